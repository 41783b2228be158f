"""Tokenizers for text tasks: byte-level BPE trained on the training split only, or plain bytes (256 +
2 special tokens); all byte-level, so every text round-trips exactly. "bpe" splits words before merging as GPT-2
does; "bpe-llama3" as Llama 3's tokenizer does (its split pattern: contractions case-insensitively, numbers in
groups of up to three digits), the tokenizer the authors' pipeline feeds their models, trained here on the
training split like "bpe". Also encoding a corpus into
token arrays. The tokenizer is attached to the model and saved with its checkpoint (models/tokenizer.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mixit_lab.models.tokenizer import SPECIAL_TOKENS, bos_id, pad_id, tokenizer_from_json, tokenizer_to_json

from .cache import CACHE_FORMAT, cached_tokenizer, digest as _digest

TOKENIZERS = ("bpe", "byte", "bpe-llama3")
# Llama 3's pre-tokenizer split (its tokenizer.json); the bytes of each piece are then the BPE's alphabet
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
DEFAULT_VOCAB_SIZE = 4096  # BPE
MIN_BPE_VOCAB = 256 + len(SPECIAL_TOKENS) + 1  # at least one merge


# --------------------------------------------------------------------------- tokenizers
def _byte_chars() -> list[str]:
    """The printable character that byte-level tokenizers use for each byte value 0..255 (GPT-2's map)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), 256))
    chars, shifted = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + shifted))
            shifted += 1
    return chars


def _byte_level(tokenizer: Tokenizer, split: str = "gpt2") -> Tokenizer:
    if split == "llama3":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(tokenizers.Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def byte_tokenizer() -> Tokenizer:
    """Bytes as tokens: ids 0, 1 are <|endoftext|>, <pad>; id 2 + b is byte b."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + b for b, ch in enumerate(_byte_chars())})
    tokenizer = _byte_level(Tokenizer(models.BPE(vocab=vocab, merges=[])))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer_from_json(tokenizer.to_str())


def train_bpe(documents: list[str], vocab_size: int, split: str = "gpt2") -> Tokenizer:
    """A byte-level BPE tokenizer of at most `vocab_size` tokens (ids 0, 1 special) trained on `documents`, words
    split before merging as GPT-2 ("gpt2") or Llama 3 ("llama3") split them.

    Merges need a pair seen at least twice, so a small corpus can give fewer than `vocab_size` tokens.
    """
    tokenizer = _byte_level(Tokenizer(models.BPE()), split)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tokenizer_from_json(tokenizer.to_str())


def get_tokenizer(kind: str, vocab_size: int, train_texts: list[str], train_hash: str,
                  cache: Path | None = None) -> Tokenizer:
    """The tokenizer for a corpus: cached in `cache` by (training text, kind, vocab size, library version)."""
    if kind == "byte":
        return byte_tokenizer()
    split = "llama3" if kind == "bpe-llama3" else "gpt2"
    key = _digest(*(("bpe",) if split == "gpt2" else ("bpe", split)), vocab_size, tokenizers.__version__, train_hash,
                  CACHE_FORMAT)
    return cached_tokenizer(cache, key, lambda: train_bpe(train_texts, vocab_size, split))


def _token_dtype(tokenizer: Tokenizer) -> type:
    return np.uint16 if tokenizer.get_vocab_size() <= 2**16 else np.int32


def _encode_all(tokenizer: Tokenizer, texts: list[str], chunk: int = 2048) -> list[list[int]]:
    out: list[list[int]] = []
    for start in range(0, len(texts), chunk):
        out += [e.ids for e in tokenizer.encode_batch_fast(texts[start : start + chunk], add_special_tokens=False)]
    return out


def encode_documents(tokenizer: Tokenizer, documents: list[str]) -> np.ndarray:
    """One token stream: every document preceded by <|endoftext|> (1-D uint16, or int32 for big vocabularies)."""
    bos, dtype = bos_id(tokenizer), _token_dtype(tokenizer)
    parts = [np.asarray([bos] + ids, dtype=dtype) for ids in _encode_all(tokenizer, documents)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def encode_rows(tokenizer: Tokenizer, texts: list[str], seq_len: int) -> np.ndarray:
    """[n, seq_len] rows: <|endoftext|> + the text's tokens, cut to seq_len, right-padded with <pad>."""
    rows = np.full((len(texts), seq_len), pad_id(tokenizer), dtype=_token_dtype(tokenizer))
    bos = bos_id(tokenizer)
    for i, ids in enumerate(_encode_all(tokenizer, texts)):
        row = ([bos] + ids)[:seq_len]
        rows[i, : len(row)] = row
    return rows


def _tokenizer_hash(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(tokenizer_to_json(tokenizer).encode()).hexdigest()
