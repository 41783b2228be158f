"""What attention patterns look like, per head: entropy, reach, sinks, rank and input dependence.

    from mixit_lab.analysis.attention import attention_stats
    df = attention_stats(model, tokens)      # one row per (layer, head); tokens int64 [batch, pos]

Every statistic is computed per pattern P [query_pos, key_pos] (one input, one head), averaged
over the informative query rows (causal: rows i >= 1, since row 0 can only attend to key 0;
bidirectional: all rows), then averaged over inputs. With w[i, j] = |P[i, j]| / sum_j |P[i, j]|,
the row's attention as a distribution:

    entropy             -sum_j w log w, in nats
    entropy_normalized  entropy / log(number of allowed keys of row i) (i + 1 causal, T bidirectional):
                        1 = uniform, 0 = one key
    mean_distance       sum_j w[i, j] |i - j|, in positions
    sink_mass           P[i, 0], the signed weight on the first key
    diagonal_mass       P[i, i], the signed weight on the query's own position
    negative_mass       sum of |negative entries| / sum |P[i, :]|: 0 for softmax, > 0 for the
                        signed patterns of shaped attention (I + softmax - C) and MixiT (I + N - rowmean N)
    effective_rank      exp(entropy of the normalised singular values of the whole T x T pattern)
                        (Roy & Vetterli 2007): T for an orthogonal pattern, 1 for rank one
    input_dependence    variance across inputs of P[i, j], averaged over allowed (i, j) of the
                        informative rows; squared attention weight. Exactly 0 when the pattern does
                        not depend on the input (MixiT)

Using |P| for the distribution statistics makes them identical to the usual definitions for
softmax patterns and still meaningful for signed ones; sink and diagonal mass keep the sign,
since rows sum to 1 in every variant. For MixiT the patterns are the fixed matrices
`blocks.{l}.attn.mixing`, so by default they are read from those buffers once (`source` =
"buffer") instead of running the model.
"""

from __future__ import annotations


import pandas as pd
import torch

from .common import (
    ModelOrPath, as_model, cached_batches, check_positive_int, is_causal, layer_attention_kinds, pattern_hook, random_tokens,
)

STATS = (
    "entropy",
    "entropy_normalized",
    "mean_distance",
    "sink_mass",
    "diagonal_mass",
    "negative_mass",
    "effective_rank",
)
COLUMNS = ["layer", "head", *STATS, "input_dependence", "source"]


def _first_row(causal: bool) -> int:
    """Index of the first informative query row: 1 for causal attention (row 0 sees only key 0), else 0."""
    return 1 if causal else 0


def pattern_stats(pattern: torch.Tensor, causal: bool = True) -> dict[str, torch.Tensor]:
    """Per-pattern statistics (see the module docstring) of pattern [batch, head, T, T] -> name -> [batch, head]."""
    P = pattern.double()
    t = P.shape[-1]
    r0 = _first_row(causal)
    pos = torch.arange(t, device=P.device, dtype=P.dtype)
    A = P.abs()
    row_abs = A.sum(-1, keepdim=True)
    W = A / row_abs.clamp_min(torch.finfo(P.dtype).tiny)
    entropy = -torch.special.xlogy(W, W).sum(-1)[..., r0:]  # [batch, head, rows]
    n_keys = (pos + 1 if causal else torch.full_like(pos, t))[r0:]
    wide = n_keys >= 2
    distance = (W * (pos[:, None] - pos[None, :]).abs()).sum(-1)[..., r0:]
    negative = (P.clamp(max=0).abs().sum(-1, keepdim=True) / row_abs.clamp_min(torch.finfo(P.dtype).tiny))[..., 0]
    sv = torch.linalg.svdvals(P)
    p = sv / sv.sum(-1, keepdim=True).clamp_min(torch.finfo(P.dtype).tiny)
    return {
        "entropy": entropy.mean(-1),
        "entropy_normalized": (entropy[..., wide] / n_keys[wide].log()).mean(-1),
        "mean_distance": distance.mean(-1),
        "sink_mass": P[..., r0:, 0].mean(-1),
        "diagonal_mass": P.diagonal(0, -2, -1)[..., r0:].mean(-1),
        "negative_mass": negative[..., r0:].mean(-1),
        "effective_rank": torch.exp(-torch.special.xlogy(p, p).sum(-1)),
    }


class _Variance:
    """Running variance across inputs of patterns [batch, head, T, T], shifted by the first pattern.

    Shifting makes identical patterns give exactly 0 (no rounding from subtracting a mean).
    """

    def __init__(self) -> None:
        self.ref = self.s1 = self.s2 = None
        self.n = 0

    def update(self, pattern: torch.Tensor) -> None:
        P = pattern.double()
        if self.ref is None:
            self.ref = P[0].clone()
            self.s1 = torch.zeros_like(self.ref)
            self.s2 = torch.zeros_like(self.ref)
        d = P - self.ref
        self.s1 += d.sum(0)
        self.s2 += (d * d).sum(0)
        self.n += P.shape[0]

    def mean_variance(self, causal: bool) -> torch.Tensor:
        """[head]: variance across inputs, averaged over the allowed entries of the informative rows."""
        var = (self.s2 / self.n - (self.s1 / self.n) ** 2).clamp_min(0)
        t = var.shape[-1]
        allowed = torch.ones(t, t, dtype=torch.bool, device=var.device)
        if causal:
            allowed = allowed.tril()
        allowed[: _first_row(causal)] = False
        return var[:, allowed].mean(-1)


def _check_tokens(model, tokens: torch.Tensor) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be an integer tensor [batch, pos]; got {getattr(tokens, 'shape', tokens)!r}")
    if tokens.shape[0] < 1 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must hold at least 1 sequence of at least 2 positions; got shape {tuple(tokens.shape)}")
    if tokens.shape[1] > model.cfg.n_ctx:
        raise ValueError(f"tokens have {tokens.shape[1]} positions, more than the model's n_ctx={model.cfg.n_ctx}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= model.cfg.d_vocab:
        raise ValueError(f"token ids must lie in [0, {model.cfg.d_vocab}); got [{int(tokens.min())}, {int(tokens.max())}]")
    return tokens


@torch.no_grad()
def _iter_patterns(model, tokens: torch.Tensor, batch_size: int):
    """Yield (layer, pattern [batch, head, T, T]) for every batch of `tokens`, from hook_pattern."""
    names = [pattern_hook(layer) for layer in range(model.cfg.n_layers)]
    for _, _, cache in cached_batches(model, tokens, names, batch_size):
        for layer, name in enumerate(names):
            yield layer, cache[name]


def input_dependence(model: ModelOrPath, tokens: torch.Tensor, batch_size: int = 32) -> torch.Tensor:
    """float64 [n_layers, n_heads]: variance of hook_pattern across the inputs `tokens` [batch, pos].

    Always runs the model (also for MixiT), so it checks what the model actually does.
    """
    model = as_model(model)
    _check_tokens(model, tokens)
    check_positive_int("batch_size", batch_size)
    variances = [_Variance() for _ in range(model.cfg.n_layers)]
    for layer, pattern in _iter_patterns(model, tokens, batch_size):
        variances[layer].update(pattern)
    causal = is_causal(model)
    return torch.stack([v.mean_variance(causal).cpu() for v in variances])


@torch.no_grad()
def attention_stats(
    model: ModelOrPath,
    tokens: torch.Tensor | None = None,
    *,
    n_seqs: int = 64,
    seed: int = 0,
    batch_size: int = 32,
    from_buffers: bool = True,
) -> pd.DataFrame:
    """Per-head attention statistics (module docstring) on `tokens`, or on random tokens.

    Args:
        model: a mixit_lab.models.Transformer (any variant); it stays on its device. Or a run directory /
            checkpoint path, loaded with `mixit_lab.models.load_model`.
        tokens: int64 [batch, pos] with pos <= n_ctx, e.g. a task's eval set; default
            `n_seqs` random sequences of n_ctx tokens (seed `seed`).
        batch_size: sequences per forward pass.
        from_buffers: for MixiT, read the fixed matrices from `blocks.{l}.attn.mixing` (once)
            instead of running the model; input_dependence is then 0 by construction.

    Returns:
        DataFrame, one row per (layer, head), columns `COLUMNS`; `source` says whether the
        patterns came from the model's hook_pattern ("pattern") or from the buffers ("buffer").
    """
    model = as_model(model)
    check_positive_int("batch_size", batch_size)
    if tokens is None:
        check_positive_int("n_seqs", n_seqs)
        tokens = random_tokens(model.cfg.d_vocab, n_seqs, model.cfg.n_ctx, seed)
    _check_tokens(model, tokens)
    causal = is_causal(model)
    n_layers, n_heads, t = model.cfg.n_layers, model.cfg.n_heads, tokens.shape[1]
    sums = torch.zeros(n_layers, len(STATS), n_heads, dtype=torch.float64)
    if from_buffers and all(kind in ("mixing", "learned") for kind in layer_attention_kinds(model)):
        source = "buffer"
        for layer, block in enumerate(model.blocks):
            pattern = block.attn.mixing_pattern(t)
            stats = pattern_stats(pattern if pattern.ndim == 4 else pattern[None], causal)
            sums[layer] = torch.stack([stats[name][0].cpu() for name in STATS])
        count, dependence = 1, torch.zeros(n_layers, n_heads, dtype=torch.float64)
    else:
        source = "pattern"
        variances = [_Variance() for _ in range(n_layers)]
        for layer, pattern in _iter_patterns(model, tokens, batch_size):
            stats = pattern_stats(pattern, causal)
            sums[layer] += torch.stack([stats[name].sum(0).cpu() for name in STATS])
            variances[layer].update(pattern)
        count = tokens.shape[0]
        dependence = torch.stack([v.mean_variance(causal).cpu() for v in variances])
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row = {"layer": layer, "head": head}
            row.update({name: float(sums[layer, k, head]) / count for k, name in enumerate(STATS)})
            row["input_dependence"] = float(dependence[layer, head])
            row["source"] = source
            rows.append(row)
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs.update({"n_inputs": int(tokens.shape[0]), "seq_len": int(t), "causal": causal})
    return df
