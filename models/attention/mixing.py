"""MixiT's attention: fixed, input-independent mixing matrices A [head, query_pos, key_pos], one per layer, that
mix each head's values, z[b, q, h] = sum_k A[h, q, k] v[b, k, h]. No queries or keys.

`mixing_matrices` draws them (reproducible from the seed and the layer) and `centre_mixing` centres them; they
are a buffer saved in checkpoints (`blocks.{i}.attn.mixing`). At run time `mixing_pattern` cuts them to the
sequence and, where keys are cut off (padding, a shorter bidirectional sequence), re-centres their noise over the
real keys (`recentre_rows`, models/attention/base.py); head 0, the sink head, stays as built (`keep_sink_head`).
"""

from __future__ import annotations

import math

import torch

from ..config import ModelConfig
from ..seeds import derive_seed
from .base import Attention, recentre_rows
from .kernels import mix_per_head


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
    count = None
    if cfg.mixing_centre == "causal" and cfg.layer_attention(layer) == "mixing":
        count = torch.arange(1, T + 1, dtype=noise.dtype, device=noise.device)[:, None]
    eye = torch.eye(T, dtype=noise.dtype, device=noise.device)
    A = recentre_rows(noise, allowed, count, identity=eye if cfg.depth_alpha == 0 else 0)
    if cfg.sink_head:
        sink = 0.5 * eye
        sink[:, 0] = 0.5
        A[0] = sink
    return A


def keep_sink_head(cfg: ModelConfig, built: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """pattern [batch, head, q, k] with head 0 put back as built ([head, q, k]) when cfg.sink_head: the sink head
    holds fixed weights, not noise, so no cut or re-centring applies to it."""
    if not cfg.sink_head:
        return pattern
    return torch.cat([built[:1].expand(pattern.shape[0], 1, -1, -1), pattern[:, 1:]], dim=1)


class MixingAttention(Attention, kind="mixing"):
    """MixiT's attention: each head's values mixed by its fixed matrix (the `mixing` buffer); only V and O train."""

    def _init_pattern(self, cfg: ModelConfig, layer: int) -> None:
        """The layer's matrices (`_keep_matrices`) and their noise scales `mixing_noise_std` [head]."""
        A, scale = mixing_matrices(cfg, layer)
        self._keep_matrices(cfg, A)
        self.register_buffer("mixing_noise_std", scale)  # [head]

    def _keep_matrices(self, cfg: ModelConfig, A: torch.Tensor) -> None:
        """Keep the matrices A [head, n_ctx, n_ctx] as the fixed `mixing` buffer."""
        self.register_buffer("mixing", A)  # [head, query_pos, key_pos], saved in checkpoints

    def _attend(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None, start: int) -> torch.Tensor:
        """x [batch, pos, d_model] (or per-head [batch, pos, 1, head, d_model]) -> z [batch, pos - start, head, d_head]."""
        v = self._project_split(x, self.W_V, self.b_V) if x.dim() == 5 else self._project(x, self.W_V, self.b_V)
        return self._mix(self.hook_v(v[:, :, 0]), key_padding_mask, start)

    def mixing_pattern(self, t: int, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The input-independent pattern for sequences of length t: [head, t, t] ([batch, head, t, t] with
        padding): MixiT's fixed matrices, cut to t positions and re-centred over the real keys."""
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
        return keep_sink_head(self.cfg, A, out)

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
        allowed = self._allowed(t, A.device, key_padding_mask, sees_itself=False).to(A.dtype)  # [batch or 1, 1, q, k]
        return keep_sink_head(self.cfg, A, eye + recentre_rows(A - eye, allowed))

    def _mix(self, v: torch.Tensor, key_padding_mask: torch.Tensor | None, start: int = 0) -> torch.Tensor:
        """v [batch, pos, head, d_head] -> z [batch, query_pos, head, d_head]: each head's values mixed by its pattern."""
        A = self.mixing_pattern(v.shape[1], key_padding_mask)[..., start:, :].to(v.dtype)
        if self.hook_pattern.has_hooks():
            A = self.hook_pattern(A.expand(v.shape[0], -1, -1, -1))
        b, t, h, e = v.shape
        if A.dim() == 3 and mix_per_head(e):
            # One pattern per head for the whole batch: one matmul per head, [q, k] @ [k, batch * d_head], instead of
            # batch x head tiny ones (kernels.MIX_PER_HEAD_MAX_D_HEAD). The same sums; in bf16 the same bits.
            z = A @ v.permute(2, 1, 0, 3).reshape(h, t, b * e)  # [head, query_pos, batch * d_head]
            return z.view(h, -1, b, e).permute(2, 1, 0, 3)
        return (A @ v.transpose(1, 2)).transpose(1, 2)
