"""What a run's settings (`TrainConfig`) come to on this machine: `resolve` gives the task, the `ModelConfig`, the
number of held-out rows each evaluation scores and the device, as a frozen `ResolvedRun`.

It is the one place these are worked out and checked. `mixit train` (mixit_lab.cli.train) calls it to refuse bad
input before anything is written; the trainer (mixit_lab.training.trainer.train) calls it to train; a sweep's and a
preset's grid (mixit_lab.training.sweep.expand_grid_models) calls it for every run of the grid. The same settings
give the same answer wherever it is asked. Its rules:

- the task is the one `TrainConfig.build_task` builds (its token cache in the folder passed in);
- `eval_samples` lies in 1..`Task.max_eval_size` (65,536, or a larger fixed held-out set's size) and is at most
  the rows evaluated: a fixed held-out set smaller than it (modadd's pairs, memorize's keys, a corpus's held-out
  windows) is scored whole (`check_eval_size`);
- `tune_samples` needs a task that holds out tuning rows;
- the model fields the task requires (`task.model_overrides`) are not contradicted;
- the device is `TrainConfig.device` on this machine, this rank's own GPU under torchrun (`resolve_device`).

Importing this module imports no torch; resolving builds a task, which does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mixit_lab.models.config import ModelConfig

if TYPE_CHECKING:
    import torch

    from mixit_lab.training.config import TrainConfig
    from mixit_lab.training.tasks.base import Task


@dataclass(frozen=True)
class ResolvedRun:
    """What a TrainConfig comes to here: its task, its model, the held-out rows each evaluation scores, and its
    device (None when the caller did not ask for one: a grid planned on a machine other than the one it trains on)."""

    task: Task
    model: ModelConfig
    eval_size: int
    device: torch.device | None


def check_eval_size(eval_samples: int | None, task: Task) -> int:
    """The number of held-out rows a run of `task` evaluates on: `eval_samples` (None: the task's default), but at most
    a fixed held-out set's rows (`task.held_out_size`), which are then scored whole.

    The one eval-size rule: ValueError naming the value and the allowed range unless eval_samples lies in
    1..`task.max_eval_size`, MAX_EVAL_SIZE or a larger fixed held-out set's size. `eval_samples` is at most the rows
    evaluated, as a preset's shared train block means it: asking a small fixed set for more scores the same rows
    (`eval_set` gives all of them), the same run with the same fingerprint, and the number returned says how many."""
    if eval_samples is None:
        return task.default_eval_size
    limit, held = task.max_eval_size, task.held_out_size
    if eval_samples > limit:
        why = (f"task {task.name!r} holds out {held} rows" if held is not None and held >= limit else
               f"a run evaluates on at most {limit} held-out rows (every evaluation scores them all)")
        raise ValueError(f"eval_samples={eval_samples} is too many: {why}; allowed: 1..{limit}")
    return eval_samples if held is None else min(eval_samples, held)


def _model_config(cfg: TrainConfig, task: Task) -> ModelConfig:
    """The model of a run of `cfg` on `task`: cfg's fields, the task's context and vocabulary, and the fields the task
    requires (`task.model_overrides`), which `cfg.model_extra` must not contradict (ValueError)."""
    required = task.model_overrides
    if cfg.model_extra.get("n_classes") is not None and "n_classes" not in required:
        raise ValueError(f"n_classes={cfg.model_extra['n_classes']!r}: task {task.name!r} predicts tokens; "
                         "n_classes is set by a classification task (sentiment) from its labels")
    for key, value in cfg.model_extra.items():
        if key in required and required[key] != value:
            flag = " (drop --bidirectional)" if key == "causal" else ""
            raise ValueError(f"task {task.name!r} requires {key}={required[key]!r}, not {key}={value!r}{flag}")
    return ModelConfig(
        variant=cfg.variant,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        n_ctx=task.seq_len,
        d_vocab=task.d_vocab,
        seed=cfg.seed,
        **{**cfg.model_extra, **required},
    )


def resolve_device(name: str) -> torch.device:
    """The device a run whose TrainConfig.device is `name` trains on in this process: "auto" is CUDA if there is
    one, else the CPU; under torchrun "auto" and "cuda" are this rank's own GPU (cuda:LOCAL_RANK). ValueError if this
    machine has no such device."""
    from mixit_lab.training.machine import pick_device
    from mixit_lab.training.parallel import Ranks, local_device

    return pick_device(local_device(name, Ranks.from_env()))


def resolve(cfg: TrainConfig, cache_dir: str | Path | None = None, *, task: Task | None = None,
            device: bool | torch.device = True, strict: bool = False) -> ResolvedRun:
    """Resolve `cfg` on this machine (the rules are the module's); ValueError (one line) for what it refuses.

    cache_dir: where a text task keeps its tokens (the runs folder's .token_cache/). task: the task, already built
    from cfg (else built here). device: True resolves cfg.device (`resolve_device`); a torch.device is the one the
    caller resolved already (the trainer, before its processes start); False leaves it out (None).
    strict: also refuse what `mixit train` refuses before it starts: a model field set that changes nothing in this
    model (`ModelConfig.check_fields_apply`; a preset's train block, shared by its studies, may set some) and a
    model larger than this machine's memory (`check_fits_in_memory`, which building the model checks anyway)."""
    task = task if task is not None else cfg.build_task(cache_dir)
    eval_size = check_eval_size(cfg.eval_samples, task)
    if cfg.tune_samples and task.tuning_size() == 0:
        raise ValueError(f"tune_samples={cfg.tune_samples}: task {task.name!r} holds out no tuning rows; give it a "
                         "tuning split (tune_fraction > 0, e.g. --tune-fraction 0.1)")
    model = _model_config(cfg, task)
    if strict:
        from mixit_lab.models.transformer import check_fits_in_memory

        model.check_fields_apply()
        check_fits_in_memory(model)
    if device is True:
        device = resolve_device(cfg.device)
    return ResolvedRun(task, model, eval_size, None if device is False else device)
