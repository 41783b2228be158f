"""Training throughput of each variant: time of a full step (forward, backward, AdamW) on random tokens.

    from training.benchmark import measure_throughput
    df = measure_throughput(["standard", "mixit"], d_model=256, n_layers=4, n_heads=4, seq_len=128,
                            batch_size=32, vocab=512, steps=10, repeats=3, warmup=3, device="auto")

The one implementation behind `benchmarks/bench_models.py` and the speed table of a reproduction
(RUNS_DIR/speed/speed.csv, drawn by figures.speed). Every variant gets the same config (seed 0) and
the same batch; a step runs under the autocast that training uses for `precision` ("auto": bf16 on CUDA). The time per step is
the median over `repeats` timed blocks of `steps` steps each, after `warmup` untimed steps.
"""

from __future__ import annotations

import statistics
import time
from typing import Iterable

import pandas as pd
import torch

from models import VARIANTS, ModelConfig, build_model

from .trainer import autocast_for, pick_device

COLUMNS = [
    "variant", "params_trainable", "params_frozen", "step_ms", "tokens_per_s", "ms_per_sample",
    "relative_to_standard", "d_model", "n_layers", "n_heads", "seq_len", "batch_size", "device",
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_seconds(
    variant: str, d_model: int, n_layers: int, n_heads: int, seq_len: int, batch_size: int, vocab: int,
    steps: int, repeats: int, warmup: int, device: torch.device, compile: bool = False, precision: str = "auto",
) -> tuple[float, dict[str, int]]:
    """(median seconds per training step, parameter counts) of one variant."""
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

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times), model.parameter_counts()


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
    ms_per_sample = step_ms / batch_size; relative_to_standard = ms_per_sample / standard's - 1
    (negative: faster than standard; NaN when standard is not among `variants`).
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
    rows = []
    for variant in variants:
        seconds, counts = step_seconds(variant, d_model, n_layers, n_heads, seq_len, batch_size, vocab, steps,
                                       repeats, warmup, dev, compile, precision)
        rows.append({
            "variant": variant, "params_trainable": counts["trainable"], "params_frozen": counts["frozen"],
            "step_ms": seconds * 1e3, "tokens_per_s": batch_size * seq_len / seconds,
            "ms_per_sample": seconds * 1e3 / batch_size,
            "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "seq_len": seq_len,
            "batch_size": batch_size, "device": str(dev),
        })
    df = pd.DataFrame(rows)
    base = df.loc[df["variant"] == "standard", "ms_per_sample"]
    df["relative_to_standard"] = df["ms_per_sample"] / float(base.iloc[0]) - 1 if len(base) else float("nan")
    return df[COLUMNS]
