"""The explorer's computations on one model: its inputs, attention patterns, head grids, predictions and
parameters, as plain functions (no Streamlit, no runs folder); `mixit_lab.analysis.explore` re-exports them beside
what it reads from a runs folder.

    from mixit_lab.analysis.explore_model import attention_patterns, eval_example
    patterns = attention_patterns(model, eval_example(task, 0).tokens)   # [layer, head, query, key]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from .common import layer_attention_kinds, pattern_hook
from .heads import HEAD_SCORES

SHOWN_HEAD_SEQS = 32  # repeated sequences of head scores computed on the fly (mixit analyze stores its own number)


class NoHeadScores(ValueError):
    """The model's context is too short for head scores on repeated sequences."""


@dataclass
class Example:
    """One input sequence for the attention and prediction views."""

    tokens: torch.Tensor  # int64 [pos]
    labels: list[str]  # one display string per token
    source: str  # where it came from, for captions
    answer: list[bool] | None = None  # eval samples: the positions the task scores


def _visible(token: str) -> str:
    """A token string that shows on screen: spaces as '␣', control characters escaped ('\\n')."""
    if not token:
        return "''"
    if token.isprintable():
        return token if token.strip() else token.replace(" ", "␣")
    return repr(token)[1:-1]


def token_labels(ids: list[int], model=None, task=None) -> list[str]:
    """Display strings of token ids: the model's tokenizer's (text, or its task's vocabulary), else the task's
    vocabulary, else the ids."""
    if model is not None and getattr(model, "tokenizer", None) is not None:
        return [_visible(t) for t in model.to_str_tokens(torch.tensor(ids, dtype=torch.int64))]
    if task is not None:
        return [task.vocab[i] if 0 <= i < len(task.vocab) else f"#{i}" for i in ids]
    return [str(i) for i in ids]


def eval_example(task, index: int, n_shown: int = 64) -> Example:
    """Row `index` (0 <= index < n_shown) of the task's held-out eval set."""
    if not 0 <= index < n_shown:
        raise ValueError(f"eval sample index={index} is outside [0, {n_shown})")
    tokens, mask = task.eval_set(n_shown)[:2]
    row = tokens[index]
    return Example(row, token_labels(row.tolist(), task=task), f"eval sample {index} of {task.name}",
                   answer=mask[index].tolist())


def parse_token_ids(text: str, d_vocab: int, n_ctx: int) -> torch.Tensor:
    """Token ids typed as '3 14 15' or '3, 14, 15' -> int64 [pos]; ValueError naming a bad value."""
    items = [s for s in re.split(r"[\s,]+", text.strip()) if s]
    if not items:
        raise ValueError("no token ids given; type integers separated by spaces or commas, e.g. '3 1 4'")
    ids = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise ValueError(f"token id {item!r} is not an integer; allowed: 0 to {d_vocab - 1}") from None
        if not 0 <= value < d_vocab:
            raise ValueError(f"token id {value} is outside the vocabulary; allowed: 0 to {d_vocab - 1}")
        ids.append(value)
    if len(ids) > n_ctx:
        raise ValueError(f"{len(ids)} token ids are more than the model's context of n_ctx={n_ctx}")
    return torch.tensor(ids, dtype=torch.int64)


def ids_example(text: str, model, task=None) -> Example:
    tokens = parse_token_ids(text, model.cfg.d_vocab, model.cfg.n_ctx)
    return Example(tokens, token_labels(tokens.tolist(), model, task), "token ids")


def takes_text(model) -> bool:
    """Whether the model reads typed text: it carries a text tokenizer (lm, sentiment), not a task's vocabulary."""
    from mixit_lab.models.tokenizer import is_task_tokenizer

    tokenizer = getattr(model, "tokenizer", None)
    return tokenizer is not None and not is_task_tokenizer(tokenizer)


def text_example(model, text: str) -> Example:
    """Text tokenized as in training (with <|endoftext|> first), cut to n_ctx tokens."""
    if not takes_text(model):
        raise ValueError("this model was not trained on text (it has no tokenizer for text, at most its task's "
                         "vocabulary); give token ids instead")
    if not text:
        raise ValueError("no text given")
    tokens = model.to_tokens(text, move_to_device=False)[0]
    return Example(tokens, token_labels(tokens.tolist(), model), "text")


@torch.no_grad()
def attention_patterns(model, tokens: torch.Tensor) -> np.ndarray:
    """float32 [layer, head, query_pos, key_pos]: every head's pattern on one sequence tokens [pos].

    For MixiT these are its fixed matrices (cut to the sequence), the same for every input.
    """
    names = [pattern_hook(layer) for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens[None].to(model.cfg.device), names_filter=names, return_type=None,
                                    return_cache_object=False)
    return np.stack([cache[name][0].float().cpu().numpy() for name in names])


def head_kinds(model) -> list[list[str]]:
    """[layer][head] -> what the head's pattern is: 'softmax', 'softmax, frozen Q/K', 'shaped',
    'fixed (input-independent)', 'fixed sink (input-independent)' (MixiT's head 0, unless its config has
    sink_head=False) or 'learned (input-independent)'. Grid models can differ by layer."""
    cfg = model.cfg
    sink = getattr(getattr(model, "config", None), "sink_head", True)
    rows = []
    for layer, kind in enumerate(layer_attention_kinds(model)):
        if kind in ("mixing", "learned"):
            word = "fixed" if kind == "mixing" else "learned"
            row = [f"{word} (input-independent)"] * cfg.n_heads
            if sink:
                row[0] = f"{word} sink (input-independent)"
        elif kind == "shaped":
            row = ["shaped: I + softmax - C"] * cfg.n_heads
        else:
            row = [_softmax_head_kind(model, layer, head) for head in range(cfg.n_heads)]
        rows.append(row)
    return rows


def _softmax_head_kind(model, layer: int, head: int) -> str:
    """'softmax', or 'softmax, frozen Q/K' / 'frozen Q' / 'frozen K' when that head's query or key weights keep
    their init (a frozen_qk model, a q or k freeze, or a head freeze such as qk@1.h2: mixit_lab.models.freeze)."""
    masks = getattr(model, "frozen_masks", {})
    frozen = []
    for part in ("Q", "K"):
        name = f"blocks.{layer}.attn.W_{part}"
        param = model.get_parameter(name)
        if not param.requires_grad or (name in masks and bool(masks[name][head].all())):
            frozen.append(part)
    return "softmax" if not frozen else f"softmax, frozen {'/'.join(frozen)}"


def has_sink_head(model) -> bool:
    """MixiT with head 0 of each layer a sink head (0.5 on the token itself, 0.5 on the first token)."""
    return is_fixed_attention(model) and getattr(model.config, "sink_head", True)


def fixed_layers(model) -> list[int]:
    """The layers whose attention is a fixed mixing matrix (all of MixiT's; some of a grid model's)."""
    return [layer for layer, kind in enumerate(layer_attention_kinds(model)) if kind == "mixing"]


def is_fixed_attention(model) -> bool:
    """Whether every layer's attention is a fixed mixing matrix (MixiT; not a grid model with a softmax layer)."""
    return len(fixed_layers(model)) == model.cfg.n_layers


def compute_head_table(model, n_seqs: int = SHOWN_HEAD_SEQS, seq_len: int = 32, seed: int = 0) -> tuple[pd.DataFrame, dict[str, float]]:
    """(mixit_lab.analysis.heads.head_scores, chance scores) on repeated random sequences that fit the context.

    NoHeadScores if the context is too short for repeated sequences (n_ctx < 4).
    """
    from .heads import head_scores

    seq_len = min(seq_len, model.cfg.n_ctx // 2)
    if seq_len < 2:
        raise NoHeadScores(f"n_ctx={model.cfg.n_ctx} is too short for head scores on repeated sequences (needs >= 4)")
    scores = head_scores(model, n_seqs=n_seqs, seq_len=seq_len, seed=seed)
    return scores.table, dict(scores.chance)


def component_grid(table: pd.DataFrame, value: str) -> np.ndarray:
    """float [2, layer]: `value` of each layer's attention (row 0) and MLP (row 1) in a components table."""
    rows = [table[table["component"] == kind].sort_values("layer")[value].to_numpy(dtype=float)
            for kind in ("attn", "mlp")]
    return np.stack(rows)


def head_share_grid(table: pd.DataFrame) -> np.ndarray:
    """float [layer, head]: each head's share of the answer's logit difference in a components table."""
    heads = table[table["component"] == "head"]
    return heads.pivot(index="layer", columns="head", values="share").sort_index().sort_index(axis=1).to_numpy(dtype=float)


def patching_grid(table: pd.DataFrame) -> np.ndarray:
    """[layer, head] array of the fraction of the answer's logit difference each head restores."""
    grid = table.pivot(index="layer", columns="head", values="restored")
    return grid.sort_index().sort_index(axis=1).to_numpy(dtype=float)


def score_grid(heads: pd.DataFrame, score: str) -> np.ndarray:
    """float [layer, head] of one score column of a heads table."""
    if score not in heads.columns:
        raise ValueError(f"score {score!r} is not in the heads table; allowed: {', '.join(HEAD_SCORES)}")
    grid = heads.pivot(index="layer", columns="head", values=score).sort_index().sort_index(axis=1)
    return grid.to_numpy(dtype=float)


def repeated_pattern(model, layer: int, head: int, seq_len: int, seed: int = 0) -> tuple[torch.Tensor, np.ndarray]:
    """(tokens [2n], pattern [2n, 2n]) of one head on a repeated random sequence [r, r], r of seq_len tokens."""
    from .heads import repeated_tokens

    if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
        raise ValueError(f"head L{layer}H{head} does not exist; the model has {model.cfg.n_layers} layers "
                         f"x {model.cfg.n_heads} heads")
    if not 2 <= seq_len <= model.cfg.n_ctx // 2:
        raise ValueError(f"seq_len={seq_len} must lie in [2, n_ctx/2 = {model.cfg.n_ctx // 2}]")
    tokens = repeated_tokens(model.cfg.d_vocab, n_seqs=1, seq_len=seq_len, seed=seed)[0]
    return tokens, attention_patterns(model, tokens)[layer, head]


@torch.no_grad()
def top_k_next(model, tokens: torch.Tensor, position: int, k: int = 10, task=None) -> pd.DataFrame:
    """The k most likely next tokens after `position`: columns rank, token_id, token, probability."""
    if not 0 <= position < tokens.shape[0]:
        raise ValueError(f"position={position} is outside the sequence [0, {tokens.shape[0]})")
    logits = model(tokens[None].to(model.cfg.device), return_type="logits")[0, position].float()
    probs = logits.softmax(-1).cpu()
    k = max(1, min(k, probs.shape[0]))
    top = probs.topk(k)
    ids = top.indices.tolist()
    return pd.DataFrame({"rank": range(1, k + 1), "token_id": ids, "token": token_labels(ids, model, task),
                         "probability": top.values.tolist()})


@torch.no_grad()
def next_token_probability(model, tokens: torch.Tensor, position: int, token_id: int) -> tuple[float, int]:
    """(probability, rank from 1) of token_id as the next token after `position`."""
    logits = model(tokens[None].to(model.cfg.device), return_type="logits")[0, position].float()
    probs = logits.softmax(-1).cpu()
    return float(probs[token_id]), int((probs > probs[token_id]).sum()) + 1


@torch.no_grad()
def class_probabilities(model, tokens: torch.Tensor, classes: list[str] | None = None) -> pd.DataFrame:
    """A classifier's class probabilities for one sequence: columns class, probability."""
    probs = model.classify(tokens[None].to(model.cfg.device))[0].float().softmax(-1).cpu().tolist()
    names = classes if classes and len(classes) == len(probs) else [str(i) for i in range(len(probs))]
    return pd.DataFrame({"class": names, "probability": probs})


def default_position(example: Example) -> int:
    """Where to predict by default: just before the first scored (answer) token, else the last position."""
    if example.answer and any(example.answer):
        return max(0, example.answer.index(True) - 1)
    return int(example.tokens.shape[0]) - 1


def parameter_table(model) -> pd.DataFrame:
    """Trainable and frozen parameters per component of mixit_lab.models.vocabulary.COMPONENTS (embed, pos, qk, v, o, mix, ...)."""
    df = pd.DataFrame(model.parameter_table())
    df["total"] = df["trainable"] + df["frozen"]
    return df


def fixed_matrix_values(model) -> int:
    """Entries of MixiT's fixed mixing matrices: buffers saved with the checkpoint, not parameters."""
    return sum(b.numel() for name, b in model.named_buffers() if name.endswith(".mixing"))
