"""Accuracy against depth (number of layers), one line per variant (the paper's Table 6: addition).

Runs: group depth (else every finished addition run, if they come in more than one depth). One
panel per task in the group (normally just addition). Per variant and depth, the best
configuration's mean over seeds; error bars span the seeds' min..max.

    python -m mixit_lab.figures.depth_accuracy RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import (NoData, as_runs, best_config, finished_runs, legend_above, plot_variant_lines, seed_stats,
                     select_runs, spread_note, value_ticks)
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, paper_style

NAME = "depth_accuracy"
GROUPS = ("depth",)  # the study groups it draws (mixit_lab.training.rundir.group_of)
MAX_PANELS = 4


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    several_depths = runs.loc[runs["task"] == "addition", "n_layers"].nunique() > 1
    runs = select_runs(runs, GROUPS, fallback=lambda r: (r["task"] == "addition") & several_depths,
                       what="runs of several depths")
    runs = best_config(runs, ["task_label", "variant", "n_layers"], "eval_acc")
    if runs.empty:
        raise NoData("no finished depth run has an eval_acc")
    tasks = sorted(runs["task_label"].unique())[:MAX_PANELS]

    with paper_style():
        fig = new_figure(COLUMN_WIDTH if len(tasks) == 1 else DOUBLE_WIDTH, 2.3)
        axes = np.atleast_1d(fig.subplots(1, len(tasks), sharey=True, squeeze=False)[0])
        for ax, task in zip(axes, tasks):
            stats = seed_stats(runs[runs["task_label"] == task], ["variant", "n_layers"], "eval_acc")
            plot_variant_lines(ax, stats, "n_layers", scale=100)
            value_ticks(ax, stats["n_layers"].astype(int), log=False)
            ax.set_xlabel("depth (layers)")
            ax.set_ylim(-3, 103)
            title = [task]
            note = spread_note(stats["n"])
            if note:
                title.append(note)
            ax.set_title("\n".join(title), fontsize=6, color="#555555")
        axes[0].set_ylabel("eval accuracy (%)")
        legend_above(fig, ncol=min(4, runs["variant"].nunique()))
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
