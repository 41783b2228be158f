"""Which runs a report table reads, and the statistics over seeds every table shares.

    from mixit_lab.reproduce.selection import select, accuracy_stats
    dyck = select(runs, "dyck", "algorithmic")            # finished dyck runs of that study (else of any)
    stats = accuracy_stats(dyck, ["variant", "task_label"])  # mean, std, seeds, median, stuck seeds (%)

`runs` is a table of mixit_lab.analysis.runs.load_runs (one row per run). The paper's tables never read the
beyond-the-paper group (grid models, not the paper's variants) nor the scale group (runs that sweep
one setting, tabled by mixit_lab.reproduce.emergence).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from mixit_lab.analysis.runs import reported
from mixit_lab.models import VARIANTS

from .emergence import SCALE

BEYOND = "beyond"  # the study group of grid experiments (reproduce/presets/beyond.yaml): not the paper's tables
SCHEDULE = "schedule"  # studies at the authors' scripts' default schedule: their own table beside the paper's
NOT_THE_PAPERS = (BEYOND, SCALE, SCHEDULE)  # groups the paper's tables leave out

# A seed this many points below its configuration's median is reported as stuck: one such seed
# (retrieval's standard seed 1 at 32.4% against 100% for the others, from a too-short warmup) would
# otherwise decide a mean, so the verdicts read medians and the report names the stuck seeds.
STUCK_POINTS = 30.0


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs whose training finished, each at its setting's chosen learning rate (mixit_lab.analysis.runs.reported: a tuned
    study's runs at the other learning rates are its tuning grid, read from the tuning record, never here)."""
    return reported(runs)


def papers_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs of the paper's groups (neither beyond-the-paper nor scale)."""
    done = finished(runs)
    return done[~done["group"].isin(NOT_THE_PAPERS)]


def select(runs: pd.DataFrame, task: str, study: str | None = None, fallback: bool = True) -> pd.DataFrame:
    """Finished runs of `task` from the paper's groups: from `study` if that study has any, else from every
    study. fallback=False: only `study`'s runs."""
    mine = papers_runs(runs)
    mine = mine[mine["task"] == task]
    if study is not None and (not fallback or (mine["group"] == study).any()):
        mine = mine[mine["group"] == study]
    return mine


def mean_by(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Mean and spread over seeds of `value` per `keys`, the number of seeds, and the values themselves in seed
    order (`{value}_values`: what mixit_lab.reproduce.intervals reads)."""
    if df.empty:
        return pd.DataFrame(columns=[*keys, value, f"{value}_std", "seeds", f"{value}_values"])
    ordered = df.sort_values("seed", kind="stable") if "seed" in df else df
    g = ordered.groupby(keys, sort=False)[value]
    values = g.apply(lambda v: [float(x) for x in v]).rename(f"{value}_values")
    return pd.concat([g.mean(), g.std(ddof=0).rename(f"{value}_std"), g.size().rename("seeds"), values],
                     axis=1).reset_index()


def accuracy_stats(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Accuracy (%) per `keys`: mean, spread, seeds, the per-seed values (`acc_values`), median and the seeds stuck
    far below the median."""
    df = df.assign(acc=df["eval_acc"].astype(float) * 100)
    out = mean_by(df, keys, "acc")
    if df.empty:
        return out.assign(median=pd.Series(dtype=float), stuck=pd.Series(dtype=str))
    medians, stuck = [], []
    for _, g in df.groupby(keys, sort=False):
        med = float(g["acc"].median())
        medians.append(med)
        low = g[g["acc"] < med - STUCK_POINTS].sort_values("seed")
        stuck.append(", ".join(f"seed {int(s)} at {a:.1f}%" for s, a in zip(low["seed"], low["acc"])))
    return out.assign(median=medians, stuck=stuck)


def lookup(df: pd.DataFrame, value: str, **where: Any) -> float | None:
    """`value` of the first row matching `where` (column=value), or None without one."""
    if df.empty:
        return None
    rows = df
    for k, v in where.items():
        rows = rows[rows[k] == v]
    return float(rows[value].iloc[0]) if len(rows) else None


def in_variant_order(df: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by the task column (if any), then variants in registry order (standard first)."""
    if df.empty or "variant" not in df:
        return df.reset_index(drop=True)
    rank = {v: i for i, v in enumerate(VARIANTS)}
    first = [c for c in ("task", "regime") if c in df]
    then = [c for c in ("n", "depth", "n_layers") if c in df]
    df = df.assign(_rank=df["variant"].map(rank)).sort_values([*first, "_rank", *then], kind="stable")
    return df.drop(columns="_rank").reset_index(drop=True)
