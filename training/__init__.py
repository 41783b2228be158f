"""Training core: the task registry (algorithmic and text tasks), the training loop, the run directory,
sweeps and data-parallel runs. The `mixit` command line is the `cli` package.

    from training import get_task, TASKS, TrainConfig, train
    task = get_task("addition", digits=10)
    tokens, mask = task.sample(1000, generator=torch.Generator().manual_seed(0))
"""

from .tasks import TASKS, Task, TrainStream, get_task
from .trainer import TrainConfig, TrainingDiverged, evaluate, train

__all__ = ["TASKS", "Task", "TrainStream", "get_task", "TrainConfig", "TrainingDiverged", "evaluate", "train"]
