"""Model zoo: one config dataclass, one registry of variants, one Transformer.

    from models import ModelConfig, build_model, load_model, VARIANTS
    model = build_model(ModelConfig(variant="mixit", d_model=128, n_layers=2, n_heads=4, n_ctx=34, d_vocab=31))
"""

from .checkpoint import CheckpointError, save_model
from .config import VARIANTS, ModelConfig, VariantSpec
from .transformer import Transformer, load_model


def build_model(config: ModelConfig) -> Transformer:
    """A freshly initialised model; the same config (seed included) gives identical weights."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"build_model expects a ModelConfig, got {type(config).__name__}")
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
