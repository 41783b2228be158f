"""Model zoo: one config dataclass, one registry of variants, one Transformer.

    from mixit_lab.models import ModelConfig, build_model, load_model, VARIANTS
    model = build_model(ModelConfig(variant="mixit", d_model=128, n_layers=2, n_heads=4, n_ctx=34, d_vocab=31))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .checkpoint import CheckpointError, save_model
from .config import ModelConfig
from .variants import VARIANTS, VariantSpec

if TYPE_CHECKING:
    from .transformer import Transformer, load_model


def __getattr__(name: str):
    """`Transformer` and `load_model` import mixit_lab.models.transformer (torch, TransformerLens) on first use, so that
    what only reads run folders and configs (the figures, `mixit figures`) starts without them."""
    if name in ("Transformer", "load_model"):
        from . import transformer

        return getattr(transformer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(config: ModelConfig) -> Transformer:
    """A freshly initialised model; the same config (seed included) gives identical weights.

    Args:
        config: the variant, sizes (`d_model`, `n_layers`, `n_heads`, `n_ctx`, `d_vocab`), seed and the
            grid fields (`freeze`, `attention`).

    Returns:
        A `Transformer` (a TransformerLens `HookedRootModule`): `model(tokens)` maps int64 tokens
        `[batch, pos]` to logits `[batch, pos, d_vocab]`.
    """
    if not isinstance(config, ModelConfig):
        raise TypeError(f"build_model expects a ModelConfig, got {type(config).__name__}")
    from .transformer import Transformer

    return Transformer(config)


__all__ = [
    "VARIANTS",
    "CheckpointError",
    "ModelConfig",
    "Transformer",
    "VariantSpec",
    "build_model",
    "load_model",
    "save_model",
]
