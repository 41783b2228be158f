"""Text tokenizers that travel with a model: a Hugging Face `tokenizers.Tokenizer` saved as tokenizer.json.

Models trained on text carry the tokenizer they were trained with (`model.tokenizer`), saved next to
config.json in the checkpoint and loaded with it (JSON only, nothing executed). Every such tokenizer is
byte-level, so any text round-trips exactly, and has two special tokens:

    <|endoftext|>  id 0: begins a document (`prepend_bos`) and separates documents in LM training text
    <pad>          id 1: right padding in batches; never produced from text

Special-token strings that occur in text are encoded as ordinary bytes (`encode_special_tokens`), so a
corpus that happens to contain "<pad>" cannot inject a pad token. Training tokenizers lives in
`training/tasks/` (bpe.py); this module only loads and applies them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch
from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
BOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"
SPECIAL_TOKENS = (BOS_TOKEN, PAD_TOKEN)


def tokenizer_from_json(text: str, source: str = "tokenizer JSON") -> Tokenizer:
    """Parse a tokenizer.json string; errors are a ValueError naming `source`."""
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # the Rust side raises a bare Exception
        raise ValueError(f"{source}: not a valid tokenizer ({str(e).splitlines()[0]})") from None
    missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
    if missing:
        raise ValueError(f"{source}: tokenizer lacks the special tokens {missing}")
    tokenizer.encode_special_tokens = True  # not stored in the JSON
    return tokenizer


def tokenizer_to_json(tokenizer: Tokenizer) -> str:
    """Canonical JSON text of a tokenizer (what tokenizer.json holds)."""
    return json.dumps(json.loads(tokenizer.to_str()), indent=1, ensure_ascii=False) + "\n"


def bos_id(tokenizer: Tokenizer) -> int:
    return tokenizer.token_to_id(BOS_TOKEN)


def pad_id(tokenizer: Tokenizer) -> int:
    return tokenizer.token_to_id(PAD_TOKEN)


def encode(
    tokenizer: Tokenizer, texts: str | Sequence[str], prepend_bos: bool, max_len: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize one text or a list: (tokens int64 [batch, pos] right-padded with <pad>, lengths int64 [batch]).

    With `max_len`, longer texts are cut to their first `max_len` tokens (BOS included).
    """
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts) or not texts:
        raise TypeError("expected a string or a non-empty list of strings")
    bos = [bos_id(tokenizer)] if prepend_bos else []
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
