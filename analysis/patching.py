"""Head-level activation patching: which heads carry the answer from a clean input into a corrupted one.

For retrieval and 1-hop k-hop, `patching_pairs` builds clean rows and corrupted twins in which only the
answer changes: retrieval gets another value in the queried pair; k-hop another letter at the position
an induction head must read (`KHop.hop_sources`), the answer part recomputed. The metric is the logit
difference clean answer - corrupted answer at the position that predicts the answer. Each head's
output (`blocks.{l}.attn.hook_z`, all positions) is copied from the clean run into the corrupted run by
TransformerLens's own `patching.get_act_patch_attn_head_out_all_pos`, which works on our models
unchanged; the result is normalised so that 0 is the corrupted run and 1 the clean run.

    from analysis.patching import head_patching
    table = head_patching(model, task, n=64)   # one row per (layer, head): restored fraction
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import pandas as pd
import torch

from .common import model_device

COLUMNS = ["layer", "head", "restored", "logit_diff"]
PATCHABLE = ("retrieval", "khop")


@dataclass
class PatchingPairs:
    """Clean and corrupted rows [n, seq_len] differing only where the answer comes from."""

    clean: torch.Tensor
    corrupted: torch.Tensor
    position: torch.Tensor  # [n]: the position whose logits predict the answer
    clean_answer: torch.Tensor  # [n] token ids
    corrupted_answer: torch.Tensor  # [n]


def patching_pairs(task, n: int = 64, seed: int = 0) -> PatchingPairs:
    """`n` clean/corrupted pairs for a retrieval task or a 1-hop k-hop task (ValueError for any other)."""
    if task.name not in PATCHABLE:
        raise ValueError(f"patching: task {task.name!r} is not one of: {', '.join(PATCHABLE)}")
    if task.name == "khop" and task.alphabet < 4:
        raise ValueError(f"patching: khop alphabet={task.alphabet} leaves no replacement letter; allowed: alphabet >= 4")
    g = torch.Generator().manual_seed(seed)
    tokens, mask = task.sample(n, g)
    rows = torch.arange(n)
    if task.name == "retrieval":
        answer_at = mask.float().argmax(1)  # the scored value, right after the query
        position = answer_at - 1
        query_key = tokens[rows, position] - task.query0_id
        keys = tokens[:, 0 : 2 * task.pairs : 2] - task.key0_id  # pad rows give negative keys
        pair = (keys == query_key[:, None]).float().argmax(1)
        clean_answer = tokens[rows, 2 * pair + 1]
        shift = torch.randint(1, task.num_values, (n,), generator=g)  # another value: never the same
        corrupted_answer = (clean_answer - task.value0_id + shift) % task.num_values + task.value0_id
        corrupted = tokens.clone()
        corrupted[rows, 2 * pair + 1] = corrupted_answer
        corrupted[rows, answer_at] = corrupted_answer
        return PatchingPairs(tokens, corrupted, position, clean_answer, corrupted_answer)

    if task.hops != 1:
        raise ValueError(f"patching: k-hop with hops={task.hops}; only 1 hop is a single lookup to corrupt")
    N = task.length
    x = tokens[:, :N]
    sources = task.hop_sources(x)  # [n, N]
    # The last answer position with a non-null answer; rows without one (no letter repeats) are dropped.
    has = sources >= 0
    keep = has.any(1)
    if not keep.any():
        raise ValueError(f"patching: no k-hop row of {n} has a non-null answer (length {N}, alphabet {task.alphabet})")
    tokens, x, sources, has = tokens[keep], x[keep], sources[keep], has[keep]
    n, rows = int(keep.sum()), torch.arange(int(keep.sum()))
    i = (has.float() * torch.arange(1, N + 1)).argmax(1)
    s = sources[rows, i]
    # A letter other than x_s and its neighbours, so that the previous occurrence of x_i stays at s - 1.
    x2 = x.clone()
    forbidden = torch.stack([x[rows, s], x[rows, s - 1], x[rows, (s + 1).clamp(max=N - 1)]], 1)
    for r in range(n):
        choices = [c for c in range(task.alphabet) if c not in forbidden[r].tolist()]
        x2[r, s[r]] = choices[int(torch.randint(len(choices), (1,), generator=g))]
    corrupted = torch.cat([x2, torch.full((n, 1), task.sep_id), task.hop_targets(x2)], dim=1)
    return PatchingPairs(tokens, corrupted, N + i, x[rows, s], x2[rows, s])


def _logit_diff(logits: torch.Tensor, pairs: PatchingPairs) -> torch.Tensor:
    rows = torch.arange(logits.shape[0], device=logits.device)
    at = logits[rows, pairs.position.to(logits.device)]
    return at[rows, pairs.clean_answer.to(logits.device)] - at[rows, pairs.corrupted_answer.to(logits.device)]


@torch.no_grad()
def head_patching(model, task, n: int = 64, seed: int = 0) -> pd.DataFrame:
    """Per (layer, head): the fraction of the clean-vs-corrupted logit difference restored by patching the
    head's clean output into the corrupted run (mean over `n` pairs), and the patched logit difference.

    Uses `transformer_lens.patching.get_act_patch_attn_head_out_all_pos` on the model's `hook_z`.
    """
    from transformer_lens import patching

    pairs = patching_pairs(task, n, seed)
    device = model_device(model)
    clean, corrupted = pairs.clean.to(device), pairs.corrupted.to(device)
    was_training = model.training
    model.eval()
    try:
        clean_logits, cache = model.run_with_cache(clean)
        clean_diff = _logit_diff(clean_logits, pairs).mean()
        corrupted_diff = _logit_diff(model(corrupted), pairs).mean()
        with contextlib.redirect_stderr(io.StringIO()):  # its per-patch progress bar, in every analysis
            patched = patching.get_act_patch_attn_head_out_all_pos(
                model, corrupted, cache, lambda logits: _logit_diff(logits, pairs).mean())
    finally:
        model.train(was_training)
    span = (clean_diff - corrupted_diff).item()
    rows = []
    for layer in range(patched.shape[0]):
        for head in range(patched.shape[1]):
            value = patched[layer, head].item()
            restored = (value - corrupted_diff.item()) / span if abs(span) > 1e-9 else float("nan")
            rows.append({"layer": layer, "head": head, "restored": restored, "logit_diff": value})
    out = pd.DataFrame(rows, columns=COLUMNS)
    out.attrs.update(clean_logit_diff=clean_diff.item(), corrupted_logit_diff=corrupted_diff.item())
    return out
