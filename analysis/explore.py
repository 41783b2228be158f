"""The explorer's data layer: runs, models, inputs, attention patterns, head scores, predictions and
comparisons for the explorer's pages, as plain functions (no Streamlit here), so they can be tested and reused.
What it computes on one model (inputs, patterns, grids, predictions) lives in `mixit_lab.analysis.explore_model`.

    from mixit_lab.analysis import explore as ex, explore_model as em
    root = ex.open_root("runs/smoke")
    runs = ex.list_runs(root)                          # one row per run (mixit_lab.analysis.runs.COLUMNS + size)
    run = ex.open_run(root, runs.path[0])              # its Run: each file read once, kept while unchanged
    model = ex.load_run_model(root, runs.path[0])
    example = em.eval_example(ex.task_of(root, runs.path[0]), 0)
    patterns = em.attention_patterns(model, example.tokens)   # [layer, head, query, key]

Everything is read from one runs directory, the *root*. Every path is resolved (symlinks and `..`
included) and checked to lie under the root before it is opened (`inside`), so the explorer never
reads elsewhere: text runs, whose corpus lies outside, take their input as typed text (through the
tokenizer saved in the run) instead of eval samples. Nothing here trains and nothing is written:
head scores that `mixit analyze` did not store are computed in memory (`compute_head_table`).

Each run is opened once (`open_run`, a mixit_lab.training.run.Run, which keeps what it reads) and kept while the
modification times of its files stay the same, so listing 200 runs again, or a page asking for a run's record,
metrics, analysis and tables, costs one directory walk and a few `stat` calls per run.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from mixit_lab.models.checkpoint import CONFIG_FILE, WEIGHTS_FILE
from mixit_lab.models.files import read_json
from mixit_lab.training.rundir import (
    ANALYSIS_DIR, ANALYSIS_FILE, ANALYSIS_TABLE, CHECKPOINT_DIR, CHECKPOINT_FILES, DYNAMICS_FILE, MANIFEST,
    METRICS_FILE, RUN_FILE, SIGNAL_FILE, SPEED_FILE, SUMMARY_FILE, find_runs, kept_checkpoint_dir,
    kept_checkpoints, UNFINISHED, lock_holder, read_metric_records, unfinished_status,
)
from mixit_lab.training.run import Run
from mixit_lab.training.runinfo import RunInfo

from .runs import COLUMNS, read_analysis_table, read_metrics, run_row

RUN_COLUMNS = [*COLUMNS, "size"]
SHOWN_COMPONENT_ROWS = 64  # eval rows of a components table computed on the fly (mixit analyze stores more)
TAIL_BYTES = 16384  # how much of metrics.jsonl is read for a run that has no summary.json yet


class OutsideRoot(ValueError):
    """A path that resolves to somewhere outside the runs directory."""


# --------------------------------------------------------------------------- paths
def open_root(path: str | Path) -> Path:
    """The runs directory, resolved; FileNotFoundError (one line, naming it) if it is not a directory."""
    p = Path(path).expanduser()
    if not p.is_dir():
        what = "is not a directory" if p.exists() else "does not exist"
        raise FileNotFoundError(f"runs directory {str(path)!r} {what}")
    return p.resolve()


def inside(root: Path, path: str | Path) -> Path:
    """`path` (absolute, or relative to root) resolved; OutsideRoot unless it lies under `root`."""
    root = Path(root).resolve()
    resolved = (root / path).resolve()
    if resolved != root and root not in resolved.parents:
        raise OutsideRoot(f"{path} is outside the runs directory {root}; the explorer reads nothing else")
    return resolved


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


# --------------------------------------------------------------------------- runs
_OPENED: dict[str, tuple[tuple, Run]] = {}  # run directory -> (its files' stamps, its Run)
_STAMPED = (RUN_FILE, SUMMARY_FILE, METRICS_FILE, f"{ANALYSIS_DIR}/{ANALYSIS_FILE}",
            f"{CHECKPOINT_DIR}/{WEIGHTS_FILE}", DYNAMICS_FILE)


def open_run(root: Path, run_dir: str | Path) -> Run:
    """The run below root as a Run (each file read on first use and once), the same object while its files keep
    their modification times and sizes; OutsideRoot if it, or a file a listing reads, lies outside root."""
    run_dir = inside(root, run_dir)
    for name in (RUN_FILE, SUMMARY_FILE, METRICS_FILE):
        inside(root, run_dir / name)
    stamp = tuple(_stat(run_dir / name) for name in _STAMPED)
    cached = _OPENED.get(str(run_dir))
    if cached is None or cached[0] != stamp:
        cached = _OPENED[str(run_dir)] = (stamp, Run(run_dir))
    return cached[1]


def _progress_from_metrics(run_dir: Path) -> dict[str, Any]:
    """step, loss, eval metrics, tokens/s of a run without summary.json, from the end of its metrics."""
    records = read_metric_records(run_dir, tail_bytes=TAIL_BYTES)
    if not records:
        return {}
    last = records[-1]
    out = {k: last.get(k) for k in ("step", "loss", "tokens_per_s", "elapsed_s")}
    evals = [r for r in records if "eval_acc" in r]
    if evals:
        out.update(eval_acc=evals[-1].get("eval_acc"), eval_loss=evals[-1].get("eval_loss"))
    return out


def _run_row(root: Path, run_dir: Path) -> dict[str, Any]:
    run_id = run_dir.relative_to(root).as_posix() if run_dir != root else run_dir.name
    try:
        run = open_run(root, run_dir)
    except OutsideRoot as e:
        row = {c: None for c in RUN_COLUMNS}
        row.update(run=run_id, path=str(run_dir), status="corrupt", error=str(e))
        return row
    row = dict(run.memo("explorer row", lambda: _listed(run, root, run_id)))
    if row["status"] in UNFINISHED:  # a process may have stopped since, without touching a file
        row["status"] = unfinished_status(run_dir)
    return row


def _listed(run: Run, root: Path, run_id: str) -> dict[str, Any]:
    """The run's row of the listing: run_row, its progress when it has no summary yet, and its size."""
    row = run_row(run, root)
    row["run"] = run_id
    if row["status"] in UNFINISHED:
        row.update(_progress_from_metrics(run.path))
    if row["status"] != "corrupt":
        row["size"] = f"d{row['d_model']} L{row['n_layers']} H{row['n_heads']}"
    return row


def list_runs(root: str | Path) -> pd.DataFrame:
    """Every run below root, one row each: mixit_lab.analysis.runs.COLUMNS plus `size` ("d16 L2 H2").

    Runs without summary.json ("running" while a process writes them, else "interrupted") get their step and latest
    metrics from the end of metrics.jsonl. Unreadable runs are rows with status "corrupt" and an
    `error`. Rows are cached by the modification times of the files they come from.
    """
    root = open_root(root)
    return pd.DataFrame([_run_row(root, p) for p in find_runs(root)], columns=RUN_COLUMNS)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None


def read_run_metrics(root: Path, run_dir: str | Path) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame sorted by step (empty if none yet), read once while the file is unchanged."""
    return read_metrics(open_run(root, run_dir))


def read_run_analysis(root: Path, run_dir: str | Path) -> dict[str, Any] | None:
    """The run's analysis/analysis.json from `mixit analyze`, or None."""
    inside(root, Path(run_dir) / ANALYSIS_DIR / ANALYSIS_FILE)
    return open_run(root, run_dir).analysis()


def read_run_table(root: Path, run_dir: str | Path, name: str) -> pd.DataFrame | None:
    """One `mixit analyze` table of the run (heads, attention, memory, ...), or None if absent."""
    if not re.fullmatch(r"[a-z_]+", name):
        raise ValueError(f"analysis table name {name!r}: allowed are lower-case letters and '_'")
    inside(root, Path(run_dir) / ANALYSIS_DIR / ANALYSIS_TABLE.format(name))
    return read_analysis_table(open_run(root, run_dir), name)


# --------------------------------------------------------------------------- models and tasks
def checkpoint_dir(root: Path, run_dir: str | Path, step: int | None = None) -> Path:
    """The run's checkpoint/ directory (or, with `step`, its kept checkpoint of that step), with each file a
    model load opens checked to lie under root."""
    ckpt = inside(root, Path(run_dir) / CHECKPOINT_DIR if step is None else kept_checkpoint_dir(run_dir, step))
    for name in CHECKPOINT_FILES:
        inside(root, ckpt / name)
    return ckpt


def checkpoint_stamp(root: Path, run_dir: str | Path, step: int | None = None) -> tuple:
    """Modification times and sizes of the checkpoint's files: a cache key that changes with the weights."""
    ckpt = checkpoint_dir(root, run_dir, step)
    return tuple(_stat(ckpt / name) for name in CHECKPOINT_FILES)


def kept_steps(root: Path, run_dir: str | Path) -> list[int]:
    """The training steps of the run's kept checkpoints (`mixit train --keep-checkpoints N`); [] if none."""
    return [step for step, _ in kept_checkpoints(inside(root, run_dir))]


def read_run_dynamics(root: Path, run_dir: str | Path) -> pd.DataFrame | None:
    """The run's analysis_dynamics.csv (head scores per kept checkpoint), or None if absent or unreadable."""
    path = inside(root, Path(run_dir) / DYNAMICS_FILE)

    def read() -> pd.DataFrame | None:
        try:
            return pd.read_csv(path)
        except (OSError, ValueError):
            return None

    return open_run(root, run_dir).memo(DYNAMICS_FILE, read)


def load_run_model(root: Path, run_dir: str | Path, step: int | None = None):
    """The run's latest checkpoint (or its kept checkpoint of `step`) as a model on the CPU, in eval mode.

    FileNotFoundError if the run has no checkpoint yet; mixit_lab.models.checkpoint.CheckpointError (a
    ValueError) for a truncated or mismatched one. Both name the file.
    """
    from mixit_lab.models import load_model

    ckpt = checkpoint_dir(root, run_dir, step)
    if not (ckpt / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{Path(run_dir).name}: no checkpoint yet ({ckpt / CONFIG_FILE} is missing)")
    model = load_model(ckpt, device="cpu")
    model.eval()
    return model


def task_of(root: Path, run_dir: str | Path):
    """The run's algorithmic task (its Run's `task`, rebuilt once per version of run.json); None for text tasks
    (their corpus lies outside the runs directory, so their input is typed text instead)."""
    run = open_run(root, run_dir)
    if _task_class(run.info).needs_corpus:  # its corpus lies outside the runs directory
        return None
    return run.task


def can_patch_run(root: Path, run_dir: str | Path) -> bool:
    """Whether head patching applies to a run's task (mixit_lab.analysis.patching.can_patch), by its class."""
    from .patching import can_patch

    return can_patch(_task_class(open_run(root, run_dir).info))


def run_classes(root: Path, run_dir: str | Path) -> list[str] | None:
    """Class names of a classification run (sentiment), else None."""
    info = open_run(root, run_dir).info
    cls = _task_class(info)
    if not cls.is_classifier():
        return None
    return [str(c) for c in info.train.task_params.get("classes") or cls.default_classes]


def _task_class(info: RunInfo):
    """The task class of a run (its RunInfo); the base Task (no corpus, not a classifier) for one
    that cannot be found."""
    from mixit_lab.training.rebuild import run_task_class

    return run_task_class(info)


# --------------------------------------------------------------------------- heads
def stored_head_table(root: Path, run_dir: str | Path) -> tuple[pd.DataFrame, dict[str, float]] | None:
    """(heads.csv, chance scores) as `mixit analyze` stored them, or None if it did not."""
    df = read_run_table(root, run_dir, "heads")
    if df is None or not {"layer", "head"} <= set(df.columns):
        return None
    info = read_run_analysis(root, run_dir) or {}
    chance = ((info.get("summary") or {}).get("heads") or {}).get("chance") or {}
    return df, chance


def patching_table(root: Path, run_dir: str | Path, model=None, task=None,
                   final_model: Callable[[], Any] | None = None) -> tuple[pd.DataFrame, str]:
    """(head patching table, where it came from): analysis/patching.csv if `mixit analyze` stored it and no
    model is given, else computed now on `model` (mixit_lab.analysis.patching; ValueError if the task does not apply).
    `final_model`: how the final checkpoint is loaded when it is needed (a caller's cache; default load_run_model)."""
    if model is None:
        stored = read_run_table(root, run_dir, "patching")
        if stored is not None:
            return stored, "stored by mixit analyze (analysis/patching.csv)"
        model = final_model() if final_model is not None else load_run_model(root, run_dir)
    from .patching import head_patching

    if task is None:
        task = task_of(root, run_dir)
    if task is None:
        raise ValueError("activation patching applies to retrieval, 1-hop k-hop and tasks with patching_pairs, "
                         "not to text tasks")
    return head_patching(model, task, n=64).frame(), "computed now on 64 clean/corrupted pairs"


def components_table(root: Path, run_dir: str | Path, model=None, n: int = SHOWN_COMPONENT_ROWS,
                     final_model: Callable[[], Any] | None = None) -> tuple[pd.DataFrame, str]:
    """(components table, where it came from): analysis/components.csv if `mixit analyze` stored it and no
    model is given, else computed now on `model` (or the final checkpoint: `final_model()`, default
    load_run_model) over `n` eval rows (mixit_lab.analysis.components; ValueError for a task without answer tokens)."""
    if model is None:
        stored = read_run_table(root, run_dir, "components")
        if stored is not None:
            return stored, "stored by mixit analyze (analysis/components.csv)"
        model = final_model() if final_model is not None else load_run_model(root, run_dir)
    task = task_of(root, run_dir)
    if task is None or task.is_classifier() or task.needs_corpus:
        raise ValueError("component attribution reads the answer tokens of algorithmic tasks, not text tasks")
    from .components import component_effects

    rows = min(n, task.default_eval_size)
    tokens, mask = task.eval_set(rows)
    return component_effects(model, tokens, mask, task.metric).table, f"computed now on {rows} eval rows"


# --------------------------------------------------------------------------- comparisons
CURVE_METRICS = ("loss", "eval_loss", "eval_acc", "eval_perplexity")


def compare_curves(root: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """Long table run, variant, size, seed, lr, step, metric, value of the runs' metrics.jsonl."""
    frames = []
    for row in runs.itertuples():
        try:
            m = read_run_metrics(root, row.path)
        except (OutsideRoot, OSError):
            continue
        if m.empty:
            continue
        cols = [c for c in CURVE_METRICS if c in m.columns]
        long = m.melt(id_vars="step", value_vars=cols, var_name="metric", value_name="value").dropna()
        frames.append(long.assign(run=row.run, variant=row.variant, size=row.size, seed=row.seed, lr=row.lr))
    if not frames:
        return pd.DataFrame(columns=["run", "variant", "size", "seed", "lr", "step", "metric", "value"])
    return pd.concat(frames, ignore_index=True)[["run", "variant", "size", "seed", "lr", "step", "metric", "value"]]


def memorization_table(root: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """memory.csv of every analysed `memorize` run, with run, variant, size, n, d and keys = n^d."""
    rows = []
    for row in runs[runs["task"] == "memorize"].itertuples():
        try:
            df = read_run_table(root, row.path, "memory")
        except OutsideRoot:
            continue
        if df is None or df.empty:
            continue
        params = row.task_params or {}
        n, d = params.get("n"), params.get("d")
        rows.append({"run": row.run, "variant": row.variant, "size": row.size, "n": n, "d": d,
                     "keys": n ** d if n and d else None, **df.iloc[0].to_dict()})
    return pd.DataFrame(rows)


def _read_csv(root: Path, rel: str, required: set[str]) -> pd.DataFrame | None:
    path = inside(root, rel)
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError):
        return None
    return df if required <= set(df.columns) and not df.empty else None


def signal_table(root: Path) -> pd.DataFrame | None:
    """Last-layer rows of RUNS/signal/signal.csv (`mixit reproduce`): variant, d_model, depth, cosine, covariance."""
    df = _read_csv(root, SIGNAL_FILE, {"variant", "d_model", "depth", "layer", "cosine", "covariance"})
    if df is None:
        return None
    return df[df["layer"] == df["depth"]].reset_index(drop=True)


def speed_table(root: Path) -> pd.DataFrame | None:
    """RUNS/speed/speed.csv (`mixit reproduce`): tokens/s of a training step per variant."""
    return _read_csv(root, SPEED_FILE, {"variant", "tokens_per_s"})


def reproduce_manifest(root: Path) -> dict[str, Any] | None:
    """RUNS/reproduce.json, or None if this is not a `mixit reproduce` directory (or it is unreadable). A status
    "running" whose process is gone (killed: it could not say so) reads "interrupted"."""
    try:
        manifest = _read_json(inside(root, MANIFEST))
    except (OSError, ValueError):
        return None
    if isinstance(manifest, dict) and manifest.get("status") == "running" and lock_holder(root) is None:
        manifest = {**manifest, "status": "interrupted", "stopped_in": manifest.get("stopped_in") or "unknown (killed)"}
    return manifest


@dataclass
class FigureLink:
    name: str
    path: Path  # where `mixit reproduce` wrote it (as recorded; not checked unless readable)
    readable: bool  # the file lies under the runs directory and exists, so the explorer may show it


def figure_links(root: Path, names: list[str]) -> list[FigureLink]:
    """Where `mixit reproduce` drew the figures `names` (e.g. mixit_lab.figures.figures_for_group(a run's group)).

    Paths come from reproduce.json's figures_dir_resolved. Files outside the runs directory are
    listed but never opened (nor checked for existence).
    """
    manifest = reproduce_manifest(root)
    if not manifest or not manifest.get("figures_dir_resolved"):
        return []
    fig_dir = Path(manifest["figures_dir_resolved"])
    links = []
    for name in names:
        path = fig_dir / f"{name}.png"
        try:
            readable = inside(root, path).is_file()
        except OutsideRoot:
            readable = False
        links.append(FigureLink(name, path, readable))
    return links


def format_count(n: Any) -> str:
    """12,345 for a count, '-' for missing."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "-"
    return f"{int(n):,}"
