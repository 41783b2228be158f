"""Head ablation: knock out one head (or a set) and measure what the task loses.

    from analysis.ablation import ablate_heads, head_ablation, head_ablation_result
    tokens, mask = task.eval_set(1000)
    ablate_heads(model, tokens, mask, task.metric, heads=[(1, 0)], method="zero")   # {"loss", "accuracy"}
    df = head_ablation(model, tokens, mask, task.metric)                            # every head, ranked
    result = head_ablation_result(model, tokens, mask, task.metric)                 # the same as a HeadAblation

A head is ablated by a forward hook on `blocks.{l}.attn.hook_z` ([batch, pos, head_index, d_head],
the head's output before W_O), replacing its slice z[:, :, h]:

    zero  with 0, so the head contributes only the bias b_O (shared by all heads of the layer)
    mean  with its mean over the dataset at each position, z_mean[pos, h] (the head still
          contributes its average, only its dependence on the particular input is removed)

Loss and accuracy are `training.trainer.evaluate` on the given set: mean cross-entropy (nats)
over the masked target tokens, and "sequence" (every target of a row right) or "token" accuracy.
For a classifier (a model with `classify`, e.g. trained on `sentiment`) pass the class `labels`:
`mask` then marks the real tokens (it is the attention mask), and loss and accuracy are per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd
import torch

from training.trainer import evaluate

from .common import cached_batches, check_positive_int

METHODS = ("zero", "mean")
COLUMNS = ["layer", "head", "loss", "accuracy", "delta_loss", "delta_accuracy", "rank"]


def _z_hook(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


def _check_inputs(model, tokens, mask, metric: str, method: str, labels=None) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of: {', '.join(METHODS)}")
    if tokens.ndim != 2 or tokens.shape != mask.shape:
        raise ValueError(f"tokens and mask must both be [N, pos]; got {tuple(tokens.shape)} and {tuple(mask.shape)}")
    if labels is not None:
        if not hasattr(model, "classify") or getattr(model.config, "n_classes", None) is None:
            raise ValueError("labels were given but the model is not a classifier (no n_classes)")
        if labels.shape != tokens.shape[:1]:
            raise ValueError(f"labels must be [N] = [{tokens.shape[0]}]; got {tuple(labels.shape)}")
        return
    if not hasattr(model, "unembed"):
        raise ValueError("this model has no unembedding: pass the class labels of a classification task")
    if metric not in ("sequence", "token"):
        raise ValueError(f"metric={metric!r} is not one of: sequence, token")
    if not mask[:, 1:].any():
        raise ValueError("mask marks no target tokens")


def _check_heads(model, heads: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for item in heads:
        layer, head = item
        if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
            raise ValueError(
                f"head ({layer}, {head}) does not exist; layers 0..{model.cfg.n_layers - 1}, heads 0..{model.cfg.n_heads - 1}"
            )
        out.append((int(layer), int(head)))
    return out


@torch.no_grad()
def mean_z(
    model, tokens: torch.Tensor, batch_size: int = 512, attention_mask: torch.Tensor | None = None
) -> dict[int, torch.Tensor]:
    """layer -> mean of hook_z over the batch, [pos, head_index, d_head], on the model's device.

    attention_mask [N, pos] (1 = real token) is passed to the model, as a classifier is run.
    """
    names = [_z_hook(layer) for layer in range(model.cfg.n_layers)]
    sums: dict[int, torch.Tensor] = {}
    for _, _, cache in cached_batches(model, tokens, names, batch_size, attention_mask=attention_mask):
        for layer, name in enumerate(names):
            s = cache[name].double().sum(0)
            sums[layer] = sums[layer] + s if layer in sums else s
    return {layer: (s / tokens.shape[0]).float() for layer, s in sums.items()}


def _ablation_hooks(heads: list[tuple[int, int]], method: str, means: dict[int, torch.Tensor] | None):
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    hooks = []
    for layer, layer_heads in by_layer.items():
        idx = torch.tensor(layer_heads)

        def hook(z: torch.Tensor, hook, layer=layer, idx=idx) -> torch.Tensor:
            z = z.clone()
            if method == "zero":
                z[:, :, idx.to(z.device)] = 0
            else:
                z[:, :, idx.to(z.device)] = means[layer][: z.shape[1], idx.to(z.device)].to(z.dtype)
            return z

        hooks.append((_z_hook(layer), hook))
    return hooks


def ablate_heads(
    model,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    metric: str,
    heads: Iterable[tuple[int, int]],
    method: str = "mean",
    *,
    labels: torch.Tensor | None = None,
    means: dict[int, torch.Tensor] | None = None,
    batch_size: int = 512,
) -> dict[str, float]:
    """Loss (nats per target token, or per row with labels) and accuracy with `heads` [(layer, head), ...] ablated together.

    tokens int64 / mask bool [N, pos] as the tasks produce them; metric "sequence" or "token";
    labels int64 [N] for a classifier. `means` (from `mean_z` on the same tokens) is computed
    when needed and not given.
    """
    _check_inputs(model, tokens, mask, metric, method, labels)
    heads = _check_heads(model, heads)
    check_positive_int("batch_size", batch_size)
    if method == "mean" and means is None:
        means = mean_z(model, tokens, batch_size, attention_mask=mask if labels is not None else None)
    with model.hooks(fwd_hooks=_ablation_hooks(heads, method, means)):
        result = evaluate(model, tokens, mask, metric, batch_size, labels=labels)
    return {"loss": result["eval_loss"], "accuracy": result["eval_acc"]}


@dataclass
class HeadAblation:
    """What `head_ablation_result` measures: the ranked per-head table and the intact model's baseline."""

    table: pd.DataFrame  # one row per (layer, head), columns COLUMNS, sorted by rank
    baseline_loss: float
    baseline_accuracy: float
    method: str
    n_examples: int

    def frame(self) -> pd.DataFrame:
        """The table with the baseline in `attrs`, as `head_ablation` returns it."""
        df = self.table.copy()
        df.attrs.update(baseline_loss=self.baseline_loss, baseline_accuracy=self.baseline_accuracy,
                        method=self.method, n_examples=self.n_examples)
        return df


def head_ablation(
    model,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    metric: str,
    method: str = "mean",
    *,
    labels: torch.Tensor | None = None,
    batch_size: int = 512,
) -> pd.DataFrame:
    """Ablate every head on its own; rank heads by the loss increase (rank 1 = most needed).

    Returns a DataFrame with one row per (layer, head): layer, head, loss, accuracy, delta_loss
    (ablated minus intact, nats), delta_accuracy, rank; sorted by rank. `attrs` holds the intact
    model's "baseline_loss" / "baseline_accuracy", "method" and "n_examples"; `head_ablation_result`
    returns them as fields.
    """
    return head_ablation_result(model, tokens, mask, metric, method, labels=labels, batch_size=batch_size).frame()


def head_ablation_result(
    model,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    metric: str,
    method: str = "mean",
    *,
    labels: torch.Tensor | None = None,
    batch_size: int = 512,
) -> HeadAblation:
    """`head_ablation` as a `HeadAblation`: the same table, the baseline as typed fields."""
    _check_inputs(model, tokens, mask, metric, method, labels)
    check_positive_int("batch_size", batch_size)
    base = evaluate(model, tokens, mask, metric, batch_size, labels=labels)
    attention_mask = mask if labels is not None else None
    means = mean_z(model, tokens, batch_size, attention_mask) if method == "mean" else None
    rows = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            r = ablate_heads(model, tokens, mask, metric, [(layer, head)], method, labels=labels, means=means,
                             batch_size=batch_size)
            rows.append({
                "layer": layer, "head": head, "loss": r["loss"], "accuracy": r["accuracy"],
                "delta_loss": r["loss"] - base["eval_loss"], "delta_accuracy": r["accuracy"] - base["eval_acc"],
            })
    df = pd.DataFrame(rows)
    df["rank"] = df["delta_loss"].rank(ascending=False, method="first").astype(int)
    return HeadAblation(
        table=df.sort_values("rank").reset_index(drop=True)[COLUMNS],
        baseline_loss=base["eval_loss"],
        baseline_accuracy=base["eval_acc"],
        method=method,
        n_examples=int(tokens.shape[0]),
    )
