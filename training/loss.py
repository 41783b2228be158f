"""The loss of a batch, and evaluation on a held-out set: what training, evaluation, ablations and the memory
analysis all score through.

On a hook-free `Transformer` the loss runs only the positions it reads (see masked_logits); with hooks
attached it runs every position, as the hooks expect. Where one pass's fp32 logits would be large (a large
vocabulary times many scored rows: CHUNKED_LOSS_MIN_BYTES), the loss and evaluation unembed and score the final
residual rows chunk by chunk (chunked_cross_entropy), so the logits of all rows never exist at once.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from mixit_lab.models.transformer import Transformer

from .precision import autocast_for
from .tasks import Task


# One pass's fp32 logits (scored rows x d_vocab x 4 bytes) above which the loss is taken in chunks, each chunk's logits
# recomputed in the backward pass (chunked_cross_entropy): memory for time. The paper preset's LM batch in one pass,
# 512 x 255 rows at a ~27k vocabulary, holds 13 GiB of fp32 logits beside their bf16 copy and the softmax's saved
# output: 85 GiB a pass on an H200, 48.5 GiB chunked at +11% time (docs/benchmarks.md), so it fits an 80 GB card.
# Its micro-batches of 128 rows (3.3 GiB of logits, 23 GiB a pass) stay below: they fit, and chunks would only add
# the recomputation. Every preset's CPU run stays far below (the quick preset's LM pass: 16 MiB), so its numbers are
# the plain path's to the digit. Read when called: a test may lower it.
CHUNKED_LOSS_MIN_BYTES = 4 * 2**30
# The fp32 logits of one chunk: 2**30 / (4 x 27k) = 9,942 rows at the paper preset's vocabulary, a matmul large
# enough to run near the card's rate.
LOSS_CHUNK_BYTES = 2**30


def scored_rows(model, tokens: torch.Tensor, mask: torch.Tensor,
                host_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The final residual rows [rows, d_model] at the positions that predict scored tokens, and those targets.

    Position t-1 predicts token t; only rows of the residual stream that predict a scored token go through the
    unembedding, which is most of the cost saved on small tasks. A `Transformer` runs on the positions up to the
    last that predicts a scored token (in a causal model later ones never reach it), and its last block from the
    first such position on (`from_pos`): memorization's 3-token rows, scored at the end, need 2 positions and the last
    block at 1. With hooks attached (ablations, patching) it runs on every position, as they expect.
    `host_mask`: the same mask in host memory (the trainer's batch before it moved): the span and the rows are read
    from it, so that a GPU step waits for no device value (a boolean index would).
    """
    predict = (mask if host_mask is None else host_mask)[:, 1:]
    span = _scored_span(model, predict)
    first, last = span if span is not None else (0, tokens.shape[1] - 2)
    if span is None:
        resid = model(tokens, return_type=None)[:, :-1]
    else:
        end = last + 1 if model.config.causal else tokens.shape[1]
        resid = model(tokens[:, :end], return_type=None, from_pos=first)[:, : last + 1 - first]
    predict, targets = predict[:, first : last + 1], tokens[:, first + 1 : last + 2]
    if host_mask is None:
        return resid[predict], targets[predict]
    rows = torch.from_numpy(np.flatnonzero(predict.numpy())).to(resid.device, non_blocking=True)
    return resid.flatten(0, 1).index_select(0, rows), targets.flatten().index_select(0, rows)


def masked_logits(model, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (fp32) at the positions that predict scored tokens, and those targets (see scored_rows)."""
    resid, targets = scored_rows(model, tokens, mask)
    return model.unembed(resid).float(), targets


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


def loss_chunk_rows(n_rows: int, d_vocab: int) -> int:
    """Rows per chunk of the loss for `n_rows` scored rows over `d_vocab` logits: all of them (one piece, the plain
    path) unless their fp32 logits exceed CHUNKED_LOSS_MIN_BYTES, else LOSS_CHUNK_BYTES' worth."""
    if n_rows * d_vocab * 4 <= CHUNKED_LOSS_MIN_BYTES:
        return max(n_rows, 1)
    return max(1, LOSS_CHUNK_BYTES // (4 * d_vocab))


def _readout_size(model) -> int:
    """The unembedding's width, d_vocab; 0 for a model whose unembedding has no W_U (any module will do as one):
    its loss is never chunked."""
    weight = getattr(model.unembed, "W_U", None)
    return weight.shape[-1] if isinstance(weight, torch.Tensor) else 0


def _chunk_loss(unembed: Callable[[torch.Tensor], torch.Tensor], resid: torch.Tensor, targets: torch.Tensor,
                reduction: str) -> torch.Tensor:
    """Cross-entropy of one chunk's logits: what the backward pass recomputes."""
    return F.cross_entropy(unembed(resid).float(), targets, reduction=reduction)


def chunked_cross_entropy(unembed: Callable[[torch.Tensor], torch.Tensor], resid: torch.Tensor,
                          targets: torch.Tensor, rows: int, reduction: str = "mean") -> torch.Tensor:
    """F.cross_entropy(unembed(resid).float(), targets), taken `rows` rows at a time, each chunk's logits recomputed
    in the backward pass (non-reentrant checkpoints, under the autocast of the forward): the autograd graph holds
    the residual rows and one scalar a chunk, never the fp32 logits of all rows."""
    pieces = [checkpoint(_chunk_loss, unembed, resid[i : i + rows], targets[i : i + rows],
                         "none" if reduction == "none" else "sum", use_reentrant=False, preserve_rng_state=False)
              for i in range(0, resid.shape[0], rows)]
    if reduction == "none":
        return torch.cat(pieces)
    total = torch.stack(pieces).sum()
    return total / targets.numel() if reduction == "mean" else total


def masked_loss(model, tokens: torch.Tensor, mask: torch.Tensor, reduction: str = "mean",
                host_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy over the scored tokens of `mask`: in chunks where one pass's logits would be large.
    `host_mask`: see scored_rows."""
    resid, targets = scored_rows(model, tokens, mask, host_mask)
    rows = loss_chunk_rows(resid.shape[0], _readout_size(model))
    if rows >= resid.shape[0]:
        return F.cross_entropy(model.unembed(resid).float(), targets, reduction=reduction)
    return chunked_cross_entropy(model.unembed, resid, targets, rows, reduction)


def task_loss(model, task: Task, batch: tuple[torch.Tensor, ...], reduction: str = "mean",
              host_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The training loss of one batch: masked next-token cross-entropy, or class cross-entropy.

    reduction "mean" averages over the scored tokens (rows for a classifier), "sum" adds them up. `host_mask`: the
    batch's mask still in host memory, where the scored rows are read (see scored_rows)."""
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


def _scored_tokens(model, tokens: torch.Tensor, mask: torch.Tensor, device: torch.device,
                   precision: str) -> tuple[float, torch.Tensor]:
    """The summed loss of a batch's scored tokens and whether each is predicted right; the logits taken in chunks
    where all of them would be large (loss_chunk_rows), else in one piece."""
    with autocast_for(device, precision):
        resid, targets = scored_rows(model, tokens, mask)
    rows = loss_chunk_rows(resid.shape[0], _readout_size(model))
    loss_sum, right = 0.0, torch.empty(targets.shape, dtype=torch.bool, device=targets.device)
    for i in range(0, resid.shape[0], rows):
        with autocast_for(device, precision):
            logits = model.unembed(resid[i : i + rows]).float()
        loss_sum += F.cross_entropy(logits, targets[i : i + rows], reduction="sum").item()
        right[i : i + rows] = logits.argmax(-1) == targets[i : i + rows]
    return loss_sum, right


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
        loss, right = _scored_tokens(model, tb, mb, device, precision)
        loss_sum += loss
        n_tokens += right.numel()
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
