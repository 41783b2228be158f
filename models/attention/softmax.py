"""Softmax attention: queries and keys (rotary where the variant's positions are), softmax over the allowed keys.

On CPU short sequences take plain ops (two matmuls and a softmax, in the score layout `kernels` picks), longer
ones and other devices PyTorch's fused SDPA kernel; a hook on the scores or the pattern always takes the plain
path, which materialises them. Shaped attention (shaped.py) is this with I - C added to the pattern.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..components import add_bias, apply_rotary, rotary_tables
from ..config import ModelConfig
from .base import Attention
from .kernels import plain_attention_max_len, scores_keys_outer, softmax_over_keys


class SoftmaxAttention(Attention, kind="softmax"):
    """softmax(scale * q k^T, masked) v per head; q, k rotated by position with rotary embeddings."""

    def _init_pattern(self, cfg: ModelConfig, layer: int) -> None:
        """W_Q, W_K [head, d_model, d_head], their biases, the q.k scale and the rotary tables."""
        H, D, E = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(H, D, E))
        self.W_K = nn.Parameter(torch.empty(H, D, E))
        add_bias(self, "b_Q", H, E, trained=cfg.bias)
        add_bias(self, "b_K", H, E, trained=cfg.bias)
        self.scale = cfg.attn_scale_for(self.kind)  # q.k multiplier: 1/sqrt(d_head), width-scaled in shaped models
        self.rotary = cfg.spec.positions == "rotary"  # with learned positions, none (as MixiT's)
        if self.rotary:
            # Expanded once to [pos, 2 (q, k), head, d_head]: tables broadcast over heads from
            # [pos, 1, d_head] made apply_rotary's products 3x slower at d_head 4.
            cos, sin = (table[:, None, None].expand(-1, 2, H, -1).contiguous()
                        for table in rotary_tables(cfg.n_ctx, E, cfg.rope_base))
            self.register_buffer("rotary_cos", cos, persistent=False)
            self.register_buffer("rotary_sin_signed", sin, persistent=False)

    def _rotary_tables(self, t: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, signed sin [pos, 2, head, d_head] for the first t positions, in `dtype` (bf16 under autocast:
        no promotion of q, k to fp32)."""
        return self.rotary_cos[:t].to(dtype), self.rotary_sin_signed[:t].to(dtype)

    def _needs_pattern(self) -> bool:
        """Whether a hook reads the scores or the pattern, which only the plain path materialises."""
        return self.hook_pattern.has_hooks() or self.hook_attn_scores.has_hooks()

    def _attend(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None, start: int) -> torch.Tensor:
        """x [batch, pos, d_model] (or per-head [batch, pos, 3, head, d_model]) -> z [batch, pos - start, head, d_head]."""
        t = x.shape[1]
        if x.dim() == 5:
            qkv = self._project_split(x, self.W_Q, self.b_Q, self.W_K, self.b_K, self.W_V, self.b_V)
            qk, v = qkv[:, :, :2], qkv[:, :, 2]
        elif self.W_Q.requires_grad == self.W_K.requires_grad == self.W_V.requires_grad:
            qkv = self._project(x, self.W_Q, self.b_Q, self.W_K, self.b_K, self.W_V, self.b_V)
            qk, v = qkv[:, :, :2], qkv[:, :, 2]
        else:
            # Frozen and trained weights in separate matmuls, so the backward pass skips the frozen
            # ones' weight gradients (frozen_qk's saving, finding 7).
            qk = self._project(x, self.W_Q, self.b_Q, self.W_K, self.b_K)
            v = self._project(x, self.W_V, self.b_V)[:, :, 0]
        if self.rotary and not (self.hook_q.has_hooks() or self.hook_k.has_hooks()):
            # Queries and keys rotated together, as one [batch, pos, 2, head, d_head] tensor.
            q, k = apply_rotary(qk, *self._rotary_tables(t, qk.dtype)).unbind(2)
        else:
            q, k = self.hook_q(qk[:, :, 0]), self.hook_k(qk[:, :, 1])
            if self.rotary:
                cos, sin = self._rotary_tables(t, q.dtype)
                q, k = apply_rotary(q, cos[:, 0], sin[:, 0]), apply_rotary(k, cos[:, 1], sin[:, 1])
        v = self.hook_v(v)
        q, k = self.hook_rot_q(q), self.hook_rot_k(k)
        return self._softmax_attention(q[:, start:], k, v, key_padding_mask)

    def _shaping(self, t: int, device: torch.device, key_padding_mask: torch.Tensor | None,
                 start: int = 0) -> torch.Tensor | None:
        """What is added to the pattern [.., q, k] (rows start..t-1): nothing here; I - C in shaped attention."""
        return None

    def _softmax_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """q [batch, query_pos, head, d_head] (the last query_pos of the pos positions), k, v [batch, pos, head, d_head]
        -> z [batch, query_pos, head, d_head]."""
        t, start = k.shape[1], k.shape[1] - q.shape[1]
        # [batch, pos, head, d_head] -> [batch, head, pos, d_head] views for the matmuls.
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self._needs_pattern() or t <= plain_attention_max_len(q.device, q.dtype):
            allowed = self._allowed(t, q.device, key_padding_mask, start).transpose(-1, -2)  # [.., key, query]
            # Scores are computed keys-first, [batch, head, key, query], and handed on as a [batch, head, query, key]
            # view of that memory, or, for short sequences on CPU, of a copy laid out [key, batch, head, query]:
            # the layouts in which softmax_over_keys is fast (kernels.KEYS_OUTER_MAX_LEN).
            scores_kq = kh @ qh.transpose(-1, -2)
            mask = torch.zeros(allowed.shape, dtype=scores_kq.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
            if scores_keys_outer(q.device, t):
                # mask + scale * scores in one pass over the copy; the mask is 0 or -inf, so no extra rounding
                outer = torch.add(mask.permute(2, 0, 1, 3), scores_kq.permute(2, 0, 1, 3).contiguous(), alpha=self.scale)
                scores = outer.permute(1, 2, 3, 0)
            else:
                scores = (scores_kq * self.scale + mask).transpose(-1, -2)
            pattern = softmax_over_keys(self.hook_attn_scores(scores))
            shaping = self._shaping(t, q.device, key_padding_mask, start)
            if shaping is not None:
                pattern = pattern + shaping.to(pattern.dtype)
            pattern = self.hook_pattern(pattern)
            zh = pattern @ vh
        else:
            # SDPA's is_causal aligns a shorter query block top-left, so queries from `start` on get an explicit mask.
            explicit = key_padding_mask is not None or (start > 0 and self.causal)
            mask = self._allowed(t, q.device, key_padding_mask, start) if explicit else None
            is_causal = self.causal and mask is None
            zh = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, is_causal=is_causal, scale=self.scale)
            shaping = self._shaping(t, q.device, key_padding_mask, start)
            if shaping is not None:
                # (I - C) V without forming the matrices: V minus the (causal) running mean of V.
                zh = zh + shaping.to(vh.dtype) @ vh
        return zh.transpose(1, 2)
