"""Where the findings emerge: the scale preset's runs as one table per finding, and a report section.

    from mixit_lab.reproduce.emergence import emergence_tables, emergence_section
    tables = emergence_tables("runs/scale")       # {"scale_dyck": DataFrame, "scale_sentiment": ..., "scale_sst2": ...}
    lines = emergence_section(tables)             # Markdown lines: "## Where the findings emerge", ...

The scale preset (reproduce/presets/scale.yaml) moves one or two axes of the quick preset toward the
paper's setting for each finding that does not hold at the quick preset's size: Dyck string length and
training steps (finding 3), the sentiment classifier's width, depth and heads (finding 3), the sentiment corpus
(SST-2's 67,349 training sentences and phrases against 800 labelled sentences; finding 3), width at a fixed
memorization dataset (finding 4), and width for the depth study (finding 5). Only runs of the study
group `scale` count here (mixit_lab.training.rundir.group_of: every study name starts with `scale-`); the report's
paper tables leave that group out.

Each table has, per variant and scale point (the axes' values as columns), the final metric's mean,
spread (standard deviation over seeds, ddof 0, as the report's tables), median and number of seeds, and
the paper's number where the paper gives one. Accuracies are in %; memorization is in bits per
trainable parameter, read from each run's analysis summary (`mixit analyze`, mixit_lab.analysis.memory), as the
report's Table 4. The section's sentence per finding is computed from the means: whether the finding's
gap (standard - MixiT on Dyck and sentiment, standard - MixiT bits per parameter on memorization,
each variant's accuracy lost from the shallowest to the deepest model on depth) shrinks, grows or
stays as each axis moves toward the paper's setting.

This module sits below mixit_lab.reproduce.report and mixit_lab.reproduce.selection (they import it, never the reverse); the
paper's numbers come from mixit_lab.analysis.paper and the table format from mixit_lab.reproduce.markdown, as the report's.
Given the runs table (`runs=`, mixit_lab.analysis.runs.load_runs), it reads nothing from the runs folder but the
memorization runs' analysis summaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from mixit_lab.analysis.runs import load_runs, records, reported
from mixit_lab.figures.scale_common import is_sst2_study
from mixit_lab.models import VARIANTS
from mixit_lab.training.tasks import resolved_task_params

from .intervals import combination, difference
from .markdown import markdown_table as _markdown_table
from mixit_lab.analysis.paper import FULL_ACCURACY, PAPER

SCALE = "scale"  # the study group of the scale preset (mixit_lab.reproduce.report leaves it out of the paper's tables)

PAPER_SENTIMENT = PAPER["sentiment"]  # Table 3's sentiment accuracies (%)
PAPER_MEMORIZE_BITS = PAPER["memorize_bits"]  # Table 4's bits per trainable parameter

STAT_COLUMNS = ["mean", "std", "median", "seeds", "paper", "values"]  # values: per seed, in seed order


@dataclass(frozen=True)
class Finding:
    """One finding's scale study: which runs, which axes move, which metric, and the gap the sentence follows."""

    table: str  # the table's name, e.g. "scale_dyck"
    number: int  # the paper's finding number
    title: str
    task: str  # the runs' task
    axes: tuple[str, ...]  # run settings (d_model, n_layers, steps, ...) or task parameters (max_pairs, n, ...)
    metric: str  # "accuracy" (%) or "bits_per_trainable_param"
    unit: str  # the metric's unit in sentences
    tolerance: float  # a change of the gap within this counts as "stays"
    paper: dict[str, float] | None = None  # the paper's number per variant, where it gives one
    about: str = ""  # the table's caption
    sst2: bool = False  # the runs of the SST-2 studies (mixit_lab.figures.scale_common.SST2_STUDY), else all but those


FINDINGS: tuple[Finding, ...] = (
    Finding("scale_dyck", 3, "Finding 3, Dyck: string length and training steps", "dyck", ("max_pairs", "steps"),
            "accuracy", "points", 2.0, None,
            "Final eval accuracy (%) on held-out strings. max_pairs sets the string length (up to 2 x max_pairs; the "
            "quick preset: 8, the paper: 40); steps the training length (quick: 1,000). The paper finds MixiT about "
            "as good as standard on Dyck."),
    Finding("scale_sentiment", 3, "Finding 3, sentiment: the classifier's width, depth and heads", "sentiment",
            ("d_model", "n_layers", "n_heads"), "accuracy", "points", 2.0, PAPER_SENTIMENT,
            "Final eval accuracy (%) on held-out sentences. The quick preset's classifier is width 64 with 2 layers "
            "and 4 heads, the authors' 4 layers of width 1,024 (their README trains MixiT with 16 heads). The "
            "paper's numbers are on Yelp reviews at their size."),
    Finding("scale_sst2", 3, "Finding 3, sentiment on SST-2: a real-sized corpus", "sentiment",
            ("d_model", "n_layers", "steps"), "accuracy", "points", 2.0, PAPER_SENTIMENT,
            "Final accuracy (%) on SST-2's dev.tsv (872 sentences), trained on its train.tsv (67,349 sentences and "
            "phrases, GLUE's SST-2), each variant at the learning rate chosen for it on 2% of the training file. "
            "The paper's numbers are on Yelp reviews at the authors' size.", sst2=True),
    Finding("scale_memorize", 4, "Finding 4, memorization: width at a fixed dataset", "memorize", ("d_model",),
            "bits_per_trainable_param", "bits per trainable parameter", 0.05, PAPER_MEMORIZE_BITS,
            "Bits stored per trainable parameter (mixit_lab.analysis.memory), mean over seeds, at a dataset that standard is "
            "meant to store completely at every width (the paper's fixed-data regime); `accuracy` is the share of "
            "the keys stored (%). The paper: standard > frozen_qk ≈ mixit > frozen_mlp."),
    Finding("scale_depth", 5, "Finding 5, depth: width and depth", "addition", ("d_model", "n_layers"),
            "accuracy", "points", 2.0, None,
            "Final eval accuracy (%) on 2-digit addition, every run the same number of steps. `mixit [freeze "
            "v,o,mlp,norms]` is MixiT as the authors' depth script trains it by default (only the embeddings, "
            "positions and readout train). The paper finds the random transformer collapsing with depth and "
            "MixiT holding."),
)
FINDING_OF = {f.table: f for f in FINDINGS}
TABLE_NAMES = tuple(f.table for f in FINDINGS)

# Run settings that, with the axes, make one configuration (columns of mixit_lab.analysis.runs.COLUMNS).
CONFIG_KEYS = ("d_model", "n_layers", "n_heads", "steps", "lr", "batch_size")


# --------------------------------------------------------------------------- reading runs
def scale_runs(runs_dir: str | Path | None = None, *, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The finished runs of group `scale` (mixit_lab.analysis.runs.COLUMNS): of `runs` (a load_runs table) when given,
    else of the runs below runs_dir."""
    if runs is None:
        if runs_dir is None:
            raise ValueError("scale_runs needs runs_dir or runs")
        runs = load_runs(Path(runs_dir))
    done = reported(runs)
    return done[done["group"] == SCALE].reset_index(drop=True)


def _axis_values(runs: pd.DataFrame, axis: str) -> pd.Series:
    """A run setting (a column) or task parameter (the task's default where the run gave none) of every run."""
    if axis in runs.columns:
        return runs[axis]
    return pd.Series([resolved_task_params(t, p if isinstance(p, dict) else None).get(axis)
                      for t, p in zip(runs["task"], runs["task_params"])], index=runs.index)


def _reads_memory(finding: Finding) -> bool:
    """Whether the finding's metric comes from the memorization analysis (bits), not the run's accuracy."""
    return finding.metric != "accuracy"


def _variant_rank(label: str) -> tuple[int, str]:
    """Registry order of the named variant a label starts with; grid models after their variant."""
    base = str(label).split(" [", 1)[0]
    order = list(VARIANTS)
    return (order.index(base) if base in order else len(order), str(label))


def _finding_runs(runs: pd.DataFrame, finding: Finding) -> pd.DataFrame:
    """The finding's runs with a `value` column (its metric) and its axes as columns."""
    runs = runs[(runs["task"] == finding.task)
                & (runs["study"].map(is_sst2_study) == finding.sst2)].reset_index(drop=True)
    if runs.empty:
        return runs.assign(value=pd.Series(dtype=float))
    runs = runs.assign(**{a: _axis_values(runs, a) for a in finding.axes if a not in runs.columns})
    if not _reads_memory(finding):
        return runs.assign(value=pd.to_numeric(runs["eval_acc"], errors="coerce") * 100).dropna(subset=["value"])
    memories = [r.analysis_summary("memory") or {} for r in records(runs)]  # mixit_lab.analysis.memory's summary
    runs = runs.assign(
        value=[m.get(finding.metric) for m in memories],
        stored=[None if m.get("accuracy") is None else 100 * float(m["accuracy"]) for m in memories],
        trainable=[m.get("params_trainable") for m in memories],
        n=_axis_values(runs, "n"), d=_axis_values(runs, "d"),
    )
    runs["value"] = pd.to_numeric(runs["value"], errors="coerce")
    return runs.dropna(subset=["value"]).reset_index(drop=True)  # not analysed yet: no bits to read


# --------------------------------------------------------------------------- tables
def finding_table(runs: pd.DataFrame, finding: Finding) -> pd.DataFrame:
    """One finding's table from scale runs (mixit_lab.analysis.runs.COLUMNS rows): per variant and scale point, the
    metric's mean, std (ddof 0), median and seeds, and the paper's number (memorize: also `accuracy`, the
    keys stored in %, and the dataset's n and d)."""
    data = _finding_runs(runs, finding)
    extra = ["n", "d"] if _reads_memory(finding) else []
    # Settings other than the axes that differ between runs are part of the configuration (and shown), e.g.
    # MixiT's 16 heads against standard's 4.
    varying = [k for k in CONFIG_KEYS if k not in finding.axes and k in data and data[k].nunique(dropna=False) > 1]
    keys = ["variant", *finding.axes, *extra, *varying]
    columns = [*keys, *(["accuracy"] if _reads_memory(finding) else []), *STAT_COLUMNS]
    if data.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, g in data.groupby(keys, sort=False, dropna=False):
        values = g["value"].astype(float)
        row = dict(zip(keys, key))
        if _reads_memory(finding):
            row["accuracy"] = pd.to_numeric(g["stored"], errors="coerce").mean()
        variant = str(row["variant"])
        row.update(mean=values.mean(), std=values.std(ddof=0), median=values.median(), seeds=len(values),
                   paper=(finding.paper or {}).get(variant, math.nan),
                   values=[float(v) for v in g.sort_values("seed")["value"]] if "seed" in g else list(values))
        rows.append(row)
    out = pd.DataFrame(rows, columns=columns)
    out["_rank"] = out["variant"].map(_variant_rank)
    out = out.sort_values(["_rank", *finding.axes, *extra, *varying], kind="stable").drop(columns="_rank")
    return out.reset_index(drop=True)


def emergence_tables(runs_dir: str | Path | None = None, *,
                     runs: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """One table per finding (FINDINGS: scale_dyck, scale_sentiment, scale_sst2, scale_memorize, scale_depth) from the
    runs of group `scale` (of `runs`, a load_runs table, when given, else below runs_dir); a finding without
    runs has an empty table with its columns."""
    runs = scale_runs(runs_dir, runs=runs)
    return {f.table: finding_table(runs, f) for f in FINDINGS}


# --------------------------------------------------------------------------- trends
def _num(x: Any) -> str:
    x = float(x)
    return f"{x:,.0f}" if x == int(x) else f"{x:g}"


def _point(axes: tuple[str, ...], values: tuple) -> str:
    """'max_pairs 16, 4,000 steps', 'width 256, 4 layers'."""
    words = {"d_model": lambda v: f"width {_num(v)}", "n_layers": lambda v: f"{_num(v)} layers",
             "steps": lambda v: f"{_num(v)} steps", "n_heads": lambda v: f"{_num(v)} heads"}
    return ", ".join(words.get(a, lambda v, a=a: f"{a} {_num(v)}")(v) for a, v in zip(axes, values))


def trend_word(start: float, end: float, tolerance: float, magnitude: bool = False) -> str:
    """"shrinks", "grows" or "stays": how a gap moves from start to end (its size when `magnitude`)."""
    a, b = (abs(start), abs(end)) if magnitude else (start, end)
    if b - a > tolerance:
        return "grows"
    if a - b > tolerance:
        return "shrinks"
    return "stays"


def _comparisons(points: pd.DataFrame, axes: tuple[str, ...]) -> list[tuple[tuple, tuple]]:
    """Pairs (start, end) of scale points to compare, each a tuple of axis values: the point with every axis
    at its smallest value against the one with every axis at its largest (when both were run), then, for
    each axis, its smallest against its largest value at each setting of the other axes; with no such pair,
    the first point against the last."""
    present = {tuple(r) for r in points[list(axes)].itertuples(index=False)}
    pairs: list[tuple[tuple, tuple]] = []
    lo = tuple(points[a].min() for a in axes)
    hi = tuple(points[a].max() for a in axes)
    if lo != hi and lo in present and hi in present:
        pairs.append((lo, hi))
    if len(axes) > 1 or not pairs:
        for i, axis in enumerate(axes):
            others = [a for a in axes if a != axis]
            groups = points.groupby(others, sort=True) if others else [((), points)]
            for _, g in groups:
                if g[axis].nunique() < 2:
                    continue
                start = tuple(g.loc[g[axis].idxmin(), list(axes)])
                end = tuple(g.loc[g[axis].idxmax(), list(axes)])
                if (start, end) not in pairs:
                    pairs.append((start, end))
    if not pairs and len(present) > 1:
        ordered = sorted(present)
        pairs.append((ordered[0], ordered[-1]))
    return pairs


def _moves(axes: tuple[str, ...], start: tuple, end: tuple) -> str:
    """'as steps go from 1,000 to 4,000 (at max_pairs 16)' or 'from width 64, 2 layers to width 256, 4 layers (at
    4 heads)': the axes that move, then those that stay."""
    changed = [i for i, (a, b) in enumerate(zip(start, end)) if a != b]
    fixed = [j for j in range(len(axes)) if j not in changed]
    at = f" (at {_point(tuple(axes[j] for j in fixed), tuple(start[j] for j in fixed))})" if fixed else ""
    if len(changed) == 1:
        i = changed[0]
        name = {"d_model": "width", "n_layers": "depth", "steps": "steps", "n_heads": "heads"}.get(axes[i], axes[i])
        return f"as {name} goes from {_num(start[i])} to {_num(end[i])}{at}"
    moved = tuple(axes[i] for i in changed)
    ends = [_point(moved, tuple(values[i] for i in changed)) for values in (start, end)]
    return f"from {ends[0]} to {ends[1]}{at}"


def describe_gap(points: pd.DataFrame, axes: tuple[str, ...], label: str, unit: str, tolerance: float,
                 magnitude: bool = False, target: float | None = None) -> list[str]:
    """Clauses saying how `points["gap"]` (one row per scale point, `axes` as columns) moves toward the
    paper's setting, e.g. 'as steps goes from 1,000 to 4,000 (at max_pairs 16), standard − MixiT shrinks
    (+5.0 → +1.0 points)'. With `magnitude` the gap's size is what shrinks or grows; with a `target` (the
    paper's gap) each clause also says whether the change goes toward it or away from it."""
    points = points.dropna(subset=["gap"])
    if points.empty:
        return []
    gap = {tuple(r[:-1]): r[-1] for r in points[[*axes, "gap"]].itertuples(index=False)}
    seeds = ({tuple(r[:-2]): (r[-2], r[-1]) for r in points[[*axes, "plus", "minus"]].itertuples(index=False)}
             if {"plus", "minus"} <= set(points) else {})
    digits = 1 if unit == "points" else 2
    clauses = []
    for start, end in _comparisons(points, axes):
        a, b = gap[start], gap[end]
        word = trend_word(a, b, tolerance, magnitude)
        path = [a, b]
        changed = [i for i, (x, y) in enumerate(zip(start, end)) if x != y]
        if len(changed) == 1:  # one axis moves: every value along it, e.g. max_pairs 8, 16, 32
            i = changed[0]
            along = sorted((k for k in gap if all(k[j] == start[j] for j in range(len(axes)) if j != i)),
                           key=lambda k: k[i])
            path = [gap[k] for k in along]
        size = "|" + label + "|" if magnitude and (a < 0 or b < 0) else label
        where = ""
        if target is not None and word != "stays":
            closer = abs(b - target) < abs(a - target)
            where = f", {'toward' if closer else 'away from'} the paper's {target:+.{digits}f}"
        values = " → ".join(f"{g:+.{digits}f}" for g in path)
        clauses.append(f"{_moves(axes, start, end)}, {size} {word} ({values} {unit}{where}"
                       f"{_change_interval(seeds.get(start), seeds.get(end), digits)})")
    return clauses


def _change_interval(start: tuple | None, end: tuple | None, digits: int) -> str:
    """'; the change -0.5 [-9.1, +8.1] over seeds': the 95% interval of the gap's change from start to end, each
    gap a difference of two groups of seeds (plus - minus); '' without each point's per-seed values."""
    if not start or not end or not all(isinstance(v, list) and v for v in (*start, *end)):
        return ""
    change = combination([end[0], end[1], start[0], start[1]], [1.0, -1.0, -1.0, 1.0])
    return f"; the change {change.text(digits)} over seeds" if not change.one_seed else ""


def _pivot(table: pd.DataFrame, axes: tuple[str, ...]) -> pd.DataFrame:
    """Mean per scale point (rows, by the axes) and variant (columns)."""
    return table.pivot_table(index=list(axes), columns="variant", values="mean", aggfunc="mean")


def _pair_gap(table: pd.DataFrame, axes: tuple[str, ...], a: str, b: str) -> pd.DataFrame:
    """points with `gap` = mean of variant a - mean of variant b, where both were run, and each side's per-seed
    values (`plus`, `minus`: what the gap's interval reads)."""
    pivot = _pivot(table, axes)
    if a not in pivot or b not in pivot:
        return pd.DataFrame(columns=[*axes, "gap", "plus", "minus"])
    gaps = (pivot[a] - pivot[b]).rename("gap").reset_index()
    if "values" not in table:
        return gaps
    by = {(row["variant"], *(row[x] for x in axes)): row["values"] for _, row in table.iterrows()}
    gaps["plus"] = [by.get((a, *key)) for key in gaps[list(axes)].itertuples(index=False)]
    gaps["minus"] = [by.get((b, *key)) for key in gaps[list(axes)].itertuples(index=False)]
    return gaps


def _label(variant: str) -> str:
    return {"standard": "standard", "mixit": "MixiT", "random": "random", "frozen_qk": "frozen_qk",
            "frozen_mlp": "frozen_mlp"}.get(variant, variant.replace("mixit", "MixiT", 1))


def gap_sentence(name: str, table: pd.DataFrame) -> str:
    """One sentence, computed from `table` (a table of emergence_tables), saying whether the finding's gap
    shrinks, grows or stays as each axis moves toward the paper's setting; '' without enough data."""
    f = FINDING_OF[name]
    if table.empty:
        return ""
    if name in ("scale_dyck", "scale_sentiment"):
        points = _pair_gap(table, f.axes, "standard", "mixit")
        clauses = describe_gap(points, f.axes, "standard − MixiT", f.unit, f.tolerance, magnitude=True)
        if not clauses:
            return _too_few(points)
        paper = "the paper: MixiT about as good as standard" + (
            f", {PAPER_SENTIMENT['standard'] - PAPER_SENTIMENT['mixit']:+.1f} points on Yelp"
            if name == "scale_sentiment" else "")
        return _sentence(clauses, paper)
    if name == "scale_sst2":
        return _sst2_sentence(table)
    if name == "scale_memorize":
        points = _pair_gap(table, f.axes, "standard", "mixit")
        target = PAPER_MEMORIZE_BITS["standard"] - PAPER_MEMORIZE_BITS["mixit"]
        clauses = describe_gap(points, f.axes, "standard − MixiT", f.unit, f.tolerance, target=target)
        if not clauses:
            return _too_few(points)
        paper = f"the paper: {target:+.2f}, standard > frozen_qk ≈ mixit > frozen_mlp"
        return _sentence(clauses, paper) + _memorize_note(table)
    if name == "scale_depth":
        clauses = []
        widths = [a for a in f.axes if a != "n_layers"]
        # random first: the paper's claim is its collapse; then MixiT, then grid models.
        for variant in sorted(table["variant"].unique(), key=lambda v: (v != "random", _variant_rank(v))):
            mine = table[table["variant"] == variant]
            rows = []
            for key, g in mine.groupby(widths, sort=True):
                if g["n_layers"].nunique() < 2:
                    continue
                shallow, deep = g.loc[g["n_layers"].idxmin()], g.loc[g["n_layers"].idxmax()]
                rows.append({**dict(zip(widths, key if isinstance(key, tuple) else (key,))),
                             "gap": shallow["mean"] - deep["mean"], "plus": shallow.get("values"),
                             "minus": deep.get("values"),
                             "depths": f"{_num(shallow['n_layers'])} to {_num(deep['n_layers'])} layers"})
            if not rows:
                continue
            points = pd.DataFrame(rows)
            depths = points["depths"].unique()
            label = f"{_label(variant)}'s loss from " + (depths[0] if len(depths) == 1 else "the shallowest to the deepest")
            if len(points) == 1:
                one = points.iloc[0]
                loss = difference(one["plus"], one["minus"]) if isinstance(one.get("plus"), list) else None
                clauses.append(f"at {_point(tuple(widths), tuple(one[widths]))}, {label} is "
                               + (loss.text() if loss is not None else f"{one['gap']:+.1f}") + " points")
            else:
                clauses += describe_gap(points[[*widths, "gap", "plus", "minus"]], tuple(widths), label, f.unit,
                                        f.tolerance)
        if not clauses:
            return "Too few depths to measure a loss with depth."
        return _sentence(clauses, "the paper: random collapses with depth, MixiT holds")
    raise ValueError(f"unknown emergence table {name!r}; one of {', '.join(TABLE_NAMES)}")


def _sst2_sentence(table: pd.DataFrame) -> str:
    """Per SST-2 point, standard minus each other variant with its 95% interval over seeds."""
    f = FINDING_OF["scale_sst2"]
    clauses = []
    for key, g in table.groupby(list(f.axes), sort=True):
        seeds = {row["variant"]: row["values"] for _, row in g.iterrows()}
        if "standard" not in seeds:
            continue
        gaps = [f"standard − {_label(v)} {difference(seeds['standard'], values).text()}"
                for v, values in seeds.items() if v != "standard"]
        if gaps:
            clauses.append(f"at {_point(f.axes, key)}, " + ", ".join(gaps) + " points")
    if not clauses:
        return "Not measured: the table lacks standard or another variant."
    paper = f"the paper: {PAPER_SENTIMENT['standard'] - PAPER_SENTIMENT['mixit']:+.1f} points standard − MixiT on Yelp"
    return _sentence(clauses, paper)


def _sentence(clauses: list[str], paper: str) -> str:
    text = "; ".join(clauses)
    return text[0].upper() + text[1:] + f" ({paper})."


def _too_few(points: pd.DataFrame) -> str:
    if points.empty:
        return "Not measured: the table lacks standard or MixiT."
    return "Only one scale point has both standard and MixiT: no trend to read."


def _memorize_note(table: pd.DataFrame) -> str:
    """Which variant stores most per parameter at each width, and whether standard stored every key."""
    notes = []
    for width, g in table.groupby("d_model", sort=True):
        order = g.sort_values("mean", ascending=False)["variant"].map(_label)
        notes.append(f"width {_num(width)}: " + " > ".join(order))
    text = " Order by bits per trainable parameter, " + "; ".join(notes) + "."
    std = table[table["variant"] == "standard"]
    short = std[pd.to_numeric(std["accuracy"], errors="coerce") < FULL_ACCURACY]
    if len(std) and short.empty:
        text += " Standard stores every key at every width (the fixed-data regime)."
    elif len(short):
        text += " Standard does not store every key at " + ", ".join(
            f"width {_num(r.d_model)} ({r.accuracy:.1f}%)" for r in short.itertuples()) + ": not the fixed-data regime there."
    return text


# --------------------------------------------------------------------------- the report section
def markdown_table(df: pd.DataFrame) -> str:
    """A Markdown table in the report's format."""
    return _markdown_table(df, "_No runs of the scale preset for this finding._")


def emergence_section(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Markdown lines of the report section "Where the findings emerge": per finding its table and one
    sentence saying whether the gap shrinks, grows or stays toward the paper's setting ([] when no finding
    has scale runs)."""
    if all(tables.get(f.table) is None or tables[f.table].empty for f in FINDINGS):
        return []
    lines = ["## Where the findings emerge", "",
             "The scale preset's runs (study group `scale`): for each finding that does not hold at the quick "
             "preset's size, one or two axes moved toward the paper's setting. Mean, std (over seeds) and median "
             "of the final metric per variant and scale point; `paper` where the paper gives a number. The "
             "sentence under each table reads the means: whether the finding's gap shrinks, grows or stays "
             "(changes within the tolerance named) as each axis moves toward the paper, with the change's 95% "
             "interval over seeds (Welch's t; `values` holds each seed's number). Every variant is at the learning "
             "rate chosen for it where its study tunes one (\"Learning rates\"), else at the study's one rate.", ""]
    for f in FINDINGS:
        table = tables.get(f.table)
        if table is None:
            continue
        lines += [f"### {f.title}", "", f.about, "", markdown_table(table)]
        sentence = gap_sentence(f.table, table)
        if any(word in sentence for word in ("shrinks", "grows", "stays")):
            sentence += f" (Tolerance: {f.tolerance:g} {f.unit}.)"
        if sentence:
            lines += [sentence, ""]
    return lines


__all__ = ["FINDINGS", "SCALE", "TABLE_NAMES", "describe_gap", "emergence_section", "emergence_tables",
           "finding_table", "gap_sentence", "scale_runs", "trend_word"]
