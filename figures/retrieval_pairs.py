"""Retrieval accuracy against the number of key/value pairs, one line per variant (the paper's Fig. 2).

Runs: group retrieval (else every finished retrieval run). For each variant and `pairs`, the best
configuration's mean over seeds; error bars span the seeds' min..max.

    python -m mixit_lab.figures.retrieval_pairs RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import (NoData, as_runs, best_config, finished_runs, legend_above, param, plot_variant_lines,
                     seed_stats, select_runs, spread_note, value_ticks)
from .style import COLUMN_WIDTH, new_figure, paper_style

NAME = "retrieval_pairs"
GROUPS = ("retrieval",)  # the study groups it draws (mixit_lab.training.rundir.group_of)


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = select_runs(runs, GROUPS, fallback=lambda r: r["task"] == "retrieval", what="retrieval runs")
    runs = runs[runs["task"] == "retrieval"]
    runs = runs.assign(pairs=param(runs, "pairs"))
    runs = best_config(runs[runs["pairs"].notna()], ["variant", "pairs"], "eval_acc")
    if runs.empty:
        raise NoData("no finished retrieval run has an eval_acc")
    stats = seed_stats(runs, ["variant", "pairs"], "eval_acc")
    pairs = sorted(stats["pairs"].unique())

    with paper_style():
        fig = new_figure(COLUMN_WIDTH, 2.3)
        ax = fig.add_subplot()
        plot_variant_lines(ax, stats, "pairs", scale=100)
        value_ticks(ax, pairs)
        ax.set_ylim(-3, 103)
        ax.set_xlabel("key/value pairs per sequence (max)")
        ax.set_ylabel("retrieval accuracy (%)")
        legend_above(fig, ncol=min(4, stats["variant"].nunique()))
        note = spread_note(stats["n"])
        if note:
            ax.set_title(note, loc="right", fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
