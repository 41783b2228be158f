"""The authors' own training code at our studies' settings: the reference each finding's verdict is read against.

    from reproduce.reference import load_reference, reference_runs
    records = load_reference()            # reproduce/authors_reference.json
    theirs = reference_runs(records, ours)  # their finished runs as rows of analysis.runs.COLUMNS

`benchmarks/authors_reference.py` writes the records: one per run of the authors' scripts (their
commit, command, date and machine included) at the settings of one of our preset studies. A record
counts for a report only where its settings (task and its parameters, width, layers, heads, steps,
batch size, learning rate) equal those of a finished run of ours of the same variant, so a reference
measured at other settings never stands in for these.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.runs import COLUMNS, task_label
from models.files import read_json

REFERENCE_FILE = Path(__file__).resolve().with_name("authors_reference.json")

# Settings that must match between a record and a run of ours (seeds are repeats, not settings).
SETTINGS = ("task_label", "d_model", "n_layers", "n_heads", "steps", "batch_size", "lr", "warmup_steps", "weight_decay")

# Labels of the authors' runs that are none of our variants, and the variant of ours whose settings they share.
# "mixit_weight_frozen": MixiT as their depth script trains it by default (only embeddings and readout train).
ALIASES = {"mixit_weight_frozen": "mixit"}


def load_reference(path: str | Path = REFERENCE_FILE) -> list[dict[str, Any]]:
    """The records of the reference file ([] when there is none); ValueError naming the file if malformed."""
    path = Path(path)
    if not path.is_file():
        return []
    data = read_json(path)
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path}: expected {{'records': [...]}} with one mapping per run")
    return records


def _key(values: dict[str, Any]) -> tuple:
    """Settings as a comparable tuple (floats rounded, so 3e-3 read from YAML equals 0.003 from JSON)."""
    out = []
    for name in SETTINGS:
        v = values.get(name)
        if isinstance(v, float) and math.isfinite(v):
            v = float(f"{v:.6g}")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            v = float(v) if name in ("lr", "weight_decay") else int(v)
        out.append(v)
    return tuple(out)


def _fraction(x: Any) -> float | None:
    """An accuracy as a fraction: records may give percent (the `value` of an accuracy metric) or fraction."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    x = float(x)
    return x / 100 if x > 1 else x


def record_row(rec: dict[str, Any]) -> dict[str, Any]:
    """One record as a finished run (analysis.runs.COLUMNS, plus its memorization result under "memory")."""
    params = dict(rec.get("task_params") or {})
    row: dict[str, Any] = {c: None for c in COLUMNS}
    accuracy = _fraction(rec.get("accuracy", rec.get("value") if rec.get("metric") == "accuracy" else None))
    study = str(rec.get("study") or "")
    row.update(
        run=f"authors/{study}/{rec.get('variant')}/seed{rec.get('seed')}", group=study.split("-", 1)[0], study=study,
        variant=rec.get("variant"), task=rec.get("task"), task_params=params,
        task_label=task_label(str(rec.get("task")), params), status="finished", eval_acc=accuracy,
        eval_loss=rec.get("eval_loss"), params_trainable=rec.get("params_trainable"), precision="fp32",
        **{k: rec.get(k) for k in ("d_model", "n_layers", "n_heads", "lr", "seed", "steps", "batch_size",
                                   "warmup_steps", "weight_decay")},
    )
    bpp = rec.get("bits_per_trainable_param")
    row["memory"] = None if bpp is None else {
        "accuracy": accuracy, "bits_per_trainable_param": float(bpp), "params_trainable": rec.get("params_trainable"),
        "bits": rec.get("bits", float(bpp) * float(rec.get("params_trainable") or 0) or None)}
    row["eval_items"] = rec.get("eval_items")
    return row


def reference_runs(records: list[dict[str, Any]], ours: pd.DataFrame) -> pd.DataFrame:
    """The records whose settings equal a finished run of ours of the same variant, as finished runs."""
    finished = ours[ours["status"] == "finished"] if len(ours) else ours
    mine = {(v, *_key(r)) for v, r in zip(finished.get("variant", []), finished.to_dict("records"))}
    rows = [row for row in map(record_row, records)
            if (ALIASES.get(row["variant"], row["variant"]), *_key(row)) in mine]
    return pd.DataFrame(rows, columns=[*COLUMNS, "memory", "eval_items"])


END_TO_END_COLUMNS = ["task", "variant", "d_model", "n_layers", "n_heads", "steps", "metric", "ours", "ours_median",
                      "theirs", "theirs_median", "difference", "spread", "beyond_spread", "note"]

# Tasks whose metric in the authors' code is another quantity than ours, so that their number and ours are not
# compared (the verdicts still read theirs against their own other runs: a finding is about differences).
OTHER_METRIC = {
    "addition": "their metric scores the token after each answer token, averaged over tokens: the first sum digit "
                "is neither trained nor scored (on their own models our whole-answer accuracy is 5-10%), so "
                "their number is not ours",
}


def _metric(row: dict[str, Any]) -> tuple[str, float | None]:
    """What a run is compared on: bits per trainable parameter for memorization studies, else accuracy (%)."""
    memory = row.get("memory")
    if row.get("task") == "memorize" and row.get("group") == "memorize":
        if not isinstance(memory, dict) and isinstance(row.get("path"), str):
            from analysis.runs import memory_summary

            memory = memory_summary(row["path"])
        value = (memory or {}).get("bits_per_trainable_param")
        return "bits/param", None if value is None else float(value)
    acc = row.get("eval_acc")
    return "accuracy %", None if acc is None or pd.isna(acc) else 100 * float(acc)


def end_to_end(ours: pd.DataFrame, records: list[dict[str, Any]]) -> pd.DataFrame:
    """Our finished runs beside the authors' code's at the same settings, one row per setting and variant:
    per-seed values of both, their medians, the difference (ours - theirs) and whether it exceeds the seed
    spread (the larger of the two sides' ranges over seeds)."""
    theirs = reference_runs(records, ours)
    if theirs.empty:
        return pd.DataFrame(columns=END_TO_END_COLUMNS)
    mine = ours[ours["status"] == "finished"]
    rows = []
    keys = ["task_label", "variant", *SETTINGS[1:]]
    for key, group in theirs.groupby(keys, sort=False, dropna=False):
        where = dict(zip(keys, key))
        variant = ALIASES.get(where["variant"], where["variant"])
        same = mine[(mine["variant"] == variant)
                    & mine.apply(lambda r: _key(r.to_dict()) == _key(where), axis=1)]
        metric = _metric(group.iloc[0].to_dict())[0]
        side = {}
        for name, runs in (("theirs", group), ("ours", same if where["variant"] == variant else same.iloc[0:0])):
            values = [(r["seed"], _metric(r)[1]) for r in runs.to_dict("records")]
            side[name] = sorted((int(s), v) for s, v in values if v is not None)
        med = {k: (float(pd.Series([v for _, v in side[k]]).median()) if side[k] else None) for k in side}
        spread = max((max(v for _, v in side[k]) - min(v for _, v in side[k]) for k in side if side[k]), default=0.0)
        note = OTHER_METRIC.get(str(group.iloc[0]["task"]), "")
        diff = None if None in med.values() or note else round(med["ours"] - med["theirs"], 4)
        digits = 3 if metric == "bits/param" else 1
        rows.append({
            "task": where["task_label"], "variant": where["variant"], "d_model": where["d_model"],
            "n_layers": where["n_layers"], "n_heads": where["n_heads"], "steps": where["steps"], "metric": metric,
            "ours": " / ".join(f"{v:.{digits}f}" for _, v in side["ours"]) or "—", "ours_median": med["ours"],
            "theirs": " / ".join(f"{v:.{digits}f}" for _, v in side["theirs"]), "theirs_median": med["theirs"],
            "difference": diff, "spread": spread,
            "beyond_spread": None if diff is None else bool(abs(diff) > spread), "note": note,
        })
    return pd.DataFrame(rows, columns=END_TO_END_COLUMNS)
