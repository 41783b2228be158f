"""The token cache: tokenizers, token arrays and Hub samples of text corpora, as files in a folder.

The folder is passed explicitly (the trainer uses `<runs folder>/.token_cache`, training.rundir.
DATA_CACHE_DIR, so the runs of a sweep tokenize a corpus once); with None nothing is cached. Entries
are keyed by a digest of what they were built from and written atomically; an unreadable entry is
rebuilt and overwritten.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tokenizers import Tokenizer

from models.files import atomic_file
from models.tokenizer import tokenizer_from_json, tokenizer_to_json

CACHE_FORMAT = 1  # bump when the cached arrays change meaning


def digest(*parts: object) -> str:
    """A short hex key for the parts (a cache key, or a data fingerprint)."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


def cached_tokenizer(cache: Path | None, key: str, build: Callable[[], Tokenizer]) -> Tokenizer:
    path = None if cache is None else Path(cache) / f"tokenizer-{key}.json"
    if path is not None and path.is_file():
        try:
            return tokenizer_from_json(path.read_text(encoding="utf-8"), str(path))
        except (ValueError, UnicodeDecodeError):
            pass  # unreadable cache entry: rebuild and overwrite it
    tokenizer = build()
    if path is not None:
        with atomic_file(path) as fh:
            fh.write(tokenizer_to_json(tokenizer))
    return tokenizer


def cached_array(cache: Path | None, key: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    path = None if cache is None else Path(cache) / f"tokens-{key}.npy"
    if path is not None and path.is_file():
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError):
            pass
    array = build()
    if path is not None:
        with atomic_file(path, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
    return array


def cached_json(cache: Path | None, key: str, build: Callable[[], Any]) -> Any:
    path = None if cache is None else Path(cache) / f"hub-{key}.json"
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            pass  # unreadable cache entry: load again and overwrite it
    data = build()
    if path is not None:
        with atomic_file(path) as fh:
            json.dump(data, fh)
    return data
