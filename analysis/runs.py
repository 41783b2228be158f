"""Read a directory of runs into tables: the one loader behind the report, the figures and the explorer.

    from analysis.runs import load_runs, read_metrics, read_analysis, read_analysis_table
    runs = load_runs("runs/quick")          # one row per run directory (run.json) found below the root
    curve = read_metrics(runs.path[0])      # metrics.jsonl as a DataFrame (step, loss, eval_loss, ...)

The layout of a run directory and of a runs folder, and how runs are found, belong to
training.rundir; this module turns them into tables. A run's `group` is training.rundir.group_of its
study. Nothing here trains or writes; a broken run becomes a row with status "corrupt" and an
`error` message instead of an exception.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from models.checkpoint import WEIGHTS_FILE
from models.config import grid_label
from training.rundir import (
    ANALYSIS_DIR, ANALYSIS_FILE, CHECKPOINT_DIR, RUN_FILE, SUMMARY_FILE, find_runs, group_of, read_json,
    read_metric_records,
)
from training.trainer import resolved_warmup

COLUMNS = [
    "run", "group", "study", "path", "variant", "task", "task_params", "task_label", "d_model", "n_layers", "n_heads",
    "lr", "seed", "steps", "batch_size", "warmup_steps", "weight_decay", "status", "step", "eval_acc", "best_eval_acc", "eval_loss", "loss",
    "tokens_per_s", "elapsed_s", "params_trainable", "params_frozen", "params_total", "has_checkpoint",
    "has_analysis", "precision", "error",
]


def task_label(task: str, params: dict[str, Any]) -> str:
    """A short name for a task and its parameters, e.g. 'retrieval(pairs=8)'; file lists by base name."""
    shown = {k: v for k, v in sorted(params.items()) if k not in ("text_file", "dataset", "tokenizer", "vocab_size")}
    if not shown:
        return task
    return f"{task}(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"


def load_run(path: str | Path, root: str | Path | None = None) -> dict[str, Any]:
    """One run as a row (see COLUMNS). Status: finished | diverged | error (from summary.json),
    running (no summary yet: interrupted or in progress) or corrupt (unreadable run.json/summary.json)."""
    path = Path(path)
    rel = path.relative_to(root) if root is not None and path != Path(root) else Path(path.name)
    row: dict[str, Any] = {c: None for c in COLUMNS}
    study = rel.parts[0] if len(rel.parts) > 1 else ""
    row.update(run=str(rel.as_posix()), group=group_of(study), study=study, path=str(path))
    row["has_checkpoint"] = (path / CHECKPOINT_DIR / WEIGHTS_FILE).is_file()
    row["has_analysis"] = (path / ANALYSIS_DIR / ANALYSIS_FILE).is_file()
    reading = path / RUN_FILE  # named in the error message
    try:
        info = read_json(reading)
        train = info["train"]
        params = dict(train.get("task_params") or {})
        extra = train.get("model_extra") or {}
        row.update(
            variant=grid_label(train["variant"], extra.get("freeze", ()), extra.get("attention", ())),
            task=train["task"], task_params=params,
            task_label=task_label(train["task"], params),
            **{k: train.get(k) for k in ("d_model", "n_layers", "n_heads", "lr", "seed", "steps", "batch_size",
                                         "weight_decay")},
            warmup_steps=resolved_warmup(train["steps"], train.get("warmup_steps"))
            if isinstance(train.get("steps"), int) else None,
        )
        summary_path = path / SUMMARY_FILE
        if summary_path.is_file():
            reading = summary_path
            summary = read_json(summary_path)
            row["status"] = summary.get("status", "finished")
            for key in ("step", "eval_acc", "best_eval_acc", "eval_loss", "loss", "tokens_per_s", "elapsed_s",
                        "params_trainable", "params_frozen", "params_total", "precision"):
                row[key] = summary.get(key)
            if row["status"] == "error":
                row["error"] = summary.get("message")
        else:
            row["status"] = "running"
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        row["status"] = "corrupt"
        row["error"] = f"{reading.name}: {type(e).__name__}: {e}"
    return row


def load_runs(root: str | Path) -> pd.DataFrame:
    """All runs below `root`, one row each (see COLUMNS); an empty frame with those columns if none."""
    root = Path(root)
    rows = [load_run(p, root) for p in find_runs(root)]
    return pd.DataFrame(rows, columns=COLUMNS)


def read_metrics(run_dir: str | Path) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame sorted by step; lines cut off by a kill are skipped."""
    df = pd.DataFrame(read_metric_records(run_dir))
    return df.sort_values("step", kind="stable").reset_index(drop=True) if len(df) else df


def read_analysis(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's analysis/analysis.json (from `mixit analyze`), or None if absent or unreadable."""
    try:
        return read_json(Path(run_dir) / ANALYSIS_DIR / ANALYSIS_FILE)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def read_analysis_table(run_dir: str | Path, name: str) -> pd.DataFrame | None:
    """One analysis table (heads, attention, signal, memory, ablation, in_context_loss), or None."""
    path = Path(run_dir) / ANALYSIS_DIR / f"{name}.csv"
    try:
        return pd.read_csv(path)
    except (OSError, ValueError):
        return None
