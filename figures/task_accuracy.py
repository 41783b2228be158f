"""Final evaluation accuracy of every variant on every task: grouped bars, one group per task.

Runs come from the groups algorithmic, retrieval, khop and sentiment (if none of these exists,
every finished run that has an accuracy); language modeling is left out (its metric is the loss,
see lm_curves). A bar is the mean over seeds of the best configuration (learning rate, size) of
that variant on that task; the error bar spans the seeds' min..max when there are several.

    python -m mixit_lab.figures.task_accuracy RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import by_loss
from mixit_lab.analysis.runs import RunSet

from .common import (NoData, as_runs, best_config, finished_runs, legend_above, seed_errors,
                     seed_stats, select_runs, spread_note, variants_in)
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, paper_style, variant_style

NAME = "task_accuracy"
GROUPS = ("algorithmic", "retrieval", "khop", "sentiment")  # the study groups it draws (mixit_lab.training.rundir.group_of)
CHAR_WIDTH = 0.06  # inches per character of a 7 pt tick label (with some room between labels)


def _natural_key(text: str) -> list:
    """'retrieval(pairs=10)' after 'retrieval(pairs=2)'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def tick_label(task_label: str) -> str:
    """'retrieval(pairs=8)' -> 'retrieval\\npairs=8', so that tick labels stay narrow."""
    return task_label.replace("(", "\n").replace(")", "").replace(", ", "\n")


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = runs[~by_loss(runs)]  # language modeling: lm_curves draws it
    runs = select_runs(runs, GROUPS, fallback=lambda r: r["eval_acc"].notna(), what="runs with an accuracy")
    runs = best_config(runs, ["task_label", "variant"], "eval_acc")
    if runs.empty:
        raise NoData("no finished run has an eval_acc")
    stats = seed_stats(runs, ["task_label", "variant"], "eval_acc")
    group_rank = {g: i for i, g in enumerate(GROUPS)}
    first_group = runs.groupby("task_label")["group"].first()
    tasks = sorted(stats["task_label"].unique(),
                   key=lambda t: (group_rank.get(first_group[t], len(GROUPS)), _natural_key(t)))
    variants = variants_in(stats)

    labels = [tick_label(t) for t in tasks]
    label_width = len(tasks) * max(len(line) for t in labels for line in t.split("\n")) * CHAR_WIDTH
    wide = len(tasks) * len(variants) > 12 or label_width > COLUMN_WIDTH - 0.5
    rotate = label_width > DOUBLE_WIDTH - 0.5

    with paper_style():
        fig = new_figure(DOUBLE_WIDTH if wide else COLUMN_WIDTH, 2.3)
        ax = fig.add_subplot()
        width = 0.8 / len(variants)
        x = np.arange(len(tasks))
        for i, v in enumerate(variants):
            d = stats[stats["variant"] == v].set_index("task_label").reindex(tasks)
            s = variant_style(v)
            pos = x + (i - (len(variants) - 1) / 2) * width
            ax.bar(pos, d["mean"] * 100, width, yerr=seed_errors(d.fillna({"n": 0}), 100), color=s.color, label=s.label, edgecolor="white",
                   linewidth=0.3, error_kw={"elinewidth": 0.6, "capsize": 1})
            zero = (d["mean"] == 0).to_numpy()  # a visible stub, so that 0% is not mistaken for a missing run
            ax.hlines(np.zeros(zero.sum()), pos[zero] - width * 0.45, pos[zero] + width * 0.45, color=s.color,
                      linewidth=1.5, clip_on=False, zorder=3)
        if rotate:
            ax.set_xticks(x, [t.replace("\n", " ", 1).replace("\n", ", ") for t in labels], rotation=30, ha="right",
                          rotation_mode="anchor")
        else:
            ax.set_xticks(x, labels)
        ax.set_xlim(-0.5, len(tasks) - 0.5)
        ax.set_ylim(0, 100)
        ax.set_ylabel("eval accuracy (%)")
        ax.grid(axis="x", visible=False)
        ax.tick_params(axis="x", length=0)
        legend_above(fig, ncol=len(variants) if wide or len(variants) <= 3 else (len(variants) + 1) // 2)
        note = spread_note(stats["n"])
        if note:
            ax.set_title(note, loc="right", fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
