"""The token cache: tokenizers, token arrays and Hub samples of text corpora, as files in a folder.

The folder is passed explicitly (the trainer uses `<runs folder>/.token_cache`, mixit_lab.training.rundir.
DATA_CACHE_DIR, so the runs of a sweep tokenize a corpus once); with None nothing is cached. Entries
are keyed by a digest of what they were built from and written atomically, each with a content hash beside it
(`NAME.sha256`, written after the entry): an entry that is unreadable, altered since it was written, or has no
hash (written by an older version, or cut off before its hash) is rebuilt and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tokenizers import Tokenizer

from mixit_lab.models.files import atomic_file
from mixit_lab.models.tokenizer import tokenizer_from_json, tokenizer_to_json

CACHE_FORMAT = 1  # bump when the cached arrays change meaning


def digest(*parts: object) -> str:
    """A short hex key for the parts (a cache key, or a data fingerprint)."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


def _content_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _hash_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _intact(path: Path | None) -> bool:
    """Whether a cache entry exists and its bytes are those its content hash was written for; says so when not."""
    if path is None or not path.is_file():
        return False
    try:
        if _hash_file(path).read_text(encoding="ascii").strip() == _content_hash(path):
            return True
    except (OSError, UnicodeDecodeError):
        pass
    warnings.warn(f"token cache: {path} does not match its content hash (altered, or written without one): rebuilt",
                  stacklevel=3)
    return False


def _store(path: Path | None, write: Callable[[Any], None], mode: str = "w") -> None:
    """Write a cache entry atomically, then its content hash."""
    if path is None:
        return
    with atomic_file(path, mode) as fh:
        write(fh)
    with atomic_file(_hash_file(path)) as fh:
        fh.write(_content_hash(path))


def cached_tokenizer(cache: Path | None, key: str, build: Callable[[], Tokenizer]) -> Tokenizer:
    path = None if cache is None else Path(cache) / f"tokenizer-{key}.json"
    if _intact(path):
        try:
            return tokenizer_from_json(path.read_text(encoding="utf-8"), str(path))
        except (ValueError, UnicodeDecodeError):
            pass  # unreadable cache entry: rebuild and overwrite it
    tokenizer = build()
    _store(path, lambda fh: fh.write(tokenizer_to_json(tokenizer)))
    return tokenizer


def cached_array(cache: Path | None, key: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    path = None if cache is None else Path(cache) / f"tokens-{key}.npy"
    if _intact(path):
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError):
            pass
    array = build()
    _store(path, lambda fh: np.save(fh, array, allow_pickle=False), "wb")
    return array


def cached_json(cache: Path | None, key: str, build: Callable[[], Any]) -> Any:
    path = None if cache is None else Path(cache) / f"hub-{key}.json"
    if _intact(path):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            pass  # unreadable cache entry: load again and overwrite it
    data = build()
    _store(path, lambda fh: json.dump(data, fh))
    return data
