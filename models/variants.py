"""The registry of named variants: what each one trains, freezes and replaces in a standard Llama-style decoder.

`VARIANTS` is the one registry: `ModelConfig.variant` names one of its entries, and the command line's choices,
sweeps, presets and analysis read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from .vocabulary import AttentionKind


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
