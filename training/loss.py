"""The loss of a batch, and evaluation on a held-out set: what training, evaluation, ablations and the memory
analysis all score through.

On a hook-free `Transformer` the loss runs only the positions it reads (see masked_logits); with hooks
attached it runs every position, as the hooks expect.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from mixit_lab.models.transformer import Transformer

from .precision import autocast_for
from .tasks import Task


def masked_logits(model, tokens: torch.Tensor, mask: torch.Tensor,
                  host_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the positions that predict scored tokens, and those targets.

    Position t-1 predicts token t; only rows of the residual stream that predict a scored
    token go through the unembedding, which is most of the cost saved on small tasks. A
    `Transformer` runs on the positions up to the last that predicts a scored token (in a causal
    model later ones never reach it), and its last block from the first such position on
    (`from_pos`): memorization's 3-token rows, scored at the end, need 2 positions and the last
    block at 1. With hooks attached (ablations, patching) it runs on every position, as they expect.
    `host_mask`: the same mask on the CPU (the trainer's batch before it moved), read for the span instead of
    `mask`, so that a GPU step needs no host sync.
    """
    predict = mask[:, 1:]
    span = _scored_span(model, predict if host_mask is None else host_mask[:, 1:])
    if span is None:
        resid = model(tokens, return_type=None)[:, :-1]
        return model.unembed(resid[predict]).float(), tokens[:, 1:][predict]
    first, last = span
    end = last + 1 if model.config.causal else tokens.shape[1]
    resid = model(tokens[:, :end], return_type=None, from_pos=first)[:, : last + 1 - first]
    predict = predict[:, first : last + 1]
    logits = model.unembed(resid[predict]).float()
    return logits, tokens[:, first + 1 : last + 2][predict]


def _scored_span(model, predict: torch.Tensor) -> tuple[int, int] | None:
    """First and last position that predicts a scored token, if `model` is a `Transformer`
    (possibly compiled) with no TransformerLens hook attached, forward or backward, and some token is
    scored; else None (run every position)."""
    if not isinstance(getattr(model, "_orig_mod", model), Transformer):
        return None
    if any(point.has_hooks() for point in model.hook_dict.values()):
        return None
    if predict.device.type == "cpu":  # read as numpy: host memory, no device to wait for
        scored = np.flatnonzero(predict.numpy().any(0))
        return (int(scored[0]), int(scored[-1])) if len(scored) else None
    scored = predict.any(0).nonzero()
    return (int(scored[0]), int(scored[-1])) if len(scored) else None


def masked_loss(model, tokens: torch.Tensor, mask: torch.Tensor, reduction: str = "mean",
                host_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy over the scored tokens of `mask` (`host_mask`: see masked_logits)."""
    logits, targets = masked_logits(model, tokens, mask, host_mask)
    return F.cross_entropy(logits, targets, reduction=reduction)


def task_loss(model, task: Task, batch: tuple[torch.Tensor, ...], reduction: str = "mean",
              host_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The training loss of one batch: masked next-token cross-entropy, or class cross-entropy.

    reduction "mean" averages over the scored tokens (rows for a classifier), "sum" adds them up. `host_mask`:
    the batch's mask still on the CPU, where the scored span is read (see masked_logits)."""
    if task.objective == "classification":
        tokens, mask, labels = batch
        return F.cross_entropy(model.classify(tokens, mask).float(), labels, reduction=reduction)
    tokens, mask = batch
    return masked_loss(model, tokens, mask, reduction, host_mask)


def scored_count(task: Task, batch: tuple[torch.Tensor, ...]) -> int:
    """How many terms task_loss averages over in `batch`: scored tokens, or rows for a classifier. A batch in host
    memory (the trainer's, before it moves) is counted with numpy: no device to wait for."""
    if task.objective == "classification":
        return batch[0].shape[0]
    predict = batch[1][:, 1:]
    return int(predict.numpy().sum() if predict.device.type == "cpu" else predict.sum())


class SummedLoss(torch.nn.Module):
    """task_loss(reduction="sum") as a module, so that DistributedDataParallel sees every parameter the
    loss uses (the unembedding is called outside the model's forward)."""

    def __init__(self, model: torch.nn.Module, task: Task):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return task_loss(self.model, self.task, batch, reduction="sum")


@torch.no_grad()
def evaluate(
    model, tokens: torch.Tensor, mask: torch.Tensor, metric: str, batch_size: int = 1024,
    labels: torch.Tensor | None = None, precision: str = "auto",
) -> dict[str, float]:
    """Mean loss over scored tokens and accuracy ("sequence": every scored token right; "token": per token).

    With `labels` (classification tasks; `mask` marks real tokens) the loss and accuracy are per row.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum, n_tokens, n_correct_tokens, n_correct_rows = 0.0, 0, 0, 0
    for start in range(0, tokens.shape[0], batch_size):
        tb = tokens[start : start + batch_size].to(device)
        mb = mask[start : start + batch_size].to(device)
        if labels is not None:
            with autocast_for(device, precision):
                logits = model.classify(tb, mb).float()
            targets = labels[start : start + batch_size].to(device)
            loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
            n_correct_rows += (logits.argmax(-1) == targets).sum().item()
            n_tokens += targets.numel()
            continue
        with autocast_for(device, precision):
            logits, targets = masked_logits(model, tb, mb)
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum").item()
        right = logits.argmax(-1) == targets
        n_tokens += targets.numel()
        n_correct_tokens += right.sum().item()
        # Scatter per-token correctness back to rows: a row is right if none of its scored tokens is wrong.
        wrong_per_row = torch.zeros(tb.shape[0], dtype=torch.long, device=device)
        rows = mb[:, 1:].nonzero()[:, 0]
        wrong_per_row.index_add_(0, rows, (~right).long())
        n_correct_rows += (wrong_per_row == 0).sum().item()
    model.train(was_training)
    per_row = labels is not None or metric == "sequence"
    acc = n_correct_rows / tokens.shape[0] if per_row else n_correct_tokens / max(1, n_tokens)
    return {"eval_loss": loss_sum / max(1, n_tokens), "eval_acc": acc}
