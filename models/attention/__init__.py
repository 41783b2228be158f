"""Attention, one kind per module: softmax (softmax.py), shaped (shaped.py), MixiT's fixed mixing (mixing.py) and
learned mixing (learned.py), on what they share (base.py: `Attention`, the projections, hooks and accessors), with
the CPU kernel thresholds apart (kernels.py).

    from mixit_lab.models.attention import Attention
    attn = Attention(cfg, layer)   # the subclass of cfg.layer_attention(layer)

Importing this package registers every kind with `Attention`, so `Attention(cfg, layer)` finds each one.
"""

from __future__ import annotations

from .base import Attention, recentre_rows
from .kernels import plain_attention_max_len, softmax_over_keys
from .learned import LearnedAttention
from .mixing import MixingAttention, centre_mixing, keep_sink_head, mixing_matrices
from .shaped import ShapedAttention
from .softmax import SoftmaxAttention

__all__ = [
    "Attention",
    "LearnedAttention",
    "MixingAttention",
    "ShapedAttention",
    "SoftmaxAttention",
    "centre_mixing",
    "keep_sink_head",
    "mixing_matrices",
    "plain_attention_max_len",
    "recentre_rows",
    "softmax_over_keys",
]
