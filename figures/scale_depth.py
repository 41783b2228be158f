"""Finding 5 as the scale preset widens the depth study: addition accuracy against depth, one panel per width.

Runs: the finished addition runs of group scale (reproduce/presets/scale.yaml), every run trained the same
number of steps. One panel per width (the quick preset's 64, then wider), x = depth. Per variant, the mean
over seeds; error bars span the seeds' min..max. `MixiT [freeze v,o,mlp,norms]` (dashed, hollow markers) is
MixiT as the authors' depth script trains it by default: only the embeddings, positions and readout.

    python -m mixit_lab.figures.scale_depth RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import as_runs, legend_above, spread_note, value_ticks
from .scale_common import GROUPS, draw_against, scale_runs, title, values_of, with_accuracy
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, paper_style

NAME = "scale_depth"
GROUPS = GROUPS  # the study groups it draws (mixit_lab.training.rundir.group_of): "scale"
AXES = ("d_model", "n_layers")
MAX_PANELS = 4


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = with_accuracy(scale_runs(as_runs(runs), "addition", AXES, "addition (depth)"))
    widths = values_of(runs, "d_model")[:MAX_PANELS]
    with paper_style():
        fig = new_figure(COLUMN_WIDTH if len(widths) == 1 else DOUBLE_WIDTH, 2.4)
        axes = np.atleast_1d(fig.subplots(1, len(widths), sharey=True, squeeze=False)[0])
        for ax, width in zip(axes, widths):
            mine = runs[runs["d_model"].astype(float) == width]
            draw_against(ax, mine, "n_layers")
            value_ticks(ax, values_of(mine, "n_layers"), log=False)
            ax.set_xlabel("depth (layers)")
            ax.set_ylim(-3, 103)
            steps = sorted({int(s) for s in mine["steps"].dropna()})
            title(ax, f"width {int(width):,}" + (f", {steps[0]:,} steps" if len(steps) == 1 else ""),
                  spread_note(mine.groupby(["variant", "n_layers"]).size()))
        axes[0].set_ylabel("eval accuracy (%)")
        legend_above(fig, ncol=min(3, runs["variant"].nunique()))
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
