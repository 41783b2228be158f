"""A run directory as Python objects: `load_run` gives the trained model, its task, configs and metrics, and
`run_task` is the one place a run's task is rebuilt from its run.json (analysis, figures, the report and the
explorer all go through it).

    from training import load_run
    run = load_run("checkpoints/khop1-standard")
    run.model, run.task, run.train_config, run.summary["eval_acc"]
    tokens, mask = run.task.eval_set(8)
    run.model.to_str_tokens(tokens[0])      # the task's token strings
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models import ModelConfig
from models.transformer import Transformer

from .rundir import (
    DATA_CACHE_DIR, SUMMARY_FILE, find_checkpoint, is_run_dir, read_json, read_metric_records, read_run_info,
)
from .tasks import TASKS, Task, TaskImportError, attach_tokenizer, get_task, is_import_path, task_class
from .trainer import TrainConfig

__all__ = ["Run", "load_run", "run_task", "run_task_class"]


@dataclass(frozen=True, eq=False)
class Run:
    """One training run, loaded: what `load_run` returns."""

    path: Path  # the run directory
    model: Transformer  # the latest checkpoint, in eval mode, carrying its task's tokenizer
    task: Task | None  # rebuilt from run.json (None when load_run(..., task=False))
    train_config: TrainConfig
    model_config: ModelConfig
    summary: dict[str, Any] | None  # summary.json; None while the run is still training
    metrics: list[dict[str, Any]]  # metrics.jsonl: one record per logged step

    def __repr__(self) -> str:
        status = (self.summary or {}).get("status", "unfinished")
        return (f"Run({str(self.path)!r}, task={self.task!r}, variant={self.train_config.variant!r}, "
                f"status={status!r}, steps logged={len(self.metrics)})")


def load_run(path: str | Path, device: str | None = "cpu", task: bool = True) -> Run:
    """Load a run directory (from `mixit train` or `training.train`): its model, task, configs and metrics.

    Args:
        path: the run directory (or its checkpoint/ folder).
        device: where the model goes ("cpu" by default; None keeps it where loading put it).
        task: rebuild the task (False skips it, e.g. for a text run whose corpus is elsewhere).

    The model carries its task's tokenizer (`model.to_str_tokens(tokens)` gives the task's token strings);
    a checkpoint written before checkpoints saved one gets it from the rebuilt task.

    Raises:
        FileNotFoundError: no run directory, or no checkpoint yet.
        ValueError: an unreadable run.json, a task that cannot be rebuilt (naming the run and the module).
    """
    from models import load_model

    ref = find_checkpoint(path)
    if ref.run_dir is None:
        raise ValueError(f"{path} is a bare checkpoint (no run.json): load it with models.load_model")
    info = read_run_info(ref.run_dir)
    train_config = TrainConfig.from_dict(info["train"])
    model = load_model(ref.checkpoint, device=device)
    rebuilt = run_task(ref.run_dir, info) if task else None
    if rebuilt is not None and (model.tokenizer is None or rebuilt.text_tokenizer is None):
        attach_tokenizer(model, rebuilt)  # a checkpoint without one, or a task vocabulary: no BOS
    summary_file = ref.run_dir / SUMMARY_FILE
    return Run(
        path=ref.run_dir, model=model, task=rebuilt, train_config=train_config, model_config=model.config,
        summary=read_json(summary_file) if summary_file.is_file() else None,
        metrics=read_metric_records(ref.run_dir),
    )


def run_task(run_dir: str | Path, info: dict[str, Any] | None = None) -> Task:
    """The task a run trained on, rebuilt from its run.json as `training.train` built it (a text task reuses
    the token cache beside the run).

    A task that is neither built in nor registered in this process is imported from the import path the
    run recorded (run.json's task.import_path). ValueError (one line, naming the run) if it cannot be.
    """
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        run_dir = find_checkpoint(run_dir).run_dir or run_dir  # its checkpoint/ folder
    info = read_run_info(run_dir) if info is None else info
    cfg = TrainConfig.from_dict(info["train"])
    spec = _task_spec(info)
    try:
        return get_task(spec, cache_dir=run_dir.parent / DATA_CACHE_DIR, **cfg.task_params)
    except TaskImportError as e:
        raise TaskImportError(f"{run_dir}: cannot rebuild task {cfg.task!r}: {e}") from None
    except ValueError:
        if spec not in TASKS and not is_import_path(spec):
            raise ValueError(f"{run_dir}: task {cfg.task!r} is not known here and run.json records no import path; "
                             "register it (training.tasks.register_task) before loading the run") from None
        raise


def run_task_class(info: dict[str, Any]) -> type[Task]:
    """The Task class of a run's run.json contents (imported as `run_task` would); the base `Task` when it cannot
    be found: facts such as `needs_corpus` and `is_classifier()` then read as those of an algorithmic task."""
    try:
        return task_class(_task_spec(info))
    except ValueError:
        return Task


def _task_spec(info: dict[str, Any]) -> str:
    """What names a run's task for `get_task`: its name when this process knows it (built in, or registered),
    else the import path run.json records (the task was registered in the process that trained it)."""
    spec = info["train"]["task"]
    recorded = (info.get("task") or {}).get("import_path")
    if spec not in TASKS and not is_import_path(spec) and recorded:
        return recorded
    return spec
