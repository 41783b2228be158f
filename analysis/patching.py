"""Head-level activation patching: which heads carry the answer from a clean input into a corrupted one.

Any (clean, corrupted) pair of token batches and any metric (`patch_heads`): each head's output
(`blocks.{l}.attn.hook_z`, all positions) is copied from the clean run into the corrupted run by
TransformerLens's own `patching.get_act_patch_attn_head_out_all_pos`, which works on our models
unchanged, and the metric is read on the patched logits. The metric is a TransformerLens-style callable,
logits [batch, pos, d_vocab] -> scalar tensor, or, given `answer_tokens` [batch, 2] (clean answer,
corrupted answer) and a `position`, the built-in logit difference clean answer - corrupted answer there.
`restored` = (patched - corrupted) / (clean - corrupted): 0 is the corrupted run, 1 the clean run.

`restored` divides by clean - corrupted, so it means nothing when the two nearly coincide (say, a model
that has not learned the task: both logit differences near 0). Then a one-line `PatchingWarning` names
both values. "Nearly" is `math.isclose(clean, corrupted, rel_tol=NEAR_EQUAL_RTOL, abs_tol=atol)`: within
10% of the larger magnitude (`rtol`; pass 0 for a metric whose zero means nothing, as a log-probability),
or within `atol` (default `LOGIT_DIFF_ATOL` = 0.1 for the logit difference, a probability ratio of
e^0.1 ~ 1.1; `CALLABLE_ATOL` = 1e-6, rounding noise, for a callable metric whose scale this module cannot
know: pass your metric's own floor).

For retrieval and 1-hop k-hop, `head_patching(model, task)` builds the pairs itself: `patching_pairs`
gives clean rows and corrupted twins in which only the answer changes: retrieval gets another value in
the queried pair; k-hop another letter at the position an induction head must read (`KHop.hop_sources`),
the answer part recomputed; the metric is the logit difference at the position that predicts the answer.

    from mixit_lab.analysis.patching import head_patching, patch_heads
    result = head_patching(model, task, n=64)     # a HeadPatching: .clean, .corrupted, ...
    table = result.frame()                        # one row per (layer, head): restored fraction
    table = head_patching("runs/khop1-standard").frame()  # a run directory: its model and task
    result = patch_heads(model, clean, corrupted, answer_tokens=answers, position=-1)
    result = patch_heads(model, clean, corrupted, metric=lambda logits: logits[:, -1, 3].mean())
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
import warnings
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch

from .common import ModelOrPath, as_model, model_and_task, model_device

COLUMNS = ["layer", "head", "restored", "logit_diff"]  # the built-in metric; a callable's column is "metric"
NEAR_EQUAL_RTOL = 0.1  # clean and corrupted within 10% of the larger: `restored` is meaningless
LOGIT_DIFF_ATOL = 0.1  # ... or within 0.1 logits (built-in metric)
CALLABLE_ATOL = 1e-6  # ... or within rounding noise (a callable metric, whose scale is unknown here)

Metric = Callable[[torch.Tensor], torch.Tensor]  # logits [batch, pos, d_vocab] -> scalar tensor


class PatchingWarning(UserWarning):
    """The clean and corrupted metrics nearly coincide, so the normalised `restored` score is meaningless."""


@dataclass
class PatchingPairs:
    """Clean and corrupted rows [n, seq_len] differing only where the answer comes from."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    position: torch.Tensor  # [n]: the position whose logits predict the answer
    clean_answer: torch.Tensor  # [n] token ids
    corrupted_answer: torch.Tensor  # [n]


def can_patch(task_or_class) -> bool:
    """Whether the task (or task class) builds patching pairs: it has a `patching_pairs(n, seed)` method, as retrieval,
    k-hop and a task of one's own may (the base Task, which stands for a class not imported, has none). The method
    may still refuse the task's settings (k-hop with more than one hop), with a ValueError saying why."""
    return callable(getattr(task_or_class, "patching_pairs", None))


def patching_pairs(task, n: int = 64, seed: int = 0) -> PatchingPairs:
    """`n` clean/corrupted pairs from the task's own `patching_pairs(n, seed)` (mixit_lab.training.tasks.Task's protocol);
    ValueError for a task without one, or whose settings it refuses."""
    if not can_patch(task):
        raise ValueError(f"patching: task {task.name!r} has no patching_pairs method (retrieval, 1-hop k-hop and tasks "
                         "of one's own that define one build pairs)")
    clean, corrupted, position, answers = task.patching_pairs(n, seed)
    return PatchingPairs(clean, corrupted, torch.as_tensor(position), answers[:, 0], answers[:, 1])


def logit_diff_metric(answer_tokens: torch.Tensor, position: int | torch.Tensor = -1) -> Metric:
    """The built-in metric: mean over rows of logit(clean answer) - logit(corrupted answer) at `position`.

    answer_tokens int64 [batch, 2] (clean answer, corrupted answer); position an int (-1: the last) or
    int64 [batch], the position whose logits predict the answer.
    """

    def metric(logits: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_vocab] -> []
        rows = torch.arange(logits.shape[0], device=logits.device)
        at = logits[rows, torch.as_tensor(position, device=logits.device)]  # [batch, d_vocab]
        answers = answer_tokens.to(logits.device)
        return (at[rows, answers[:, 0]] - at[rows, answers[:, 1]]).mean()

    return metric


@dataclass
class HeadPatching:
    """What `patch_heads` / `head_patching` measure: the per-head table and both baselines."""

    table: pd.DataFrame  # one row per (layer, head): layer, head, restored, and the patched metric
    clean: float  # the metric on the clean run
    corrupted: float  # the metric on the corrupted run
    metric: str  # "logit_diff" (built-in) or the callable's name
    n_pairs: int

    @property
    def value_column(self) -> str:
        """The patched metric's column: "logit_diff" for the built-in metric, "metric" for a callable."""
        return "logit_diff" if self.metric == "logit_diff" else "metric"

    def frame(self) -> pd.DataFrame:
        """The table with the baselines in `attrs` (clean_logit_diff / corrupted_logit_diff, or clean_metric / ...)."""
        df = self.table.rename(columns={"value": self.value_column})
        df.attrs.update({f"clean_{self.value_column}": self.clean, f"corrupted_{self.value_column}": self.corrupted,
                         "metric": self.metric, "n_pairs": self.n_pairs})
        return df


def warn_if_near_equal(clean: float, corrupted: float, atol: float, rtol: float = NEAR_EQUAL_RTOL) -> bool:
    """Warn (one line, `PatchingWarning`) and return True when clean and corrupted nearly coincide (module docstring)."""
    if not math.isclose(clean, corrupted, rel_tol=rtol, abs_tol=atol):
        return False
    level, frame = 2, sys._getframe(1)  # point the warning at the first caller outside this module
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    warnings.warn(
        f"patching: clean metric {clean:.4g} and corrupted metric {corrupted:.4g} nearly coincide (within "
        f"{rtol:.0%} or {atol:g}), so 'restored', which divides by their difference, is meaningless",
        PatchingWarning, stacklevel=level,
    )
    return True


def _check_tokens(model, clean: torch.Tensor, corrupted: torch.Tensor) -> None:
    """Clean and corrupted must be integer [batch, pos] tensors of the same shape that the model can read."""
    for name, t in (("clean_tokens", clean), ("corrupted_tokens", corrupted)):
        if not isinstance(t, torch.Tensor) or t.ndim != 2 or t.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"{name} must be an integer tensor [batch, pos]; got {getattr(t, 'shape', t)!r}")
    if clean.shape != corrupted.shape:
        raise ValueError(f"clean_tokens {tuple(clean.shape)} and corrupted_tokens {tuple(corrupted.shape)} "
                         "must have the same shape [batch, pos]")
    if clean.shape[1] > model.cfg.n_ctx:
        raise ValueError(f"tokens have {clean.shape[1]} positions, more than the model's n_ctx={model.cfg.n_ctx}")


def _builtin_metric(model, n_rows: int, n_pos: int, answer_tokens, position) -> Metric:
    """`logit_diff_metric` after checking answer_tokens [batch, 2] and position (int or [batch]) fit the inputs."""
    answer_tokens = torch.as_tensor(answer_tokens)
    if answer_tokens.shape != (n_rows, 2):
        raise ValueError(f"answer_tokens must be [batch, 2] = [{n_rows}, 2] (clean answer, corrupted answer); "
                         f"got {tuple(answer_tokens.shape)}")
    d_vocab = model.cfg.d_vocab
    if int(answer_tokens.min()) < 0 or int(answer_tokens.max()) >= d_vocab:
        raise ValueError(f"answer_tokens must lie in [0, {d_vocab}); got [{int(answer_tokens.min())}, "
                         f"{int(answer_tokens.max())}]")
    position = torch.as_tensor(position)
    if position.shape not in ((), (n_rows,)) or int(position.min()) < -n_pos or int(position.max()) >= n_pos:
        raise ValueError(f"position must be an int or [batch] = [{n_rows}] in [-{n_pos}, {n_pos}); got {position.tolist()}")
    return logit_diff_metric(answer_tokens.long(), position.long())


def _scalar(value: torch.Tensor, what: str) -> float:
    """A metric's output as a float; ValueError unless it is one number."""
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ValueError(f"the metric must return a scalar tensor (TransformerLens style); on the {what} logits it "
                         f"returned {type(value).__name__} of shape {tuple(getattr(value, 'shape', ()))}")
    return float(value)


def patch_heads(
    model: ModelOrPath,
    clean_tokens: torch.Tensor,
    corrupted_tokens: torch.Tensor,
    metric: Metric | None = None,
    *,
    answer_tokens: torch.Tensor | None = None,
    position: int | torch.Tensor = -1,
    atol: float | None = None,
    rtol: float = NEAR_EQUAL_RTOL,
) -> HeadPatching:
    """Patch each head's clean output into the corrupted run; per (layer, head) the metric and the fraction restored.

    Args:
        model: a mixit_lab.models.Transformer (or HookedRootModule with `hook_z`), or a run directory / checkpoint path.
        clean_tokens, corrupted_tokens: int64 [batch, pos], the same shape.
        metric: logits [batch, pos, d_vocab] -> scalar tensor, as TransformerLens's patching takes it ...
        answer_tokens: ... or int64 [batch, 2] (clean answer, corrupted answer) for the built-in logit
            difference at `position` (an int, -1 = the last, or int64 [batch]).
        atol, rtol: when the near-equal warning fires (module docstring); rtol=0 for a metric whose zero
            means nothing (a log-probability), where "within 10%" would not say the two coincide.

    Returns:
        `HeadPatching`: the metric on the clean and corrupted runs, its name and n_pairs; `.frame()` one row per
        (layer, head): layer, head, restored, and the patched metric ("logit_diff" for the built-in metric, else
        "metric"), with clean_logit_diff / corrupted_logit_diff (clean_metric / ...), metric, n_pairs in `attrs`.
    """
    from transformer_lens import patching

    model = as_model(model)
    _check_tokens(model, clean_tokens, corrupted_tokens)
    if (metric is None) == (answer_tokens is None):
        raise ValueError("pass either metric (a callable: logits -> scalar) or answer_tokens [batch, 2], not both")
    name = "logit_diff" if metric is None else getattr(metric, "__name__", type(metric).__name__)
    if metric is None:
        metric = _builtin_metric(model, *clean_tokens.shape, answer_tokens, position)
        atol = LOGIT_DIFF_ATOL if atol is None else atol
    device = model_device(model)
    clean, corrupted = clean_tokens.to(device), corrupted_tokens.to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            clean_logits, cache = model.run_with_cache(clean)
            clean_value = _scalar(metric(clean_logits), "clean")
            corrupted_value = _scalar(metric(model(corrupted)), "corrupted")
            with contextlib.redirect_stderr(io.StringIO()):  # its per-patch progress bar, in every analysis
                patched = patching.get_act_patch_attn_head_out_all_pos(model, corrupted, cache, metric)  # [layer, head]
    finally:
        model.train(was_training)
    warn_if_near_equal(clean_value, corrupted_value, CALLABLE_ATOL if atol is None else atol, rtol)
    span = clean_value - corrupted_value
    rows = [{"layer": layer, "head": head, "value": float(patched[layer, head])}
            for layer in range(patched.shape[0]) for head in range(patched.shape[1])]
    table = pd.DataFrame(rows)
    table["restored"] = (table["value"] - corrupted_value) / span if abs(span) > 1e-9 else float("nan")
    return HeadPatching(table=table[["layer", "head", "restored", "value"]], clean=clean_value,
                        corrupted=corrupted_value, metric=name, n_pairs=int(clean_tokens.shape[0]))


def head_patching(model: ModelOrPath, task=None, n: int = 64, seed: int = 0) -> HeadPatching:
    """Per (layer, head): the fraction of the clean-vs-corrupted logit difference restored by patching the
    head's clean output into the corrupted run (mean over `n` `patching_pairs` of a retrieval or 1-hop k-hop
    task), and the patched logit difference; a `HeadPatching` as `patch_heads` returns it. `model` may be a
    run directory: `task` then defaults to its own.
    """
    model, task = model_and_task(model, task)
    if task is None:
        raise ValueError("head_patching needs the task: pass it, or pass a run directory instead of a model")
    pairs = patching_pairs(task, n, seed)
    answers = torch.stack([pairs.clean_answer, pairs.corrupted_answer], dim=1)  # [n, 2]
    return patch_heads(model, pairs.clean, pairs.corrupted, answer_tokens=answers, position=pairs.position)
