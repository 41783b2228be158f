"""Who does the work: what each layer's attention and MLP carry of the answer, per variant and task.

Runs: the finished runs of the paper's studies whose analysis holds components.csv (`mixit analyze`,
analysis.components). One column of panels per variant. Rows are task settings, columns
layer x {attention, MLP}. Top: accuracy lost (points) when that one component is mean-ablated. Bottom:
its share of the answer's logit difference (direct logit attribution). Cells show the median over seeds;
blank where a task's model has fewer layers.

    python -m figures.components RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.components import who_does_the_work

from .common import NoData, finished_runs, select_runs
from .style import DOUBLE_WIDTH, DIVERGING_CMAP, SEQUENTIAL_CMAP, new_figure, order_variants, paper_style, variant_label

NAME = "components"
GROUPS = ("retrieval", "khop", "algorithmic", "memorize", "depth")  # the study groups it draws
PANELS = (("mean_drop", "accuracy lost when mean-ablated (points)", SEQUENTIAL_CMAP, (0, 100)),
          ("share", "share of the answer's logit difference", DIVERGING_CMAP, (-1, 1)))


def _label(work: pd.DataFrame) -> pd.Series:
    """A task setting's row label: the task and its model's depth."""
    return work["task"] + " (" + work["n_layers"].astype(int).astype(str) + "L)"


def _grid(work: pd.DataFrame, value: str, rows: list[str], columns: list[str]) -> np.ndarray:
    """[rows, columns] of `value` (medians over seeds): rows task settings, columns 'L0 attention', 'L0 MLP', ..."""
    work = work.assign(row=_label(work), column="L" + work["layer"].astype(int).astype(str) + " " + work["component"])
    grid = work.pivot_table(index="row", columns="column", values=value, aggfunc="first")
    return grid.reindex(index=rows, columns=columns).to_numpy(dtype=float)


def _ink(value: float, lo: float, hi: float, cmap: str) -> str:
    """Text colour readable on the cell: white on viridis' dark low end and on the diverging map's dark ends."""
    x = min(max((value - lo) / (hi - lo), 0.0), 1.0)
    dark = abs(x - 0.5) > 0.3 if cmap == DIVERGING_CMAP else x < 0.55
    return "white" if dark else "black"


def plot(runs_dir: Path) -> Figure:
    runs = select_runs(finished_runs(runs_dir), GROUPS, what="runs of the paper's studies")
    work = who_does_the_work(runs, per_layer=True)
    if work.empty:
        raise NoData("no finished run has a components analysis (run `mixit analyze`)")
    variants = order_variants(work["variant"])
    rows = sorted(set(_label(work)))
    columns = [f"L{layer} {kind}" for layer in range(int(work["layer"].max()) + 1) for kind in ("attention", "MLP")]
    with paper_style():
        fig = new_figure(DOUBLE_WIDTH, 1.0 + 0.28 * len(rows) * len(PANELS))
        axes = np.atleast_2d(fig.subplots(len(PANELS), len(variants), squeeze=False, sharey=True))
        for i, (value, label, cmap, (lo, hi)) in enumerate(PANELS):
            for j, variant in enumerate(variants):
                ax = axes[i, j]
                grid = _grid(work[work["variant"] == variant], value, rows, columns)
                image = ax.imshow(grid, cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
                for (r, c), v in np.ndenumerate(grid):
                    if np.isfinite(v):
                        ax.text(c, r, f"{v:.0f}" if value == "mean_drop" else f"{v:.2f}", ha="center", va="center",
                                fontsize=5, color=_ink(v, lo, hi, cmap))
                ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=5)
                ax.set_yticks(range(len(rows)), rows, fontsize=5)
                if i == 0:
                    ax.set_title(variant_label(variant), fontsize=7)
            fig.colorbar(image, ax=axes[i, :].tolist(), shrink=0.9, label=label)
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
