"""Signal propagation: how similar token representations become as depth grows (rank collapse).

    from mixit_lab.analysis.signal import signal_propagation, signal_propagation_model
    df = signal_propagation(variants=("random", "mixit"), depths=(2, 32))   # fresh models
    df = signal_propagation_model(trained_model, tokens)                     # one (trained) model

For the residual stream X [pos, d_model] of one sequence after a layer, with rows x_i:

    cosine      mean over token pairs i != j of x_i . x_j / (|x_i| |x_j|)           (scale-free)
    covariance  mean over token pairs i != j of x_i . x_j / d_model                  (off-diagonal of
                the token covariance matrix X X^T / d_model, uncentred, as in the signal-propagation
                analyses of Noci et al.; squared residual units)
    variance    mean over tokens of |x_i|^2 / d_model                                (its diagonal)

each averaged over sequences (and, in `signal_propagation`, over seeds). Layer 0 is the input to
the first block (`blocks.0.hook_resid_pre`: token plus position embedding), layer l >= 1 the
residual stream after block l (`blocks.{l-1}.hook_resid_post`), before the final norm. Inputs are
random sequences with distinct tokens (when the vocabulary allows), so that at layer 0 equal
tokens do not make identical rows.

Note on variants at initialisation: `standard`, `frozen_qk`, `frozen_mlp` and `random` differ
only in what training updates, so a fresh model of each is the same network (same seed, same
weights) and their rows coincide; `mixit` and `shaped` are different networks.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd
import torch

from mixit_lab.models import VARIANTS, ModelConfig, build_model

from .common import cached_batches, check_positive_int, random_tokens

DEPTHS = (2, 4, 8, 16, 32)
MEASURES = ("cosine", "covariance", "variance")


def token_similarity(resid: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence cosine, covariance and variance (module docstring) of resid [batch, pos, d_model] -> [batch]."""
    X = resid.double()
    b, t, d = X.shape
    if t < 2:
        raise ValueError(f"token similarity needs at least 2 positions; got {t}")
    pairs = t * (t - 1)
    sq = (X * X).sum(-1)  # [batch, pos]
    U = X / sq.sqrt().clamp_min(torch.finfo(X.dtype).tiny)[..., None]
    cosine = ((U.sum(1) ** 2).sum(-1) - (U * U).sum((-1, -2))) / pairs
    covariance = ((X.sum(1) ** 2).sum(-1) - sq.sum(-1)) / (pairs * d)
    return {"cosine": cosine, "covariance": covariance, "variance": sq.mean(-1) / d}


def _resid_hooks(n_layers: int) -> list[str]:
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{layer}.hook_resid_post" for layer in range(n_layers)]


@torch.no_grad()
def signal_propagation_model(
    model, tokens: torch.Tensor | None = None, *, n_seqs: int = 16, seed: int = 0, batch_size: int = 16
) -> pd.DataFrame:
    """cosine / covariance / variance after every layer of one model, averaged over sequences.

    Args:
        model: a mixit_lab.models.Transformer (fresh or trained); it stays on its device.
        tokens: int64 [batch, pos], pos >= 2; default `n_seqs` random sequences of n_ctx tokens.

    Returns:
        DataFrame with columns layer (0 = embeddings, l = after block l), cosine, covariance,
        variance; n_layers + 1 rows.
    """
    check_positive_int("batch_size", batch_size)
    if tokens is None:
        check_positive_int("n_seqs", n_seqs)
        tokens = random_tokens(model.cfg.d_vocab, n_seqs, model.cfg.n_ctx, seed)
    if tokens.ndim != 2 or tokens.shape[1] < 2 or tokens.shape[1] > model.cfg.n_ctx:
        raise ValueError(f"tokens must be [batch, pos] with 2 <= pos <= n_ctx={model.cfg.n_ctx}; got {tuple(tokens.shape)}")
    names = _resid_hooks(model.cfg.n_layers)
    sums = torch.zeros(len(names), len(MEASURES), dtype=torch.float64)
    for _, _, cache in cached_batches(model, tokens, names, batch_size):
        for layer, name in enumerate(names):
            sim = token_similarity(cache[name])
            sums[layer] += torch.stack([sim[m].sum().cpu() for m in MEASURES])
    means = sums / tokens.shape[0]
    return pd.DataFrame({"layer": range(len(names)), **{m: means[:, k].numpy() for k, m in enumerate(MEASURES)}})


def signal_propagation(
    variants: Iterable[str] = tuple(VARIANTS),
    depths: Iterable[int] = DEPTHS,
    widths: Iterable[int] = (128,),
    *,
    n_heads: int = 4,
    n_ctx: int = 64,
    d_vocab: int = 512,
    n_seqs: int = 16,
    seeds: Iterable[int] = (0, 1, 2),
    device: str | torch.device = "cpu",
    **config: object,
) -> pd.DataFrame:
    """Token similarity after every layer of freshly initialised models: variant x width x depth x layer.

    Each (variant, width, depth, seed) builds `ModelConfig(variant, d_model=width, n_layers=depth,
    n_heads, n_ctx, d_vocab, seed)` and feeds it `n_seqs` random sequences of n_ctx distinct tokens
    (drawn with the same seed). Returns a DataFrame with columns variant, d_model, depth, layer,
    cosine, covariance, variance (means over seeds and sequences, see the module docstring),
    cosine_std and covariance_std (standard deviation over seeds; 0 for one seed), n_seeds.
    Deterministic for given arguments. Further keyword arguments go to every ModelConfig, e.g.
    `sink_head=False` for MixiT without its sink heads.
    """
    variants, depths, widths, seeds = list(variants), list(depths), list(widths), list(seeds)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants={unknown or variants!r}: choose from {', '.join(VARIANTS)}")
    for name, values in (("depths", depths), ("widths", widths)):
        if not values:
            raise ValueError(f"{name} must not be empty")
        for value in values:
            check_positive_int(name[:-1], value)
    if not seeds:
        raise ValueError("seeds must not be empty")
    rows = []
    for variant in variants:
        for width in widths:
            for depth in depths:
                per_seed = []
                for seed in seeds:
                    cfg = ModelConfig(variant=variant, d_model=width, n_layers=depth, n_heads=n_heads,
                                      n_ctx=n_ctx, d_vocab=d_vocab, seed=seed, **config)
                    model = build_model(cfg).to(device)
                    tokens = random_tokens(d_vocab, n_seqs, n_ctx, seed)
                    per_seed.append(signal_propagation_model(model, tokens, batch_size=n_seqs))
                stacked = torch.tensor(np.stack([df[list(MEASURES)].to_numpy().T for df in per_seed]))  # [seed, m, layer]
                mean, std = stacked.mean(0), stacked.std(0, unbiased=False)
                for layer in range(depth + 1):
                    rows.append({
                        "variant": variant, "d_model": width, "depth": depth, "layer": layer,
                        **{m: float(mean[k, layer]) for k, m in enumerate(MEASURES)},
                        "cosine_std": float(std[0, layer]), "covariance_std": float(std[1, layer]),
                        "n_seeds": len(seeds),
                    })
    return pd.DataFrame(rows)
