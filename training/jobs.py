"""The training worker: what a pool worker or a Ray task of a sweep runs. A job is one run (`TrainJob`, trained by
`train_one`) or a stack of runs trained as one in one process (`StackJob`, mixit_lab.training.stack); either gives
one summary row per run, and a run that fails becomes a row that says so, never a failed sweep.

`plan_jobs` makes a sweep's jobs: with `stack` N > 1 the runs that can stack (mixit_lab.training.stack.stack_key) go
N at a time into stack jobs, in the order given; the rest train alone.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .config import TrainConfig
from .rundir import RunLocked
from .stack import stack_key, stack_refusal, train_stack
from .tasks import BUILTIN_TASKS, TASKS, load_task_class, register_task, task_import_path
from .trainer import train


@dataclass(frozen=True)
class TrainJob:
    """One training run for a worker process: plain values, so it pickles across `spawn`."""

    name: str  # the run's name, relative to the runs folder (e.g. "algorithmic/addition_...")
    config: dict[str, Any]  # TrainConfig.to_dict()
    run_dir: str
    command: str  # recorded in run.json as the command that trained it ("sweep", "reproduce")
    tracker: str | None = None  # mixit_lab.training.trackers: also send the metrics to TensorBoard or W&B
    task_import: str | None = None  # a task registered in the parent process (not built in): where the worker
    # imports it from (its import path), so that the run is named and recorded as in the parent


@dataclass(frozen=True)
class StackJob:
    """Runs a worker trains as one stack (their settings stack: mixit_lab.training.stack.check_stackable)."""

    runs: tuple[TrainJob, ...]


def worker_task_import(task: str) -> str | None:
    """The import path a fresh worker process needs to know `task`: None for a built-in task, an import path (the
    worker imports it itself) or a name this process does not know (the run's own error says so)."""
    if task in BUILTIN_TASKS or task not in TASKS:
        return None
    return task_import_path(TASKS[task])


def plan_jobs(runs: Sequence[tuple[str, TrainConfig]], out: Path, command: str, tracker: str | None = None,
              stack: int = 1) -> list[TrainJob | StackJob]:
    """The jobs that train `runs` into out/<name>: one each, or with `stack` > 1 the runs that can stack grouped by
    their shared settings, `stack` at most a job (a group's first run sets the job's place in the order)."""
    jobs = {name: TrainJob(name, cfg.to_dict(), str(Path(out) / name), command, tracker, worker_task_import(cfg.task))
            for name, cfg in runs}
    if stack > 1 and tracker == "wandb":
        warnings.warn(f"stack={stack} is left out with the W&B tracker, which keeps one run open a process: each run "
                      "trains alone", stacklevel=2)
        stack = 1
    if stack <= 1:
        return list(jobs.values())
    groups: dict[str, list[str]] = {}
    for name, cfg in runs:
        key = name if stack_refusal(cfg) is not None else stack_key(cfg)
        groups.setdefault(key, []).append(name)
    planned: list[TrainJob | StackJob] = []
    for names in groups.values():
        for i in range(0, len(names), stack):
            part = [jobs[n] for n in names[i:i + stack]]
            planned.append(part[0] if len(part) == 1 else StackJob(tuple(part)))
    return planned


def run_job(job: TrainJob | StackJob) -> list[dict[str, Any]]:
    """Worker: a job's summary rows, one per run."""
    return train_stacked(job) if isinstance(job, StackJob) else [train_one(job)]


def train_one(job: TrainJob) -> dict[str, Any]:
    """Worker: train one run (resuming it if it was interrupted) and return its summary row.

    A run that fails becomes a row with status "error" and the message, so one failure never
    stops the others.
    """
    start = time.perf_counter()
    try:
        _register(job)
        cfg = TrainConfig.from_dict(job.config)
        summary = train(cfg, job.run_dir, resume=True, progress=False,
                        argv=["mixit", job.command, f"(run {job.name})"], tracker=job.tracker)
    except RunLocked as e:  # another sweep (or mixit train) is training it: leave it to that one
        summary = {"status": "running elsewhere", "message": str(e), **_what(job)}
    except Exception as e:  # one failed run must not stop the sweep
        summary = {"status": "error", "message": f"{type(e).__name__}: {e}", **_what(job)}
    summary.setdefault("elapsed_s", time.perf_counter() - start)
    return {"run": job.name, **summary}


def train_stacked(job: StackJob) -> list[dict[str, Any]]:
    """Worker: train a stack's runs as one (resuming those interrupted) and return their rows. If the stack fails
    (a run locked by another process, a setting refused, out of memory), each run goes on alone from its last
    checkpoint (train_one), so that one run's failure is its own row."""
    start = time.perf_counter()
    first = job.runs[0]
    try:
        _register(first)
        summaries = train_stack([TrainConfig.from_dict(j.config) for j in job.runs], [j.run_dir for j in job.runs],
                                resume=True, progress=False, argv=["mixit", first.command, f"(stack from {first.name})"],
                                tracker=first.tracker)
    except Exception as e:
        warnings.warn(f"the stack of {len(job.runs)} runs from {first.name} stopped ({type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}); its runs go on alone", stacklevel=2)
        return [train_one(j) for j in job.runs]
    elapsed = time.perf_counter() - start
    return [{"run": j.name, **{"elapsed_s": elapsed, **s}} for j, s in zip(job.runs, summaries)]


def lost_job(job: TrainJob | StackJob, error: Exception) -> list[dict[str, Any]]:
    """The rows of a job whose process died: one per run, status "error" with the cause's first line."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    runs = job.runs if isinstance(job, StackJob) else (job,)
    return [{"run": j.name, "status": "error", "message": f"{type(error).__name__}: {first}"} for j in runs]


def _register(job: TrainJob) -> None:
    """A task of one's own, registered in the parent: register it in this worker too."""
    if job.task_import is not None:
        register_task(load_task_class(job.task_import))


def _what(job: TrainJob) -> dict[str, Any]:
    return {"variant": job.config.get("variant"), "task": job.config.get("task")}
