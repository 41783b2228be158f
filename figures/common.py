"""What the figure modules share: the runs they draw, selecting runs, averaging over seeds, per-variant series, the CLI.

Every figure module exposes `plot(runs: RunSet) -> Figure` and raises `NoData(reason)` when the runs folder
holds nothing it can draw. The RunSet (mixit_lab.analysis.runs) is the folder, its runs and their table, read once
and shared by every figure that `mixit_lab.figures.make_all` draws from it; only finished runs count (a diverged or
interrupted run has no final evaluation).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from mixit_lab.analysis.runs import RunSet, reported
from mixit_lab.models.files import read_json
from mixit_lab.training.rundir import MANIFEST

if TYPE_CHECKING:  # matplotlib is imported by the figure modules, through mixit_lab.figures.style
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Run settings that, with the task, make one configuration; seeds are repeats of a configuration.
CONFIG_KEYS = ("d_model", "n_layers", "n_heads", "lr", "steps", "batch_size")


class NoData(Exception):
    """The runs directory holds nothing this figure can draw; the message is one line saying what is missing."""


def _note_damaged(table: pd.DataFrame) -> None:
    """One warning line naming the damaged runs (a run.json or summary.json that cannot be read) that every figure
    leaves out; nothing when there are none."""
    import warnings

    bad = table[table["status"] == "corrupt"]
    if len(bad):
        named = "; ".join(f"{r.run} ({str(r.error).split(': ', 1)[0]})" for r in bad.itertuples())
        warnings.warn(f"{len(bad)} damaged run(s) left out of the figures: {named}; restore or remove them",
                      stacklevel=3)


def as_runs(runs: RunSet | str | Path) -> RunSet:
    """`runs` itself, or a folder (as a notebook or a one-figure script may give it) as a RunSet of its own."""
    return runs if isinstance(runs, RunSet) else RunSet(runs)


def runs_frame(runs: RunSet) -> pd.DataFrame:
    """The runs' table (RunSet.frame: COLUMNS and each row's `record`); NoData if the folder is missing. The read
    that builds it warns once of the damaged runs every figure leaves out."""
    if not runs.root.is_dir():
        raise NoData(f"{runs.root} is not a directory")
    fresh = not runs.is_read
    frame = runs.frame()
    if fresh:
        _note_damaged(frame)
    return frame


# Study groups whose runs sweep one setting for one question (the scale preset's `scale`, mixit_lab.reproduce.emergence):
# only the figures that name the group draw them, never another figure's fallback (as the report's tables
# leave them out of the paper's).
OWN_FIGURES_ONLY = ("scale", "schedule")


def finished_runs(runs: RunSet, groups: Sequence[str] = ()) -> pd.DataFrame:
    """The finished runs of `runs` (see mixit_lab.analysis.runs.COLUMNS) at their setting's chosen learning rate (all runs of
    an untuned setting: mixit_lab.analysis.runs.reported), a new frame; NoData if its folder is missing.

    Runs of an OWN_FIGURES_ONLY group are left out unless `groups` names it."""
    df = reported(runs_frame(runs))
    hidden = [g for g in OWN_FIGURES_ONLY if g not in groups]
    return df[~df["group"].isin(hidden)].reset_index(drop=True)


def select_runs(
    runs: pd.DataFrame,
    groups: Sequence[str],
    fallback: Callable[[pd.DataFrame], pd.Series] | None = None,
    what: str = "runs",
) -> pd.DataFrame:
    """Runs in the given groups; if there are none, the runs where `fallback(runs)` is True; else NoData."""
    chosen = runs[runs["group"].isin(groups)]
    if chosen.empty and fallback is not None and not runs.empty:
        chosen = runs[fallback(runs)]
    if chosen.empty:
        raise NoData(f"no finished {what} (looked for group {'/'.join(groups)})")
    return chosen.reset_index(drop=True)


def param(runs: pd.DataFrame, name: str) -> pd.Series:
    """One numeric task parameter of every run: the value it was trained with, else the task's default
    (a run records only the parameters it was given); NaN where the run's task has no such parameter."""
    return pd.Series([_param(task, params, name) for task, params in zip(runs["task"], runs["task_params"])],
                     index=runs.index, dtype=float)


def _param(task: str, params: object, name: str) -> float | None:
    """One numeric parameter of a run: as given, else the task's default (mixit_lab.training.tasks), else None."""
    value = params.get(name) if isinstance(params, dict) else None
    if value is None:  # the task's default: only then is the task registry (and torch) imported
        from mixit_lab.training.tasks import resolved_task_params

        value = resolved_task_params(task, params if isinstance(params, dict) else None).get(name)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def best_config(runs: pd.DataFrame, keys: Sequence[str], value: str, higher_is_better: bool = True) -> pd.DataFrame:
    """For each combination of `keys`, the runs (all seeds) of its best configuration by mean `value`.

    A configuration is task_label plus CONFIG_KEYS not among `keys`; when a study tries several
    learning rates (or sizes) for one variant, the figure shows the one that did best, as the
    paper reports the best learning rate.
    """
    runs = runs[runs[value].notna()].reset_index(drop=True)
    if runs.empty:
        return runs
    config = [k for k in ("task_label", *CONFIG_KEYS) if k not in keys and k in runs]
    cols = list(dict.fromkeys([*keys, *config]))
    ident = runs[cols].astype(str).agg("|".join, axis=1)  # one string per configuration (NaN-safe)
    group = runs[list(keys)].astype(str).agg("|".join, axis=1)
    means = runs[value].groupby(ident).transform("mean")
    order = means.sort_values(ascending=not higher_is_better, kind="stable").index
    best = {}
    for i in order:
        best.setdefault(group[i], ident[i])
    return runs[[best[g] == c for g, c in zip(group, ident)]].reset_index(drop=True)


def seed_stats(runs: pd.DataFrame, keys: Sequence[str], value: str) -> pd.DataFrame:
    """mean, min, max and n (seeds) of `value` for each combination of `keys`."""
    stats = runs.groupby(list(keys), dropna=False)[value].agg(["mean", "min", "max", "count"]).reset_index()
    return stats.rename(columns={"count": "n"})


def variants_in(df: pd.DataFrame) -> list[str]:
    """The variants present in df, in the figures' order."""
    from .style import order_variants

    return order_variants(df["variant"].dropna())


def plot_variant_lines(ax: Axes, stats: pd.DataFrame, x: str, scale: float = 1.0) -> None:
    """One line per variant of stats (from seed_stats, with `x` and variant among its keys), error bars
    spanning the seeds' min..max where there is more than one seed."""
    from .style import variant_style

    for v in variants_in(stats):
        s = variant_style(v)
        d = stats[stats["variant"] == v].sort_values(x)
        ax.errorbar(d[x], d["mean"] * scale, yerr=seed_errors(d, scale), color=s.color, marker=s.marker,
                    label=s.label, markeredgecolor="white", markeredgewidth=0.4, elinewidth=0.7)


def seed_errors(stats: pd.DataFrame, scale: float = 1.0) -> np.ndarray | None:
    """Asymmetric error bars [2, n] from the mean to the seeds' min and max (NaN, no bar, for one seed).

    Clipped at 0: the mean of equal seeds can round past them (the mean of 84 copies of 0.1 is 0.1 + 1e-17), and
    matplotlib refuses a negative bar."""
    several = (stats["n"] > 1).to_numpy()
    if not several.any():
        return None
    spread = np.vstack([stats["mean"] - stats["min"], stats["max"] - stats["mean"]]).clip(min=0) * scale
    return np.where(several, spread, np.nan)


def value_ticks(ax: Axes, values: Iterable[float], axis: str = "x", log: bool | None = None) -> None:
    """Ticks exactly at the measured values (e.g. 16, 64, 256 keys), labelled plainly, no minor ticks.

    Log scale when `log` is True, or (None) when the values span a factor of 8 or more."""
    from matplotlib.ticker import NullLocator

    values = sorted({float(v) for v in values})
    if log is None:
        log = len(values) > 2 and values[0] > 0 and values[-1] / values[0] >= 8
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    set_ticks = ax.set_xticks if axis == "x" else ax.set_yticks
    if log:
        set_scale("log")
    shown = values if len(values) <= 8 else values[:: int(np.ceil(len(values) / 8))]
    set_ticks(shown, [f"{v:,g}" for v in shown])
    (ax.xaxis if axis == "x" else ax.yaxis).set_minor_locator(NullLocator())


def plain_log_ticks(ax: Axes, axis: str = "x") -> None:
    """Label a log axis (after plotting) in plain numbers at 1, 10, 100, ..., and at 2 and 5 times those where
    it spans under two decades (matplotlib would label 3x10^0 and 4x10^0 there, on top of each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    scale_axis = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = sorted(scale_axis.get_view_interval())
    subs = (1.0, 2.0, 5.0) if lo > 0 and hi / lo < 100 else (1.0,)
    scale_axis.set_major_locator(LogLocator(base=10, subs=subs))
    scale_axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}"))
    scale_axis.set_minor_formatter(NullFormatter())


def legend_above(fig_or_ax, handles=None, labels=None, ncol: int | None = None, **kwargs):
    """A legend in one row (or a few) above the plotting area, where it cannot cover data."""
    from matplotlib.figure import Figure

    target = fig_or_ax
    if handles is None:
        axes = target.axes if isinstance(target, Figure) else [target]
        seen: dict[str, object] = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        labels, handles = list(seen), list(seen.values())
    if not handles:
        return None
    ncol = ncol or min(len(handles), 6)
    if isinstance(target, Figure):
        return target.legend(handles, labels, loc="outside upper center", ncol=ncol, **kwargs)
    return target.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=ncol,
                         borderaxespad=0.2, **kwargs)


def spread_note(seed_counts: Iterable[int]) -> str:
    """A note for error bars: what they span ('' when every point is a single seed)."""
    n = max(seed_counts, default=1)
    return f"error bars: min–max over {n} seeds" if n > 1 else ""


def config_text(run: pd.Series) -> str:
    """A short description of a run's model, e.g. 'd_model 64, 2 layers, 4 heads'."""
    layers = int(run["n_layers"])
    return f"d_model {int(run['d_model'])}, {layers} layer{'s' if layers != 1 else ''}, {int(run['n_heads'])} heads"


# --------------------------------------------------------------------------- command line
def study_figures_dir(study: str) -> Path:
    """A study's figures folder by default: reports/<study>/figures, beside its report (relative to the working
    directory, so never inside a package's own folder, where a study's files once changed the code's fingerprint)."""
    return Path("reports") / study / "figures"


def default_out_dir(runs_dir: str | Path) -> Path:
    """study_figures_dir of the preset named in runs_dir/reproduce.json, else of runs_dir's own name."""
    runs_dir = Path(runs_dir)
    name = runs_dir.resolve().name
    try:
        preset = read_json(runs_dir / MANIFEST).get("preset")
        if isinstance(preset, str) and preset and "/" not in preset and preset not in (".", ".."):
            name = preset
    except (OSError, ValueError, AttributeError):
        pass
    return study_figures_dir(name)


def run_one(name: str, plot: Callable[[RunSet], Figure], argv: Sequence[str] | None = None) -> int:
    """`python -m mixit_lab.figures.<name> RUNS_DIR [--out DIR]`: draw one figure and save it (PNG + PDF)."""
    from .style import save

    p = argparse.ArgumentParser(prog=f"python -m mixit_lab.figures.{name}", description=f"Draw the {name} figure.",
                                allow_abbrev=False)
    p.add_argument("runs_dir", type=Path, metavar="RUNS_DIR")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: reports/<preset>/figures)")
    args = p.parse_args(argv)
    if not args.runs_dir.is_dir():
        print(f"{p.prog}: error: RUNS_DIR {args.runs_dir} is not a directory", file=sys.stderr)
        return 2
    try:
        fig = plot(RunSet(args.runs_dir))
    except NoData as e:
        print(f"{name}: skipped: {e}", file=sys.stderr)
        return 1
    paths = save(fig, args.out or default_out_dir(args.runs_dir), name)
    print(f"{name}: {', '.join(str(x) for x in paths)}")
    return 0
