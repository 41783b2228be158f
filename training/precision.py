"""Choosing the arithmetic of a run: fp32 or bf16 autocast, per precision setting and machine.

"fast" asks the CPU: bf16 only where this machine's bf16 matmuls beat its fp32 ones by BF16_MIN_SPEEDUP.
That measurement is kept in a cache folder the caller passes (the trainer passes its runs folder's
mixit_lab.training.rundir.DATA_CACHE_DIR), so that every run beside it decides alike; without one it is measured once
per process.
"""

from __future__ import annotations

import functools
import platform
import time
import warnings
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch

from mixit_lab.models.files import read_json, write_json

from .config import PRECISIONS

# "fast" picks bf16 autocast on a CPU only where this machine's bf16 matmuls beat fp32 by this factor
# (cpu_bf16_speedup): on an AMD EPYC with avx512_bf16 they ran 2-5x fp32, on an Intel Xeon without AMX
# slower than fp32. The margin keeps a machine near parity on fp32, the reference arithmetic.
BF16_MIN_SPEEDUP = 1.25
SPEEDUP_FILE = "bf16_speedup.json"  # in the cache folder passed to cpu_bf16_speedup: {machine key: speedup}


def resolve_precision(precision: str, device: torch.device, cache_dir: str | Path | None = None) -> str:
    """"fp32" or "bf16" for a TrainConfig.precision on `device` ("auto": bf16 on CUDA, fp32 elsewhere;
    "fast": as auto, but bf16 on a CPU where it pays, see cpu_bf16_speedup, which keeps its measurement in
    `cache_dir`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of: {', '.join(PRECISIONS)}")
    if precision == "fast" and device.type == "cpu":
        return "bf16" if cpu_bf16_speedup(cache_dir) >= BF16_MIN_SPEEDUP else "fp32"  # 0.0 without native bf16
    if precision in ("auto", "fast"):
        return "bf16" if device.type == "cuda" else "fp32"
    if precision == "bf16" and device.type not in ("cpu", "cuda"):
        raise ValueError(f"precision='bf16' is supported on cpu and cuda, not {device.type}; use fp32")
    return precision


def autocast_for(device: torch.device, precision: str = "auto") -> AbstractContextManager:
    """Mixed precision for forward passes: bf16 autocast (matmuls in bf16, softmax, norms and losses in fp32)
    when `precision` resolves to bf16, else full precision. Weights and optimizer state stay fp32.

    The trainer passes the precision it resolved once ("fp32" or "bf16"); "fast" here decides without a cache."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (avx512_bf16 / AMX, through oneDNN); without it bf16 is emulated."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def _cpu_name() -> str:
    """The CPU's model name (read once: a machine's key in the speedup cache)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _measure_bf16_speedup(rounds: int = 7) -> float:
    """fp32 time / bf16 time of matmuls of a width-64 to 256 model's training shapes, median over rounds
    that alternate the two, on one thread (a property of the core, and what each preset worker uses)."""
    shapes = ((2048, 64, 256), (2048, 256, 64), (512, 256, 1024))
    pairs = {dt: [(torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt)) for m, k, n in shapes]
             for dt in (torch.float32, torch.bfloat16)}

    def seconds(dtype: torch.dtype) -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            for a, b in pairs[dtype]:
                a @ b
        return time.perf_counter() - t0

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds(torch.float32), seconds(torch.bfloat16)  # warm-up
        ratios = sorted(seconds(torch.float32) / seconds(torch.bfloat16) for _ in range(rounds))
    finally:
        torch.set_num_threads(threads)
    return ratios[len(ratios) // 2]


_BF16_SPEEDUP: dict[str, float] = {}  # this process's answers, by machine key


def cpu_bf16_speedup(cache_dir: str | Path | None = None) -> float:
    """How many times faster this CPU's bf16 matmuls run than its fp32 ones (0.0 without native bf16).

    Measured once per machine and torch version. With a cache folder the answer is kept in
    `cache_dir`/SPEEDUP_FILE and read from there first: every run that shares the folder then decides alike,
    even where a measurement would land near BF16_MIN_SPEEDUP. Without one, once per process."""
    key = f"{_cpu_name()} | torch {torch.__version__}"
    path = None if cache_dir is None else Path(cache_dir) / SPEEDUP_FILE
    known = _read_speedups(path)
    if isinstance(known.get(key), (int, float)):  # the folder's answer
        _BF16_SPEEDUP[key] = float(known[key])
        return _BF16_SPEEDUP[key]
    if key not in _BF16_SPEEDUP:
        _BF16_SPEEDUP[key] = _measure_bf16_speedup() if cpu_has_bf16() else 0.0
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {**known, key: _BF16_SPEEDUP[key]})
        except OSError:
            pass  # a read-only folder: measured again by the next process
    return _BF16_SPEEDUP[key]


def _read_speedups(path: Path | None) -> dict:
    """The speedups kept in `path`, by machine key ({} for no file, or one that cannot be read)."""
    try:
        return read_json(path) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}


def warn_if_emulated(precision: str, device: torch.device) -> None:
    """Warn when a resolved bf16 precision runs on a CPU without native bf16 (emulated, likely slower)."""
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        warnings.warn("precision='bf16' on a CPU without native bf16 (avx512_bf16 or AMX): emulated, "
                      "likely slower than fp32", stacklevel=2)
