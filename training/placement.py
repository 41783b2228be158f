"""Which GPU each local worker trains on: several runs per GPU in the process pool (`mixit sweep` and `mixit
reproduce --runs-per-gpu`, mixit_lab.training.sweep.Executor).

A pool whose runs train on CUDA has one worker slot per run that may train at once: G visible GPUs x N runs per GPU
(`--workers`, when given, caps it). Slot s trains on GPU s % G: its worker starts with CUDA_VISIBLE_DEVICES set to
that one GPU (mixit_lab.training.pool.pool_map's `worker_env`), so CUDA, when it starts in the worker, sees that GPU
alone as cuda:0, and a worker that dies is replaced on the same GPU. The GPUs are this process's own: the entries of
its CUDA_VISIBLE_DEVICES when set (indices, UUIDs or MIG names, passed on as written), else 0..G-1. Runs on the CPU
take none of this: the pool is as it was, `--workers` processes with no environment of their own.

Importing this module imports no torch; `gpus_here` asks torch how many GPUs there are.
"""

from __future__ import annotations

import os

# The default runs per GPU, from docs/benchmarks.md, "The GPU engine's first measurements, on an H200": aggregate
# optimizer steps a second of N processes each training the paper's retrieval shape on one GPU with today's eager
# step were 84 (1), 136 (2), 168 (4), 180 (8), 180 (16). Each process has its own CUDA context and the GPU
# time-slices between contexts (no MPS), so their kernels never overlap: 4 processes give 2.0x one run's rate, 8
# only 2.1x at twice the memory, 16 nothing more.
RUNS_PER_GPU = 4


def check_runs_per_gpu(value: object) -> int:
    """`value` as runs per GPU: ValueError naming it and what is allowed unless it is a whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"runs_per_gpu={value!r} is not allowed: give a whole number >= 1 (how many runs train on "
                         "one GPU at once)")
    return value


def visible_gpus(listed: str | None, count: int) -> list[str]:
    """The GPUs of a process that has `count` CUDA devices, as CUDA_VISIBLE_DEVICES entries: the first `count`
    entries of `listed` (its CUDA_VISIBLE_DEVICES; CUDA stops at the first entry it cannot use), else 0..count-1."""
    if count <= 0:
        return []
    if listed is None:
        return [str(i) for i in range(count)]
    entries = [e.strip() for e in listed.split(",") if e.strip()]
    return entries[:count]


def gpus_here() -> list[str]:
    """visible_gpus of this process: its CUDA_VISIBLE_DEVICES and torch's device count ([] without CUDA)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), count)


def gpu_slots(visible: list[str], runs_per_gpu: int, workers: int | None = None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of each worker slot of a pool on the GPUs `visible`: slot s gets visible[s % G], so
    that no GPU has more than `runs_per_gpu` slots. There are G x runs_per_gpu slots, or `workers` when it is
    smaller (workers: the --workers the user gave; None: not given). ValueError for no GPU or a bad count."""
    check_runs_per_gpu(runs_per_gpu)
    if not visible:
        raise ValueError("no GPU to place runs on: this process sees no CUDA device")
    if workers is not None and workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    most = len(visible) * runs_per_gpu
    return [visible[s % len(visible)] for s in range(most if workers is None else min(workers, most))]


def slot_environments(slots: list[str]) -> list[dict[str, str]]:
    """pool_map's `worker_env` for these slots: each worker sees its own GPU alone."""
    return [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in slots]
