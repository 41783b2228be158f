"""Finding 3 on Dyck as the scale preset moves it toward the paper: accuracy against string length and steps.

Runs: the finished Dyck runs of group scale (reproduce/presets/scale.yaml). One panel per axis that the runs
move: max_pairs (strings up to 2 x max_pairs characters; the quick preset's 8, the paper's 40) and training
steps (the quick preset's 1,000). Per variant, the mean over seeds; error bars span the seeds' min..max. Each
line holds the other axis at one value (the panel's title says which; line styles tell several apart).

    python -m mixit_lab.figures.scale_dyck RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import as_runs, legend_above, spread_note, value_ticks
from .scale_common import (AXIS_LABELS, GROUPS, draw_against, scale_runs, settings_note, title, values_of,
                           with_accuracy)
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, paper_style

NAME = "scale_dyck"
GROUPS = GROUPS  # the study groups it draws (mixit_lab.training.rundir.group_of): "scale"
AXES = ("max_pairs", "steps")


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = with_accuracy(scale_runs(as_runs(runs), "dyck", AXES, "Dyck"))
    panels = [a for a in AXES if runs[a].nunique() >= 2] or [AXES[0]]
    with paper_style():
        fig = new_figure(COLUMN_WIDTH if len(panels) == 1 else DOUBLE_WIDTH, 2.3)
        axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True, squeeze=False)[0])
        for ax, x in zip(axes, panels):
            settings = draw_against(ax, runs, x, [a for a in AXES if a != x])
            value_ticks(ax, values_of(runs, x), log=False)
            ax.axhline(50, color="#999999", linewidth=0.6, linestyle=":", zorder=0)  # about half the strings balance
            ax.set_xlabel(AXIS_LABELS[x])
            ax.set_ylim(min(40.0, float(runs["value"].min()) - 3), 102)
            title(ax, settings_note(settings), spread_note(runs.groupby(["variant", *AXES]).size()))
        axes[0].set_ylabel("eval accuracy (%)")
        legend_above(fig)
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
