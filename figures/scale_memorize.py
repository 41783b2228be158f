"""Finding 4 in the paper's fixed-data regime as the scale preset widens the model: bits per trainable
parameter against width.

Runs: the finished memorize runs of group scale (reproduce/presets/scale.yaml), one dataset (n^d keys) that
standard is meant to store completely at every width. Left: bits stored per trainable parameter (each run's
analysis summary, `mixit analyze`; runs not analysed are left out), the paper's value per variant dotted in
its colour. Right: the share of keys stored (%). Per variant, the mean over seeds; error bars span the
seeds' min..max.

    python -m mixit_lab.figures.scale_memorize RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import as_runs, legend_above, spread_note, value_ticks
from .scale_common import (AXIS_LABELS, GROUPS, PAPER_MEMORIZE_BITS, draw_against, draw_paper, scale_runs,
                           settings_note, title, values_of, with_memory)
from .style import DOUBLE_WIDTH, new_figure, paper_style

NAME = "scale_memorize"
GROUPS = GROUPS  # the study groups it draws (mixit_lab.training.rundir.group_of): "scale"
AXES = ("d_model",)
DATASET = ("n", "d")


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = with_memory(scale_runs(as_runs(runs), "memorize", (*AXES, *DATASET), "memorize"))
    with paper_style():
        fig = new_figure(DOUBLE_WIDTH, 2.3)
        bits_ax, stored_ax = fig.subplots(1, 2)
        settings = draw_against(bits_ax, runs, "d_model", DATASET)
        draw_paper(bits_ax, PAPER_MEMORIZE_BITS, runs["variant"])
        bits_ax.set_ylabel("bits per trainable parameter")
        bits_ax.set_ylim(bottom=0)
        title(bits_ax, settings_note(settings), "dotted: the paper")
        draw_against(stored_ax, runs.assign(value=runs["stored"]).dropna(subset=["value"]), "d_model", DATASET)
        stored_ax.set_ylabel("keys stored (%)")
        stored_ax.set_ylim(-3, 103)
        title(stored_ax, spread_note(runs.groupby(["variant", *AXES, *DATASET]).size()))
        for ax in (bits_ax, stored_ax):
            value_ticks(ax, values_of(runs, "d_model"), log=True)
            ax.set_xlabel(AXIS_LABELS["d_model"])
        legend_above(fig, *bits_ax.get_legend_handles_labels())
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
