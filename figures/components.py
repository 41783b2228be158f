"""Who does the work: what each layer's attention and MLP carry of the answer, per task setting and variant.

Runs: the finished runs of the paper's studies whose analysis holds components.csv (`mixit analyze`,
mixit_lab.analysis.components). One row of panels per task setting (task, depth, and width where a task comes in
several), one heatmap row per variant trained on it; columns: layer x {attention, MLP}, as many as that
setting's model has (a 2-layer task's panels are 4 cells wide, a 6-layer one's 12; the cells line up with
the header's layers). Left: accuracy lost (points) when that one component is mean-ablated. Right: its
share of the answer's logit difference (direct logit attribution). Cells show the median over seeds,
written compactly ("97", "0.3") where the number fits the cell; grey where the analysis has no value. Each
heatmap's axes has the gid "<value>|<row label>", e.g. "share|retrieval (2L)".

    python -m mixit_lab.figures.components RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.image import AxesImage
from matplotlib.textpath import TextToPath

from mixit_lab.analysis.component_map import who_does_the_work

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, finished_runs, select_runs
from .style import DIVERGING_CMAP, DOUBLE_WIDTH, SEQUENTIAL_CMAP, new_figure, order_variants, paper_style, variant_label

NAME = "components"
GROUPS = ("retrieval", "khop", "algorithmic", "memorize", "depth")  # the study groups it draws
# (column of who_does_the_work, title, colour map, colour range, colour bar ticks)
PANELS = (("mean_drop", "accuracy lost when mean-ablated (points)", SEQUENTIAL_CMAP, (0, 100), (0, 50, 100)),
          ("share", "share of the answer's logit difference", DIVERGING_CMAP, (-1, 1), (-1, -0.5, 0, 0.5, 1)))
KINDS = (("attention", "attn"), ("MLP", "MLP"))  # component (as mixit_lab.analysis.components names it), column label
LABEL_SIZE = 6.0  # pt: row labels, column labels, panel titles
CELL_WIDTH = (0.2, 0.34)  # inches: the narrowest and widest cell (the widest when few layers leave room)
CELL_HEIGHT = 0.17  # inches, at least
PANEL_MIN_WIDTH = 1.15  # inches: room for a panel's title and colour bar, for 1-layer models
GAP = 0.7  # cells between the two panels
MISSING = "#EEEEEE"  # a cell the analysis has no value for
FILL = 0.85  # a number may take this fraction of its cell's width
WIDEST = "−0.5"  # the cells' font is chosen so that numbers this wide fit; wider ones are left out where they do not


@dataclass(frozen=True)
class Setting:
    """One row of panels: a task at one depth and width."""

    task: str
    n_layers: int
    d_model: int
    label: str


@dataclass(frozen=True)
class Sizes:
    """Cell size (inches) and the cells' font size (pt), chosen from the number of cells."""

    cell_width: float
    cell_height: float
    font: float


def _split_label(task_label: str) -> tuple[str, dict[str, str]]:
    """A task label (mixit_lab.analysis.runs.task_label) split: 'retrieval(pairs=8)' -> ('retrieval', {'pairs': '8'})."""
    match = re.fullmatch(r"([^(]+)\((.*)\)", task_label)
    if not match:
        return task_label, {}
    return match[1], dict(p.split("=", 1) for p in re.split(r", (?=\w+=)", match[2]) if "=" in p)


def _natural(text: str) -> list:
    """'pairs=16' after 'pairs=4'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def task_settings(work: pd.DataFrame) -> list[Setting]:
    """The task settings in `work`, labelled short: the task's name, only the parameters that differ between
    its settings, its depth, and its width where one task and depth come in several, e.g. 'retrieval pairs=8 (2L)'."""
    keys = work[["task", "n_layers", "d_model"]].drop_duplicates().astype({"n_layers": int, "d_model": int})
    parsed = {label: _split_label(label) for label in keys["task"]}
    names = []
    for label in keys["task"]:
        name, params = parsed[label]
        siblings = [p for n, p in parsed.values() if n == name]
        differ = [k for k in params if any(p.get(k) != params[k] for p in siblings)]
        names.append(" ".join([name, *(f"{k}={params[k]}" for k in differ)]))
    keys = keys.assign(name=names)
    widths = keys.groupby(["name", "n_layers"])["d_model"].transform("nunique")
    settings = [Setting(task, layers, width, f"{name} ({layers}L, d{width})" if several > 1 else f"{name} ({layers}L)")
                for task, layers, width, name, several in zip(keys["task"], keys["n_layers"], keys["d_model"],
                                                               keys["name"], widths)]
    return sorted(settings, key=lambda s: (_natural(s.label.split(" (")[0]), s.n_layers, s.d_model))


def setting_grid(work: pd.DataFrame, setting: Setting, value: str) -> pd.DataFrame:
    """[variants trained on the setting, 2 x n_layers] of `value`: columns L0 attention, L0 MLP, L1 attention, ..."""
    mine = work[(work["task"] == setting.task) & (work["n_layers"] == setting.n_layers)
                & (work["d_model"] == setting.d_model) & (work["layer"] >= 0)]
    kind = {name: k for k, (name, _) in enumerate(KINDS)}
    mine = mine.assign(column=mine["layer"].astype(int) * len(KINDS) + mine["component"].map(kind))
    grid = mine.pivot_table(index="variant", columns="column", values=value, aggfunc="first")
    return grid.reindex(index=order_variants(mine["variant"]), columns=range(len(KINDS) * setting.n_layers))


def cell_text(value: float) -> str:
    """A cell's number, short: '97', '3.2', '0.3', '−0.5', '0' (no '-0')."""
    text = f"{value:.0f}" if abs(value) >= 9.95 else f"{value:.1f}".removesuffix(".0")
    return "0" if text == "-0" else text.replace("-", "−")


def text_width(text: str, size: float) -> float:
    """Width (pt) of `text` at `size` pt in the current font (call inside paper_style())."""
    return TextToPath().get_text_width_height_descent(text, FontProperties(size=size), ismath=False)[0]


def choose_sizes(columns: int, label_width: float) -> Sizes:
    """Cells as wide as the page allows for 2 x `columns` of them beside labels `label_width` inches wide
    (within CELL_WIDTH, and wide enough for a panel's title), and a font that fits the cells."""
    room = (DOUBLE_WIDTH - label_width - 0.2) / (2 * columns + GAP)
    width = max(min(max(room, CELL_WIDTH[0]), CELL_WIDTH[1]), PANEL_MIN_WIDTH / columns)
    font = float(np.clip(FILL * width * 72 / text_width(WIDEST, 1.0), 5.0, 7.0))
    return Sizes(width, max(CELL_HEIGHT, 1.9 * font / 72), font)


def _ink(value: float, lo: float, hi: float, cmap: str) -> str:
    """Text colour readable on the cell: white on viridis' dark low end and on the diverging map's dark ends."""
    x = min(max((value - lo) / (hi - lo), 0.0), 1.0)
    dark = abs(x - 0.5) > 0.3 if cmap == DIVERGING_CMAP else x < 0.55
    return "white" if dark else "black"


def _heatmap(ax: Axes, grid: pd.DataFrame, panel: tuple, sizes: Sizes) -> AxesImage:
    """One setting's cells, numbered where the number fits; layers set apart by white lines."""
    _, _, cmap, (lo, hi), _ = panel
    values = grid.to_numpy(dtype=float)
    image = ax.imshow(values, cmap=matplotlib.colormaps[cmap].with_extremes(bad=MISSING), vmin=lo, vmax=hi,
                      aspect="auto", interpolation="nearest")
    room = FILL * sizes.cell_width * 72
    for (r, c), v in np.ndenumerate(values):
        text = cell_text(v) if np.isfinite(v) else ""
        if text and text_width(text, sizes.font) <= room:
            ax.text(c, r, text, ha="center", va="center", fontsize=sizes.font, color=_ink(v, lo, hi, cmap))
    for x in np.arange(len(KINDS) - 0.5, values.shape[1] - 1, len(KINDS)):
        ax.axvline(x, color="white", linewidth=1.2)
    ax.set_xticks([])
    ax.set_yticks(range(len(grid)), [variant_label(v) for v in grid.index], fontsize=LABEL_SIZE)
    ax.tick_params(length=0)
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return image


def _header(ax: Axes, columns: int, title: str, sizes: Sizes) -> None:
    """The column labels above a panel's stack: 'attn' / 'MLP' per cell, 'layer N' over each pair, the title."""
    ax.set_xlim(-0.5, columns - 0.5)
    ax.set_ylim(0, 1)
    n_layers = columns // len(KINDS)
    ax.set_xticks(range(columns), [short for _ in range(n_layers) for _, short in KINDS], fontsize=LABEL_SIZE - 0.5)
    ax.set_xticks(np.arange(n_layers) * len(KINDS) + (len(KINDS) - 1) / 2,
                  [f"layer {layer}" for layer in range(n_layers)], minor=True, fontsize=LABEL_SIZE)
    ax.tick_params(axis="x", which="both", top=True, bottom=False, labeltop=True, labelbottom=False, length=0)
    ax.tick_params(axis="x", which="minor", pad=3 + 1.4 * LABEL_SIZE)
    ax.set_yticks([])
    ax.grid(False)
    ax.patch.set_visible(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    chars = max(12, int(columns * sizes.cell_width * 72 / (0.6 * LABEL_SIZE + 0.5)))
    ax.set_title(textwrap.fill(title, chars), fontsize=LABEL_SIZE + 0.5)


def draw(work: pd.DataFrame) -> Figure:
    """The figure of a who_does_the_work(per_layer=True) table (see the module docstring)."""
    settings = task_settings(work[work["layer"] >= 0])
    if not settings:
        raise NoData("the components analyses have no per-layer rows")
    columns = len(KINDS) * max(s.n_layers for s in settings)
    grids = {(s, p[0]): setting_grid(work, s, p[0]) for s in settings for p in PANELS}
    heights = [len(grids[s, PANELS[0][0]]) for s in settings]
    with paper_style():
        labels = max(text_width(s.label, LABEL_SIZE) for s in settings) + max(
            text_width(variant_label(v), LABEL_SIZE) for g in grids.values() for v in g.index)
        sizes = choose_sizes(columns, labels / 72 + 0.15)
        fig = new_figure(labels / 72 + 0.35 + sizes.cell_width * (2 * columns + GAP),
                         0.95 + sizes.cell_height * sum(heights) + 0.07 * len(settings))
        fig.get_layout_engine().set(w_pad=0.02, h_pad=0.03, wspace=0, hspace=0)
        gs = fig.add_gridspec(1 + len(settings), 2 * columns + 1, width_ratios=[1] * columns + [GAP] + [1] * columns,
                              height_ratios=[0.01 * max(heights)] + heights)
        for p, panel in enumerate(PANELS):
            first = p * (columns + 1)
            _header(fig.add_subplot(gs[0, first:first + columns]), columns, panel[1], sizes)
            axes = []
            for i, s in enumerate(settings):
                ax = fig.add_subplot(gs[i + 1, first:first + len(KINDS) * s.n_layers])
                image = _heatmap(ax, grids[s, panel[0]], panel, sizes)
                ax.set_gid(f"{panel[0]}|{s.label}")  # what a test or a notebook finds a panel by
                if p == 0:
                    ax.set_ylabel(s.label, rotation=0, ha="right", va="center", fontsize=LABEL_SIZE)
                else:
                    ax.tick_params(labelleft=False)  # the same rows as the left panel's
                axes.append(ax)
            thickness = 0.08 / (sizes.cell_height * sum(heights))  # a 0.08 in bar, as a fraction of the panels' height
            fig.colorbar(image, ax=axes, location="bottom", fraction=thickness, aspect=40, pad=0.01, ticks=panel[4])
            if p == 0:
                fig.align_ylabels(axes)
    return fig


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = select_runs(finished_runs(as_runs(runs)), GROUPS, what="runs of the paper's studies")
    work = who_does_the_work(runs, per_layer=True)
    if work.empty:
        raise NoData("no finished run has a components analysis (run `mixit analyze`)")
    return draw(work)


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
