"""The run directory and the runs folder: their file names, reading and writing them, finding runs.

Every other module asks this one where a file lives; none spells a file name itself.

A run directory (written by `mixit_lab.training.train`, read by analysis, figures, the report and the explorer):

    run.json          what was run: train config, model config, task (name, class import path, every
                      parameter; mixit_lab.training.run_task rebuilds it from here), command, provenance
    metrics.jsonl     one JSON object per logged step (appended while training)
    tokenizer.json    text tasks only: the tokenizer (also inside checkpoint/)
    checkpoint/       the latest checkpoint (mixit_lab.models.checkpoint format, with the task's tokenizer.json: a text
                      tokenizer or the task's vocabulary) + trainer state for resume
    summary.json      written last; its presence marks the run finished (or diverged / failed)
    analysis/         `mixit analyze` results: analysis.json + one CSV per table

A runs folder (a sweep's `--out`, or the output of `mixit reproduce`) holds run directories at any
depth, `mixit reproduce` one folder per *study* (ROOT/<study>/<run>), and beside them:

    .token_cache/     tokenizers and token arrays of text corpora, shared by the runs below
    sweep.json        the runs a sweep was asked for (mixit sweep)
    summary.csv       one row per run of a sweep or a study
    reproduce.json    the manifest of `mixit reproduce`: preset, corpora, stage timings, findings
    signal/signal.csv token similarity vs depth at initialisation (+ signal.json, its settings)
    speed/speed.csv   training throughput per variant (+ speed.json)

`mixit reproduce` also writes, in the working directory, .mixit_cache/last_study.json: the absolute paths of
the runs folder, report and figures it made, and the preset (what `mixit app` opens without an argument).

A study's *group* is its name up to the first "-": studies `algorithmic` and `algorithmic-mixit`
(the same tasks at another head count, say) feed the same tables and figures.

Every write is atomic (mixit_lab.models.files), except metrics.jsonl, which is appended line by line; its
readers skip a line cut off by a kill.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from mixit_lab.models.checkpoint import CONFIG_FILE, RUN_CHECKPOINT_DIR, WEIGHTS_FILE
from mixit_lab.models.files import atomic_file, read_json, write_text
from mixit_lab.models.tokenizer import TOKENIZER_FILE

from .runinfo import RunInfo

# --------------------------------------------------------------------------- a run directory
RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CHECKPOINT_DIR = RUN_CHECKPOINT_DIR  # "checkpoint" (mixit_lab.models.load_model accepts a run directory too)
STATE_TENSORS, STATE_JSON = "trainer_state.safetensors", "trainer_state.json"  # inside checkpoint/
ANALYSIS_DIR = "analysis"
ANALYSIS_FILE = "analysis.json"  # inside analysis/
CHECKPOINT_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)  # what loading a model opens

# --------------------------------------------------------------------------- a runs folder
DATA_CACHE_DIR = ".token_cache"
SWEEP_FILE = "sweep.json"
RUNS_SUMMARY = "summary.csv"
MANIFEST = "reproduce.json"
TUNING_FILE = "tuning.json"  # in a runs folder: the learning rates tried and chosen (mixit_lab.training.tuning.Tuning)
SIGNAL_FILE = "signal/signal.csv"
SPEED_FILE = "speed/speed.csv"
REPORT_FILE = "report.md"  # in a report directory (mixit reproduce --report-dir), beside one CSV per table
LAST_STUDY_FILE = ".mixit_cache/last_study.json"  # in the working directory: where the last `mixit reproduce` wrote
KEPT_DIR = "checkpoints"  # --keep-checkpoints: the model at earlier steps, checkpoints/step_000100/ (no trainer state)
DYNAMICS_FILE = "analysis_dynamics.csv"  # head scores of every kept checkpoint (mixit_lab.analysis.dynamics)
SKIP_DIRS = {CHECKPOINT_DIR, KEPT_DIR, ANALYSIS_DIR, DATA_CACHE_DIR, "__pycache__"}  # never hold runs
LOCK_FILE = ".lock"  # in a run directory: held (flock) by the process writing it


class RunLocked(RuntimeError):
    """Another live process is writing this run directory."""


class RunDamaged(ValueError):
    """A run directory's run.json cannot be read, so the run can be neither resumed nor compared: one line naming the
    file (read_run_info's error) and what to do."""

    def __init__(self, run_dir: str | Path, error: Exception) -> None:
        super().__init__(f"{' '.join(str(error).split())}; the run is damaged: restore its run.json from a copy, or "
                         f"move {run_dir} away to train the run again")

__all__ = [
    "LOCK_FILE", "RunDamaged", "RunLocked", "run_lock", "is_empty_run_dir", "ANALYSIS_DIR", "ANALYSIS_FILE", "CHECKPOINT_DIR", "CHECKPOINT_FILES", "CheckpointRef", "DATA_CACHE_DIR", "DYNAMICS_FILE", "KEPT_DIR", "MANIFEST",
    "LAST_STUDY_FILE", "METRICS_FILE", "REPORT_FILE", "RUNS_SUMMARY", "RUN_FILE", "SIGNAL_FILE", "SPEED_FILE", "STATE_JSON", "STATE_TENSORS",
    "SUMMARY_FILE", "SWEEP_FILE", "TUNING_FILE", "append_metrics", "kept_checkpoint_dir", "kept_checkpoints", "find_checkpoint", "find_runs", "group_of",
    "is_finished", "is_run_dir", "read_metric_records", "read_run_info", "read_summary",
    "truncate_metrics", "UNFINISHED", "lock_holder", "unfinished_status", "what_it_holds", "write_runs_table",
]


def kept_checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """Where --keep-checkpoints keeps the model as it was after `step` optimizer steps."""
    return Path(run_dir) / KEPT_DIR / f"step_{step:06d}"


def kept_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, directory) of every complete kept checkpoint of a run, by step (none without --keep-checkpoints)."""
    folder = Path(run_dir) / KEPT_DIR
    found = []
    for d in folder.glob("step_*") if folder.is_dir() else []:
        step = d.name.removeprefix("step_")
        if step.isdigit() and (d / WEIGHTS_FILE).is_file() and (d / CONFIG_FILE).is_file():
            found.append((int(step), d))
    return sorted(found)


def is_run_dir(path: str | Path) -> bool:
    """Whether `path` is a run directory (it holds run.json)."""
    return (Path(path) / RUN_FILE).is_file()


def find_runs(root: str | Path) -> list[Path]:
    """Every run directory below `root` (or `root` itself), sorted by path; hidden folders are skipped."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    found = []
    for here, dirs, files in os.walk(root):
        if RUN_FILE in files:
            found.append(Path(here))
            dirs[:] = []  # a run does not contain runs
        else:
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
    return sorted(found)


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's exclusive lock for the block; RunLocked (naming the holder's PID) if another
    process holds it.

    An OS file lock (flock): the kernel drops it when the holder exits or is killed, so a lock is never
    stale, and a file left behind by a dead process is simply taken over. Readers need no lock:
    every file they read is replaced atomically. Where flock does not exist (Windows) runs are not locked.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(run_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides, as for every file
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(f"{run_dir} is being written by another process (PID {_pid_in(fd)}); "
                            "wait for it to finish or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


# What a start that failed before its first checkpoint leaves (a value the model refused, a kill): no run to keep.
STARTED_ONLY = (LOCK_FILE, RUN_FILE, METRICS_FILE)


def is_empty_run_dir(path: str | Path) -> bool:
    """Whether `path` is missing or holds no run worth keeping: nothing but a lock file, or what a start that
    failed before its first checkpoint leaves (run.json, metrics, the summary of a divergence), no checkpoint."""
    path = Path(path)
    if not path.exists():
        return True
    names = {p.name for p in path.iterdir()}
    if names <= set(STARTED_ONLY):
        return True
    # A start that diverged before its first checkpoint (init_std=1e30) also leaves its summary: nothing to keep.
    return names <= {*STARTED_ONLY, SUMMARY_FILE} and _summary_status(path) not in ("finished", None)


def what_it_holds(path: str | Path) -> str:
    """One line saying what a folder that `is_empty_run_dir` does not call empty holds, for the error that refuses
    to train into it: a run another process is writing (its PID), a run whose run.json cannot be read, a run (how
    far it got), or files that are no run at all."""
    path = Path(path)
    holder = lock_holder(path)
    if holder is not None:
        return f"{path} holds a run that another process (PID {holder}) is writing; wait for it, or stop it"
    if (path / RUN_FILE).is_file():
        try:
            read_run_info(path)
        except (OSError, ValueError) as e:
            return f"{path} holds a run whose {RUN_FILE} cannot be read ({e}); move it away or choose another --out"
    if (path / RUN_FILE).is_file() or (path / CHECKPOINT_DIR).is_dir() or (path / SUMMARY_FILE).is_file():
        status = _summary_status(path) if (path / SUMMARY_FILE).is_file() else "unfinished"
        return f"{path} already holds a run ({status}); pass --resume to continue it or choose another --out"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir())
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"{path} holds no run but other files ({shown}); choose another --out, or move them away"


UNFINISHED = ("running", "interrupted")  # the status of a run without summary.json (unfinished_status)


def unfinished_status(run_dir: str | Path) -> str:
    """A run without summary.json: "running" while a process holds its lock, else "interrupted" (killed, or stopped by
    a signal: `--resume` continues it)."""
    return "running" if lock_holder(run_dir) is not None else "interrupted"


def lock_holder(run_dir: str | Path) -> str | None:
    """The PID of the process holding the run's (or runs folder's) lock (run_lock), or None when no process does."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # taken only when no writer holds it; released at once
        return None
    except BlockingIOError:
        return _pid_in(fd)
    finally:
        os.close(fd)


def _pid_in(fd: int) -> str:
    """The PID run_lock's holder wrote into the lock file."""
    return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"


def _summary_status(run_dir: Path) -> str | None:
    """summary.json's status, or None when it cannot be read (then the folder is not taken as empty)."""
    try:
        return read_json(run_dir / SUMMARY_FILE).get("status")
    except (OSError, ValueError):
        return None


def group_of(study: str) -> str:
    """The group a study belongs to: its name up to the first '-' ('algorithmic-mixit' -> 'algorithmic')."""
    return study.split("-", 1)[0]


_READ: dict[tuple[str, bytes], RunInfo] = {}  # (run.json's path, its bytes) -> its record: each version parsed once
_READ_MOST = 8192


def read_run_info(run_dir: str | Path) -> RunInfo:
    """The run's run.json as a typed record (mixit_lab.training.runinfo.RunInfo): the one place the file is opened and parsed.

    One ValueError naming the file for anything wrong with it: missing, unreadable, not JSON, not an object,
    an unknown key, a bad value. Bytes read before give the same record again, unparsed (a command that reads
    thousands of runs, some several times, builds each record once): treat it as read-only."""
    path = Path(run_dir) / RUN_FILE
    try:
        raw = path.read_bytes()
        key = (str(path), raw)
        if key in _READ:
            return _READ[key]
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object")
    except FileNotFoundError:
        raise ValueError(f"{path}: cannot read run description (the file is missing)") from None
    except (OSError, ValueError) as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = str(e).removeprefix(f"{path}: ").removeprefix(f"{path} ")
        raise ValueError(f"{path}: cannot read run description ({type(e).__name__}: {reason})") from None
    info = RunInfo.from_dict(data, path)
    if len(_READ) >= _READ_MOST:
        _READ.clear()
    _READ[key] = info
    return info


def is_finished(run_dir: str | Path) -> bool:
    """Whether the run has ended (summary.json exists: finished, diverged or failed)."""
    return (Path(run_dir) / SUMMARY_FILE).is_file()


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """The run's summary.json."""
    return read_json(Path(run_dir) / SUMMARY_FILE)


def append_metrics(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Append one record (a logged step) to the run's metrics.jsonl."""
    with open(Path(run_dir) / METRICS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def read_metric_records(run_dir: str | Path, tail_bytes: int | None = None) -> list[dict[str, Any]]:
    """The records of metrics.jsonl that have a step, in file order (none if it is missing).

    With `tail_bytes`, only the complete lines among the file's last `tail_bytes` are read (cheap
    progress of a long run). A line cut off by a kill, or still being written, is skipped.
    """
    path = Path(run_dir) / METRICS_FILE
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            start = 0 if tail_bytes is None else max(0, size - tail_bytes)
            fh.seek(start)
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    if start > 0:
        lines = lines[1:]  # the first line was cut by the seek
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record:
            records.append(record)
    return records


def truncate_metrics(run_dir: str | Path, last_step: int) -> None:
    """On resume: drop the metric lines logged after `last_step` (the checkpoint resumed from)."""
    if not (Path(run_dir) / METRICS_FILE).exists():
        return
    kept = [r for r in read_metric_records(run_dir) if r["step"] <= last_step]
    write_text(Path(run_dir) / METRICS_FILE, "".join(json.dumps(r) + "\n" for r in kept))


def write_runs_table(rows: list[dict[str, Any]], path: str | Path) -> pd.DataFrame:
    """Write one row per run as CSV (a sweep's or a study's summary.csv) atomically; return the table.

    Task parameters (a dict) are stored as sorted JSON, so the cell reads back unambiguously.
    """
    table = pd.DataFrame(rows)
    if "task_params" in table:
        table["task_params"] = table["task_params"].map(
            lambda p: json.dumps(p, sort_keys=True) if isinstance(p, dict) else p
        )
    with atomic_file(path) as fh:
        table.to_csv(fh, index=False)
    return table


# --------------------------------------------------------------------------- checkpoints in runs
@dataclass
class CheckpointRef:
    """Where a checkpoint lives: its directory, and the run directory around it (if any)."""

    checkpoint: Path  # holds config.json + model.safetensors
    run_dir: Path | None  # holds run.json (task, training config), or None for a bare checkpoint
    _info: RunInfo | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return (self.run_dir or self.checkpoint).name

    def run_info(self) -> RunInfo | None:
        """The run directory's run.json (read_run_info), or None for a bare checkpoint; read once per CheckpointRef
        (`mixit analyze` asks several times per checkpoint)."""
        if self.run_dir is None:
            return None
        if self._info is None:
            self._info = read_run_info(self.run_dir)
        return self._info


def find_checkpoint(path: str | Path) -> CheckpointRef:
    """Resolve a run directory (run.json + checkpoint/), its checkpoint/ subdirectory, or a bare checkpoint."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if is_run_dir(path) and (path / CHECKPOINT_DIR / CONFIG_FILE).is_file():
        return CheckpointRef(path / CHECKPOINT_DIR, path)
    if (path / CONFIG_FILE).is_file():
        parent = path.resolve().parent
        in_run = path.name == CHECKPOINT_DIR and is_run_dir(parent)
        return CheckpointRef(path, path.parent if in_run else None)
    if is_run_dir(path):
        raise FileNotFoundError(f"{path} is a run directory without a checkpoint yet "
                                f"({path / CHECKPOINT_DIR / CONFIG_FILE} is missing)")
    raise ValueError(
        f"{path} is neither a run directory (run.json + checkpoint/) nor a checkpoint directory "
        f"({CONFIG_FILE} + {WEIGHTS_FILE})"
    )


# --------------------------------------------------------------------------- more file names (spelled here only)
TENSORBOARD_DIR = "tensorboard"  # in a run directory: mixit_lab.training.trackers' TensorBoard event files
ANALYSIS_TABLE = "{}.csv"  # in analysis/: one table of `mixit analyze`, ANALYSIS_TABLE.format("heads") = "heads.csv"
