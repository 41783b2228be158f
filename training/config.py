"""A training run's settings: `TrainConfig`, everything that defines a run (run.json's train section), and the values
its fields allow. Apart from the training loop (mixit_lab.training.trainer) so that reading a run's record (tables, figures,
the report) does not import torch: a task is built only when asked for (`build_task`). What the settings come to on
this machine (the task, the model, the eval size, the device) is mixit_lab.training.resolve.resolve's."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .optim import SCHEDULES, authors_lr, resolved_warmup, scheduled_lr
from .sampling import check_sampling

if TYPE_CHECKING:
    from .tasks import Task

PRECISIONS = ("auto", "fp32", "bf16", "fast")  # TrainConfig.precision; what each means: mixit_lab.training.precision


@dataclass
class TrainConfig:
    """Everything that defines a training run. Model fields not listed go in `model_extra`."""

    task: str = "addition"
    task_params: dict[str, Any] = field(default_factory=dict)
    variant: str = "standard"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    model_extra: dict[str, Any] = field(default_factory=dict)  # other ModelConfig fields, e.g. base_width
    seed: int = 0
    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    warmup_steps: int | None = None  # default: the schedule's (ours: 5% of steps; the authors': max(4%, 500))
    min_lr_ratio: float = 0.1  # our schedule's cosine decays to lr * min_lr_ratio
    schedule: str = "ours"  # "ours": warmup, cosine to lr * min_lr_ratio; "authors": their scripts' default,
    # warmup max(4% of steps, 500) then linear decay to 0 (mixit_lab.training.optim)
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_samples: int | None = None  # default: the task's held-out set size
    tune_samples: int = 0  # rows of the task's tuning set (a validation set, disjoint from the eval rows and held out of
    # training) scored at each evaluation as tune_loss / tune_acc: what a learning rate is chosen on (mixit_lab.training.tuning)
    eval_batch_size: int = 1024
    sampling: str = "uniform"  # "epochs": each row of a finite training set (memorize) once per epoch, as the authors'
    # Trainer draws keys; "uniform": rows drawn independently (with replacement), our default
    micro_batch_size: int | None = None  # rows per forward pass: the batch's gradient accumulated over slices of
    # this many rows (to fit a GPU's memory); None: the whole batch at once. The same run up to float rounding.
    checkpoint_every: int | None = None  # default: every eval
    log_every: int = 10
    device: str = "auto"
    compile: bool = False
    cuda_graph: bool = False  # capture the step as a CUDA graph and replay it (mixit_lab.training.graph_step); eager
    # elsewhere (CPU, several processes, micro-batches, compile) and where the capture fails: the same numbers
    keep_checkpoints: int = 0  # keep the model at 0 and at this many log-spaced steps up to the last (training dynamics)
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 elsewhere), fp32, bf16 (autocast, CPU too), or
    # fast (auto, but bf16 on a CPU whose bf16 matmuls measure >= BF16_MIN_SPEEDUP x fp32's)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # JSON round trip gives a list
        for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip", "d_model", "n_layers", "n_heads", "seed",
                     "warmup_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{name}={value!r} must be a number")
        if len(self.betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in self.betas):
            raise ValueError(f"betas={self.betas!r} must be two numbers")
        for name in ("steps", "batch_size", "eval_every", "log_every", "eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        if isinstance(self.tune_samples, bool) or not isinstance(self.tune_samples, int) or self.tune_samples < 0:
            raise ValueError(f"tune_samples={self.tune_samples!r} must be an integer >= 0")
        for name in ("checkpoint_every", "eval_samples", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be a positive integer or None")
        if self.warmup_steps is not None and not (0 <= self.warmup_steps <= self.steps):
            raise ValueError(f"warmup_steps={self.warmup_steps!r} must lie in [0, steps={self.steps}]")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr!r} must be a positive number")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio={self.min_lr_ratio!r} must lie in [0, 1]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(f"weight_decay={self.weight_decay!r} and grad_clip={self.grad_clip!r} must be >= 0")
        if isinstance(self.keep_checkpoints, bool) or not isinstance(self.keep_checkpoints, int) or self.keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints={self.keep_checkpoints!r} must be an integer >= 0")
        check_sampling(self.sampling)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is not one of: {', '.join(SCHEDULES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r} is not one of: {', '.join(PRECISIONS)}")
        if self.device not in ("auto", "cpu", "cuda", "mps") and not self.device.startswith("cuda:"):
            raise ValueError(f"device={self.device!r} is not one of: auto, cpu, cuda, cuda:N, mps")

    def build_task(self, cache_dir: str | Path | None = None) -> Task:
        """The run's task; a text task caches its tokens in `cache_dir` (mixit_lab.training.rundir.DATA_CACHE_DIR of the runs folder).

        `task` is a name known to this process (built in, or added by `register_task`) or an import path
        (`package.module:Class`). To rebuild the task of a saved run use `mixit_lab.training.run_task(run_dir)`,
        which also imports a task registered only in the process that trained it."""
        from .tasks import get_task

        task = get_task(self.task, cache_dir=cache_dir, **self.task_params)
        check_sampling(self.sampling, task)  # before anything is written: epochs need a finite training set
        return task

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown train config keys {unknown}; allowed: {sorted(known)}")
        return cls(**data)

    @property
    def warmup(self) -> int:
        return resolved_warmup(self.steps, self.warmup_steps, self.schedule)

    def kept_steps(self) -> list[int]:
        """The steps --keep-checkpoints keeps: the initialization (0) and `keep_checkpoints` log-spaced
        steps from 1 to `steps` (fewer when short runs make some coincide)."""
        n = self.keep_checkpoints
        if n == 0:
            return []
        if n == 1:
            return [0, self.steps]
        ratio = self.steps ** (1 / (n - 1))
        return sorted({0, *(min(self.steps, round(ratio**i)) for i in range(n))})

    def lr_at(self, step: int) -> float:
        """Learning rate for optimizer step `step` (0-based) under the run's schedule (mixit_lab.training.optim): ours, linear
        warmup then cosine decay; the authors', warmup then linear decay to 0."""
        if self.schedule == "authors":
            return authors_lr(step, self.lr, self.steps, self.warmup)
        return scheduled_lr(step, self.lr, self.steps, self.warmup, self.min_lr_ratio)
