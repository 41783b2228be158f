"""Tokenizers that travel with a model: a Hugging Face `tokenizers.Tokenizer` saved as tokenizer.json.

Every model trained by `mixit_lab.training.train` carries one (`model.tokenizer`), saved next to config.json in the
checkpoint and loaded with it (JSON only, nothing executed), so `to_tokens`, `to_str_tokens` and
`to_string` work on it. There are two kinds.

A *task tokenizer* (`task_tokenizer`, algorithmic tasks) is a word-level vocabulary: the task's token
strings, separated by whitespace in text ("3 4 + 5 6 ="), the task's pad token as padding, no BOS:

    tokenizer = task_tokenizer(["0", "1", "+", "=", "<pad>"], pad=4)
    tokenizer.encode("1 + 1 =").ids          # [1, 2, 1, 3]

A *text tokenizer* (models trained on `lm` or `sentiment`) is byte-level, so any text round-trips
exactly, and has two special tokens:

    <|endoftext|>  id 0: begins a document (`prepend_bos`) and separates documents in LM training text
    <pad>          id 1: right padding in batches; never produced from text

Special-token strings that occur in text are encoded as ordinary bytes (`encode_special_tokens`), so a
corpus that happens to contain "<pad>" cannot inject a pad token. Training tokenizers lives in
`training/tasks/` (bpe.py); this module only loads and applies them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, models, pre_tokenizers

if TYPE_CHECKING:
    import torch

TOKENIZER_FILE = "tokenizer.json"
BOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
SPECIAL_TOKENS = (BOS_TOKEN, PAD_TOKEN)


def task_tokenizer(vocab: Sequence[str], pad: int) -> Tokenizer:
    """A word-level tokenizer over a task's vocabulary (token i is `vocab[i]`), `vocab[pad]` its padding.

    Text is the token strings separated by whitespace; a string outside the vocabulary is refused (see
    `encode`). ValueError for a vocabulary that cannot be typed: duplicate, empty or space-holding strings.
    """
    vocab = list(vocab)
    bad = [s for s in vocab if not isinstance(s, str) or not s or any(c.isspace() for c in s)]
    if bad:
        raise ValueError(f"vocab holds {bad[0]!r}; each token string must be non-empty text without spaces")
    seen: dict[str, int] = {}
    for i, s in enumerate(vocab):
        if s in seen:
            raise ValueError(f"vocab holds {s!r} twice (ids {seen[s]} and {i}); each token needs its own string")
        seen[s] = i
    if not 0 <= pad < len(vocab):
        raise ValueError(f"pad id {pad} is outside the vocabulary; allowed: 0..{len(vocab) - 1}")
    tokenizer = Tokenizer(models.WordLevel(seen, unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.enable_padding(pad_id=pad, pad_token=vocab[pad])
    return tokenizer


def is_task_tokenizer(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` is a task's word-level vocabulary (`task_tokenizer`), not a text tokenizer."""
    return isinstance(tokenizer.model, models.WordLevel) and tokenizer.padding is not None


def tokenizer_from_json(text: str, source: str = "tokenizer JSON") -> Tokenizer:
    """Parse a tokenizer.json string; errors are a ValueError naming `source`."""
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # the Rust side raises a bare Exception
        raise ValueError(f"{source}: not a valid tokenizer ({str(e).splitlines()[0]})") from None
    if is_task_tokenizer(tokenizer):
        return tokenizer
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(f"{source}: tokenizer lacks the special tokens {missing}")
    tokenizer.encode_special_tokens = True  # not stored in the JSON
    return tokenizer


def tokenizer_to_json(tokenizer: Tokenizer) -> str:
    """Canonical JSON text of a tokenizer (what tokenizer.json holds)."""
    return json.dumps(json.loads(tokenizer.to_str()), indent=1, ensure_ascii=False) + "\n"


def bos_id(tokenizer: Tokenizer) -> int | None:
    """The id of <|endoftext|>; None for a task tokenizer (tasks have no BOS, so nothing is prepended)."""
    return None if is_task_tokenizer(tokenizer) else tokenizer.token_to_id(BOS_TOKEN)


def pad_id(tokenizer: Tokenizer) -> int:
    """The id batches are right-padded with: a task tokenizer's padding token, else <pad>."""
    if is_task_tokenizer(tokenizer):
        return tokenizer.padding["pad_id"]
    return tokenizer.token_to_id(PAD_TOKEN)


def _task_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """A task tokenizer's ids of `text`; ValueError naming the first string outside its vocabulary."""
    ids = [tokenizer.token_to_id(word) for word in text.split()]
    if None in ids:
        word = text.split()[ids.index(None)]
        vocab = sorted(tokenizer.get_vocab(), key=tokenizer.token_to_id)
        shown = ", ".join(vocab[:20]) + (", ..." if len(vocab) > 20 else "")
        raise ValueError(f"{word!r} is not a token of this model's task; its tokens (space-separated): {shown}")
    return ids


def encode(
    tokenizer: Tokenizer, texts: str | Sequence[str], prepend_bos: bool, max_len: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize one text or a list: (tokens int64 [batch, pos] right-padded with <pad>, lengths int64 [batch]).

    With `max_len`, longer texts are cut to their first `max_len` tokens (BOS included). A task tokenizer
    has no BOS: `prepend_bos` then adds nothing.
    """
    import torch

    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts) or not texts:
        raise TypeError("expected a string or a non-empty list of strings")
    bos = [bos_id(tokenizer)] if prepend_bos and bos_id(tokenizer) is not None else []
    if is_task_tokenizer(tokenizer):
        rows = [bos + _task_ids(tokenizer, text) for text in texts]
    else:
        rows = [bos + enc.ids for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    if max_len is not None:
        rows = [r[:max_len] for r in rows]
    width = max(1, max(len(r) for r in rows))
    tokens = torch.full((len(rows), width), pad_id(tokenizer), dtype=torch.int64)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.int64)
    return tokens, torch.tensor([len(r) for r in rows], dtype=torch.int64)


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of a token id sequence, special tokens written out (as TransformerLens's to_string does)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def str_tokens(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token decoded on its own; a multi-byte character split across tokens shows as U+FFFD pieces."""
    return [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
