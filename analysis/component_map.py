"""The component map across runs: who does the work, attention or MLP, in each task setting and variant, from every
seed's components table (mixit_lab.analysis.components, written by `mixit analyze`). Reads tables only: no torch, no model.

    from mixit_lab.analysis.component_map import who_does_the_work
    work = who_does_the_work(load_runs("runs/quick"))              # one row per setting, variant and component
    layers = who_does_the_work(load_runs("runs/quick"), per_layer=True)
"""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

WORK_KEYS = ["task", "variant", "d_model", "n_layers"]
WORK_COLUMNS = [*WORK_KEYS, "layer", "component", "seeds", "accuracy", "share", "share_std", "mean_drop",
                "mean_drop_std", "resample_drop", "resample_drop_std", "bits_lost", "bits_lost_std"]
KINDS = {"attn": "attention", "mlp": "MLP"}


def _per_run(run: Any, records: list[dict[str, Any]], per_layer: bool) -> list[dict[str, Any]]:
    """One run's rows from its components table (as records): per kind (and per layer), share of the logit
    difference, accuracy lost (points) under mean and resample ablation, and the share of stored bits lost (%,
    memorize runs). Plain records, not pandas indexing: a figure over thousands of runs calls it once per run."""
    rows = []
    by_component: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_component.setdefault(r["component"], []).append(r)
    first = by_component["all_attn"][0]
    base_acc = first["mean_accuracy"] - first["mean_delta_accuracy"]  # the intact model on the same eval rows
    for kind, name in KINDS.items():
        layers = by_component.get(kind, [])
        # Per layer: that layer's own row; else the all-at-once ablation, with the layers' shares summed.
        targets = layers if per_layer else [by_component[f"all_{kind}"][0]]
        for r in targets:
            layer = int(r["layer"]) if per_layer else -1
            share = float(r["share"]) if per_layer else math.fsum(x["share"] for x in layers if pd.notna(x["share"]))
            intact = r["mean_bits"] + r["mean_bits_lost"] if pd.notna(r["mean_bits"]) else float("nan")
            rows.append({
                "task": run.task_label, "variant": run.variant, "d_model": run.d_model, "n_layers": run.n_layers,
                "layer": layer, "component": name, "accuracy": 100 * base_acc, "share": share,
                "mean_drop": -100 * r["mean_delta_accuracy"], "resample_drop": -100 * r["resample_delta_accuracy"],
                "bits_lost": 100 * r["mean_bits_lost"] / intact if intact and pd.notna(intact) else float("nan"),
            })
    return rows


def _one_run_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with one run per setting and seed: two studies may train the same setting (the quick preset's depth
    study and Table 3 both train 2-layer MixiT on 2-digit addition), which would otherwise count each seed twice."""
    if runs.empty:
        return runs
    key = [c for c in ("task", "variant", "d_model", "n_layers", "n_heads", "lr", "schedule", "steps", "batch_size",
                       "seed") if c in runs]
    params = runs["task_params"].map(lambda p: json.dumps(p, sort_keys=True, default=str))
    return runs.assign(_params=params).drop_duplicates([*key, "_params"]).drop(columns="_params")


def who_does_the_work(runs: pd.DataFrame, per_layer: bool = False) -> pd.DataFrame:
    """Attention against MLP over a set of runs: per task setting, variant and component, the median over
    seeds (and spread) of the share of the answer's logit difference and of the accuracy (points) and stored
    bits (%) lost when that component is ablated.

    `runs`: rows of `mixit_lab.analysis.runs.load_runs`; finished runs whose analysis holds components.csv are read.
    per_layer=False: all attention layers (or all MLPs) together, layer -1, the shares summed and the
    drops from the all-at-once ablations; per_layer=True: one row per layer, from the one-at-a-time ones.
    Returns `WORK_COLUMNS`; empty when no run has the analysis.
    """
    from .runs import read_analysis_records, records, reported

    rows = []
    chosen = _one_run_per_seed(reported(runs))
    for run, record in zip(chosen.itertuples(), records(chosen)):
        table = read_analysis_records(record, "components")  # None for a reference's records: no directory
        if table:
            rows += _per_run(run, table, per_layer)
    if not rows:
        return pd.DataFrame(columns=WORK_COLUMNS)
    df = pd.DataFrame(rows)
    keys = [*WORK_KEYS, "layer", "component"]
    grouped = df.groupby(keys, sort=False, dropna=False)
    out = grouped[["accuracy", "share", "mean_drop", "resample_drop", "bits_lost"]].median()
    spread = grouped[["share", "mean_drop", "resample_drop", "bits_lost"]].std(ddof=0).add_suffix("_std")
    out = out.join(spread).join(grouped.size().rename("seeds")).reset_index()
    return out[WORK_COLUMNS]
