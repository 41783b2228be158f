"""Training core: the task registry (algorithmic and text tasks, and your own), the training loop, the run
directory, loading a run back, sweeps and data-parallel runs. The `mixit` command line is the `cli` package.

    from training import get_task, TASKS, TrainConfig, train, load_run
    task = get_task("addition", digits=10)
    tokens, mask = task.sample(1000, generator=torch.Generator().manual_seed(0))
    summary = train(TrainConfig(task="addition", task_params={"digits": 3}, steps=200), "runs/add3")
    run = load_run(summary["run_dir"])   # run.model, run.task, run.train_config, run.summary, run.metrics
"""

from .run import Run, load_run, run_task
from .tasks import TASKS, Task, TrainStream, get_task, register_task
from .trainer import TrainConfig, TrainingDiverged, evaluate, train

__all__ = ["Run", "TASKS", "Task", "TrainStream", "get_task", "load_run", "register_task", "run_task", "TrainConfig",
           "TrainingDiverged", "evaluate", "train"]
