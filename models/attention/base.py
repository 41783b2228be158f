"""What every kind of attention shares: the value and output projections, the hooks, the accessors, and the
`Attention` module that builds the layer's kind.

`Attention(cfg, layer)` returns the subclass registered for `cfg.layer_attention(layer)`: softmax (softmax.py),
shaped (shaped.py), MixiT's fixed mixing (mixing.py) or learned mixing (learned.py). A kind adds what only it
has (W_Q, W_K and the rotary tables; the mixing matrices) in `_init_pattern`, before the weights every kind has
(W_V, b_V, W_O, b_O), and computes z [batch, query_pos, head_index, d_head] from the normalized input in
`_attend`; the output projection and every hook point are here, so a checkpoint's keys (`blocks.{i}.attn.W_V`,
`blocks.{i}.attn.mixing`, ...) and the hook names (`hook_pattern`, `hook_z`, ...) are the same whatever the kind.

`recentre_rows` is the one row re-centring: MixiT's matrices as built, re-centred over real keys, the learned
pattern and the shaped variants' I - C all subtract each row's mean over its allowed keys with it.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn as nn
from transformer_lens import FactoredMatrix
from transformer_lens.hook_points import HookPoint

from ..components import add_bias, affine, apply_rotary
from ..config import ModelConfig
from ..lens import QK_KINDS, LensRefusal


def recentre_rows(noise: torch.Tensor, allowed: torch.Tensor, count: torch.Tensor | None = None,
                  identity: torch.Tensor | int = 0) -> torch.Tensor:
    """(identity + N - rowsum(N) / count) * allowed, N = noise [..., q, k] cut to the allowed keys (allowed: 0/1 [..., q, k]).

    count is each row's number of allowed keys unless given (the authors' causal count for bidirectional mixing),
    so each row's noise sums to 0 over its keys. An identity passed here is cut with the rest (MixiT's matrices as
    built, whose diagonal is always allowed); one added afterwards stays on every row (padded queries keep theirs).
    """
    noise = noise * allowed
    if count is None:
        count = allowed.sum(-1, keepdim=True).clamp_min(1.0)
    return (identity + noise - noise.sum(-1, keepdim=True) / count) * allowed


class Attention(nn.Module):
    """Multi-head attention of one layer; `Attention(cfg, layer)` builds the subclass of the layer's kind.

    Subclasses register their kind (`class SoftmaxAttention(Attention, kind="softmax")`) and implement
    `_init_pattern` (their own weights, registered first) and `_attend` (z from the normalized input).
    """

    KINDS: ClassVar[dict[str, type[Attention]]] = {}  # kind -> subclass, filled as the kinds' modules load
    kind: ClassVar[str]

    def __init_subclass__(cls, kind: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
            Attention.KINDS[kind] = cls

    def __new__(cls, cfg: ModelConfig | None = None, layer: int | None = None):
        # Attention(cfg, layer) picks the layer's kind; a subclass (or a copy, which passes no arguments) is itself.
        if cls is Attention:
            cls = Attention.KINDS[cfg.layer_attention(layer)]
        return super().__new__(cls)

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        # Whether each query sees only the keys before it: cfg.causal, or a softmax/shaped layer of a model with
        # causal_softmax (bidirectional mixing beside causal softmax layers, as the authors' classifier).
        self.causal = cfg.causal or (cfg.causal_softmax and self.kind in QK_KINDS)
        H, D, E = cfg.n_heads, cfg.d_model, cfg.d_head
        self._init_pattern(cfg, layer)  # the kind's own weights first: checkpoints and init keep their order
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

    def _init_pattern(self, cfg: ModelConfig, layer: int) -> None:
        """Register the kind's own parameters and buffers (called before W_V, b_V, W_O, b_O)."""
        raise NotImplementedError

    def _attend(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None, start: int) -> torch.Tensor:
        """x (see forward) -> z [batch, pos - start, head, d_head], through the kind's hooks."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """x [batch, pos, d_model] -> [batch, pos - start, d_model]. key_padding_mask [batch, pos] is True at real tokens.

        With start > 0 only the queries at positions start.. are computed (every position is still a key).
        x may also be per-head inputs [batch, pos, n, head, d_model] (`split_inputs`).
        """
        return self._output(self.hook_z(self._attend(x, key_padding_mask, start)))

    # ----------------------------------------------------------------- projections
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

    def _allowed(self, t: int, device: torch.device, key_padding_mask: torch.Tensor | None, start: int = 0,
                 sees_itself: bool = True) -> torch.Tensor:
        """Boolean [batch or 1, 1, q, k] mask of the key positions each query (positions start..t-1) may see.

        With padding a query always sees itself (sees_itself), so no row is empty (padded queries are ignored
        downstream); MixiT's re-centring passes False, its padded queries keeping their diagonal outside the mask.
        """
        allowed = torch.ones(t, t, dtype=torch.bool, device=device)
        if self.causal:
            allowed = allowed.tril()
        allowed = allowed[None, None, start:]
        if key_padding_mask is not None:
            allowed = allowed & key_padding_mask[:, None, None, :].bool()
            if sees_itself:
                allowed = allowed | torch.eye(t, dtype=torch.bool, device=device)[start:]
        return allowed

    # ----------------------------------------------------------------- TransformerLens's accessors
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
