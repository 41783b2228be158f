"""Training throughput of each variant: time of a full step (forward, backward, AdamW) on random tokens.

    from mixit_lab.training.benchmark import measure_throughput
    df = measure_throughput(["standard", "mixit"], d_model=256, n_layers=4, n_heads=4, seq_len=128,
                            batch_size=32, vocab=512, steps=10, repeats=3, warmup=3, device="auto")

The one implementation behind `benchmarks/bench_models.py` and the speed table of a reproduction
(RUNS_DIR/speed/speed.csv, drawn by mixit_lab.figures.speed). Every variant gets the same config (seed 0) and
the same batch; a step runs under the autocast that training uses for `precision` ("auto": bf16 on CUDA). The time per step is
the median over `repeats` timed blocks of `steps` steps each, after `warmup` untimed steps; the variants
take turns block by block, and each block is compared with standard's block of the same turn.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterable

import pandas as pd
import torch

from mixit_lab.models import VARIANTS, ModelConfig, build_model

from .machine import pick_device
from .precision import autocast_for

COLUMNS = [
    "variant", "params_trainable", "params_frozen", "step_ms", "tokens_per_s", "ms_per_sample",
    "relative_to_standard", "relative_spread", "relative_per_block", "d_model", "n_layers", "n_heads", "seq_len", "batch_size", "device",
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(
    variant: str, d_model: int, n_layers: int, n_heads: int, seq_len: int, batch_size: int, vocab: int,
    device: torch.device, compile: bool = False, precision: str = "auto",
) -> tuple[Callable[[], None], dict[str, int]]:
    """(one training step of a fresh model of `variant` on a fixed random batch, its parameter counts)."""
    cfg = ModelConfig(variant=variant, d_model=d_model, n_layers=n_layers, n_heads=n_heads, n_ctx=seq_len,
                      d_vocab=vocab, seed=0)
    model = build_model(cfg).to(device).train()
    forward = torch.compile(model) if compile else model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    tokens = torch.randint(0, vocab, (batch_size, seq_len), generator=torch.Generator().manual_seed(0)).to(device)

    def step() -> None:
        with autocast_for(device, precision):
            loss = forward(tokens, return_type="loss")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step, model.parameter_counts()


def block_seconds(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Mean seconds per step over one block of `steps` steps."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


def measure_throughput(
    variants: Iterable[str] = tuple(VARIANTS),
    d_model: int = 256,
    n_layers: int = 4,
    n_heads: int = 4,
    seq_len: int = 128,
    batch_size: int = 32,
    vocab: int = 512,
    steps: int = 10,
    repeats: int = 3,
    warmup: int = 3,
    device: str | torch.device = "auto",
    compile: bool = False,
    precision: str = "auto",
) -> pd.DataFrame:
    """One row per variant with the columns COLUMNS (the speed.csv format).

    step_ms: median time of one training step; tokens_per_s = batch_size * seq_len / step time;
    ms_per_sample = step_ms / batch_size; relative_to_standard = the median over turns of the variant's
    block time / standard's - 1 (negative: faster than standard; NaN when standard is not among
    `variants`), relative_spread = the largest minus the smallest of those per-turn ratios (0 for standard).
    """
    variants = list(variants)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(f"variants={unknown or variants!r}: choose from {', '.join(VARIANTS)}")
    for name, value in (("d_model", d_model), ("n_layers", n_layers), ("n_heads", n_heads), ("seq_len", seq_len),
                        ("batch_size", batch_size), ("vocab", vocab), ("steps", steps), ("repeats", repeats)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be a non-negative integer")
    dev = pick_device(str(device))
    steppers = {v: training_step(v, d_model, n_layers, n_heads, seq_len, batch_size, vocab, dev, compile, precision)
                for v in variants}
    for step, _ in steppers.values():
        for _ in range(warmup):
            step()
    # Variants take turns block by block, so a machine that slows down during the stage slows all of them
    # alike, and the per-block ratios to standard show how much the comparison itself moves.
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(repeats):
        for v, (step, _) in steppers.items():
            times[v].append(block_seconds(step, steps, dev))
    rows = []
    for variant, (_, counts) in steppers.items():
        seconds = statistics.median(times[variant])
        ratios = [t / b - 1 for t, b in zip(times[variant], times.get("standard", []))]
        rows.append({
            "variant": variant, "params_trainable": counts["trainable"], "params_frozen": counts["frozen"],
            "step_ms": seconds * 1e3, "tokens_per_s": batch_size * seq_len / seconds,
            "ms_per_sample": seconds * 1e3 / batch_size,
            "relative_to_standard": statistics.median(ratios) if ratios else float("nan"),
            "relative_spread": max(ratios) - min(ratios) if ratios else float("nan"),
            "relative_per_block": " ".join(f"{r:.6f}" for r in ratios),  # each block's ratio: the report's interval
            "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "seq_len": seq_len,
            "batch_size": batch_size, "device": str(dev),
        })
    df = pd.DataFrame(rows)
    return df[COLUMNS]
