"""Helpers shared by the analysis modules: input checks, token sampling, batching, checkpoint identity.

Nothing here computes a statistic; each statistic lives in the one module that is named after it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Union

import torch

from mixit_lab.models.checkpoint import CONFIG_FILE, WEIGHTS_FILE

if TYPE_CHECKING:
    from mixit_lab.training.tasks import Task

# What every analysis takes as its model: the model itself, or a run directory / checkpoint folder to load.
ModelOrPath = Union[torch.nn.Module, str, Path]


def as_model(model: ModelOrPath) -> torch.nn.Module:
    """`model` itself, or the model loaded (`mixit_lab.models.load_model`) from a run directory or checkpoint path."""
    if isinstance(model, (str, Path)):
        from mixit_lab.models import load_model

        return load_model(model)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model={model!r} is neither a model nor a run directory / checkpoint path (str or Path)")
    return model


def model_and_task(model: ModelOrPath, task: "Task | None") -> tuple[torch.nn.Module, "Task | None"]:
    """(model, task): a path loads the model and, when `task` is None, rebuilds the run's task (`run_task`)."""
    if isinstance(model, (str, Path)) and task is None:
        from mixit_lab.training.rebuild import run_task

        task = run_task(model)
    return as_model(model), task


def check_positive_int(name: str, value: Any, lo: int = 1) -> int:
    """`value` if it is an int >= lo, else a one-line ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name}={value!r} must be an integer >= {lo}")
    return value


def model_device(model: torch.nn.Module) -> torch.device:
    """The device the model lives on (`model.cfg.device`, kept in sync by `Transformer.to`)."""
    return torch.device(model.cfg.device)


def layer_attention_kinds(model: torch.nn.Module) -> list[str]:
    """Each layer's attention: 'softmax', 'shaped', 'mixing' or 'learned' (input-independent, trained)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "layer_attention"):
        return ["softmax"] * model.cfg.n_layers
    return [config.layer_attention(layer) for layer in range(model.cfg.n_layers)]


def is_causal(model: torch.nn.Module) -> bool:
    config = getattr(model, "config", None)
    return bool(getattr(config, "causal", True))


def pattern_hook(layer: int) -> str:
    """Hook name of layer `layer`'s attention pattern, [batch, head_index, query_pos, key_pos]."""
    return f"blocks.{layer}.attn.hook_pattern"


def batches(n: int, batch_size: int) -> Iterator[slice]:
    """Consecutive slices covering range(n), each at most `batch_size` long."""
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.no_grad()
def cached_batches(
    model, tokens: torch.Tensor, names: list[str], batch_size: int, return_type: str | None = None,
    attention_mask: torch.Tensor | None = None,
) -> Iterator[tuple[torch.Tensor, Any, dict[str, torch.Tensor]]]:
    """Run `model` in eval mode over `tokens` in batches, caching only the hooks `names`.

    Yields (batch tokens on the model's device, model output for `return_type`, {hook name: activation});
    the model's train/eval mode is restored afterwards.
    """
    device = model_device(model)
    was_training = model.training
    model.eval()
    try:
        for part in batches(tokens.shape[0], batch_size):
            tb = tokens[part].to(device)
            mask = None if attention_mask is None else attention_mask[part].to(device)
            kwargs = {} if mask is None else {"attention_mask": mask}
            out, cache = model.run_with_cache(
                tb, names_filter=names, return_type=return_type, return_cache_object=False, **kwargs
            )
            yield tb, out, cache
    finally:
        model.train(was_training)


def random_tokens(d_vocab: int, n_seqs: int, seq_len: int, seed: int) -> torch.Tensor:
    """int64 [n_seqs, seq_len] of uniform token ids, distinct within a row when d_vocab >= seq_len.

    Distinct tokens keep "the earlier occurrence of this token" unambiguous (head scores) and keep
    equal tokens from inflating similarities (signal propagation). Drawn on the CPU from a
    generator seeded with `seed`, so the same arguments give the same tokens on every device.
    """
    g = torch.Generator().manual_seed(seed)
    if d_vocab >= seq_len:
        return torch.rand(n_seqs, d_vocab, generator=g).argsort(dim=1)[:, :seq_len]
    return torch.randint(0, d_vocab, (n_seqs, seq_len), generator=g)


# --------------------------------------------------------------------------- checkpoints
def checkpoint_hash(checkpoint_dir: str | Path) -> str:
    """SHA-256 over a checkpoint's config.json and model.safetensors (names and bytes), hex."""
    checkpoint_dir = Path(checkpoint_dir)
    digest = hashlib.sha256()
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        file = checkpoint_dir / name
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint is missing {file}")
        digest.update(name.encode() + b"\0")
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
