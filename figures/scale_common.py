"""What the scale figures share (scale_dyck, scale_sentiment, scale_memorize, scale_depth): their runs, their
metric per run, and lines of a metric against a scale axis with the seeds' range.

The runs are the finished runs of study group `scale` (reproduce/presets/scale.yaml; every study name starts
with `scale-`) of one task. The report's tables of the same runs are mixit_lab.reproduce.emergence's; these figures
read the runs directly, as every figure does. Each data line's `gid` is "<variant>|<setting>" (the setting:
the other axes' values it is drawn at, "" when none) and each paper line's "paper|<variant>", so that a
test or a notebook can find what was drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import pandas as pd

from mixit_lab.analysis.paper import PAPER
from mixit_lab.analysis.runs import records

from mixit_lab.analysis.runs import RunSet

from .common import NoData, finished_runs, param, seed_errors, seed_stats
from .style import variant_style

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SCALE = "scale"  # the study group (mixit_lab.training.rundir.group_of "scale-...")
GROUPS = (SCALE,)
SST2_STUDY = "scale-sst2"  # the studies on SST-2 are named scale-sst2...: their sentiment runs are a corpus apart
LINESTYLES = ("-", "--", ":", "-.")
PAPER_SENTIMENT = PAPER["sentiment"]  # the paper's Table 3 (%)
PAPER_MEMORIZE_BITS = PAPER["memorize_bits"]  # Table 4
AXIS_LABELS = {"d_model": "width (d_model)", "n_layers": "depth (layers)", "steps": "training steps",
               "max_pairs": "Dyck max_pairs (strings up to 2 x max_pairs)"}


def is_sst2_study(study: str) -> bool:
    """Whether a scale study trains on SST-2 (SST2_STUDY...) rather than the labelled sentences."""
    return str(study).startswith(SST2_STUDY)


def scale_runs(all_runs: RunSet, task: str, axes: Sequence[str], what: str, sst2: bool = False) -> pd.DataFrame:
    """Finished scale runs of `task`, with each axis (a run setting or a task parameter) as a column; of the SST-2
    studies alone with `sst2`, else without them."""
    runs = finished_runs(all_runs, GROUPS)
    runs = runs[(runs["group"] == SCALE) & (runs["task"] == task)
                & (runs["study"].map(is_sst2_study) == sst2)].reset_index(drop=True)
    if runs.empty:
        raise NoData(f"no finished {what} runs of the scale preset (group {SCALE}, task {task})")
    for axis in axes:
        if axis not in runs.columns:
            runs[axis] = param(runs, axis)
    return runs


def with_accuracy(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with `value` = final eval accuracy in %, those without one dropped (NoData if none is left)."""
    runs = runs.assign(value=pd.to_numeric(runs["eval_acc"], errors="coerce") * 100).dropna(subset=["value"])
    if runs.empty:
        raise NoData("no finished scale run has an eval_acc")
    return runs.reset_index(drop=True)


def with_memory(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with `value` = bits per trainable parameter and `stored` = memorization accuracy (%), from each
    run's analysis summary (`mixit analyze`); runs not analysed yet are dropped (NoData if none is left)."""
    memories = [record.analysis_summary("memory") or {} for record in records(runs)]
    runs = runs.assign(value=pd.to_numeric(pd.Series([m.get("bits_per_trainable_param") for m in memories],
                                                     index=runs.index, dtype=object), errors="coerce"),
                       stored=pd.to_numeric(pd.Series([m.get("accuracy") for m in memories], index=runs.index,
                                                      dtype=object), errors="coerce") * 100)
    runs = runs.dropna(subset=["value"])
    if runs.empty:
        raise NoData("no scale memorize run has been analysed (mixit analyze writes its memorized bits)")
    return runs.reset_index(drop=True)


def line_style(label: str) -> dict:
    """Colour, marker and label of a variant label; a grid model (`mixit [freeze ...]`) is drawn in its
    named variant's colour, dashed, with hollow markers."""
    base, _, grid = str(label).partition(" [")
    s = variant_style(base)
    if not grid:
        return {"color": s.color, "marker": s.marker, "label": s.label, "linestyle": "-", "markerfacecolor": s.color}
    return {"color": s.color, "marker": s.marker, "label": f"{s.label} [{grid}", "linestyle": "--",
            "markerfacecolor": "white"}


def order_labels(labels) -> list[str]:
    """Variant labels in the figures' variant order, grid models right after their named variant."""
    from .style import VARIANT_ORDER

    def rank(label: str) -> tuple:
        base = str(label).split(" [", 1)[0]
        return (VARIANT_ORDER.index(base) if base in VARIANT_ORDER else len(VARIANT_ORDER), " [" in str(label),
                str(label))

    return sorted({str(v) for v in labels}, key=rank)


def _setting(others: Sequence[str], key: tuple) -> str:
    return ", ".join(f"{_axis_word(a, v)}" for a, v in zip(others, key))


def _axis_word(axis: str, value) -> str:
    v = f"{float(value):,.0f}" if float(value) == int(float(value)) else f"{float(value):g}"
    return {"d_model": f"width {v}", "n_layers": f"{v} layers", "steps": f"{v} steps"}.get(axis, f"{axis} {v}")


def draw_against(ax: Axes, runs: pd.DataFrame, x: str, others: Sequence[str] = (), scale: float = 1.0,
                 x_positions: dict | None = None) -> list[str]:
    """Per variant, the mean of `value` over seeds against axis `x` (error bars: the seeds' min..max), one
    line for each setting of the `others` axes along which `x` takes two or more values (every setting when
    none does), told apart by line style. Returns the settings drawn, in line-style order ([""] for none).

    `x_positions` maps x values to positions (a categorical axis); default: the values themselves."""
    names = list(others)
    others = [f"_axis_{a}" for a in names]  # seed_stats adds a column "n" (seeds): keep axes such as memorize's n apart
    runs = runs.drop(columns=[c for c in others if c in runs]).rename(columns=dict(zip(names, others)))
    keys = ["variant", *others, x]
    stats = seed_stats(runs, keys, "value")
    if others:
        sizes = stats.groupby(others)[x].nunique()
        settings = [k if isinstance(k, tuple) else (k,) for k in sizes.index if sizes[k] >= 2] or \
                   [k if isinstance(k, tuple) else (k,) for k in sizes.index]
    else:
        settings = [()]
    for i, setting in enumerate(settings):
        at = stats
        for a, v in zip(others, setting):
            at = at[at[a] == v]
        for variant in order_labels(at["variant"]):
            d = at[at["variant"] == variant].sort_values(x)
            style = line_style(variant)
            xs = d[x].map(x_positions) if x_positions else d[x]
            container = ax.errorbar(xs.to_numpy(dtype=float), d["mean"].to_numpy(dtype=float) * scale,
                                    yerr=seed_errors(d, scale), color=style["color"], marker=style["marker"],
                                    markerfacecolor=style["markerfacecolor"], markeredgecolor=style["color"],
                                    markeredgewidth=0.6, elinewidth=0.7,
                                    linestyle=style["linestyle"] if len(settings) == 1 else LINESTYLES[i % len(LINESTYLES)],
                                    label=style["label"] if i == 0 else None)
            container.lines[0].set_gid(f"{variant}|{_setting(names, setting)}")
    return [_setting(names, s) for s in settings]


def draw_paper(ax: Axes, paper: dict[str, float], variants) -> None:
    """The paper's number of each drawn variant that has one, as a thin dotted line in its colour."""
    for variant in order_labels(variants):
        if variant in paper:
            line = ax.axhline(paper[variant], color=line_style(variant)["color"], linestyle=(0, (1, 1.5)),
                              linewidth=0.8, alpha=0.8)
            line.set_gid(f"paper|{variant}")


def settings_note(settings: Sequence[str]) -> str:
    """'at 1,000 steps' for one setting, 'solid: max_pairs 8, dashed: max_pairs 16' for several."""
    settings = [s for s in settings if s]
    if not settings:
        return ""
    if len(settings) == 1:
        return f"at {settings[0]}"
    names = ("solid", "dashed", "dotted", "dash-dot")
    return ", ".join(f"{names[i % len(names)]}: {s}" for i, s in enumerate(settings))


def title(ax: Axes, *parts: str) -> None:
    ax.set_title("\n".join(p for p in parts if p), fontsize=6, color="#555555")


def values_of(runs: pd.DataFrame, column: str) -> list[float]:
    return sorted({float(v) for v in runs[column].dropna()})


__all__ = ["GROUPS", "draw_against", "draw_paper", "line_style", "order_labels", "scale_runs",
           "settings_note", "title", "values_of", "with_accuracy", "with_memory"]
