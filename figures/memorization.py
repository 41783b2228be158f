"""Memorization against dataset size: accuracy, memorized bits and bits per trainable parameter, per variant.

Runs: group memorize (else every finished memorize run). x = number of keys n^d (the dataset
size; every key is a training example). From each run's analysis/memory.csv (`mixit analyze`):
accuracy, memorized bits (with the dataset's information content, keys x log2 n, as a dashed line)
and bits per trainable parameter. Runs without that analysis show their summary eval_acc in the
accuracy panel only. Per variant and size, the best configuration's mean over seeds; error bars
span the seeds' min..max.

    python -m mixit_lab.figures.memorization RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import read_analysis_records, records

from mixit_lab.analysis.runs import RunSet

from .common import (NoData, as_runs, best_config, finished_runs, legend_above, param, plain_log_ticks,
                     plot_variant_lines, seed_stats, select_runs, spread_note, value_ticks)
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, paper_style

NAME = "memorization"
GROUPS = ("memorize",)  # the study groups it draws (mixit_lab.training.rundir.group_of)


def memory_table(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with keys, accuracy (memory.csv, else eval_acc), bits, max_bits, bits_per_trainable_param."""
    rows = []
    for run, record in zip(runs.itertuples(), records(runs)):  # plain records, not a DataFrame per file: a folder
        mem = read_analysis_records(record, "memory") if run.has_analysis else None  # may hold thousands
        row = {"accuracy": run.eval_acc, "bits": np.nan, "max_bits": np.nan, "bits_per_trainable_param": np.nan}
        if mem:
            row.update({k: float(mem[0][k]) for k in row if k in mem[0]})
        rows.append(row)
    out = runs.reset_index(drop=True).join(pd.DataFrame(rows, columns=["accuracy", "bits", "max_bits",
                                                                       "bits_per_trainable_param"]))
    return out.assign(keys=param(out, "n") ** param(out, "d"))


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = select_runs(runs, GROUPS, fallback=lambda r: r["task"] == "memorize", what="memorize runs")
    runs = memory_table(runs[runs["task"] == "memorize"])
    runs = best_config(runs[runs["keys"].notna()], ["variant", "keys"], "accuracy")
    if runs.empty:
        raise NoData("no finished memorize run has an accuracy")
    has_bits = runs["bits"].notna().any()
    panels = [("accuracy", "memorization accuracy (%)", 100.0)]
    if has_bits:
        panels += [("bits", "memorized information (bits)", 1.0),
                   ("bits_per_trainable_param", "bits per trainable parameter", 1.0)]

    with paper_style():
        fig = new_figure(DOUBLE_WIDTH if has_bits else COLUMN_WIDTH, 2.2)
        axes = np.atleast_1d(fig.subplots(1, len(panels)))
        for ax, (column, ylabel, scale) in zip(axes, panels):
            data = runs[runs[column].notna()]
            stats = seed_stats(data, ["variant", "keys"], column)
            plot_variant_lines(ax, stats, "keys", scale=scale)
            value_ticks(ax, runs["keys"], log=True)
            ax.set_xlabel("dataset size (keys, $n^d$)")
            ax.set_ylabel(ylabel)
            if column == "accuracy":
                ax.set_ylim(-3, 103)
            if column == "bits":
                ax.set_yscale("log")
                cap = data.groupby("keys")["max_bits"].max().sort_index()
                (line,) = ax.plot(cap.index, cap.values, color="#555555", linestyle="--", linewidth=0.8,
                                  label="dataset information\n($n^d \\log_2 n$ bits)")
                ax.legend(handles=[line], loc="upper left", handlelength=2.0)
                plain_log_ticks(ax, "y")
        legend_above(fig, handles=axes[0].get_legend_handles_labels()[0],
                     labels=axes[0].get_legend_handles_labels()[1])
        note = spread_note(seed_stats(runs, ["variant", "keys"], "accuracy")["n"])
        if note:
            axes[-1].set_title(note, loc="right", fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
