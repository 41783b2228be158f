"""The optimizer and its schedules: AdamW with weight decay on matrices; a learning-rate schedule, ours (linear warmup
over 5% of the steps, cosine decay to a floor) or the authors' (their scripts' default: warmup over max(4% of the
steps, 500), then linear decay to 0, as the Hugging Face Trainer's "linear" schedule with their `utils.py` warmup)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by build_optimizer: the schedules are plain arithmetic (mixit_lab.training.config uses them)
    import torch


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    device: torch.device) -> torch.optim.AdamW:
    """The trainer's AdamW: weight decay on trainable matrices only; the fused kernel on CPU and CUDA, the loop
    elsewhere. On CPU it makes one call per parameter tensor instead of about ten (a tiny model's step 4.5 -> 4.0 ms
    at width 16, 2 CPU cores); on CUDA a few kernel launches for all parameters instead of the multi-tensor ops' chain
    of them (the paper preset's LM step: docs/benchmarks.md)."""
    import torch

    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=betas, foreach=False, fused=device.type in ("cpu", "cuda"),
    )


SCHEDULES = ("ours", "authors")  # TrainConfig.schedule
AUTHORS_WARMUP_RATIO, AUTHORS_MIN_WARMUP = 0.04, 500  # their utils.TrainingArguments: warmup_ratio, its floor


def resolved_warmup(steps: int, warmup_steps: int | None, schedule: str = "ours") -> int:
    """The warmup a run uses: warmup_steps if set, else ours, 5% of its steps (at least 1), or the authors', max(4% of
    the steps, 500), which is longer than a run of fewer than 500 steps: such a run never leaves its warmup."""
    if warmup_steps is not None:
        return warmup_steps
    if schedule == "authors":
        return max(int(AUTHORS_WARMUP_RATIO * steps), AUTHORS_MIN_WARMUP)
    return max(1, steps // 20)


def scheduled_lr(step: int, lr: float, steps: int, warmup: int, min_lr_ratio: float) -> float:
    """Learning rate for optimizer step `step` (0-based): linear warmup to `lr` over `warmup` steps, then cosine
    decay to lr * min_lr_ratio at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return lr * (min_lr_ratio + (1 - min_lr_ratio) * cosine)


def authors_lr(step: int, lr: float, steps: int, warmup: int) -> float:
    """Learning rate for optimizer step `step` (0-based) as the Hugging Face Trainer's "linear" schedule gives it
    (their scripts set `lr_scheduler_type = "linear"`): `lr * step / warmup` during the warmup (0 at the first
    step), then linear decay to 0 at `steps`."""
    if step < warmup:
        return lr * step / max(1, warmup)
    return lr * max(0.0, (steps - step) / max(1, steps - warmup))


def first_step_options(lr: float, model_extra: dict) -> str:
    """The options that set a run's first step, as `lr=0.001, init_std=1e+30` (the learning rate and the initial
    weights' scales, `init_std` and `qk_init_std`): what a run that diverged at its first step names."""
    named = {"lr": lr, **{k: v for k, v in (model_extra or {}).items() if k.endswith("init_std")}}
    return ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v!r}" for k, v in named.items())
