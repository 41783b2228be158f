"""Induction scores of every head (layer x head heatmaps), one panel per variant, one shared colour scale.

Runs: the analysed runs (`mixit analyze`, analysis/heads.csv) of group khop; without that group,
the analysed runs of the one task that most variants were analysed on. All panels share one
model shape (the most common among those runs); per variant, the configuration with the best eval
accuracy, its heads.csv averaged over seeds. The score is mixit_lab.analysis.heads' induction score on
repeated random sequences [r, r] (1 = all attention of the second half on the induction target);
MixiT's patterns are signed, so its scores can leave [0, 1] (the colour bar then has arrows).
Chance (uniform attention) is the analysis' own summary.heads.chance.induction.

    python -m mixit_lab.figures.induction_heads RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import read_analysis_records, records

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, best_config, finished_runs, variants_in
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, SEQUENTIAL_CMAP, new_figure, paper_style, variant_label

NAME = "induction_heads"
GROUPS = ("khop",)  # the study groups it draws (mixit_lab.training.rundir.group_of)
ANNOTATE_UP_TO = 48  # write the score in each cell up to this many heads per panel


def _analysed(all_runs: RunSet) -> pd.DataFrame:
    """The analysed runs it draws: group khop's, else those of the task most variants were analysed on."""
    runs = finished_runs(all_runs)
    runs = runs[runs["has_analysis"].astype(bool)]
    if runs["group"].isin(GROUPS).any():
        return runs[runs["group"].isin(GROUPS)]
    if runs.empty:
        raise NoData("no analysed runs (run `mixit analyze` on the khop runs)")
    per_task = runs.groupby("task")["variant"].nunique()
    task = sorted(per_task.index, key=lambda t: (-per_task[t], t != "khop", t))[0]
    return runs[runs["task"] == task]


def head_grids(runs: pd.DataFrame) -> tuple[dict[str, np.ndarray], float | None, str]:
    """variant -> mean induction score [layer, head], the chance level, and a description of the runs."""
    shapes = runs.groupby(["task_label", "n_layers", "n_heads"]).size().sort_values(ascending=False, kind="stable")
    task_label, n_layers, n_heads = shapes.index[0]
    runs = runs[(runs["task_label"] == task_label) & (runs["n_layers"] == n_layers) & (runs["n_heads"] == n_heads)]
    runs = best_config(runs.assign(eval_acc=runs["eval_acc"].fillna(0.0)), ["variant"], "eval_acc")
    grids: dict[str, np.ndarray] = {}
    chance = None
    for variant in variants_in(runs):
        stack = []
        for record in records(runs[runs["variant"] == variant]):
            heads = read_analysis_records(record, "heads")  # plain records: a folder may hold thousands of tables
            if not heads:
                continue
            grid = np.full((int(n_layers), int(n_heads)), np.nan)
            for row in heads:
                grid[int(row["layer"]), int(row["head"])] = row["induction"]
            stack.append(grid)
            if chance is None:
                chance = ((record.analysis_summary("heads") or {}).get("chance") or {}).get("induction")
        if stack:
            grids[variant] = np.nanmean(stack, axis=0)
    if not grids:
        raise NoData("the analysed runs have no heads.csv (model context too short for head scores?)")
    return grids, chance, str(task_label)


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    grids, chance, task = head_grids(_analysed(as_runs(runs)))
    n = len(grids)
    n_layers, n_heads = next(iter(grids.values())).shape
    lo = min(float(np.nanmin(g)) for g in grids.values())
    hi = max(float(np.nanmax(g)) for g in grids.values())
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[(lo < 0, hi > 1)]

    with paper_style():
        width = DOUBLE_WIDTH if n > 3 or n_heads > 6 else COLUMN_WIDTH
        panel_w = (width - 0.9) / n
        height = max(1.3, panel_w * n_layers / n_heads + 0.9)
        fig = new_figure(width, height)
        axes = np.atleast_1d(fig.subplots(1, n, sharey=True))
        for ax, (variant, grid) in zip(axes, grids.items()):
            im = ax.imshow(grid, cmap=SEQUENTIAL_CMAP, vmin=0, vmax=1, interpolation="nearest", aspect="auto")
            ax.set_title(variant_label(variant))
            ax.grid(False)
            ax.set_xticks(range(n_heads))
            ax.set_yticks(range(n_layers))
            ax.tick_params(length=0)
            ax.set_xlabel("head")
            if n_layers * n_heads <= ANNOTATE_UP_TO:
                for (i, j), value in np.ndenumerate(grid):
                    if np.isfinite(value):
                        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=5,
                                color="black" if value > 0.6 else "white")
        axes[0].set_ylabel("layer")
        label = "induction score"
        if chance is not None:
            label += f"\n(chance {chance:.2f})"
        cbar = fig.colorbar(im, ax=list(axes), shrink=0.9, extend=extend, label=label)
        if chance is not None:
            cbar.ax.axhline(chance, color="white", linewidth=1.0)
        fig.suptitle(task, fontsize=7)
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
