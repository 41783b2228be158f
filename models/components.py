"""The model's small building blocks: RMSNorm, rotary embeddings, the gated MLP, the embeddings and the readouts.

`models/transformer.py` puts them together into blocks and a model; `models/attention/` holds the attention.
Weights use the TransformerLens layout (see models/transformer.py). `add_bias` and `affine` are the two helpers
every layer with a weight uses: a bias that is a zero buffer when it is not trained, and `mult * (x @ W + b)` as
one fused matmul.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens.hook_points import HookPoint

from .config import ModelConfig


def add_bias(module: nn.Module, name: str, *shape: int, trained: bool) -> None:
    """A zero-initialised bias: a Parameter if trained, else a zero buffer kept out of checkpoints."""
    if trained:
        module.register_parameter(name, nn.Parameter(torch.zeros(*shape)))
    else:
        module.register_buffer(name, torch.zeros(*shape), persistent=False)


def affine(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor, mult: float = 1.0) -> torch.Tensor:
    """mult * (x @ W + b) for x [..., d_in], W [d_in, d_out], as one fused addmm.

    The multiplier scales the (small) weight and bias, not the (large) output, so neither the forward
    nor the backward pass spends an elementwise pass over [batch * pos, d_out] on it.
    """
    if mult != 1.0:
        W, b = W * mult, b * mult
    out = torch.addmm(b, x.reshape(-1, x.shape[-1]), W)
    return out.view(*x.shape[:-1], W.shape[-1])


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * w, with TransformerLens's hook_scale and hook_normalized."""

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d_model))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [batch, pos, d_model] -> normalized [batch, pos, d_model]."""
        if not (self.hook_scale.has_hooks() or self.hook_normalized.has_hooks()):
            # The fused kernel: the same function, without materialising the hooked intermediates.
            return F.rms_norm(x, self.w.shape, self.w, self.eps)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale) * self.w


def rotary_tables(n_ctx: int, d_head: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin tables [n_ctx, d_head] for rotate-half rotary embeddings (Llama convention).

    The sin table has its first half negated (see apply_rotary)."""
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = torch.outer(torch.arange(n_ctx, dtype=torch.float64), inv_freq)
    return torch.cat([angles, angles], dim=-1).cos().float(), torch.cat([-angles, angles], dim=-1).sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., d_head] by position: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].

    Computed as x * cos + roll(x, d_head / 2) * sin_signed (rotary_tables' sin, first half negated): one
    roll instead of a split, a negation and a concatenation. cos/sin_signed broadcast against x; tables
    already expanded to x's trailing shape (e.g. [pos, head, d_head]) keep the products vectorised.
    """
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), sin_signed)


class MLP(nn.Module):
    """Gated MLP: W_out(act(x W_gate) * (x W_in)), SiLU (Llama) or shaped LeakyReLU."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D, M = cfg.d_model, cfg.d_mlp
        self.W_gate = nn.Parameter(torch.empty(D, M))
        add_bias(self, "b_gate", M, trained=cfg.bias)
        self.W_in = nn.Parameter(torch.empty(D, M))
        add_bias(self, "b_in", M, trained=cfg.bias)
        self.W_out = nn.Parameter(torch.empty(M, D))
        add_bias(self, "b_out", D, trained=cfg.bias)
        self.shaped = cfg.spec.shaped
        if self.shaped:
            self.slope = 1 - 1 / math.sqrt(D)
            self.gain = nn.init.calculate_gain("leaky_relu", self.slope)
            self.in_mult = cfg.width_mult
            self.out_mult = math.sqrt(cfg.base_width_down / M)
        else:
            self.in_mult = self.out_mult = 1.0
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp], gate pre-activation
        self.hook_pre_linear = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()  # [batch, pos, d_mlp]

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """The gate's activation: SiLU, or the shaped variants' gain-scaled LeakyReLU."""
        if self.shaped:
            return F.leaky_relu(x, self.slope) * self.gain
        return F.silu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos, d_model]."""
        pre = self.hook_pre(affine(x, self.W_gate, self.b_gate, self.in_mult))
        pre_linear = self.hook_pre_linear(affine(x, self.W_in, self.b_in, self.in_mult))
        post = self.hook_post(self.act(pre) * pre_linear)
        return affine(post, self.W_out, self.b_out, self.out_mult)


class Embed(nn.Module):
    """Token embedding W_E [d_vocab, d_model]."""

    def __init__(self, d_vocab: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(d_vocab, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [batch, pos] -> [batch, pos, d_model]."""
        return F.embedding(tokens, self.W_E)


class PosEmbed(nn.Module):
    """Learned absolute positions W_pos [n_ctx, d_model] (mixit's; the others use rotary)."""

    def __init__(self, n_ctx: int, d_model: int):
        super().__init__()
        self.W_pos = nn.Parameter(torch.empty(n_ctx, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [batch, pos] -> [batch, pos, d_model] (a view: one row per batch item, as TransformerLens's)."""
        return self.W_pos[: tokens.shape[1]][None].expand(tokens.shape[0], -1, -1)


class Unembed(nn.Module):
    """logits = mult * (x @ W_U + b_U); mult = config.readout_mult (width scaling of the shaped variants)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab))
        add_bias(self, "b_U", cfg.d_vocab, trained=cfg.unembed_bias)
        self.mult = cfg.readout_mult

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [batch, pos, d_model] -> logits [batch, pos, d_vocab]."""
        return affine(x, self.W_U, self.b_U, self.mult)


class Classifier(nn.Module):
    """Sequence classification head: the final residual stream at the last real token (or its mean over
    real tokens, config.pooling), then mult * (pooled @ W_C + b_C) with the readout's width multiplier."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.W_C = nn.Parameter(torch.empty(cfg.d_model, cfg.n_classes))
        add_bias(self, "b_C", cfg.n_classes, trained=cfg.unembed_bias)
        self.pooling = cfg.pooling
        self.mult = cfg.readout_mult
        self.hook_pooled = HookPoint()  # [batch, d_model]

    def forward(self, resid: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """resid [batch, pos, d_model], attention_mask [batch, pos] (1 = real) -> logits [batch, n_classes]."""
        if self.pooling == "last":
            if attention_mask is None:
                pooled = resid[:, -1]
            else:  # the rightmost real token (left or right padding alike)
                positions = torch.arange(resid.shape[1], device=resid.device)
                last = (positions * attention_mask.to(torch.long)).argmax(-1)
                pooled = resid[torch.arange(resid.shape[0], device=resid.device), last]
        elif attention_mask is None:
            pooled = resid.mean(1)
        else:
            keep = attention_mask.to(resid.dtype)[..., None]
            pooled = (resid * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        return affine(self.hook_pooled(pooled), self.W_C, self.b_C, self.mult)
