"""A directory of runs: `RunSet`, each run opened once (a mixit_lab.training.run.Run) and their table built once,
the one loader behind the report, the figures and the explorer.

    from mixit_lab.analysis.runs import RunSet, read_metrics, read_analysis_table
    runs = RunSet("runs/quick")
    table = runs.frame()                    # one row per run directory (COLUMNS; `record`: the row's Run)
    run = table.record[0]                   # or runs.run(table.path[0])
    curve = read_metrics(run)               # metrics.jsonl as a DataFrame (step, loss, eval_loss, ...), read once
    heads = read_analysis_table(run, "heads")

A row's `record` answers for it whatever it is: a Run reads its directory's files (each once, kept in the Run); a
tuning record's row (`tuning_runs`) and the authors' code's results (mixit_lab.reproduce.reference) carry a
mixit_lab.training.run.RecordedRun that answers from what was recorded. Readers ask the record, never a path.

The layout of a run directory and of a runs folder, and how runs are found, belong to
mixit_lab.training.rundir; this module turns them into tables. A runs folder whose learning rates were tuned holds its
tuning record (mixit_lab.training.tuning, `TUNING_FILE`): each run's `tuning_key` names its setting, and `selected` says
whether the run is at its setting's chosen learning rate (every run of an untuned setting is); the report, the
figures and the explorer read the selected runs (`reported`). A run's `group` is mixit_lab.training.rundir.group_of its
study. Nothing here trains or writes; a broken run becomes a row with status "corrupt" and an
`error` message instead of an exception, and a damaged analysis table reads as absent (with a warning naming
it); `damaged_files` lists both, for the report and the explorer to show.
"""

from __future__ import annotations

import csv
import functools
import io
import warnings
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from mixit_lab.models.grid import grid_label
from mixit_lab.training.config import TrainConfig
from mixit_lab.training.pool import fork_workers, forked_map
from mixit_lab.training.run import RecordedRun, Run, judged_by_loss
from mixit_lab.training.rundir import (
    ANALYSIS_DIR, ANALYSIS_FILE, ANALYSIS_TABLE, TUNING_FILE, UNFINISHED, find_runs, group_of, read_metric_records,
)
from mixit_lab.training.tuning import Tuning, tuning_key

PARALLEL_FROM = 256  # runs: a smaller folder is read in this process (forking would cost more than it saves)

COLUMNS = [
    "run", "group", "study", "path", "variant", "task", "task_params", "task_label", "d_model", "n_layers", "n_heads",
    "lr", "schedule", "seed", "steps", "batch_size", "warmup_steps", "weight_decay", "status", "headline", "step",
    "eval_acc", "best_eval_acc", "eval_loss", "tune_acc", "tune_loss", "loss",
    "tokens_per_s", "elapsed_s", "params_trainable", "params_frozen", "params_total", "has_checkpoint",
    "has_analysis", "precision", "error", "tuning_key", "selected",
]


# The columns each analysis table's readers use: a table without them is damaged (read as absent).
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "components": ("component", "layer", "share", "mean_accuracy", "mean_delta_accuracy", "resample_delta_accuracy",
                   "mean_bits", "mean_bits_lost"),
    "heads": ("layer", "head", "induction", "previous_token"),
    "attention": ("layer", "head"),
    "ablation": ("layer", "head"),
    "patching": ("layer", "head"),
    "memory": ("accuracy", "bits"),
}
DAMAGED_COLUMNS = ["run", "file", "problem"]  # damaged_files' table
RECORD = "record"  # the frame's column of each row's Run (or RecordedRun): what readers ask for the run's files


class RunSet:
    """The runs below a folder: each opened once (a Run, which keeps what it reads) and their table built once.
    What the report, the figures and the explorer share; `frame()` is for selecting and showing rows.

        runs = RunSet("runs/quick")            # or RunSet(root, frame) with a table already built
        runs.frame()                           # COLUMNS and `record`, one row per run, in the folder's order
        runs.run(path)                         # the Run of a row
    """

    def __init__(self, root: str | Path, frame: pd.DataFrame | None = None, workers: int | None = None) -> None:
        self.root = Path(root)
        self._frame = frame
        self._workers = workers
        self._runs: dict[str, Run] | None = None

    @property
    def is_read(self) -> bool:
        """Whether the table is built (frame() read the folder, or one was given)."""
        return self._frame is not None

    def frame(self) -> pd.DataFrame:
        """Every run below the folder, one row each (see COLUMNS, plus `record`), built on the first call."""
        if self._frame is None:
            self._frame = load_runs(self.root, self._workers)
        return self._frame

    def run(self, path: str | Path) -> Run:
        """The Run of the row whose `path` is `path` (a Run of its own for a directory the table does not hold)."""
        found = self._by_path().get(str(path))
        return found if found is not None else Run(path)

    def _by_path(self) -> dict[str, Run]:
        if self._runs is None:
            frame = self.frame()
            records = frame[RECORD] if RECORD in frame else [Run(p) for p in frame["path"]]
            self._runs = {str(r.path): r for r in records if isinstance(r, Run)}
        return self._runs

    def __iter__(self) -> Iterator[Run]:
        return iter(self._by_path().values())

    def __len__(self) -> int:
        return len(self.frame())

    def __repr__(self) -> str:
        loaded = "not read yet" if self._frame is None else f"{len(self._frame)} runs"
        return f"RunSet({str(self.root)!r}, {loaded})"


def task_label(task: str, params: dict[str, Any]) -> str:
    """A short name for a task and its parameters, e.g. 'retrieval(pairs=8)'; file lists by base name."""
    shown = {k: v for k, v in sorted(params.items()) if k not in ("text_file", "dataset", "tokenizer", "vocab_size")}
    if not shown:
        return task
    return f"{task}(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"


def run_row(run: Run, root: str | Path | None = None) -> dict[str, Any]:
    """One run as a row (see COLUMNS). Status: finished | diverged | error | ... (from summary.json), running (no
    summary yet: interrupted or in progress) or corrupt (a damaged run.json or summary.json). `error` holds why a
    run did not finish: summary.json's message for any status but finished, the damaged file's name and what is
    wrong with it for a corrupt one."""
    path = run.path
    rel = path.relative_to(root) if root is not None and path != Path(root) else Path(path.name)
    row: dict[str, Any] = {c: None for c in COLUMNS}
    study = rel.parts[0] if len(rel.parts) > 1 else ""
    row.update(run=str(rel.as_posix()), group=group_of(study), study=study, path=str(path),
               has_checkpoint=run.has_checkpoint, has_analysis=run.has_analysis)
    try:
        row.update(_config_columns(run.train_config), **run.scores, status=run.status, headline=run.headline)
    except (OSError, ValueError) as e:
        row.update(status="corrupt", error=str(e))
        return row
    if row["status"] != "finished" and row["status"] not in UNFINISHED:
        row["error"] = run.message
    return row


def _config_columns(train: TrainConfig) -> dict[str, Any]:
    """The columns that say what a run is: variant (with its grid settings), task, size and optimiser."""
    extra = train.model_extra
    return dict(
        variant=grid_label(train.variant, extra.get("freeze", ()), extra.get("attention", ())),
        task=train.task, task_params=dict(train.task_params), task_label=task_label(train.task, train.task_params),
        d_model=train.d_model, n_layers=train.n_layers, n_heads=train.n_heads, lr=train.lr, schedule=train.schedule,
        seed=train.seed,
        steps=train.steps, batch_size=train.batch_size, weight_decay=train.weight_decay, warmup_steps=train.warmup,
        tuning_key=tuning_key(train),
    )


def load_runs(root: str | Path, workers: int | None = None) -> pd.DataFrame:
    """All runs below `root`, one row each (COLUMNS, and `record`: the row's Run); empty, with those columns, if
    none. What RunSet(root).frame() builds.

    One walk of the folder and one read of each run's files: a caller that needs the table several times
    (the report, the figures) builds it once and passes it on. A large folder is read by `workers` forked
    processes (mixit_lab.training.pool.forked_map; default: one per usable core where forking is safe); its
    Runs then read their files again when asked for more than the row holds."""
    root = Path(root)
    paths = find_runs(root)
    n = 1 if len(paths) < PARALLEL_FROM else fork_workers(workers, len(paths), torch_in_children=False)
    size = max(1, -(-len(paths) // n))  # one contiguous slice per process: the rows stay in the folder's order
    slices = [paths[i:i + size] for i in range(0, len(paths), size)]
    rows: list[dict[str, Any]] = []
    if n == 1:  # here: the rows' Runs keep what they read
        rows = [{**run_row(run, root), RECORD: run} for run in map(Run, paths)]
    for chunk in forked_map(functools.partial(_load_rows, root=root), slices if n > 1 else [], n,
                            torch_in_children=False):
        if isinstance(chunk, BaseException):
            raise chunk
        rows.extend({**row, RECORD: Run(row["path"])} for row in chunk)
    choices = tuning_choices(root)
    for row in rows:
        chosen = choices.get(row["tuning_key"])
        row["selected"] = chosen is None or abs(float(row["lr"]) - chosen) <= 1e-9 * chosen
    return pd.DataFrame(rows, columns=[*COLUMNS, RECORD])


def _load_rows(paths: list[Path], root: Path) -> list[dict[str, Any]]:
    return [run_row(Run(p), root) for p in paths]


def tuning_choices(root: str | Path) -> dict[str, float]:
    """The learning rates the runs folder's tuning record chose ({} without one; a damaged one is warned of)."""
    path = Path(root) / TUNING_FILE
    if not path.is_file():
        return {}
    try:
        return Tuning.read(path).choices()
    except (OSError, ValueError) as e:
        warnings.warn(f"{path}: damaged tuning record, every run read as selected ({e})", stacklevel=3)
        return {}


def tuning_runs(root: str | Path) -> pd.DataFrame:
    """The runs of the folder's tuning record (every learning rate of each tuned setting, at the tuning seeds) as
    rows of COLUMNS plus `memory` and `analysis` (the analysis summaries the record keeps): what the report's
    learning-rate grid and its figures read. `path` is None (a record, whether or not the run's directory is here)
    and `record` a RecordedRun holding those summaries; `selected` marks each setting's chosen rate. Empty (those
    columns) without a record."""
    path = Path(root) / TUNING_FILE
    columns = [*COLUMNS, "memory", "analysis", RECORD]
    if not path.is_file():
        return pd.DataFrame(columns=columns)
    try:
        tuning = Tuning.read(path)
    except (OSError, ValueError) as e:
        warnings.warn(f"{path}: damaged tuning record, read as none ({e})", stacklevel=2)
        return pd.DataFrame(columns=columns)
    choices = tuning.choices()
    rows = []
    for entry in tuning.runs:
        train = TrainConfig.from_dict(dict(entry["train"]))
        study = str(entry.get("study") or "")
        row = {c: None for c in columns}
        row.update(run=entry.get("run"), group=group_of(study), study=study, status=entry.get("status"),
                   headline=entry.get("headline"),
                   **_config_columns(train), **{k: v for k, v in (entry.get("metrics") or {}).items() if k in COLUMNS})
        chosen = choices.get(row["tuning_key"])
        row["selected"] = chosen is not None and abs(train.lr - chosen) <= 1e-9 * chosen
        analysis = entry.get("analysis") or {}
        row.update(memory=analysis.get("memory"), analysis=analysis,
                   **{RECORD: RecordedRun(str(entry.get("run")), summaries=analysis)})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def records(runs: pd.DataFrame) -> list[Run | RecordedRun]:
    """Each row's record, in row order: its `record` (a Run, or a RecordedRun for a row with no directory); for a
    row without one (a frame built by hand), a Run of the row's `path`, else a RecordedRun of its `memory` and
    `analysis` columns. How a reader reaches a row's files (or what it recorded) without telling rows apart."""
    found: list[Run | RecordedRun] = []
    for row in runs.to_dict("records"):
        if isinstance(row.get(RECORD), (Run, RecordedRun)):
            found.append(row[RECORD])
            continue
        if isinstance(row.get("path"), str):
            found.append(Run(row["path"]))
            continue
        summaries = dict(row["analysis"]) if isinstance(row.get("analysis"), dict) else {}
        if isinstance(row.get("memory"), dict):
            summaries["memory"] = row["memory"]
        items = row.get("eval_items")
        found.append(RecordedRun(str(row.get("run")), summaries,
                                 None if items is None or pd.isna(items) else int(items)))
    return found


def by_loss(runs: pd.DataFrame) -> pd.Series:
    """Per row, whether the run is judged by its loss rather than accuracy (mixit_lab.training.run.judged_by_loss): as its
    summary recorded it (`headline`), else as its task says; rows without a `headline` column (reference
    records) ask the task."""
    headlines = runs["headline"] if "headline" in runs else pd.Series(None, index=runs.index, dtype=object)
    return pd.Series([judged_by_loss(task, h if isinstance(h, str) else None) for task, h in zip(runs["task"], headlines)],
                     index=runs.index, dtype=bool)


def reported(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs a report reads: each at its setting's chosen learning rate (all runs of untuned settings)."""
    done = runs[runs["status"] == "finished"]
    return done[done["selected"].fillna(True).astype(bool)] if "selected" in done else done


def read_metrics(run: Run | RecordedRun | str | Path) -> pd.DataFrame:
    """metrics.jsonl as a DataFrame sorted by step; lines cut off by a kill are skipped. Given a Run, read once
    (the Run keeps the frame: treat it as read-only)."""
    if isinstance(run, RecordedRun):  # no directory: no metrics
        return _metrics_frame([])
    if isinstance(run, Run):
        return run.memo("metrics_frame", lambda: _metrics_frame(run.metrics))
    return _metrics_frame(read_metric_records(run))


def _metrics_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(records)
    return df.sort_values("step", kind="stable").reset_index(drop=True) if len(df) else df


def read_analysis_table(run: Run | RecordedRun | str | Path, name: str) -> pd.DataFrame | None:
    """One analysis table (heads, attention, signal, memory, ablation, in_context_loss), or None when absent or
    damaged (unreadable, or without the columns its readers use: a one-line warning names it). Given a Run, read
    once (the Run keeps the table: treat it as read-only)."""
    table, problem = _table_of(run, name)
    if problem is not None:
        warnings.warn(problem, stacklevel=2)
    return table


def read_analysis_records(run: Run | RecordedRun | str | Path, name: str) -> list[dict[str, Any]] | None:
    """One analysis table as plain records, numbers as floats (NaN where empty): what read_analysis_table gives,
    without a DataFrame per file, for readers of thousands of runs' tables. None when absent or damaged (warned).
    Given a Run, read once (the Run keeps the records)."""
    if isinstance(run, RecordedRun):  # no directory: no tables
        return None
    if isinstance(run, Run):
        return run.memo(("records", name), lambda: _records(run, name))
    return _records(run, name)


def _records(run: Run | str | Path, name: str) -> list[dict[str, Any]] | None:
    path, data = _table_file(run, name)
    if data is None and not path.is_file():
        return None
    try:
        with (io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="") if data is not None
              else open(path, encoding="utf-8", newline="")) as fh:
            reader = csv.DictReader(fh, strict=True)
            if not _missing_columns(reader.fieldnames or [], name):
                return [{k: _cell(v) for k, v in row.items()} for row in reader]
    except (OSError, UnicodeDecodeError, csv.Error):
        pass
    table = read_analysis_table(run, name)  # damaged: said as read_analysis_table says it
    return None if table is None else table.to_dict("records")


def _table_file(run: Run | str | Path, name: str) -> tuple[Path, bytes | None]:
    """A run's analysis table file: its path, and given a Run its bytes, read once and kept in the Run (None when
    it cannot be read: the path's own reading then says why)."""
    path = Path(run.path if isinstance(run, Run) else run) / ANALYSIS_DIR / ANALYSIS_TABLE.format(name)
    if not isinstance(run, Run):
        return path, None

    def read() -> bytes | None:
        try:
            return path.read_bytes()
        except OSError:
            return None

    return path, run.memo(("file", name), read)


def _cell(value: str | None) -> Any:
    """A CSV cell as pandas reads it: a float (NaN when empty), else the text."""
    if value is None or value == "":
        return float("nan")
    try:
        return float(value)
    except ValueError:
        return value


def analysis_table_problem(run_dir: str | Path, name: str) -> str | None:
    """Why a run's analysis table is damaged (one line naming the file and what to do), or None: absent or sound."""
    return _read_table(Path(run_dir) / ANALYSIS_DIR / ANALYSIS_TABLE.format(name), name=name)[1]


def table_file_problem(path: str | Path, name: str) -> str | None:
    """Why the analysis table file `path` (table `name`) is damaged (one line naming it), or None: absent or sound."""
    return _read_table(Path(path), name=name)[1]


def table_header_problem(path: str | Path, name: str) -> str | None:
    """Why the analysis table file `path` (table `name`) is damaged judging by its first line (unreadable, not text,
    without the table's columns), as table_file_problem says it; None if its header is sound. The cheap check by
    which an analysis is called current: the rows are read, and a damaged file named, where the table is used."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return _damaged(path, " ".join(str(e).split()) or type(e).__name__)
    missing = _missing_columns(header, name)
    return _damaged(path, f"no column {', '.join(missing)}") if missing else None


def _missing_columns(columns: Any, name: str) -> list[str]:
    """The columns the readers of table `name` use that `columns` lacks."""
    return [c for c in TABLE_COLUMNS.get(name, ()) if c not in columns]


def _damaged(path: Path, reason: str) -> str:
    """The one line that names a damaged analysis table, why, and what to do."""
    return (f"{path}: damaged analysis table, read as missing ({reason}); "
            f"rerun `mixit analyze --force {path.parent.parent}` to rebuild it")


def _table_of(run: Run | RecordedRun | str | Path, name: str) -> tuple[pd.DataFrame | None, str | None]:
    """_read_table of a run's analysis table `name`; kept in the Run when given one (read once)."""
    if isinstance(run, RecordedRun):
        return None, None
    if isinstance(run, Run):
        return run.memo(("table", name), lambda: _read_table(*_table_file(run, name), name=name))
    return _read_table(Path(run) / ANALYSIS_DIR / ANALYSIS_TABLE.format(name), name=name)


def _read_table(path: Path, data: bytes | None = None, *, name: str) -> tuple[pd.DataFrame | None, str | None]:
    """(the table, None) if it is sound, (None, None) if absent, (None, the problem) if damaged; from `data` (the
    file's bytes, read already) when given."""
    if data is None and not path.is_file():
        return None, None
    try:
        table = pd.read_csv(path if data is None else io.BytesIO(data))
    except (OSError, ValueError) as e:  # pandas' parser and decode errors are ValueErrors
        return None, _damaged(path, " ".join(str(e).split()) or type(e).__name__)
    missing = _missing_columns(table.columns, name)
    return (None, _damaged(path, f"no column {', '.join(missing)}")) if missing else (table, None)


def damaged_files(runs: pd.DataFrame) -> pd.DataFrame:
    """The damaged files among `runs` (rows of load_runs), DAMAGED_COLUMNS: each corrupt run (its run.json or
    summary.json, as its `error` says) and each unreadable analysis file of the others."""
    rows = []
    records = runs[RECORD] if RECORD in runs else [Run(p) if isinstance(p, str) else None for p in runs["path"]]
    for run, record in zip(runs.itertuples(), records):
        if not isinstance(record, Run):
            continue
        if run.status == "corrupt":
            error = str(run.error or "")
            rows.append({"run": run.run, "file": error.split(": ", 1)[0] if ": " in error else run.path,
                         "problem": error.split(": ", 1)[-1]})
            continue
        rows += [{"run": run.run, "file": file, "problem": problem} for file, problem in _damaged_analysis(record)]
    return pd.DataFrame(rows, columns=DAMAGED_COLUMNS)


def _damaged_analysis(run: Run) -> list[tuple[str, str]]:
    """(file, problem) for each damaged file of a run's analysis/ folder: analysis.json and its tables."""
    folder = run.path / ANALYSIS_DIR
    if not folder.is_dir():
        return []
    found = []
    if (folder / ANALYSIS_FILE).is_file() and run.analysis() is None:
        found.append((str(folder / ANALYSIS_FILE), "unreadable; rerun `mixit analyze --force` on the run"))
    for table in sorted(folder.glob(ANALYSIS_TABLE.format("*"))):
        problem = _table_of(run, table.stem)[1]
        if problem is not None:
            found.append((str(table), problem.split(": ", 1)[1]))
    return found
