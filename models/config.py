"""Model configuration and the registry of variants.

`ModelConfig` is the single description of a model: it is what `build_model` takes,
what `config.json` in a checkpoint holds, and (with the seed) all that is needed to
rebuild a model bit for bit. `VARIANTS` is the one registry of what each variant
trains, freezes and replaces.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

AttentionKind = Literal["softmax", "shaped", "mixing"]


@dataclass(frozen=True)
class VariantSpec:
    """What one model variant changes relative to a standard Llama-style decoder."""

    name: str
    description: str
    attention: AttentionKind = "softmax"
    positions: Literal["rotary", "learned"] = "rotary"
    # Shaped LeakyReLU MLP, scaled residual branches and width-scaled linear outputs.
    shaped: bool = False
    # Regexes over parameter names; a parameter matching `frozen` keeps its init.
    frozen: tuple[str, ...] = ()
    # If set, *only* parameters matching one of these are trained (the rest are frozen).
    trained_only: tuple[str, ...] | None = None

    def is_frozen(self, param_name: str) -> bool:
        """True if the parameter `param_name` keeps its initial value in this variant."""
        if self.trained_only is not None:
            return not any(re.fullmatch(p, param_name) for p in self.trained_only)
        return any(re.fullmatch(p, param_name) for p in self.frozen)


VARIANTS: dict[str, VariantSpec] = {
    spec.name: spec
    for spec in [
        VariantSpec("standard", "everything trained"),
        VariantSpec(
            "frozen_qk",
            "query and key projections frozen at their random init",
            frozen=(r"blocks\.\d+\.attn\.[Wb]_[QK]",),
        ),
        VariantSpec(
            "frozen_mlp",
            "every MLP weight and bias frozen at init",
            frozen=(r"blocks\.\d+\.mlp\..*",),
        ),
        VariantSpec(
            "mixit",
            "attention replaced by fixed random mixing matrices (one sink head per layer)",
            attention="mixing",
            positions="learned",
            shaped=True,
        ),
        VariantSpec(
            "random",
            "only embeddings and the output layer (unembedding or classifier) trained (Zhong & Andreas 2024)",
            trained_only=(r"embed\..*", r"pos_embed\..*", r"unembed\..*", r"classifier\..*"),
        ),
        VariantSpec(
            "shaped",
            "shaped attention I + softmax(QK^T/tau) - C with shaped MLP and residuals",
            attention="shaped",
            shaped=True,
        ),
    ]
}


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass
class ModelConfig:
    """Hyperparameters of a model. Every field is JSON-serialisable.

    `base_width` / `base_width_down` set the width scaling of the shaped variants
    (mixit, shaped): each linear output is multiplied by sqrt(base / fan_in), with
    `base_width_down` for the MLP down-projection, as in the authors' code.
    """

    variant: str = "standard"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_ctx: int = 64
    d_vocab: int = 32
    seed: int = 0
    d_mlp: int | None = None  # default 4 * d_model
    causal: bool = True  # False: bidirectional attention (sequence classification)
    n_classes: int | None = None  # set: a classification head replaces the unembedding (see Transformer.classify)
    init_std: float = 0.02
    # W_Q and W_K at init (None: init_std). Frozen at std 0.02, attention logits scale like
    # 0.0004 * d_model, so small frozen_qk models attend uniformly; 1/sqrt(d_model) gives O(1) logits.
    qk_init_std: float | None = None
    # MixiT: head 0 of each layer is a sink head (0.5 I + 0.5 on column 0). False makes every head a
    # random mixing head. The sink pulls all tokens towards token 0, so at init it is what makes
    # token similarity grow with depth (analysis.signal); without it MixiT's stays flat.
    sink_head: bool = True
    rope_base: float = 10_000.0
    norm_eps: float = 1e-6
    base_width: int = 512
    base_width_down: int = 1
    residual_scale: float = math.sqrt(0.5)  # s in h = s*h + sqrt(1-s^2)*f(h), shaped variants
    extra: dict[str, Any] = field(default_factory=dict)  # free-form metadata, saved with the model

    def __post_init__(self) -> None:
        _check(
            self.variant in VARIANTS,
            f"variant={self.variant!r} is not one of: {', '.join(VARIANTS)}",
        )
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        for name in ("d_model", "n_layers", "n_heads", "n_ctx", "d_vocab", "d_mlp", "base_width", "base_width_down"):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{name}={value!r} must be a positive integer",
            )
        _check(
            self.d_model % self.n_heads == 0,
            f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}",
        )
        if self.spec.positions == "rotary":
            _check(
                self.d_head % 2 == 0,
                f"d_head={self.d_head} (d_model / n_heads) must be even for rotary embeddings",
            )
        _check(isinstance(self.seed, int) and not isinstance(self.seed, bool), f"seed={self.seed!r} must be an integer")
        _check(self.init_std > 0, f"init_std={self.init_std!r} must be > 0")
        _check(self.qk_init_std is None or self.qk_init_std > 0, f"qk_init_std={self.qk_init_std!r} must be > 0 or None")
        _check(self.rope_base > 0, f"rope_base={self.rope_base!r} must be > 0")
        _check(self.norm_eps > 0, f"norm_eps={self.norm_eps!r} must be > 0")
        _check(0 < self.residual_scale < 1, f"residual_scale={self.residual_scale!r} must lie in (0, 1)")
        _check(isinstance(self.sink_head, bool), f"sink_head={self.sink_head!r} must be True or False")
        _check(isinstance(self.causal, bool), f"causal={self.causal!r} must be True or False")
        _check(
            self.n_classes is None
            or (isinstance(self.n_classes, int) and not isinstance(self.n_classes, bool) and self.n_classes >= 2),
            f"n_classes={self.n_classes!r} must be None (language model) or an integer >= 2",
        )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def spec(self) -> VariantSpec:
        return VARIANTS[self.variant]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        """Build a config from a dict, rejecting unknown keys with a clear message."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        _check(not unknown, f"unknown model config keys {unknown}; allowed: {sorted(known)}")
        return cls(**data)
