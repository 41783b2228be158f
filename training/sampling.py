"""How a run draws its training rows (`TrainConfig.sampling`): the allowed values and their check. Apart from the
tasks, which use it (mixit_lab.training.tasks.base's TrainStream), so that a TrainConfig is checked without importing them."""

from __future__ import annotations

from typing import Any

SAMPLINGS = ("uniform", "epochs")  # TrainConfig.sampling: how a TrainStream (mixit_lab.training.tasks.base) draws rows


def check_sampling(sampling: str, task: Any = None) -> None:
    """ValueError unless `sampling` is one of SAMPLINGS and, for "epochs", `task` (a Task) has a finite training set.
    (`Any`: naming the Task type here would make the tasks, which import this module, an import of it.)"""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling={sampling!r} is not one of: {', '.join(SAMPLINGS)}")
    if sampling == "epochs" and task is not None and not task.eval_is_train:
        raise ValueError(f"sampling='epochs' needs a task whose training set is finite (memorize), not {task.name}")
