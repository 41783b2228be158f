"""Head ablation: knock out one head (or a set) and measure what the task loses.

    from mixit_lab.analysis.ablation import ablate_heads, head_ablation
    tokens, mask = task.eval_set(1000)
    ablate_heads(model, tokens, mask, task.metric, heads=[(1, 0)], method="zero")   # {"loss", "accuracy"}
    result = head_ablation(model, tokens, mask, task.metric)                        # every head: a HeadAblation
    df = result.frame()                                                             # ranked, baseline in attrs
    head_ablation(model, tokens, metric=lambda logits: logits[:, -1, 3].mean())     # any metric of the logits

`model` may also be a run directory or checkpoint path (loaded with `mixit_lab.models.load_model`).

A head is ablated by a forward hook on `blocks.{l}.attn.hook_z` ([batch, pos, head_index, d_head],
the head's output before W_O), replacing its slice z[:, :, h]:

    zero  with 0, so the head contributes only the bias b_O (shared by all heads of the layer)
    mean  with its mean over the dataset at each position, z_mean[pos, h] (the head still
          contributes its average, only its dependence on the particular input is removed)

Loss and accuracy are `mixit_lab.training.loss.evaluate` on the given set: mean cross-entropy (nats)
over the masked target tokens, and "sequence" (every target of a row right) or "token" accuracy.
For a classifier (a model with `classify`, e.g. trained on `sentiment`) pass the class `labels`:
`mask` then marks the real tokens (it is the attention mask), and loss and accuracy are per row.

`metric` may instead be a callable, TransformerLens style: logits of all N rows at once ([N, pos, d_vocab],
or [N, n_classes] for a classifier, run with `mask` as its attention mask) -> a scalar tensor, such as a
logit difference. The table then has the columns `METRIC_COLUMNS`: the metric with the head ablated, its
change from the intact model, and the rank by drop (rank 1 = the largest decrease: metrics where higher is
better, as TransformerLens's logit differences; negate a metric where lower is better). `mask` is optional then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Union

import pandas as pd
import torch

from mixit_lab.training.loss import evaluate

from .common import ModelOrPath, as_model, cached_batches, check_positive_int, model_device

METHODS = ("zero", "mean")
COLUMNS = ["layer", "head", "loss", "accuracy", "delta_loss", "delta_accuracy", "rank"]
METRIC_COLUMNS = ["layer", "head", "metric", "delta_metric", "rank"]  # with a callable metric

Metric = Callable[[torch.Tensor], torch.Tensor]  # logits -> scalar tensor (TransformerLens style)
MetricArg = Union[str, Metric]


def _z_hook(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


def _check_inputs(model, tokens, mask, metric: MetricArg, method: str, labels=None) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of: {', '.join(METHODS)}")
    if callable(metric):
        if labels is not None:
            raise ValueError("labels are for the loss/accuracy metrics; a callable metric reads the logits itself")
        if tokens.ndim != 2 or (mask is not None and tokens.shape != mask.shape):
            raise ValueError(f"tokens (and mask, if given) must be [N, pos]; got {tuple(tokens.shape)} and "
                             f"{None if mask is None else tuple(mask.shape)}")
        return
    if mask is None:
        raise ValueError(f"metric={metric!r} needs the mask of the target tokens; only a callable metric goes without")
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
        raise ValueError(f"metric={metric!r} is not one of: sequence, token, or a callable of the logits")
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
    model: ModelOrPath, tokens: torch.Tensor, batch_size: int = 512, attention_mask: torch.Tensor | None = None
) -> dict[int, torch.Tensor]:
    """layer -> mean of hook_z over the batch, [pos, head_index, d_head], on the model's device.

    attention_mask [N, pos] (1 = real token) is passed to the model, as a classifier is run.
    """
    model = as_model(model)
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


def _is_classifier(model) -> bool:
    return getattr(getattr(model, "config", None), "n_classes", None) is not None


@torch.no_grad()
def _metric_value(model, tokens: torch.Tensor, mask: torch.Tensor | None, metric: Metric) -> float:
    """`metric` on the model's logits of all rows at once (a classifier gets `mask` as its attention mask)."""
    device = model_device(model)
    kwargs = {"attention_mask": mask.to(device)} if mask is not None and _is_classifier(model) else {}
    was_training = model.training
    model.eval()
    try:
        value = metric(model(tokens.to(device), **kwargs))
    finally:
        model.train(was_training)
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ValueError(f"the metric must return a scalar tensor; it returned {type(value).__name__} "
                         f"of shape {tuple(getattr(value, 'shape', ()))}")
    return float(value)


def _measure(model, tokens, mask, metric: MetricArg, labels, batch_size: int) -> dict[str, float]:
    """{"loss", "accuracy"} for a string metric (`mixit_lab.training.loss.evaluate`), {"metric"} for a callable one."""
    if callable(metric):
        return {"metric": _metric_value(model, tokens, mask, metric)}
    result = evaluate(model, tokens, mask, metric, batch_size, labels=labels)
    return {"loss": result["eval_loss"], "accuracy": result["eval_acc"]}


def _attention_mask(model, mask: torch.Tensor | None, labels) -> torch.Tensor | None:
    """The mask the model runs with when the means are taken: a classifier's padding mask, else none."""
    return mask if labels is not None or (mask is not None and _is_classifier(model)) else None


def ablate_heads(
    model: ModelOrPath,
    tokens: torch.Tensor,
    mask: torch.Tensor | None,
    metric: MetricArg,
    heads: Iterable[tuple[int, int]],
    method: str = "mean",
    *,
    labels: torch.Tensor | None = None,
    means: dict[int, torch.Tensor] | None = None,
    batch_size: int = 512,
) -> dict[str, float]:
    """Loss (nats per target token, or per row with labels) and accuracy with `heads` [(layer, head), ...] ablated together.

    tokens int64 / mask bool [N, pos] as the tasks produce them; metric "sequence" or "token" (or a
    callable of the logits: then {"metric": value}, and mask is optional); labels int64 [N] for a
    classifier. `means` (from `mean_z` on the same tokens) is computed when needed and not given.
    """
    model = as_model(model)
    _check_inputs(model, tokens, mask, metric, method, labels)
    heads = _check_heads(model, heads)
    check_positive_int("batch_size", batch_size)
    if method == "mean" and means is None:
        means = mean_z(model, tokens, batch_size, attention_mask=_attention_mask(model, mask, labels))
    with model.hooks(fwd_hooks=_ablation_hooks(heads, method, means)):
        return _measure(model, tokens, mask, metric, labels, batch_size)


@dataclass
class HeadAblation:
    """What `head_ablation` measures: the ranked per-head table and the intact model's baseline."""

    table: pd.DataFrame  # one row per (layer, head), columns COLUMNS (METRIC_COLUMNS for a callable), sorted by rank
    baseline_loss: float | None  # None with a callable metric
    baseline_accuracy: float | None
    method: str
    n_examples: int
    baseline_metric: float | None = None  # the callable metric on the intact model

    def frame(self) -> pd.DataFrame:
        """The table (COLUMNS, or METRIC_COLUMNS for a callable metric), sorted by rank, with the baseline in `attrs`."""
        df = self.table.copy()
        if self.baseline_metric is None:
            df.attrs.update(baseline_loss=self.baseline_loss, baseline_accuracy=self.baseline_accuracy)
        else:
            df.attrs.update(baseline_metric=self.baseline_metric)
        df.attrs.update(method=self.method, n_examples=self.n_examples)
        return df


def head_ablation(
    model: ModelOrPath,
    tokens: torch.Tensor,
    mask: torch.Tensor | None = None,
    metric: MetricArg | None = None,
    method: str = "mean",
    *,
    labels: torch.Tensor | None = None,
    batch_size: int = 512,
) -> HeadAblation:
    """Ablate every head on its own; rank heads by the loss increase (rank 1 = most needed).

    tokens int64 / mask bool [N, pos], metric "sequence" or "token" (or a callable: module docstring), labels
    int64 [N] for a classifier. Returns a `HeadAblation`: the table, one row per (layer, head): layer, head, loss,
    accuracy, delta_loss (ablated minus intact, nats), delta_accuracy, rank, sorted by rank (with a callable
    metric: `METRIC_COLUMNS`, ranked by the metric's drop); and the intact model's baseline_loss /
    baseline_accuracy (or baseline_metric), method and n_examples. `model` may be a run directory.
    """
    model = as_model(model)
    if metric is None:
        raise ValueError("head_ablation needs a metric: 'sequence', 'token' (with mask) or a callable of the logits")
    _check_inputs(model, tokens, mask, metric, method, labels)
    check_positive_int("batch_size", batch_size)
    base = _measure(model, tokens, mask, metric, labels, batch_size)
    means = mean_z(model, tokens, batch_size, _attention_mask(model, mask, labels)) if method == "mean" else None
    rows = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            r = ablate_heads(model, tokens, mask, metric, [(layer, head)], method, labels=labels, means=means,
                             batch_size=batch_size)
            rows.append({"layer": layer, "head": head, **r, **{f"delta_{k}": v - base[k] for k, v in r.items()}})
    df = pd.DataFrame(rows)
    # Rank 1 = most needed: the largest loss increase, or the largest drop of a callable metric.
    key, ascending = ("delta_metric", True) if callable(metric) else ("delta_loss", False)
    df["rank"] = df[key].rank(ascending=ascending, method="first").astype(int)
    return HeadAblation(
        table=df.sort_values("rank").reset_index(drop=True)[METRIC_COLUMNS if callable(metric) else COLUMNS],
        baseline_loss=base.get("loss"),
        baseline_accuracy=base.get("accuracy"),
        method=method,
        n_examples=int(tokens.shape[0]),
        baseline_metric=base.get("metric"),
    )
