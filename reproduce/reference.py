"""The authors' own training code at our studies' settings: the reference each finding's verdict is read against.

    from mixit_lab.reproduce.reference import load_reference, reference_runs
    records = load_reference()            # reproduce/authors_reference.json
    theirs = reference_runs(records, ours)  # their finished runs as rows of mixit_lab.analysis.runs.COLUMNS

`benchmarks/authors_reference.py` writes the records: one per run of the authors' scripts (their
commit, command, date and machine included) at the settings of one of our preset studies. A record
counts for a report only where its settings (task and its parameters, width, layers, heads, steps,
batch size, learning rate) equal those of a finished run of ours of the same variant, so a reference
measured at other settings never stands in for these.

`benchmarks/authors_signal.py` writes the signal records (`task: signal`): Table 7's measurement on their
model at initialization, one record per variant (or control), width, depth and seed. `reference_signal`
turns those whose settings equal our signal stage's (its cache key beside signal/signal.csv, read back as
mixit_lab.reproduce.stage_options.SignalOptions) into the reference Table 7; they are never runs
(`reference_runs` leaves them out).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from mixit_lab.analysis.runs import COLUMNS, RECORD, records, task_label
from mixit_lab.models.files import read_json
from mixit_lab.training.run import RecordedRun

from .stage_options import SignalOptions

REFERENCE_FILE = Path(__file__).resolve().with_name("authors_reference.json")

# Settings that must match between a record and a run of ours (seeds are repeats, not settings). A record without a
# schedule ran at ours: our warmup (and their decay; see benchmarks/authors_reference.py); "authors" is their scripts'
# default, their warmup rule too.
SETTINGS = ("task_label", "d_model", "n_layers", "n_heads", "steps", "batch_size", "lr", "warmup_steps", "weight_decay",
            "schedule")

# Labels of the authors' runs that are none of our variants, and the variant of ours whose settings they share.
# "mixit_weight_frozen": MixiT as their depth script trains it by default (only embeddings and readout train).
ALIASES = {"mixit_weight_frozen": "mixit"}

SIGNAL_TASK = "signal"  # the task of the signal records
SIGNAL_PARAMS = ("n_ctx", "d_vocab", "n_seqs")  # a signal record's task_params


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


def is_signal(rec: dict[str, Any]) -> bool:
    """A record of their model's signal propagation at init (benchmarks/authors_signal.py), not a training run."""
    return rec.get("task") == SIGNAL_TASK


def _key(values: dict[str, Any]) -> tuple:
    """Settings as a comparable tuple (floats rounded, so 3e-3 read from YAML equals 0.003 from JSON)."""
    out = []
    for name in SETTINGS:
        v = values.get(name)
        if name == "schedule":
            out.append(v if isinstance(v, str) else "ours")
            continue
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
    """One record as a finished run (mixit_lab.analysis.runs.COLUMNS, plus its memorization result under "memory")."""
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
                                   "warmup_steps", "weight_decay")}, schedule=rec.get("schedule") or "ours",
    )
    bpp = rec.get("bits_per_trainable_param")
    row["memory"] = None if bpp is None else {
        "accuracy": accuracy, "bits_per_trainable_param": float(bpp), "params_trainable": rec.get("params_trainable"),
        "bits": rec.get("bits", float(bpp) * float(rec.get("params_trainable") or 0) or None)}
    row["eval_items"] = rec.get("eval_items")
    row[RECORD] = RecordedRun(row["run"], {"memory": row["memory"]} if row["memory"] else {}, row["eval_items"])
    return row


def reference_runs(records: list[dict[str, Any]], ours: pd.DataFrame, by_study: bool = False) -> pd.DataFrame:
    """The records whose settings equal a finished run of ours of the same variant, as finished runs.

    by_study: of the same study too (the report's tables, which group runs by study: a record of the authors' code
    at their schedule must not join the study that ours trained at ours because another study of ours, tuned at
    their schedule, chose the same rate)."""
    finished = ours[ours["status"] == "finished"] if len(ours) else ours

    def key(row: dict[str, Any], variant: str) -> tuple:
        return (row.get("study") if by_study else None, variant, *_key(row))

    mine = {key(r, r["variant"]) for r in finished.to_dict("records")}
    rows = [row for row in map(record_row, [r for r in records if not is_signal(r)])
            if key(row, ALIASES.get(row["variant"], row["variant"])) in mine]
    return pd.DataFrame(rows, columns=[*COLUMNS, "memory", "eval_items", RECORD])


END_TO_END_COLUMNS = ["task", "variant", "d_model", "n_layers", "n_heads", "steps", "lr", "schedule", "metric", "ours",
                      "ours_median", "theirs", "theirs_median", "difference", "spread", "beyond_spread",
                      "theirs_own_schedule", "theirs_own_schedule_median", "note"]

# Tasks whose metric in the authors' code is another quantity than ours, so that their number and ours are not
# compared (the verdicts still read theirs against their own other runs: a finding is about differences).
OTHER_METRIC = {
    "addition": "their metric scores the token after each answer token, averaged over tokens: the first sum digit "
                "is neither trained nor scored (on their own models our whole-answer accuracy is 5-10%), so "
                "their number is not ours",
}


def _metric(row: dict[str, Any]) -> tuple[str, float | None]:
    """What a run is compared on: bits per trainable parameter for memorization studies, else accuracy (%)."""
    if row.get("task") == "memorize" and row.get("group") == "memorize":
        memory = records(pd.DataFrame([row]))[0].analysis_summary("memory")  # recorded, or the run's analysis
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
    own = own_schedule_runs(records, ours)
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
            values = {int(r["seed"]): _metric(r)[1] for r in runs.to_dict("records")}  # a seed once (two studies may
            side[name] = sorted((s, v) for s, v in values.items() if v is not None)  # record one setting's run)
        med = {k: (float(pd.Series([v for _, v in side[k]]).median()) if side[k] else None) for k in side}
        spread = max((max(v for _, v in side[k]) - min(v for _, v in side[k]) for k in side if side[k]), default=0.0)
        note = OTHER_METRIC.get(str(group.iloc[0]["task"]), "")
        diff = None if None in med.values() or note else round(med["ours"] - med["theirs"], 4)
        digits = 3 if metric == "bits/param" else 1
        at_theirs = sorted(v for v in {r.get("seed"): _metric(r)[1] for r in own.get(_own_key(where), [])}.values()
                           if v is not None)
        rows.append({
            "task": where["task_label"], "variant": where["variant"], "d_model": where["d_model"],
            "n_layers": where["n_layers"], "n_heads": where["n_heads"], "steps": where["steps"], "lr": where["lr"],
            "schedule": where["schedule"], "metric": metric,
            "ours": " / ".join(f"{v:.{digits}f}" for _, v in side["ours"]) or "—", "ours_median": med["ours"],
            "theirs": " / ".join(f"{v:.{digits}f}" for _, v in side["theirs"]), "theirs_median": med["theirs"],
            "difference": diff, "spread": spread,
            "beyond_spread": None if diff is None else bool(abs(diff) > spread),
            "theirs_own_schedule": " / ".join(f"{v:.{digits}f}" for v in at_theirs) or "—",
            "theirs_own_schedule_median": float(pd.Series(at_theirs).median()) if at_theirs else None, "note": note,
        })
    return pd.DataFrame(rows, columns=END_TO_END_COLUMNS)


OWN_SCHEDULE_SETTINGS = ("task_label", "variant", "d_model", "n_layers", "n_heads", "steps", "batch_size", "lr",
                         "weight_decay")  # a row's settings but its warmup and schedule


def _own_key(values: dict[str, Any]) -> tuple:
    full = dict(zip(SETTINGS, _key(values)))
    return (values.get("variant"), *(full[k] for k in OWN_SCHEDULE_SETTINGS if k != "variant"))


def own_schedule_runs(records: list[dict[str, Any]], ours: pd.DataFrame) -> dict[tuple, list[dict[str, Any]]]:
    """The records of the authors' code at its own default schedule (schedule "authors": their warmup rule, their
    decay) whose other settings equal a finished run of ours at our schedule, grouped by those settings: the end-to-end
    table's column beside ours, "at the authors' schedule"."""
    rows = [record_row(r) for r in records if not is_signal(r) and r.get("schedule") == "authors"]
    finished = ours[(ours["status"] == "finished") & (ours["schedule"].fillna("ours") == "ours")] if len(ours) else ours
    mine = {_own_key(r) for r in finished.to_dict("records")}
    out: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:  # keyed by the record's own variant (mixit_weight_frozen too), matched by the variant it stands for
        if _own_key({**row, "variant": ALIASES.get(row["variant"], row["variant"])}) in mine:
            out.setdefault(_own_key(row), []).append(row)
    return out


# --------------------------------------------------------------------------- Table 7 at initialization
TABLE7_COLUMNS = ["variant", "d_model", "depth", "covariance", "cosine"]


def reference_signal(records: list[dict[str, Any]], signal_path: str | Path | None) -> pd.DataFrame:
    """The reference Table 7 (mixit_lab.reproduce.tables._table7's columns): per variant or control, width and depth of our
    signal stage (its settings from the cache key beside `signal_path`, signal/signal.json), the last-layer
    covariance and cosine of the authors' model at init, means over the signal records of our seeds. A row
    needs a record for every seed of ours at the same heads, n_ctx, d_vocab, n_seqs and model fields; empty
    without our stage's settings (or with settings this version cannot read) or without such records."""
    meta = None if signal_path is None else Path(signal_path).with_suffix(".json")
    if meta is None or not meta.is_file():
        return pd.DataFrame(columns=TABLE7_COLUMNS)
    try:
        s = SignalOptions.from_dict(read_json(meta), str(meta))
    except ValueError:  # settings this version cannot read: no reference (the stage measures again when it runs)
        return pd.DataFrame(columns=TABLE7_COLUMNS)
    params = {k: getattr(s, k) for k in SIGNAL_PARAMS}
    signal = [r for r in records if is_signal(r)]
    rows = []
    for label, (variant, fields) in s.labels().items():
        for width in sorted(s.widths):
            for depth in sorted(s.depths):
                hits = {r.get("seed"): r for r in signal
                        if r.get("base_variant", r.get("variant")) == variant and r.get("d_model") == width
                        and r.get("n_layers") == depth and r.get("n_heads") == s.n_heads
                        and r.get("task_params") == params and (r.get("model_overrides") or {}) == fields
                        and r.get("seed") in s.seeds}
                if set(hits) != set(s.seeds):
                    continue
                rows.append({"variant": label, "d_model": width, "depth": depth,
                             **{m: sum(float(hits[x][m]) for x in s.seeds) / len(s.seeds)
                                for m in ("covariance", "cosine")}})
    return pd.DataFrame(rows, columns=TABLE7_COLUMNS)
