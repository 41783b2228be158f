"""Training core: the task registry (algorithmic and text tasks, and your own), the training loop, the run
directory, loading a run back, sweeps and data-parallel runs. The `mixit` command line is the `cli` package.

    from mixit_lab.training import get_task, TASKS, TrainConfig, train, load_run
    task = get_task("addition", digits=10)
    tokens, mask = task.sample(1000, generator=torch.Generator().manual_seed(0))
    summary = train(TrainConfig(task="addition", task_params={"digits": 3}, steps=200), "runs/add3")
    run = load_run(summary["run_dir"])   # run.model, run.task, run.train_config, run.summary, run.metrics
    train_stack([TrainConfig(seed=s) for s in range(4)], [f"runs/s{s}" for s in range(4)])  # four runs as one

Each name is imported from its module on first use, so that what only reads run folders (mixit_lab.training.run,
mixit_lab.training.config: the figures, `mixit figures`) starts without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import TrainConfig
    from .rebuild import run_task
    from .run import Run, load_run
    from .tasks import TASKS, Task, TrainStream, get_task, register_task
    from .loss import evaluate
    from .stack import train_stack
    from .trainer import TrainingDiverged, train

_WHERE = {"TrainConfig": "config", "Run": "run", "load_run": "run", "run_task": "rebuild", "TASKS": "tasks", "Task": "tasks",
          "TrainStream": "tasks", "get_task": "tasks", "register_task": "tasks", "TrainingDiverged": "trainer",
          "evaluate": "loss", "train": "trainer", "train_stack": "stack"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
