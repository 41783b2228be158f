"""Which kernel attention runs on: CPU-tuned thresholds, kept apart from the model, and the choices they make.

Each choice computes the same function, so a threshold only ever changes speed. The thresholds were tuned on one
2-core AMD EPYC (avx512_bf16); another CPU may want others: `python benchmarks/bench_kernels.py` measures the
choices and prints the thresholds its machine would want. The attention modules ask the functions here
(`plain_attention_max_len`, `scores_keys_outer`, `mix_per_head`, `softmax_over_keys`), which read the thresholds
when called, so a test or a benchmark may set them.
"""

from __future__ import annotations

import torch

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
    """Longest sequence for which softmax attention uses plain ops rather than the fused SDPA kernel."""
    if device.type != "cpu":
        return 0
    return MATH_ATTENTION_MAX_LEN.get(dtype, MATH_ATTENTION_MAX_LEN[torch.float32])


def scores_keys_outer(device: torch.device, t: int) -> bool:
    """Whether the plain path lays t positions' scores out keys outermost, [key, batch, head, query] (CPU only)."""
    return device.type == "cpu" and t <= KEYS_OUTER_MAX_LEN


def mix_per_head(d_head: int) -> bool:
    """Whether MixiT mixes values one matmul per head over the whole batch (rather than batch x head small ones)."""
    return d_head <= MIX_PER_HEAD_MAX_D_HEAD


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
