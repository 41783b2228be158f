"""Learned mixing ("learned" in the attention grid): input-independent like MixiT's, but trained.

A_learned [head, q, k] starts as MixiT's matrices minus the identity; each use re-centres it over the allowed keys
(`recentre_rows`) and adds the identity back, so A stays causal and every row sums to 1, as MixiT's do (a constant
signal stays constant).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config import ModelConfig
from .base import recentre_rows
from .mixing import MixingAttention


class LearnedAttention(MixingAttention, kind="learned"):
    """Mixing attention whose matrices are the trained parameter `A_learned` rather than the fixed buffer."""

    def _keep_matrices(self, cfg: ModelConfig, A: torch.Tensor) -> None:
        """Keep MixiT's matrices A [head, n_ctx, n_ctx], less the identity, as the trained `A_learned`."""
        self.A_learned = nn.Parameter(A - torch.eye(cfg.n_ctx) * (cfg.depth_alpha == 0))

    def mixing_pattern(self, t: int, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """I + A_learned re-centred over each row's allowed keys (no identity under the depth option): [head, t, t]
        ([batch, head, t, t] with padding)."""
        allowed = self._allowed(t, self.A_learned.device, key_padding_mask).to(self.A_learned.dtype)
        eye = torch.eye(t, dtype=allowed.dtype, device=allowed.device) * (self.cfg.depth_alpha == 0)
        A = eye + recentre_rows(self.A_learned[:, :t, :t], allowed)
        return A[0] if key_padding_mask is None else A
