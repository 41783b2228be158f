"""What the learning-rate figures share (lr_retrieval, lr_lm, lr_tasks, lr_memorize, lr_depth): each finding's
final metric against the learning rate, per variant, so that a reader sees at a glance whether a gap between
variants is there at every rate or only at the rates chosen.

The lines are the tuning record's runs (mixit_lab.analysis.runs.tuning_runs: every rate of a tuned setting at the tuning
seed), one line per variant; the points are the seeds trained at each variant's chosen rate (the runs folder's
selected runs), drawn at that rate. One panel per task (and depth, for the depth study), a line per variant and
size (MixiT's algorithmic runs have 16 heads where standard has 4: the legend says so). Each line's `gid` is
"<variant>|<panel title>" and each point set's "seeds|<variant>|<panel title>", so that a test or a notebook
can find what was drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import pandas as pd

from mixit_lab.analysis.runs import records, tuning_runs

from matplotlib.ticker import NullLocator

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, finished_runs, legend_above
from .style import DOUBLE_WIDTH, new_figure, order_variants, paper_style, variant_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SIZE = ("d_model", "n_layers", "n_heads")


def accuracy(rows: pd.DataFrame) -> pd.Series:
    """Final eval accuracy in %."""
    return pd.to_numeric(rows["eval_acc"], errors="coerce") * 100


def log_ppl(rows: pd.DataFrame) -> pd.Series:
    """Final validation log-perplexity (the eval loss of a language model)."""
    return pd.to_numeric(rows["eval_loss"], errors="coerce")


def bits_per_param(rows: pd.DataFrame) -> pd.Series:
    """Bits stored per trainable parameter: a record row's kept memory summary, else the run's analysis."""
    values = [(record.analysis_summary("memory") or {}).get("bits_per_trainable_param") for record in records(rows)]
    return pd.to_numeric(pd.Series(values, index=rows.index, dtype=object), errors="coerce")


def grid_and_seeds(runs: RunSet, groups: Sequence[str], tasks: Sequence[str],
                   metric: Callable[[pd.DataFrame], pd.Series]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the record's finished runs of `groups` and `tasks`, the folder's selected runs of the same settings), each
    with `value` = metric; NoData without a tuning record or without such runs."""
    grid = tuning_runs(runs.root)
    if grid.empty:
        raise NoData(f"no tuning record in {runs.root} (a preset with several learning rates writes tuning.json)")
    grid = grid[(grid["status"] == "finished") & grid["group"].isin(groups) & grid["task"].isin(tasks)]
    grid = grid.assign(value=metric(grid)).dropna(subset=["value"])
    if grid.empty:
        raise NoData(f"the tuning record has no finished {'/'.join(tasks)} runs of group {'/'.join(groups)}")
    seeds = finished_runs(runs, groups)
    seeds = seeds[seeds["group"].isin(groups) & seeds["task"].isin(tasks)]
    seeds = seeds.assign(value=metric(seeds)).dropna(subset=["value"]) if len(seeds) else seeds.assign(value=[])
    return grid.reset_index(drop=True), seeds.reset_index(drop=True)


def figure(groups: Sequence[str], tasks: Sequence[str], metric: Callable[[pd.DataFrame], pd.Series], ylabel: str,
           lower_is_better: bool = False, panels: Sequence[str] = ("task_label",)) -> Callable[[RunSet | str | Path], Figure]:
    """The `plot` of one learning-rate figure: the record's runs of `groups` and `tasks`, `metric` against the rate,
    one panel per value of the `panels` columns."""

    def plot(runs: RunSet | str | Path) -> Figure:
        """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
        grid, seeds = grid_and_seeds(as_runs(runs), groups, tasks, metric)
        return draw(grid, seeds, ylabel, tuple(panels), lower_is_better=lower_is_better)

    return plot


def panel_title(columns: tuple[str, ...], key: tuple) -> str:
    """'dyck(max_pairs=8)', or 'addition(digits=2), 4 layers' with the depth as a panel column."""
    words = {"n_layers": "layers", "d_model": "width", "n_heads": "heads"}
    return ", ".join(str(v) if c == "task_label" else f"{int(v)} {words.get(c, c)}" for c, v in zip(columns, key))


def draw(grid: pd.DataFrame, seeds: pd.DataFrame, ylabel: str, columns: tuple[str, ...] = ("task_label",),
         lower_is_better: bool = False) -> Figure:
    """One panel per value of `columns` in `grid`: per variant and size, its line over the learning rates (tuning
    seed) and its chosen rate's seeds as points."""
    keys = list(dict.fromkeys(map(tuple, grid[list(columns)].to_numpy())))
    ncols = min(len(keys), 3)
    rows = int(np.ceil(len(keys) / ncols))
    with paper_style():
        fig = new_figure(DOUBLE_WIDTH if ncols > 1 else DOUBLE_WIDTH / 2, 1.9 * rows + 0.5)
        axes = np.atleast_1d(fig.subplots(rows, ncols, squeeze=False)).ravel()
        several_heads = grid["n_heads"].nunique() > 1  # then every line names its head count
        for ax, key in zip(axes, keys):
            _panel(ax, grid, seeds, columns, key, several_heads)
            ax.set_ylabel(ylabel + (" (lower is better)" if lower_is_better and ax is axes[0] else ""))
        for ax in axes[len(keys):]:
            ax.set_visible(False)
        legend_above(fig)
    return fig


def _panel(ax: Axes, grid: pd.DataFrame, seeds: pd.DataFrame, columns: tuple[str, ...], key: tuple,
           several_heads: bool) -> None:
    title = panel_title(columns, key)
    here = grid[(grid[list(columns)] == pd.Series(key, index=columns)).all(axis=1)]
    mine = seeds[(seeds[list(columns)] == pd.Series(key, index=columns)).all(axis=1)] if len(seeds) else seeds
    for variant in order_variants(here["variant"].unique()):
        style = variant_style(variant)
        for size in here.loc[here["variant"] == variant, list(SIZE)].drop_duplicates().itertuples(index=False):
            at = (here[list(SIZE)] == pd.Series(tuple(size), index=SIZE)).all(axis=1) & (here["variant"] == variant)
            line = here[at].groupby("lr")["value"].mean().sort_index()
            label = style.label + (f" ({size.n_heads} heads)" if several_heads else "")
            ax.plot(line.index, line.to_numpy(), color=style.color, marker=style.marker, label=label,
                    markeredgecolor="white", markeredgewidth=0.4, gid=f"{variant}|{title}")
            if len(mine):
                points = mine[(mine[list(SIZE)] == pd.Series(tuple(size), index=SIZE)).all(axis=1)
                              & (mine["variant"] == variant)]
                ax.scatter(points["lr"], points["value"], s=14, facecolors="none", edgecolors=style.color,
                           linewidths=0.8, zorder=3, gid=f"seeds|{variant}|{title}")
    rates = sorted(here["lr"].unique())
    ax.set_xscale("log")
    ax.set_xticks(rates, [f"{r:.0e}".replace("e-0", "e-") for r in rates])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("learning rate")
    ax.set_title(title, fontsize="small")
