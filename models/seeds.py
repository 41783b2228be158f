"""Seeds derived from a run's one seed, so that each consumer (weights, MixiT's matrices, the data stream) draws
from its own generator and adding one never shifts another's numbers."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, *tags: object) -> int:
    """A stable 63-bit seed from a base seed and tags (Python's hash() is salted per process)."""
    digest = hashlib.sha256(repr((seed, *tags)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
