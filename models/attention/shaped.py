"""Shaped attention (the shaped variant): I + softmax(scale * q k^T) - C, C the uniform average over each row's
allowed keys, so a constant signal passes through unchanged while the softmax part starts near uniform."""

from __future__ import annotations

import torch

from .base import recentre_rows
from .softmax import SoftmaxAttention


class ShapedAttention(SoftmaxAttention, kind="shaped"):
    """Softmax attention plus I - C on the pattern; its q.k scale is the shaped variants' temperature."""

    def _shaping(self, t: int, device: torch.device, key_padding_mask: torch.Tensor | None,
                 start: int = 0) -> torch.Tensor:
        """I - C [batch or 1, 1, q, k] (rows start..t-1): the identity re-centred over each row's allowed keys."""
        allowed = self._allowed(t, device, key_padding_mask, start).float()
        return recentre_rows(torch.eye(t, device=device)[start:], allowed)
