"""What each attention head does: induction, previous-token, duplicate-token, current-token, first-token
(sink) and copying scores, on repeated random sequences [r, r]; and a task-aligned induction score
on a task's own inputs.

    from mixit_lab.analysis.heads import head_scores, task_induction_scores
    scores = head_scores(model)             # a HeadScores
    df = scores.frame()                     # one row per (layer, head)
    scores.in_context_drop                  # first-half minus second-half loss, nats per token
    tokens, _ = task.eval_set(512)          # task = get_task("khop", hops=1, ...)
    aligned = task_induction_scores(model, task, tokens)   # a SourceScores: .frame() has layer, head, score

Each analysis returns a typed result (`head_scores` -> `HeadScores`, `source_attention_scores` and
`task_induction_scores` -> `SourceScores`): a dataclass with the table and its scalars as fields, whose
`.frame()` is the table with the scalars also in `df.attrs`.

Attention scores (`SCORES`). Each is the attention mass a head puts on its target keys, averaged over
the query rows where the behaviour is defined ("scored rows"), then over sequences. For one
sequence and one head with pattern P [query_pos, key_pos] and a 0/1 detection pattern D:

    score = sum_{i in rows} sum_j P[i, j] D[i, j]  /  sum_{i in rows} sum_j P[i, j]

This is exactly TransformerLens's `head_detector.compute_head_attention_similarity_score`
(error_measure="mul") applied to P with the rows outside `rows` set to zero. TransformerLens's own
`detect_head` averages over *all* query rows, so on [r, r] a perfect induction head scores about
0.5 there (the first half has nothing to induct from) and 1.0 here.

    score            target keys D[i, j]                                       scored rows i
    induction        keys right after an earlier occurrence of token i:        second half (i >= n)
                     tokens[j - 1] == tokens[i], 1 <= j <= i
    duplicate_token  earlier occurrences of token i: tokens[j] == tokens[i], j < i   second half
    previous_token   j == i - 1                                                 i >= 1
    current_token    j == i                                                     all
    first_token      j == 0 (attention sink)                                    i >= 1

The induction, duplicate-token and previous-token detection patterns are TransformerLens's
(`get_induction_head_detection_pattern` etc.). Rows of every pattern in this project sum to 1
(softmax; shaped I + softmax - C; MixiT's I + N - rowmean(N)), so the denominator is the number
of scored rows; the one exception is row 0 of MixiT's sink heads ([0.5, 0, ...], as the authors'),
which only the current-token score reads. Shaped and MixiT patterns have negative entries: their
scores are signed sums and can fall outside [0, 1]. Chance (`HeadScores.chance`) is the score of uniform causal attention
(every allowed key weighted 1/(i+1)) on the same sequences; for induction with half-length n and
distinct tokens in r it is about ln(2)/n.

Copying score (Elhage et al. 2021): for the head's full OV circuit M = W_E W_V W_O W_U
[d_vocab, d_vocab], sum(eigenvalues) / sum(|eigenvalues|), in [-1, 1]; 1 means every token
raises its own logit. Computed with `transformer_lens.FactoredMatrix` (eigenvalues of the small
[d_head, d_head] product). Folded in: the RMSNorm weights `ln1.w` (into W_V) and `ln_final.w`
(into W_U). Left out: biases, positional embeddings, other layers, the per-position RMS scale
and the shaped variants' width multiplier `attn.out_mult` and residual branch scale, which
multiply M by a positive number and so do not change the score. NaN where M is zero or the model
has no unembedding.

Labels (`label_heads`): the first of induction, previous-token, duplicate-token, sink,
current-token whose score reaches its threshold in `LABEL_THRESHOLDS`, else "none".

Task-aligned induction (`task_induction_scores`, `source_attention_scores`). Models trained on
k-hop never see [r, r], so the scores above say little about them. Instead, on the task's eval
inputs, each answer y_i has a query position q = N + i (the position that predicts it) and a
source: the letter x_s holding the answer (for one hop, the token right after the previous
occurrence of x_i) at position s, and its aligned position N + s in the answer part, which
predicts y_s and so must gather x_s (`KHop.answer_sources`). An induction lookup can read the
answer at either: a trained 3-layer frozen_qk model's lookup head puts 0.75 of its attention on
N + s and 0.10 on s. A head's score is its attention mass on the two, pooled over the (sequence, i)
pairs whose target is not null. Chance is uniform attention over the keys q sees, 2/(q+1),
averaged over the same pairs; "positional" is the most that attention ignoring the tokens
(non-negative rows) can score, which a head can approach by attending at a typical offset.
Because a head can score well above chance by position alone, each head also gets a "shuffled"
score: its mass on the sources of another sequence (same position statistics, unrelated
content). The part of the score above the shuffled score is attention that follows the tokens,
as an induction head's must.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from transformer_lens import FactoredMatrix

from .common import (
    ModelOrPath, as_model, cached_batches, check_positive_int, is_causal, model_and_task, pattern_hook, random_tokens,
)

SCORES = ("induction", "previous_token", "duplicate_token", "current_token", "first_token")
# Order = priority: a head that passes several thresholds gets the first label.
LABEL_THRESHOLDS: dict[str, float] = {
    "induction": 0.4,
    "previous_token": 0.5,
    "duplicate_token": 0.4,
    "first_token": 0.4,
    "current_token": 0.5,
}
# The head-score vocabulary: each score column of a heads table -> the name of the kind of head it marks, which is
# the head's `label` (for a score with a threshold) and what the explorer shows. Explorer order.
HEAD_SCORES: dict[str, str] = {
    "induction": "induction",
    "previous_token": "previous-token",
    "first_token": "sink",
    "copying": "copying",
    "duplicate_token": "duplicate-token",
    "current_token": "current-token",
}
COLUMNS = ["layer", "head", *SCORES, "copying", "label"]


def repeated_tokens(d_vocab: int, n_seqs: int = 64, seq_len: int = 64, seed: int = 0) -> torch.Tensor:
    """int64 [n_seqs, 2 * seq_len]: random r (distinct tokens when d_vocab >= seq_len), then r again."""
    check_positive_int("n_seqs", n_seqs)
    check_positive_int("seq_len", seq_len, 2)
    r = random_tokens(d_vocab, n_seqs, seq_len, seed)
    return torch.cat([r, r], dim=1)


def _pattern_scores(pattern: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence scores [batch, head] of one layer's pattern [batch, head, T, T] on tokens [batch, T]."""
    P = pattern.float()
    n = tokens.shape[1] // 2
    row_mass = P.sum(-1)  # [batch, head, query]; 1 up to rounding
    # Second-half queries i >= n against all keys j: same[b, i, j] = tokens[j] == tokens[i].
    same = tokens[:, n:, None] == tokens[:, None, :]  # [batch, n, T]
    i = torch.arange(n, 2 * n, device=tokens.device)[:, None]
    j = torch.arange(2 * n, device=tokens.device)[None, :]
    duplicate = same & (j < i)
    induction = torch.zeros_like(same)
    induction[:, :, 1:] = same[:, :, :-1]  # tokens[j - 1] == tokens[i]
    induction &= j <= i
    second = P[:, :, n:]
    second_mass = row_mass[:, :, n:].sum(-1)
    after_first_mass = row_mass[:, :, 1:].sum(-1)
    return {
        "induction": torch.einsum("bhqk,bqk->bh", second, induction.to(P.dtype)) / second_mass,
        "duplicate_token": torch.einsum("bhqk,bqk->bh", second, duplicate.to(P.dtype)) / second_mass,
        "previous_token": P.diagonal(-1, -2, -1).sum(-1) / after_first_mass,
        "current_token": P.diagonal(0, -2, -1).sum(-1) / row_mass.sum(-1),
        "first_token": P[:, :, 1:, 0].sum(-1) / after_first_mass,
    }


def chance_scores(tokens: torch.Tensor, causal: bool = True) -> dict[str, float]:
    """Scores of uniform attention over the allowed keys on repeated tokens [batch, 2n], averaged over the batch.

    With distinct tokens in r the induction chance is mean_{i=n}^{2n-1} 1/(i+1), about ln(2)/n;
    repeated tokens within r give more targets per row, so a higher chance.
    """
    t = tokens.shape[1]
    allowed = torch.ones(t, t, dtype=torch.float32)
    if causal:
        allowed = allowed.tril()
    uniform = (allowed / allowed.sum(-1, keepdim=True)).expand(tokens.shape[0], 1, t, t)
    return {name: value.mean().item() for name, value in _pattern_scores(uniform, tokens.cpu()).items()}


@torch.no_grad()
def copying_scores(model: ModelOrPath) -> torch.Tensor:
    """float64 [n_layers, n_heads]: sum(eig) / sum(|eig|) of W_E W_V W_O W_U per head (NaN if undefined).

    RMSNorm weights ln1.w and ln_final.w are folded into W_V and W_U; see the module docstring.
    """
    model = as_model(model)
    cfg = model.cfg
    if not hasattr(model, "unembed"):
        return torch.full((cfg.n_layers, cfg.n_heads), math.nan, dtype=torch.float64)
    W_E = model.embed.W_E.detach().double().cpu()  # [d_vocab, d_model]
    W_U = model.unembed.W_U.detach().double().cpu()  # [d_model, d_vocab]
    if hasattr(model, "ln_final") and hasattr(model.ln_final, "w"):
        W_U = model.ln_final.w.detach().double().cpu()[:, None] * W_U
    scores = []
    for block in model.blocks:
        W_V = block.attn.W_V.detach().double().cpu()  # [head, d_model, d_head]
        if hasattr(block, "ln1") and hasattr(block.ln1, "w"):
            W_V = block.ln1.w.detach().double().cpu()[None, :, None] * W_V
        W_O = block.attn.W_O.detach().double().cpu()  # [head, d_head, d_model]
        ov = FactoredMatrix(W_E @ W_V, W_O @ W_U)  # [head, d_vocab, d_vocab] as [d_vocab, d_head] x [d_head, d_vocab]
        eig = ov.eigenvalues  # [head, d_head], complex
        total = eig.abs().sum(-1)
        score = eig.sum(-1).real / total
        scores.append(torch.where(total > 0, score, torch.full_like(score, math.nan)))
    return torch.stack(scores)


def label_heads(scores: pd.DataFrame) -> pd.Series:
    """One label per row of a frame with the `SCORES` columns (see `LABEL_THRESHOLDS`)."""

    def label(row) -> str:
        for name, threshold in LABEL_THRESHOLDS.items():
            if row[name] >= threshold:
                return HEAD_SCORES[name]
        return "none"

    return scores.apply(label, axis=1)


def _check_length(model, seq_len: int) -> None:
    n_ctx = model.cfg.n_ctx
    if 2 * seq_len > n_ctx:
        raise ValueError(
            f"seq_len={seq_len} gives repeated sequences of {2 * seq_len} tokens, longer than the model's "
            f"n_ctx={n_ctx}; use seq_len <= {n_ctx // 2}"
        )


@torch.no_grad()
def _run_repeated(model, tokens: torch.Tensor, batch_size: int):
    """Scores summed over sequences [layer][name] -> [head], and per-target-position loss sums [T-1]."""
    n_layers = model.cfg.n_layers
    names = [pattern_hook(layer) for layer in range(n_layers)]
    has_unembed = hasattr(model, "unembed")
    sums = [{name: 0.0 for name in SCORES} for _ in range(n_layers)]
    loss_sum = torch.zeros(tokens.shape[1] - 1, dtype=torch.float64)
    return_type = "logits" if has_unembed else None
    for tb, out, cache in cached_batches(model, tokens, names, batch_size, return_type=return_type):
        for layer, name in enumerate(names):
            for score, values in _pattern_scores(cache[name], tb).items():
                sums[layer][score] = sums[layer][score] + values.double().sum(0).cpu()
        if has_unembed:
            loss = F.cross_entropy(out[:, :-1].transpose(1, 2).float(), tb[:, 1:], reduction="none")
            loss_sum += loss.double().sum(0).cpu()
    return sums, (loss_sum if has_unembed else None)


def _loss_attrs(loss_by_target: torch.Tensor | None, seq_len: int) -> dict:
    """Loss summaries: target position t (1..2n-1) is predicted from position t - 1."""
    if loss_by_target is None:
        return {"loss_by_position": None, "loss_first_half": None, "loss_second_half": None, "in_context_drop": None}
    first = loss_by_target[: seq_len - 1].mean().item()  # targets 1 .. n-1
    second = loss_by_target[seq_len:].mean().item()  # targets n+1 .. 2n-1 (target n cannot be inferred)
    return {
        "loss_by_position": loss_by_target.tolist(),
        "loss_first_half": first,
        "loss_second_half": second,
        "in_context_drop": first - second,
    }


@dataclass
class HeadScores:
    """What `head_scores` measures: the per-head table and the scalars that go with it."""

    table: pd.DataFrame  # one row per (layer, head), columns COLUMNS
    chance: dict[str, float]  # each score under uniform attention on the same sequences
    loss_by_position: list[float] | None  # mean next-token loss (nats) at targets 1..2n-1; None without an unembedding
    loss_first_half: float | None
    loss_second_half: float | None
    in_context_drop: float | None  # first minus second half
    n_seqs: int
    seq_len: int
    seed: int

    def frame(self) -> pd.DataFrame:
        """The table (one row per (layer, head), columns COLUMNS) with the scalars in `attrs`."""
        df = self.table.copy()
        df.attrs.update(
            {
                "n_seqs": self.n_seqs,
                "seq_len": self.seq_len,
                "seed": self.seed,
                "chance": self.chance,
                "loss_by_position": self.loss_by_position,
                "loss_first_half": self.loss_first_half,
                "loss_second_half": self.loss_second_half,
                "in_context_drop": self.in_context_drop,
            }
        )
        return df


def head_scores(
    model: ModelOrPath, n_seqs: int = 64, seq_len: int = 64, seed: int = 0, batch_size: int = 64
) -> HeadScores:
    """Scores of every head on `n_seqs` repeated random sequences [r, r], r of `seq_len` tokens.

    Args:
        model: a mixit_lab.models.Transformer (any variant) or another HookedRootModule with TransformerLens
            hook names and weight layout; it stays on its device (`model.cfg.device`). Or a run
            directory / checkpoint path, loaded with `mixit_lab.models.load_model`.
        n_seqs, seq_len, seed: the probe sequences (`repeated_tokens(model.cfg.d_vocab, ...)`);
            2 * seq_len must fit in the model's n_ctx.
        batch_size: sequences per forward pass.

    Returns:
        `HeadScores`: `.table` / `.frame()` one row per (layer, head), columns `COLUMNS`: layer, head,
        the five attention scores (fractions of attention mass, see the module docstring), copying
        (in [-1, 1]) and label; fields "chance" (scores of uniform attention), "loss_by_position" (mean
        next-token loss in nats for target positions 1..2n-1), "loss_first_half", "loss_second_half",
        "in_context_drop" (first minus second half; None without an unembedding) and the probe
        parameters, which `.frame()` also puts in `df.attrs`.
    """
    model = as_model(model)
    check_positive_int("n_seqs", n_seqs)
    check_positive_int("seq_len", seq_len, 2)
    check_positive_int("batch_size", batch_size)
    _check_length(model, seq_len)
    tokens = repeated_tokens(model.cfg.d_vocab, n_seqs, seq_len, seed)
    sums, loss_sum = _run_repeated(model, tokens, batch_size)
    copying = copying_scores(model)
    rows = []
    for layer, layer_sums in enumerate(sums):
        for head in range(model.cfg.n_heads):
            row = {"layer": layer, "head": head}
            row.update({name: float(layer_sums[name][head]) / n_seqs for name in SCORES})
            row["copying"] = float(copying[layer, head])
            rows.append(row)
    df = pd.DataFrame(rows)
    df["label"] = label_heads(df)
    return HeadScores(
        table=df[COLUMNS],
        chance=chance_scores(tokens, is_causal(model)),
        **_loss_attrs(None if loss_sum is None else loss_sum / n_seqs, seq_len),
        n_seqs=n_seqs,
        seq_len=seq_len,
        seed=seed,
    )


def in_context_loss(model: ModelOrPath, n_seqs: int = 64, seq_len: int = 64, seed: int = 0, batch_size: int = 64) -> pd.DataFrame:
    """Mean next-token loss (nats) at each target position of [r, r]: columns position, half, loss.

    `position` t is the predicted token's index (1..2n-1), `half` is "first", "boundary" (t = n,
    the first repeated token, which nothing earlier predicts) or "second". `attrs` carries the
    same loss summaries as `HeadScores`. Raises ValueError for a model without an unembedding.
    """
    model = as_model(model)
    if not hasattr(model, "unembed"):
        raise ValueError("in_context_loss needs a model with an unembedding (next-token logits)")
    check_positive_int("n_seqs", n_seqs)
    check_positive_int("seq_len", seq_len, 2)
    _check_length(model, seq_len)
    tokens = repeated_tokens(model.cfg.d_vocab, n_seqs, seq_len, seed)
    _, loss_sum = _run_repeated(model, tokens, batch_size)
    loss = loss_sum / n_seqs
    position = torch.arange(1, 2 * seq_len)
    half = ["first" if t < seq_len else "boundary" if t == seq_len else "second" for t in position.tolist()]
    df = pd.DataFrame({"position": position.numpy(), "half": half, "loss": loss.numpy()})
    df.attrs.update(_loss_attrs(loss, seq_len))
    return df


# --------------------------------------------------------------------------- task-aligned induction
SOURCE_COLUMNS = ["layer", "head", "score", "shuffled"]


def _as_source_sets(sources: torch.Tensor) -> torch.Tensor:
    """sources [n, R] or [n, R, S] -> [n, R, S] (one key per answer is a set of one)."""
    return sources[..., None] if sources.ndim == 2 else sources


def _source_mass(pattern: torch.Tensor, queries: torch.Tensor, sources: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mass on the sources, row mass), each summed over scored rows and sequences: [head] float64.

    pattern [batch, head, T, T]; queries int64 [R] (query positions); sources int64 [batch, R, S]
    (the keys each query may read, -1 = none; a row with no source is not scored).
    """
    P = pattern.double()[:, :, queries.to(pattern.device)]  # [batch, head, R, T]
    sources = sources.to(pattern.device)
    valid = (sources >= 0).to(P.dtype)[:, None]  # [batch, 1, R, S]
    scored = valid.amax(-1)  # [batch, 1, R]
    idx = sources.clamp_min(0)[:, None].expand(-1, P.shape[1], -1, -1)  # [batch, head, R, S]
    on_sources = (P.gather(-1, idx) * valid).sum(-1)  # [batch, head, R]
    return (on_sources * scored).sum((0, 2)).cpu(), (P.sum(-1) * scored).sum((0, 2)).cpu()


def source_chance(queries: torch.Tensor, sources: torch.Tensor, seq_len: int, causal: bool = True) -> dict[str, float]:
    """Reference levels of the source score over the scored rows (those with a source >= 0).

    sources [n, R] or [n, R, S] as for `source_attention_scores`.
    chance: uniform attention over the keys a query sees, (number of sources)/(q+1) causal or
        /seq_len bidirectional, averaged over the scored rows.
    positional: the best score attention that ignores the tokens can reach with non-negative rows
        (softmax): for each query position, all mass on the key that is a source in most rows,
        i.e. sum_q max_k count(q, k) / number of scored rows.
    """
    sources = _as_source_sets(sources)
    valid = sources >= 0
    scored = valid.any(-1)  # [n, R]
    rows = int(scored.sum())
    if rows == 0:
        return {"chance": math.nan, "positional": math.nan, "rows": 0}
    q = queries[None, :].expand_as(scored)[scored].double()
    n_sources = valid.sum(-1)[scored].double()
    chance = (n_sources / (q + 1) if causal else n_sources / seq_len).mean().item()
    best = 0
    for r in range(sources.shape[1]):
        keys = sources[:, r][valid[:, r]]
        if keys.numel():
            best += int(torch.bincount(keys).max())
    return {"chance": chance, "positional": best / rows, "rows": rows}


@dataclass
class SourceScores:
    """What `source_attention_scores` / `task_induction_scores` measure: per-head scores and reference levels."""

    table: pd.DataFrame  # one row per (layer, head), columns SOURCE_COLUMNS
    chance: float  # see `source_chance`
    positional: float
    rows: int  # scored (sequence, query) pairs
    n_seqs: int
    hops: int | None = None  # the task's k (task_induction_scores only)

    def frame(self) -> pd.DataFrame:
        """The table (columns SOURCE_COLUMNS) with the scalars in `attrs` ("hops" only where it is set)."""
        df = self.table.copy()
        df.attrs.update({"chance": self.chance, "positional": self.positional, "rows": self.rows, "n_seqs": self.n_seqs})
        if self.hops is not None:
            df.attrs["hops"] = self.hops
        return df


def _check_sources(tokens: torch.Tensor, queries: torch.Tensor, sources: torch.Tensor, causal: bool) -> torch.Tensor:
    """sources as [n, R, S] after checking tokens [n, T], queries [R] and sources [n, R(, S)] fit together."""
    if tokens.ndim != 2 or queries.ndim != 1 or sources.shape[:2] != (tokens.shape[0], queries.shape[0]) \
            or sources.ndim not in (2, 3):
        raise ValueError(
            f"need tokens [n, T], queries [R] and sources [n, R] or [n, R, S]; got {tuple(tokens.shape)}, "
            f"{tuple(queries.shape)} and {tuple(sources.shape)}"
        )
    sources = _as_source_sets(sources)
    t = tokens.shape[1]
    if len(queries) and (int(queries.min()) < 0 or int(queries.max()) >= t):
        raise ValueError(f"query positions must lie in [0, {t})")
    valid = sources >= 0
    if not valid.any():
        raise ValueError("no scored rows: every source is -1")
    if int(sources.max()) >= t:
        raise ValueError(f"source positions must lie in [0, {t}) or be -1")
    ordered = sources.masked_fill(~valid, -1).sort(-1).values
    if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
        raise ValueError("a query lists the same source twice")
    if causal and (sources > queries[None, :, None])[valid].any():
        raise ValueError("a source lies after its query, where a causal model cannot attend")
    return sources


@torch.no_grad()
def source_attention_scores(
    model: ModelOrPath, tokens: torch.Tensor, queries: torch.Tensor, sources: torch.Tensor, batch_size: int = 256
) -> SourceScores:
    """Per head, the attention mass each query puts on the keys it should read, over the scored rows.

        score = sum_{scored (row, q)} sum_{s in sources(row, q)} P[q, s]  /  sum_{scored (row, q)} sum_j P[q, j]

    pooled over every scored (sequence, query) pair; rows of our patterns sum to 1, so this is the
    mean mass on the sources (signed for shaped and MixiT patterns). 1 = the head always attends
    only to the sources.

    `shuffled` is the same head's score against the sources of the previous sequence in `tokens`
    (the last row takes the first row's): the same query positions and the same distribution of
    source positions, but sources unrelated to the tokens the head sees. A head that attends by
    position alone (say, a few keys back from where x_i sits) scores as much there as on its own
    sources (exactly as much if its pattern is the same for every input); only attention that
    follows the tokens scores more on its own. NaN with one sequence.

    Args:
        model: a mixit_lab.models.Transformer (any variant) or a HookedRootModule with hook_pattern hooks, or a
            run directory / checkpoint path.
        tokens: int64 [n, T] inputs (run without a padding mask).
        queries: int64 [R], the query positions scored in every row.
        sources: int64 [n, R] (one key per query) or [n, R, S] (S distinct keys that each hold
            what the query needs), -1 = none; a query with no source is not scored.
        batch_size: sequences per forward pass.

    Returns:
        `SourceScores`: `.table` / `.frame()` one row per (layer, head): layer, head, score, shuffled;
        fields "chance" and "positional" (see `source_chance`), "rows" (scored pairs) and "n_seqs",
        which `.frame()` also puts in `df.attrs`.
    """
    model = as_model(model)
    check_positive_int("batch_size", batch_size)
    causal = is_causal(model)
    sources = _check_sources(tokens, queries, sources, causal)
    t = tokens.shape[1]
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    names = [pattern_hook(layer) for layer in range(n_layers)]
    others = sources.roll(1, dims=0)  # row i gets row i - 1's sources
    # [own, shuffled] x [mass on the source, row mass], summed over scored rows: [2, 2, layer, head].
    sums = torch.zeros(2, 2, n_layers, n_heads, dtype=torch.float64)
    start = 0
    for tb, _, cache in cached_batches(model, tokens, names, batch_size):
        part = slice(start, start + tb.shape[0])
        start += tb.shape[0]
        for layer, name in enumerate(names):
            for k, src in enumerate((sources[part], others[part])):
                hit, mass = _source_mass(cache[name], queries, src)
                sums[k, 0, layer] += hit
                sums[k, 1, layer] += mass
    score, shuffled = sums[0, 0] / sums[0, 1], sums[1, 0] / sums[1, 1]
    if tokens.shape[0] < 2:
        shuffled = torch.full_like(shuffled, math.nan)
    df = pd.DataFrame(
        [{"layer": layer, "head": head, "score": float(score[layer, head]), "shuffled": float(shuffled[layer, head])}
         for layer in range(n_layers) for head in range(n_heads)],
        columns=SOURCE_COLUMNS,
    )
    return SourceScores(table=df, **source_chance(queries, sources, t, causal), n_seqs=int(tokens.shape[0]))


def task_induction_scores(
    model: ModelOrPath, task=None, tokens: torch.Tensor | None = None, batch_size: int = 256
) -> SourceScores:
    """Task-aligned induction scores: `source_attention_scores` at the task's own answer sources.

    `task` must define `answer_sources(tokens) -> (queries, sources)` (mixit_lab.training.tasks.KHop does:
    the position predicting y_i, and the two positions holding its answer, the letter in X and
    its aligned position in the answer part; -1 where y_i is null). Unlike `head_scores`,
    which probes with repeated random tokens [r, r] a k-hop model never sees, this measures the
    lookup on the inputs the model was trained for. Returns a `SourceScores` with `hops` (the
    task's k) set. `model` may be a run directory: `task` then defaults to the run's own; `tokens`
    defaults to the task's first 512 eval rows.
    """
    model, task = model_and_task(model, task)
    if task is None:
        raise ValueError("task_induction_scores needs the task: pass it, or pass a run directory instead of a model")
    if not hasattr(task, "answer_sources"):
        raise ValueError(f"task {getattr(task, 'name', task)!r} defines no answer sources (answer_sources)")
    if tokens is None:
        tokens, _ = task.eval_set(512)
    queries, sources = task.answer_sources(tokens)
    result = source_attention_scores(model, tokens, queries, sources, batch_size)
    result.hops = getattr(task, "hops", None)
    return result
