"""A Llama-style decoder with TransformerLens hook points, in all six study variants.

Read top to bottom: RMSNorm, rotary embeddings, the fixed mixing matrices of MixiT,
attention (softmax / shaped / mixing), gated MLP, block, model. Weights use the
TransformerLens layout so `FactoredMatrix`, `head_detector` and `patching` apply:

    embed.W_E        [d_vocab, d_model]        pos_embed.W_pos [n_ctx, d_model]  (mixit only)
    attn.W_Q/W_K/W_V [n_heads, d_model, d_head] attn.b_Q/b_K/b_V [n_heads, d_head]
    attn.W_O         [n_heads, d_head, d_model] attn.b_O         [d_model]
    mlp.W_gate/W_in  [d_model, d_mlp]          mlp.W_out       [d_mlp, d_model]
    unembed.W_U      [d_model, d_vocab]        unembed.b_U     [d_vocab]
    classifier.W_C   [d_model, n_classes]      classifier.b_C  [n_classes]  (n_classes set: replaces unembed)

Biases are trained parameters with `config.bias` (attention, MLP; on by default) and
`config.unembed_bias` (b_U, b_C; off by default, as in the authors' models); a bias that is off is a zero
buffer (not saved), so code written for the TransformerLens layout still finds it.

Hook shapes follow TransformerLens: hook_q/k/v/z are [batch, pos, head_index, d_head],
hook_attn_scores/hook_pattern are [batch, head_index, query_pos, key_pos].

HookedTransformer's weight accessors (`model.W_Q`, `model.W_U`, `model.OV`, `model.QK_at`, ...) and the cache's
decompositions are in models/lens.py: they fold in the shaped variants' multipliers, which the block
parameters above do not show.

Trained models carry their task's tokenizer (`model.tokenizer`, see models/tokenizer.py: a BPE for text, the
task's token strings for the algorithmic tasks) and offer TransformerLens's `to_tokens`, `to_string` and
`to_str_tokens`.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens import FactoredMatrix, HookedRootModule
from transformer_lens.config import TransformerLensConfig
from transformer_lens.hook_points import HookPoint

from . import tokenizer as tok
from .checkpoint import check_state, read_weights, save_model
from .config import ModelConfig, component_of  # component_of: re-exported, models.transformer.component_of
from .freeze import apply_freeze, frozen_elements
from .generate import generate
from .lens import QK_KINDS, LensCache, LensRefusal, LensWeights


def derive_seed(seed: int, *tags: object) -> int:
    """A stable 63-bit seed from a base seed and tags (Python's hash() is salted per process)."""
    digest = hashlib.sha256(repr((seed, *tags)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.w = nn.Parameter(torch.ones(d_model))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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


def mixing_matrices(cfg: ModelConfig, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """MixiT's fixed mixing matrices [n_heads, n_ctx, n_ctx] for one layer, and their noise scales.

    A_h = I + N_h - rowmean(N_h), with N_h i.i.d. N(0, s_h^2) on the causal triangle (or the full
    matrix if bidirectional), the mean taken over each row's allowed entries so rows sum to 1.
    s_h = 1/sqrt(T d_head) + u_h (1/sqrt(T) - 1/sqrt(T d_head)), u_h ~ U[0, 1).
    With cfg.depth_alpha != 0 (the authors' depth option), A_h = N_h - rowmean(N_h) at s_h = 1/sqrt(T):
    no identity, rows sum to 0.
    Head 0 is a sink head, 0.5 I with column 0 set to 0.5 (row 0 is [0.5, 0, ...], as the authors'),
    unless cfg.sink_head is False (then it is drawn like the others; the other heads' matrices are
    the same either way). Reproducible from (seed, layer). The centring is `centre_mixing`'s.
    """
    T, H = cfg.n_ctx, cfg.n_heads
    g = torch.Generator().manual_seed(derive_seed(cfg.seed, "mixing", layer))
    lo, hi = 1 / math.sqrt(T * cfg.d_head), 1 / math.sqrt(T)
    scale = lo + torch.rand(H, generator=g, dtype=torch.float64) * (hi - lo)
    if cfg.depth_alpha != 0:
        scale = torch.full((H,), hi, dtype=torch.float64)
    noise = torch.randn(H, T, T, generator=g, dtype=torch.float64) * scale[:, None, None]
    return centre_mixing(cfg, layer, noise).float(), scale.float()


def centre_mixing(cfg: ModelConfig, layer: int, noise: torch.Tensor) -> torch.Tensor:
    """The fixed matrices [head, T, T] from the raw noise N [head, T, T] (any float dtype, kept).

    A_h = I + N_h - m_h (no I under the depth option), N_h cut to the causal triangle if causal; m_h, one
    value per row, is the mean of the row's allowed entries (its sum divided by their count). Bidirectional
    mixing layers with cfg.mixing_centre "causal" divide the sum by the causal count i + 1 instead, as the
    authors' classifier: their rows do not sum to 1. Head 0 is then replaced by the sink head (sink_head).
    """
    T = noise.shape[-1]
    allowed = torch.ones(T, T, dtype=noise.dtype, device=noise.device)
    if cfg.causal:
        allowed = allowed.tril()
    noise = noise * allowed
    count = allowed.sum(-1, keepdim=True)
    if cfg.mixing_centre == "causal" and cfg.layer_attention(layer) == "mixing":
        count = torch.arange(1, T + 1, dtype=noise.dtype, device=noise.device)[:, None]
    eye = torch.eye(T, dtype=noise.dtype, device=noise.device)
    A = ((eye if cfg.depth_alpha == 0 else 0) + noise - noise.sum(-1, keepdim=True) / count) * allowed
    if cfg.sink_head:
        sink = 0.5 * eye
        sink[:, 0] = 0.5
        A[0] = sink
    return A


# The thresholds below were tuned on one 2-core AMD EPYC (avx512_bf16); another CPU may want others:
# `python benchmarks/bench_kernels.py` measures the choices and prints the thresholds its machine would want.
# Each choice computes the same function, so a threshold only ever changes speed.
# On CPU, PyTorch's fused SDPA kernel is slower than plain ops (two batched matmuls and a softmax) at the
# sequence lengths this study trains on, most of all in bf16 (batch 1,000, 4 heads, T = 34: 253 ms forward +
# backward vs 45 ms; benchmarks/bench_kernels.py). In fp32 the plain ops win up to about 32 positions (0.5-0.9x
# of the fused time) and lose from 34 on (1.1-1.2x). The plain path is used up to these lengths; same function.
MATH_ATTENTION_MAX_LEN = {torch.float32: 32, torch.bfloat16: 512}
# How the plain path lays out the scores for the softmax over keys (see softmax_over_keys): on CPU up to
# KEYS_OUTER_MAX_LEN positions keys outermost, [key, batch, head, query]; else keys-first, [batch, head, key, query],
# up to KEYS_FIRST_MAX_LEN (beyond it a softmax along the last dimension is as fast). Attention forward + backward,
# keys-outer against keys-first: 0.76-0.96x at 3-19 positions, 0.98-1.5x from 33 on (benchmarks/bench_kernels.py).
KEYS_OUTER_MAX_LEN = 24
KEYS_FIRST_MAX_LEN = 64
# MixiT mixes the values one matmul per head over the whole batch up to this head width, else batch x head small
# matmuls: forward + backward 0.24-0.67x at width 4, 0.9-0.95x at 16, 1.0-1.6x at 32 (benchmarks/bench_kernels.py).
MIX_PER_HEAD_MAX_D_HEAD = 16


def plain_attention_max_len(device: torch.device, dtype: torch.dtype) -> int:
    """Longest sequence for which `Attention` uses plain ops rather than the fused SDPA kernel."""
    if device.type != "cpu":
        return 0
    return MATH_ATTENTION_MAX_LEN.get(dtype, MATH_ATTENTION_MAX_LEN[torch.float32])


def softmax_over_keys(scores: torch.Tensor) -> torch.Tensor:
    """softmax(scores, dim=-1) for scores [batch, head, query, key], taken along the dimension the keys are laid out in.

    PyTorch's CPU softmax vectorises over the dimensions inside the one it reduces, so short rows (a few keys) are
    slow along the last dimension (11-20x slower at 9 keys). Scores stored keys outermost ([key, batch, head, query]
    memory) reduce along dimension 0, vectorised over everything else; keys-first ([batch, head, key, query])
    along dimension -2, vectorised over queries. The same function whatever the layout (a hook may return any).
    """
    outer = scores.permute(3, 0, 1, 2)
    if outer.is_contiguous():
        return torch.softmax(outer, dim=0).permute(1, 2, 3, 0)
    first = scores.transpose(-1, -2)
    if first.is_contiguous() and scores.shape[-1] <= KEYS_FIRST_MAX_LEN:
        return torch.softmax(first, dim=-2).transpose(-1, -2)
    return torch.softmax(scores, dim=-1)


class Attention(nn.Module):
    """Multi-head attention; `kind` picks softmax, shaped softmax, MixiT's fixed mixing, or learned mixing.

    "learned" is input-independent like mixing but trained: A_learned [head, q, k] starts as MixiT's
    matrices minus the identity, and each use re-centres it over the allowed keys and adds the identity
    back, so A stays causal and every row sums to 1, as MixiT's do (a constant signal stays constant).
    """

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        self.kind = cfg.layer_attention(layer)
        # Whether each query sees only the keys before it: cfg.causal, or a softmax/shaped layer of a model with
        # causal_softmax (bidirectional mixing beside causal softmax layers, as the authors' classifier).
        self.causal = cfg.causal or (cfg.causal_softmax and self.kind in ("softmax", "shaped"))
        H, D, E = cfg.n_heads, cfg.d_model, cfg.d_head
        if self.kind in ("softmax", "shaped"):
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
        else:
            A, scale = mixing_matrices(cfg, layer)
            if self.kind == "mixing":
                self.register_buffer("mixing", A)  # [head, query_pos, key_pos], saved in checkpoints
            else:
                self.A_learned = nn.Parameter(A - torch.eye(cfg.n_ctx) * (cfg.depth_alpha == 0))
            self.register_buffer("mixing_noise_std", scale)  # [head]
        self.W_V = nn.Parameter(torch.empty(H, D, E))
        add_bias(self, "b_V", H, E, trained=cfg.bias)
        self.W_O = nn.Parameter(torch.empty(H, E, D))
        add_bias(self, "b_O", D, trained=cfg.bias)
        # Width scaling of the shaped variants: output * sqrt(base / fan_in); fan_in = d_model for all four.
        self.out_mult = cfg.width_mult
        self._result_contribution_scale = self.out_mult  # TransformerLens's ActivationCache: result = z @ W_O * this
        self.use_attn_result = False  # set_use_attn_result: per-head results through hook_result
        self.use_split_qkv_input = False  # set_use_split_qkv_input: per-head inputs through hook_{q,k,v}_input

        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_rot_q = HookPoint()
        self.hook_rot_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, q_pos, k_pos], masked, pre-softmax
        self.hook_pattern = HookPoint()  # [batch, head, q_pos, k_pos]
        self.hook_z = HookPoint()  # [batch, pos, head, d_head]
        self.hook_result = HookPoint()  # [batch, pos, head, d_model], with set_use_attn_result
        self.hook_q_input = HookPoint()  # [batch, pos, head, d_model], before ln1, with set_use_split_qkv_input
        self.hook_k_input = HookPoint()
        self.hook_v_input = HookPoint()

    def _project(self, x: torch.Tensor, *Wb: torch.Tensor) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos, n, head, d_head] for n (W [head, d_model, d_head], b) pairs.

        The n projections run as one matmul over the concatenated weights (Q, K and V together).
        """
        Ws, bs = Wb[0::2], Wb[1::2]
        H, D, E = Ws[0].shape
        W = torch.cat(Ws, dim=0) if len(Ws) > 1 else Ws[0]  # [n * head, d_model, d_head]
        b = torch.cat(bs, dim=0) if len(bs) > 1 else bs[0]
        out = affine(x, W.transpose(0, 1).reshape(D, -1), b.reshape(-1), self.out_mult)
        return out.view(*x.shape[:-1], len(Ws), H, E)

    def folded(self, name: str) -> torch.Tensor:
        """A weight or bias of this layer (W_Q, ..., b_O) times the multiplier the forward applies to it."""
        return getattr(self, name) * self.out_mult

    @property
    def OV(self) -> FactoredMatrix:
        """[head, d_model, d_model]: this layer's value-output maps, multiplier folded (TransformerLens's attn.OV)."""
        return FactoredMatrix(self.folded("W_V"), self.folded("W_O"))

    @property
    def QK(self) -> FactoredMatrix:
        """[head, d_model, d_model]: this layer's QK circuit, scores = scale * ln1(x_q) @ QK @ ln1(x_k)^T (+ bias
        terms), as TransformerLens's attn.QK: one softmax layer of a grid beside mixing ones. Refused (LensRefusal)
        in a layer with no queries or keys, and with rotary positions (model.QK_at(q, k) there)."""
        if self.kind not in QK_KINDS:
            raise LensRefusal(f"attn.QK: this layer has {self.kind} attention, an input-independent pattern with no "
                              "queries or keys (attn.mixing_pattern(n_ctx))")
        if self.cfg.spec.positions == "rotary":
            raise LensRefusal("attn.QK: rotary positions rotate queries and keys by position, so no single matrix "
                              "gives the scores; use model.QK_at(query_pos, key_pos)")
        return FactoredMatrix(self.folded("W_Q"), self.folded("W_K").transpose(-2, -1))

    def rotation(self, pos: int, which: int) -> torch.Tensor:
        """[head, d_head, d_head]: the matrix R with rotary(x) = x @ R at position `pos` (which: 0 queries, 1 keys)."""
        cos, sin = self.rotary_cos[pos, which], self.rotary_sin_signed[pos, which]  # [head, d_head]
        eye = torch.eye(cos.shape[-1], dtype=cos.dtype, device=cos.device)
        return apply_rotary(eye[None], cos[:, None], sin[:, None])  # row i: e_i rotated

    def _rotary_tables(self, t: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, signed sin [pos, 2, head, d_head] for the first t positions, in `dtype` (bf16 under autocast:
        no promotion of q, k to fp32)."""
        return self.rotary_cos[:t].to(dtype), self.rotary_sin_signed[:t].to(dtype)

    def _needs_pattern(self) -> bool:
        return self.hook_pattern.has_hooks() or self.hook_attn_scores.has_hooks()

    def split_inputs(self, resid: torch.Tensor, ln1: nn.Module) -> torch.Tensor:
        """resid [batch, pos, d_model] -> normalized per-head inputs [batch, pos, n (q, k, v or v), head, d_model]."""
        x = resid[:, :, None].expand(-1, -1, self.cfg.n_heads, -1)
        hooks = (self.hook_q_input, self.hook_k_input, self.hook_v_input) if self.kind in QK_KINDS else (self.hook_v_input,)
        return torch.stack([ln1(hook(x)) for hook in hooks], dim=2)

    def _project_split(self, x: torch.Tensor, *Wb: torch.Tensor) -> torch.Tensor:
        """Per-head inputs x [batch, pos, n, head, d_model] -> [batch, pos, n, head, d_head] (see split_inputs)."""
        W, b = torch.stack(Wb[0::2]), torch.stack(Wb[1::2])  # [n, head, d_model, d_head], [n, head, d_head]
        return (torch.einsum("bpnhd,nhde->bpnhe", x, W) + b) * self.out_mult

    def _output(self, z: torch.Tensor) -> torch.Tensor:
        """z [batch, pos, head, d_head] -> out_mult * (z W_O + b_O) [batch, pos, d_model]; through hook_result
        ([batch, pos, head, d_model]) with set_use_attn_result."""
        if self.use_attn_result:
            result = self.hook_result(torch.einsum("bphe,hed->bphd", z, self.W_O) * self.out_mult)
            return result.sum(-2) + self.b_O * self.out_mult
        return affine(z.reshape(*z.shape[:2], -1), self.W_O.reshape(-1, self.W_O.shape[-1]), self.b_O, self.out_mult)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos - start, d_model]. key_padding_mask [batch, pos] is True at real tokens.

        With start > 0 only the queries at positions start.. are computed (every position is still a key).
        x may also be per-head inputs [batch, pos, n, head, d_model] (`split_inputs`).
        """
        b, t = x.shape[:2]
        split = x.dim() == 5
        if self.kind in ("mixing", "learned"):
            v = self._project_split(x, self.W_V, self.b_V) if split else self._project(x, self.W_V, self.b_V)
            v = self.hook_v(v[:, :, 0])
            z = self._mix(v, key_padding_mask, start)
        else:
            if split:
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
            z = self._softmax_attention(q[:, start:], k, v, key_padding_mask)
        return self._output(self.hook_z(z))

    def _allowed(self, t: int, device: torch.device, key_padding_mask: torch.Tensor | None, start: int = 0) -> torch.Tensor:
        """Boolean [batch or 1, 1, q, k] mask of the key positions each query (positions start..t-1) may see."""
        allowed = torch.ones(t, t, dtype=torch.bool, device=device)
        if self.causal:
            allowed = allowed.tril()
        allowed = allowed[None, None, start:]
        if key_padding_mask is not None:
            # A query always sees itself, so no row is empty (padded queries are ignored downstream).
            eye = torch.eye(t, dtype=torch.bool, device=device)[start:]
            allowed = (allowed & key_padding_mask[:, None, None, :].bool()) | eye
        return allowed

    def _softmax_attention(self, q, k, v, key_padding_mask) -> torch.Tensor:
        """q [batch, query_pos, head, d_head] (the last query_pos of the pos positions), k, v [batch, pos, head, d_head]
        -> z [batch, query_pos, head, d_head]."""
        t, start = k.shape[1], k.shape[1] - q.shape[1]
        shaped = self.kind == "shaped"
        # [batch, pos, head, d_head] -> [batch, head, pos, d_head] views for the matmuls.
        qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self._needs_pattern() or t <= plain_attention_max_len(q.device, q.dtype):
            allowed = self._allowed(t, q.device, key_padding_mask, start).transpose(-1, -2)  # [.., key, query]
            # Scores are computed keys-first, [batch, head, key, query], and handed on as a [batch, head, query, key]
            # view of that memory, or, for short sequences on CPU, of a copy laid out [key, batch, head, query]:
            # the layouts in which softmax_over_keys is fast (KEYS_OUTER_MAX_LEN).
            scores_kq = kh @ qh.transpose(-1, -2)
            mask = torch.zeros(allowed.shape, dtype=scores_kq.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
            if q.device.type == "cpu" and t <= KEYS_OUTER_MAX_LEN:
                # mask + scale * scores in one pass over the copy; the mask is 0 or -inf, so no extra rounding
                outer = torch.add(mask.permute(2, 0, 1, 3), scores_kq.permute(2, 0, 1, 3).contiguous(), alpha=self.scale)
                scores = outer.permute(1, 2, 3, 0)
            else:
                scores = (scores_kq * self.scale + mask).transpose(-1, -2)
            pattern = softmax_over_keys(self.hook_attn_scores(scores))
            if shaped:
                pattern = pattern + self._shaping(t, q.device, key_padding_mask, start).to(pattern.dtype)
            pattern = self.hook_pattern(pattern)
            zh = pattern @ vh
        else:
            # SDPA's is_causal aligns a shorter query block top-left, so queries from `start` on get an explicit mask.
            explicit = key_padding_mask is not None or (start > 0 and self.causal)
            mask = self._allowed(t, q.device, key_padding_mask, start) if explicit else None
            is_causal = self.causal and mask is None
            zh = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, is_causal=is_causal, scale=self.scale)
            if shaped:
                # (I - C) V without forming the matrices: V minus the (causal) running mean of V.
                zh = zh + self._shaping(t, q.device, key_padding_mask, start).to(vh.dtype) @ vh
        return zh.transpose(1, 2)

    def _shaping(self, t: int, device, key_padding_mask, start: int = 0) -> torch.Tensor:
        """I - C for shaped attention (rows start..t-1), C the uniform average over each row's allowed keys."""
        allowed = self._allowed(t, device, key_padding_mask, start).float()
        C = allowed / allowed.sum(-1, keepdim=True).clamp_min(1.0)
        return torch.eye(t, device=device)[start:] - C

    def mixing_pattern(self, t: int, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The input-independent pattern for sequences of length t: [head, t, t] ([batch, head, t, t] with
        padding): MixiT's fixed matrices, or the learned ones."""
        if self.kind == "learned":
            return self._learned_pattern(t, key_padding_mask)
        A = self.mixing[:, :t, :t]
        if self.cfg.mixing_centre == "causal" and not self.causal:
            return A if key_padding_mask is None else self._cut_mixing(A, key_padding_mask)
        if key_padding_mask is not None or (not self.causal and t < self.cfg.n_ctx):
            A = self._recentre_mixing(A, key_padding_mask)
        return A

    def _cut_mixing(self, A: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        """mixing_centre "causal": the matrices [head, q, k] as built, padded keys cut off but nothing re-centred (the
        authors' rows do not sum to 1 to begin with; their noise sums are not kept): [batch, head, q, k]. Padded
        queries keep their diagonal; the sink head stays as built, as in _recentre_mixing."""
        out = A * self._allowed(A.shape[-1], A.device, key_padding_mask).to(A.dtype)
        if self.cfg.sink_head:
            out = torch.cat([A[:1].expand(out.shape[0], 1, -1, -1), out[:, 1:]], dim=1)
        return out

    def _learned_pattern(self, t: int, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """I + A_learned re-centred over each row's allowed keys (no identity under the depth option)."""
        allowed = self._allowed(t, self.A_learned.device, key_padding_mask).to(self.A_learned.dtype)
        noise = self.A_learned[:, :t, :t] * allowed
        row_mean = noise.sum(-1, keepdim=True) / allowed.sum(-1, keepdim=True)
        eye = torch.eye(t, dtype=noise.dtype, device=noise.device) * (self.cfg.depth_alpha == 0)
        A = eye + (noise - row_mean) * allowed
        return A[0] if key_padding_mask is None else A

    def _mix(self, v: torch.Tensor, key_padding_mask, start: int = 0) -> torch.Tensor:
        """v [batch, pos, head, d_head] -> z [batch, query_pos, head, d_head]: each head's values mixed by its pattern."""
        A = self.mixing_pattern(v.shape[1], key_padding_mask)[..., start:, :].to(v.dtype)
        if self.hook_pattern.has_hooks():
            A = self.hook_pattern(A.expand(v.shape[0], -1, -1, -1))
        b, t, h, e = v.shape
        if A.dim() == 3 and e <= MIX_PER_HEAD_MAX_D_HEAD:
            # One pattern per head for the whole batch: one matmul per head, [q, k] @ [k, batch * d_head], instead of
            # batch x head tiny ones (MIX_PER_HEAD_MAX_D_HEAD). The same sums; in bf16 the same bits.
            z = A @ v.permute(2, 1, 0, 3).reshape(h, t, b * e)  # [head, query_pos, batch * d_head]
            return z.view(h, -1, b, e).permute(2, 1, 0, 3)
        return (A @ v.transpose(1, 2)).transpose(1, 2)

    def _recentre_mixing(self, A: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """The fixed matrices [head, q, k] restricted to the real keys, noise re-centred: [batch or 1, head, q, k].

        A = I + (N - rowmean N) over the n_ctx keys. Cutting keys off (padding, or a bidirectional
        sequence shorter than n_ctx) alone would leave rows that no longer sum to 1, since the dropped
        noise does not cancel. Re-centring the remaining noise over each row's real keys gives
        I + N_R - rowmean_R(N_R): a sequence of L real tokens gets the same L x L matrix however much
        padding follows it. Causal rows are unchanged by right padding; padded queries keep their diagonal.
        """
        t = A.shape[-1]
        # The identity part (absent under the depth option) stays; only the noise is re-centred.
        eye = torch.eye(t, dtype=A.dtype, device=A.device) * (self.cfg.depth_alpha == 0)
        allowed = torch.ones(1, 1, t, t, dtype=torch.bool, device=A.device)
        if self.causal:
            allowed = allowed.tril()
        if key_padding_mask is not None:
            allowed = allowed & key_padding_mask[:, None, None, :].bool()
        allowed = allowed.to(A.dtype)  # [batch or 1, 1, q, k]
        noise = (A - eye) * allowed
        row_mean = noise.sum(-1, keepdim=True) / allowed.sum(-1, keepdim=True).clamp_min(1.0)
        out = eye + (noise - row_mean) * allowed
        if self.cfg.sink_head:  # the sink head holds fixed weights, not noise: it stays as built
            out = torch.cat([A[:1].expand(out.shape[0], 1, -1, -1), out[:, 1:]], dim=1)
        return out


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
        if self.shaped:
            return F.leaky_relu(x, self.slope) * self.gain
        return F.silu(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(affine(x, self.W_gate, self.b_gate, self.in_mult))
        pre_linear = self.hook_pre_linear(affine(x, self.W_in, self.b_in, self.in_mult))
        post = self.hook_post(self.act(pre) * pre_linear)
        return affine(post, self.W_out, self.b_out, self.out_mult)


class Block(nn.Module):
    # hook_resid_post is the one residual stream the next block (or ln_final) reads: what TransformerLens's logit lens
    # asks of a block before it reads the stack through the final norm and W_U.
    hook_out_is_single_residual_stream = True

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer)
        self.ln2 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.skip, self.branch = cfg.residual_scales
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid: torch.Tensor, key_padding_mask: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """resid [batch, pos, d_model] -> [batch, pos - start, d_model]: with start > 0 the block's output only at
        positions start.. (the earlier ones still serve as keys)."""
        resid = self.hook_resid_pre(resid)
        attn_in = self.attn.split_inputs(resid, self.ln1) if self.attn.use_split_qkv_input else self.ln1(resid)
        attn_out = self.hook_attn_out(self.attn(attn_in, key_padding_mask, start))
        resid = self.hook_resid_mid(self._residual(resid[:, start:], attn_out))
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(resid)))
        return self.hook_resid_post(self._residual(resid, mlp_out))

    def _residual(self, resid: torch.Tensor, branch_out: torch.Tensor) -> torch.Tensor:
        """skip * resid + branch * f(resid): 1 and 1, or s and sqrt(1 - s^2) in the shaped variants."""
        if self.skip == 1.0 and self.branch == 1.0:
            return resid + branch_out
        return torch.add(resid * self.skip, branch_out, alpha=self.branch)


class Embed(nn.Module):
    def __init__(self, d_vocab: int, d_model: int):
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(d_vocab, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.W_E)


class PosEmbed(nn.Module):
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


def model_bytes(config: ModelConfig) -> int:
    """About the bytes of a model's fp32 parameters and buffers (embeddings, blocks, readout, MixiT's matrices)."""
    d, mlp, layers = config.d_model, config.d_mlp or 4 * config.d_model, config.n_layers
    readout = config.d_vocab if config.n_classes is None else config.n_classes
    params = (config.d_vocab + config.n_ctx + readout) * d + layers * (4 * d * d + 3 * d * mlp)
    return 4 * (params + layers * config.n_heads * config.n_ctx**2)


def check_fits_in_memory(config: ModelConfig) -> None:
    """ValueError naming the sizes when the model alone would not fit in this machine's memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return  # unknown here (not POSIX): let the allocator decide
    need = model_bytes(config)
    if need > memory:
        raise ValueError(f"a model of d_model={config.d_model}, n_layers={config.n_layers}, d_vocab={config.d_vocab}, "
                         f"n_ctx={config.n_ctx} needs about {need / 2**30:,.0f} GiB for its weights alone, more than "
                         f"this machine's {memory / 2**30:,.0f} GiB; choose smaller sizes")


class Transformer(LensWeights, HookedRootModule):
    """The study's decoder. `model(tokens)` maps int64 [batch, pos] to logits [batch, pos, d_vocab].

    With `config.n_classes` set it is a sequence classifier instead: a `classifier` head replaces the
    unembedding and `model(tokens, attention_mask=...)` returns class logits [batch, n_classes].

    `model.config` is the `ModelConfig`; `model.cfg` is a `TransformerLensConfig` view of it
    (n_layers, n_heads, d_model, d_head, n_ctx, d_vocab, device, dtype) for TransformerLens tools.
    """

    def __init__(self, config: ModelConfig):
        check_fits_in_memory(config)  # before any tensor: an impossible size is one line, not an allocator error
        super().__init__()
        self.config = config
        spec = config.spec
        self.cfg = TransformerLensConfig(
            d_model=config.d_model,
            d_head=config.d_head,
            n_layers=config.n_layers,
            n_ctx=config.n_ctx,
            n_heads=config.n_heads,
            d_mlp=config.d_mlp,
            d_vocab=config.d_vocab,
            device="cpu",
            positional_embedding_type="standard" if spec.positions == "learned" else "rotary",
            gated_mlp=True,
            uses_rms_norm=True,
            normalization_type="RMS",
            final_rms=True,
            act_fn="leaky_relu" if spec.shaped else "silu",
            eps=config.norm_eps,
            default_prepend_bos=False,
        )
        self.embed = Embed(config.d_vocab, config.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if spec.positions == "learned":
            self.pos_embed = PosEmbed(config.n_ctx, config.d_model)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layers))
        self.ln_final = RMSNorm(config.d_model, config.norm_eps)
        if config.n_classes is None:
            self.unembed = Unembed(config)
        else:
            self.classifier = Classifier(config)
        self.tokenizer = None  # a tokenizers.Tokenizer: the task's, set by training (set_tokenizer)
        self._init_weights()
        apply_freeze(self, config)  # requires_grad, and masks + gradient hooks for frozen heads (models/freeze.py)
        self.setup()  # registers hook points with HookedRootModule

    @torch.no_grad()
    def _init_weights(self) -> None:
        """N(0, init_std^2) for every weight matrix and embedding (W_Q, W_K: qk_init_std if set),
        zeros for biases, ones for norms; the zero_pad_token row of W_E zero (models/freeze.py keeps it there).

        Uses a private generator, so the weights depend only on the config's seed.
        """
        g = torch.Generator().manual_seed(derive_seed(self.config.seed, "weights"))
        qk_std = self.config.qk_init_std or self.config.init_std
        for name, param in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                param.normal_(0.0, qk_std if leaf in ("W_Q", "W_K") else self.config.init_std, generator=g)
        if self.config.zero_pad_token is not None:  # drawn first, so every other weight is as without it
            self.embed.W_E[self.config.zero_pad_token] = 0.0

    def forward(
        self,
        tokens: torch.Tensor | str | list[str],
        return_type: Literal["logits", "loss", "both"] | None = "logits",
        attention_mask: torch.Tensor | None = None,
        *,
        from_pos: int = 0,
        stop_at_layer: int | None = None,
    ):
        """tokens int64 [batch, pos] -> logits [batch, pos, d_vocab].

        return_type "loss" gives the mean next-token cross-entropy, "both" gives (logits, loss),
        None gives the final residual stream [batch, pos, d_model] (after ln_final).
        attention_mask [batch, pos] (1 = real token) masks padded keys out of attention (not with config.attend_padding).
        A model with a tokenizer also takes text (a string or a list, tokenized by `to_tokens`).
        A classifier (n_classes set) returns class logits [batch, n_classes], as `classify`.
        from_pos > 0 computes the output only at positions from_pos.. ([batch, pos - from_pos, ...]; not with
        "loss"/"both"): the last block skips the earlier positions' queries and MLP, which every position
        still serves as keys and values for. The trainer uses it when its loss reads late positions only.
        stop_at_layer (as TransformerLens's) returns the residual stream entering that block instead, [batch, pos,
        d_model], before any norm: 0 gives the embeddings, -1 the input of the last block.
        """
        if stop_at_layer is not None:
            tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
            return self.residual_stream(tokens, attention_mask, stop_at_layer=stop_at_layer)
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
        if self.config.n_classes is not None and return_type is not None:
            if return_type != "logits":
                raise ValueError(
                    f"return_type={return_type!r}: a classifier has no next-token loss; "
                    "use model.classify(tokens, attention_mask) and a cross-entropy on the labels"
                )
            if from_pos:
                raise ValueError(f"from_pos={from_pos}: a classifier's logits pool the whole sequence; pass return_type=None")
            return self.classify(tokens, attention_mask)
        if from_pos and return_type not in ("logits", None):
            raise ValueError(f"from_pos={from_pos} needs return_type 'logits' or None: the loss reads every position")
        resid = self.residual_stream(tokens, attention_mask, from_pos)
        if return_type is None:
            return resid
        logits = self.unembed(resid)
        if return_type == "logits":
            return logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())
        if return_type == "loss":
            return loss
        if return_type == "both":
            return logits, loss
        raise ValueError(f"return_type={return_type!r} is not one of: 'logits', 'loss', 'both', None")

    def classify(self, tokens: torch.Tensor | str | list[str], attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits [batch, n_classes]: the final residual stream at the last real token (or mean-pooled).

        attention_mask [batch, pos] (1 = real token) keeps padding out of attention (unless config.attend_padding,
        the authors' classifier) and of the pooling; text input is tokenized (and its mask built) by `to_tokens`.
        """
        if self.config.n_classes is None:
            raise ValueError("this model has no classification head (its config has n_classes=None)")
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
        return self.classifier(self.residual_stream(tokens, attention_mask), attention_mask)

    def residual_stream(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                        from_pos: int = 0, stop_at_layer: int | None = None) -> torch.Tensor:
        """Final normalized residual stream [batch, pos - from_pos, d_model], at positions from_pos.. (see forward);
        with stop_at_layer, the (unnormalized) stream entering that block."""
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)  # after forward's: only checks
        if attention_mask is not None:  # every forward pass comes here once
            self._check_no_left_padding(attention_mask)
        if tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"tokens must be an integer tensor [batch, pos]; got dtype={tokens.dtype}, shape={tuple(tokens.shape)}"
            )
        if tokens.shape[1] > self.config.n_ctx:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds n_ctx={self.config.n_ctx}")
        if tokens.numel():  # an id out of range would be a bare IndexError (CPU) or a device-side assert (CUDA)
            lo, hi = (int(v) for v in tokens.aminmax())
            if lo < 0 or hi >= self.config.d_vocab:
                raise ValueError(f"token id {lo if lo < 0 else hi} is out of range: allowed 0..{self.config.d_vocab - 1} "
                                 f"(d_vocab={self.config.d_vocab})")
        if not (isinstance(from_pos, int) and 0 <= from_pos < tokens.shape[1]):
            raise ValueError(f"from_pos={from_pos!r} must be an integer in [0, {tokens.shape[1] - 1}] for {tokens.shape[1]} positions")
        resid = self.hook_embed(self.embed(tokens))
        if hasattr(self, "pos_embed"):
            resid = resid + self.hook_pos_embed(self.pos_embed(tokens))
        if self.config.attend_padding:  # padding attended like any token (the pooling still reads the mask)
            attention_mask = None
        if stop_at_layer is not None:
            n = self.config.n_layers
            if not (isinstance(stop_at_layer, int) and -n <= stop_at_layer <= n):
                raise ValueError(f"stop_at_layer={stop_at_layer!r} must be an integer in [{-n}, {n}] for {n} layers")
            for block in self.blocks[:stop_at_layer]:
                resid = block(resid, attention_mask)
            return resid
        for layer, block in enumerate(self.blocks):
            resid = block(resid, attention_mask, from_pos if layer == self.config.n_layers - 1 else 0)
        return self.ln_final(resid)

    def run_with_cache(self, *model_args, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs):
        """Like HookedRootModule.run_with_cache, but returns an `ActivationCache` (as HookedTransformer did): a
        `LensCache`, whose residual decompositions weigh each write as it arrives (models/lens.py).

        Returns:
            `(output, cache)`: the forward's output (logits `[batch, pos, d_vocab]` by default) and the
            activations by hook name, e.g. `cache["blocks.0.attn.hook_pattern"]` `[batch, head,
            query_pos, key_pos]`, `cache["blocks.0.hook_resid_post"]` `[batch, pos, d_model]`.
        """
        out, cache_dict = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        if return_cache_object:
            return out, LensCache(cache_dict, self, has_batch_dim=not remove_batch_dim)
        return out, cache_dict

    # ----------------------------------------------------------------- text (models trained on text)
    def set_tokenizer(self, tokenizer, default_prepend_bos: bool = True) -> None:
        """Attach a `tokenizers.Tokenizer` (see models/tokenizer.py); it is saved with the checkpoint."""
        if tokenizer.get_vocab_size() > self.config.d_vocab:
            raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} tokens but d_vocab={self.config.d_vocab}")
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer
        self.cfg.default_prepend_bos = default_prepend_bos

    def _require_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer: trained runs carry their task's vocabulary "
                             "(training.load_run(run_dir).model); a bare checkpoint can get one with set_tokenizer")
        return self.tokenizer

    def to_tokens(
        self, input: str | list[str], prepend_bos: bool | None = None, move_to_device: bool = True, truncate: bool = True
    ) -> torch.Tensor:
        """Text -> int64 tokens [batch, pos], as TransformerLens: a list is right-padded with <pad>.

        prepend_bos defaults to `cfg.default_prepend_bos` (True for text models: documents start with
        <|endoftext|>, as in training); truncate cuts to n_ctx tokens.
        """
        tokens, _ = self._encode(input, prepend_bos, truncate)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def generate(self, input: str | torch.Tensor = "", max_new_tokens: int = 10, **kwargs):
        """HookedTransformer.generate, with its arguments and return types (models/generate.py)."""
        return generate(self, input, max_new_tokens, **kwargs)

    def to_string(self, tokens: torch.Tensor | list[int]) -> str | list[str]:
        """Tokens [pos] -> a string, [batch, pos] -> a list of strings (special tokens written out)."""
        tokenizer = self._require_tokenizer()
        tokens = torch.as_tensor(tokens)
        if tokens.ndim == 2:
            return [tok.decode(tokenizer, row.tolist()) for row in tokens]
        if tokens.ndim > 2:
            raise ValueError(f"to_string expects tokens [pos] or [batch, pos], got shape {tuple(tokens.shape)}")
        return tok.decode(tokenizer, tokens.reshape(-1).tolist())

    def to_str_tokens(
        self, input: str | list | torch.Tensor, prepend_bos: bool | None = None
    ) -> list[str] | list[list[str]]:
        """Each token as a string: of a text (tokenized by `to_tokens`), a list of texts, or tokens [pos]."""
        tokenizer = self._require_tokenizer()
        if isinstance(input, list) and input and isinstance(input[0], str):
            return [self.to_str_tokens(text, prepend_bos) for text in input]
        if isinstance(input, str):
            ids = self.to_tokens(input, prepend_bos, move_to_device=False)[0].tolist()
        else:
            ids = torch.as_tensor(input).squeeze()
            if ids.ndim > 1:
                raise ValueError(f"to_str_tokens expects one sequence, got shape {tuple(ids.shape)}")
            ids = ids.reshape(-1).tolist()
        return tok.str_tokens(tokenizer, ids)

    def _encode(self, input, prepend_bos: bool | None, truncate: bool) -> tuple[torch.Tensor, torch.Tensor]:
        tokenizer = self._require_tokenizer()
        prepend_bos = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
        return tok.encode(tokenizer, input, prepend_bos, self.config.n_ctx if truncate else None)

    def _tokens_and_mask(self, tokens, attention_mask):
        """Tokenize text input (building its padding mask); check a token tensor's mask and make it bool.

        One sequence [pos] (with its mask [pos]) becomes a batch of one. The mask must have the tokens'
        shape [batch, pos] (else it would broadcast inside attention), and be bool or hold only 0 and 1
        (TransformerLens's masks are int 0/1; floats 0./1. too): anything else is refused, not rounded.
        """
        if not isinstance(tokens, (str, list)):
            if isinstance(tokens, torch.Tensor) and tokens.ndim == 1:
                tokens = tokens[None]
                if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 1:
                    attention_mask = attention_mask[None]
            if attention_mask is None or (attention_mask.dtype == torch.bool and attention_mask.shape == tokens.shape):
                return tokens, attention_mask
            if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != tokens.shape:
                raise ValueError(f"attention_mask must be [batch, pos] = {list(tokens.shape)}, the tokens' shape "
                                 f"(bool, or 0/1); got shape {list(getattr(attention_mask, 'shape', []))}")
            bad = (attention_mask != 0) & (attention_mask != 1)
            if bad.any():
                raise ValueError(f"attention_mask must be bool or hold only 0 and 1 (1 = real token); got the value "
                                 f"{attention_mask[bad][0].item()} (dtype {attention_mask.dtype})")
            return tokens, attention_mask.bool()
        if attention_mask is not None:
            raise ValueError("pass attention_mask only with token tensors; text input builds its own")
        tokens, lengths = self._encode(tokens, None, truncate=True)
        tokens = tokens.to(self.cfg.device)
        if (lengths == tokens.shape[1]).all():
            return tokens, None
        return tokens, torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(tokens.device)[:, None]

    def _check_no_left_padding(self, mask: torch.Tensor) -> None:
        """Refuse a real token after padding (left padding) where positions are absolute: learned W_pos, or MixiT's
        fixed matrices, index by position from 0, so shifted tokens would be read at other positions. With
        attend_padding (the authors' classifier) padding is attended as tokens at their positions: allowed."""
        cfg = self.config
        if cfg.attend_padding or not (cfg.spec.positions == "learned" or any(
                cfg.layer_attention(i) in ("mixing", "learned") for i in range(cfg.n_layers))):
            return  # relative positions (rotary), or padding attended as tokens: nothing to check
        late = mask[:, 1:] & ~mask[:, :-1]
        if late.any():
            row = int(late.any(-1).nonzero()[0])
            raise ValueError(f"attention_mask row {row} has padding before a real token (left padding); this model's "
                             "positions are absolute (learned W_pos or fixed mixing matrices): pad on the right")

    # ----------------------------------------------------------------- bookkeeping
    def parameter_counts(self) -> dict[str, int]:
        """Trainable, frozen and total parameter counts (buffers such as mixing matrices excluded); a frozen
        head's slice of a trained parameter counts as frozen."""
        frozen = sum(frozen_elements(self, name, p) for name, p in self.named_parameters())
        total = sum(p.numel() for p in self.parameters())
        return {"trainable": total - frozen, "frozen": frozen, "total": total}

    def parameter_table(self) -> list[dict[str, object]]:
        """Parameter counts per component of models.config.COMPONENTS (`component_of`: embed, pos, qk, v, o, mix,
        mlp, norms, ln_final, unembed, the classifier in unembed), in the order the parameters come."""
        rows: dict[str, dict[str, int]] = {}
        for name, param in self.named_parameters():
            comp = component_of(name)
            row = rows.setdefault(comp, {"trainable": 0, "frozen": 0})
            frozen = frozen_elements(self, name, param)  # a frozen head's slice counts as frozen
            row["frozen"] += frozen
            row["trainable"] += param.numel() - frozen
        return [{"component": c, **r} for c, r in rows.items()]

    def _apply(self, fn, *args, **kwargs):
        # Keep cfg.device/dtype in sync after .to(), .cuda(), .half(), ...
        out = super()._apply(fn, *args, **kwargs)
        param = next(self.parameters(), None)
        if param is not None:
            self.cfg.device = str(param.device)
            self.cfg.dtype = param.dtype
        return out

    def save_pretrained(self, path: str | Path) -> Path:
        """Write config.json + model.safetensors into directory `path`, atomically."""
        return save_model(self, path)


def load_model(path: str | Path, device: str | torch.device | None = None) -> Transformer:
    """Load a checkpoint directory written by `save_pretrained` (or a training run directory) into a new model.

    A checkpoint with a tokenizer.json (models trained on text) gets its tokenizer attached.

    Args:
        path: a run directory (its latest checkpoint), its `checkpoint/` folder, or a folder written by
            `save_pretrained`.
        device: where to put the weights (`"cpu"` loads a CUDA-trained run on any machine); None keeps
            them where loading put them.

    Returns:
        The `Transformer`, with the weights and config of the checkpoint.

    Raises:
        FileNotFoundError: a missing directory or file.
        CheckpointError: a truncated, corrupt or mismatched checkpoint; the message names the file.
    """
    config, state, tokenizer = read_weights(path)
    model = Transformer(config)
    check_state(path, state, model.state_dict())
    model.load_state_dict(state)
    if tokenizer is not None:
        model.set_tokenizer(tokenizer)
    if device is not None:
        model.to(device)
    return model.eval()
