"""The machine a run uses: which device, and glibc's malloc settings for a CPU training process."""

from __future__ import annotations

import sys

import torch


def pick_device(name: str = "auto") -> torch.device:
    """The torch device for a TrainConfig.device ("auto": CUDA if there is one, else the CPU); ValueError if absent."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} requested but CUDA is not available")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={name!r} requested but MPS is not available")
    return device


# glibc malloc settings of keep_freed_memory(), by tunable name (also usable as GLIBC_TUNABLES=glibc.malloc.NAME=...).
KEPT_MALLOC_SETTINGS = {"mmap_threshold": 32 << 20, "trim_threshold": 1 << 30, "top_pad": 64 << 20}


def keep_freed_memory(keep: bool = True) -> bool:
    """Let glibc's malloc keep freed blocks (up to 32 MB each) for reuse instead of giving them back.

    A training step frees and reallocates the same activation buffers every step. With glibc's
    defaults many go back to the OS and return as fresh pages, about 1,700 page faults per step for a
    k-hop model of the quick preset; kept, about 20, and the step is 5-10% faster on a 2-core VM
    (benchmarks/bench_kernels.py). `keep=False` restores glibc's default thresholds. Returns whether
    the setting applied (glibc on Linux only; elsewhere nothing changes).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    option = {"mmap_threshold": -3, "trim_threshold": -1, "top_pad": -2}  # M_MMAP_THRESHOLD, ... in malloc.h
    values = KEPT_MALLOC_SETTINGS if keep else dict.fromkeys(KEPT_MALLOC_SETTINGS, 128 << 10)
    return all(mallopt(option[name], value) for name, value in values.items())
