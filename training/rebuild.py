"""Rebuild the task a run trained on from its run.json: `run_task` is the one place it is done (a run's `task`,
`mixit analyze`, the figures, the report and the explorer all go through it), `run_task_class` the class alone.
A task of one's own is imported only with the user's consent (mixit_lab.training.tasks.trust_task_code)."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

from .rundir import DATA_CACHE_DIR, find_checkpoint, is_run_dir, read_run_info
from .runinfo import RunInfo
from .tasks import (
    TASKS, Task, TaskImportError, TaskNotTrusted, get_task, is_import_path, task_class, task_code_trusted,
)

__all__ = ["run_task", "run_task_class"]


def run_task(run_dir: str | Path, info: RunInfo | None = None, check: bool = True) -> Task:
    """The task a run trained on, rebuilt from its run.json as `mixit_lab.training.train` built it (a text task reuses
    the token cache beside the run), and checked against the run's record: TaskChanged (one line) when its data
    or its held-out rows differ from those the run trained and was evaluated on (RunInfo.check_data). With
    check=False the task is returned unchecked (for facts that do not depend on its rows, such as its sizes).

    A task that is neither built in nor registered in this process is imported from the import path the
    run recorded (run.json's task.import_path), only with the user's consent (mixit_lab.training.tasks.trust_task_code;
    TaskNotTrusted without). ValueError (one line, naming the run) if it cannot be.
    `info`: the run's RunInfo when the caller has read it already. `run_dir` may also be its checkpoint/ folder.
    """
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):  # its checkpoint/ folder, or a bare checkpoint (whose task nothing records)
        found = find_checkpoint(run_dir).run_dir
        if found is None:
            raise ValueError(f"{run_dir} is a bare checkpoint (no run.json), so its task is unknown; pass the task")
        run_dir = found
    info = read_run_info(run_dir) if info is None else info
    name, params = info.train.task, dict(info.train.task_params)
    spec = _task_spec(info)
    if _needs_consent(spec):
        raise TaskNotTrusted(f"{run_dir}: task {name!r} is code ({spec}), and opening a run imports none without "
                             "consent; if you trust it: --trust-tasks, or mixit_lab.training.tasks.trust_task_code()")
    try:
        task = get_task(spec, cache_dir=run_dir.parent / DATA_CACHE_DIR, **params)
        if check:
            info.check_data(task)
            _warn_if_source_changed(info, spec)
    except TaskImportError as e:
        raise TaskImportError(f"{run_dir}: cannot rebuild task {name!r}: {e}") from None
    except ValueError:
        if spec not in TASKS and not is_import_path(spec):
            raise ValueError(f"{run_dir}: task {name!r} is not known here and run.json records no import path; "
                             "register it (mixit_lab.training.tasks.register_task) before loading the run") from None
        raise
    except Exception as e:  # the task's own code failed while building or drawing its rows: one line, not its traceback
        raise ValueError(f"{run_dir}: task {name!r} raised {type(e).__name__} when rebuilt: {e}") from None
    return task


def _warn_if_source_changed(info: RunInfo, spec: str) -> None:
    """Warn when a task file's bytes differ from those the run trained with, though its held-out rows are the same
    (a comment, or a change to how it trains: the run's numbers may not be this file's)."""
    module = spec.rpartition(":")[0]
    if info.task.source_sha256 and module.endswith(".py") and Path(module).is_file():
        if hashlib.sha256(Path(module).read_bytes()).hexdigest() != info.task.source_sha256:
            warnings.warn(f"{info.path}: task file {module} changed since the run trained (its held-out rows did not)",
                          stacklevel=3)


def run_task_class(info: RunInfo) -> type[Task]:
    """The Task class of a run (its RunInfo; imported as `run_task` would); the base `Task` when it cannot
    be found: facts such as `needs_corpus` and `is_classifier()` then read as those of an algorithmic task."""
    spec = _task_spec(info)
    if _needs_consent(spec):
        return Task  # not imported without consent (run_task)
    try:
        return task_class(spec)
    except ValueError:
        return Task


def _needs_consent(spec: str) -> bool:
    """Whether building task `spec` would import code the user has not consented to (trust_task_code)."""
    return spec not in TASKS and is_import_path(spec) and not task_code_trusted(spec)


def _task_spec(info: RunInfo) -> str:
    """What names a run's task for `get_task`: its name when this process knows it (built in, or registered),
    else the import path run.json records (the task was registered in the process that trained it)."""
    spec = info.train.task
    recorded = info.task.import_path
    if spec not in TASKS and not is_import_path(spec) and recorded:
        spec = recorded
    return _moved_task_file(spec, info)


def _moved_task_file(spec: str, info: RunInfo) -> str:
    """A task file's import path after its runs folder moved (another machine, another home): the recorded file when
    it is there, else the file that run.json records relative to the run (`source_file`) when that is there."""
    module, _, qualname = spec.rpartition(":")
    if not (is_import_path(spec) and module.endswith(".py")) or Path(module).is_file() or not info.task.source_file:
        return spec
    moved = (info.run_dir / info.task.source_file).resolve()
    return f"{moved}:{qualname}" if moved.is_file() else spec
