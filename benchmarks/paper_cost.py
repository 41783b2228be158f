"""What the paper preset costs: FLOPs of every study, measured, and the hours they take on this CPU and
(estimated) on GPUs.

    python benchmarks/paper_cost.py                      # reproduce/presets/paper.yaml
    python benchmarks/paper_cost.py --preset quick       # the same for another preset
    python benchmarks/paper_cost.py --gpu-tflops 989 --mfu 0.3 --scaling 0.9

FLOPs: for each distinct model shape of a study, one training step (forward and backward) of one
sequence is run under torch.utils.flop_counter.FlopCounterMode, which counts every matmul; times
the study's sequences (runs x steps x batch). The optimizer and element-wise work are not counted.

CPU hours: that many FLOPs at the rate this machine reaches on the study's largest shape (timed on
a few training steps of a small batch, all cores, fp32 and bf16 autocast; the faster is used).

GPU hours: the FLOPs at `--mfu` of `--gpu-tflops` (default: an H100's 989 dense bf16 TFLOP/s at 30%);
on 8 GPUs data-parallel with `--scaling` efficiency. These are estimates from stated assumptions, not
measurements: run `mixit train` on the GPU to measure. Small models do not reach that MFU: their time
is set by the per-step latency (kernel launches, the optimizer), so the "optimizer steps" column
bounds it from below (at 100 steps/s, 1M steps take 2.8 hours, however few FLOPs they hold).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from mixit_lab.models import VARIANTS, ModelConfig, build_model  # noqa: E402
from mixit_lab.reproduce.preset import load_preset  # noqa: E402
from mixit_lab.training.tasks import TASKS, get_task  # noqa: E402
from mixit_lab.models.model_extra import grid_extra  # noqa: E402
from mixit_lab.training.sweep import variant_entry  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.precision import autocast_for  # noqa: E402


def shape_of(task: str, params: dict) -> tuple[int, int, int | None]:
    """(sequence length, vocabulary, classes) of a task; text tasks from their parameters, without a corpus."""
    if TASKS[task].needs_corpus:
        classes = len(params.get("classes") or TASKS[task].default_classes) or None
        return params.get("seq_len", 256), params.get("vocab_size", 32000) + 4, classes
    t = get_task(task, **params)
    return t.seq_len, t.d_vocab, None


def study_runs(preset) -> dict[str, list[tuple[TrainConfig, ModelConfig]]]:
    """Every run of every study as (TrainConfig, ModelConfig), built without corpora."""
    out = {}
    for name, spec in preset.studies.items():
        variants = list(VARIANTS) if spec.variants == ["all"] else spec.variants
        runs = []
        for entry, task, size, seed, lr in itertools.product(variants, spec.tasks, spec.sizes, spec.seeds, spec.lrs):
            variant, grid = variant_entry(entry)  # a name, or a grid model {name: {freeze: ..., attention: ...}}
            task_name, params = (task, {}) if isinstance(task, str) else next(iter(task.items()))
            train = {**preset.train, **spec.train}
            train["model_extra"] = grid_extra(train.get("model_extra", {}), grid)
            cfg = TrainConfig(task=task_name, task_params=params or {}, variant=variant, seed=seed, lr=lr,
                              **size, **train)
            n_ctx, vocab, classes = shape_of(task_name, params or {})
            extra = dict(cfg.model_extra)
            if classes:
                extra.update(n_classes=classes, causal=False)
            mcfg = ModelConfig(variant=variant, d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                               n_ctx=n_ctx, d_vocab=vocab, **extra)
            runs.append((cfg, mcfg))
        out[name] = runs
    return out


def loss_of(model, tokens: torch.Tensor) -> torch.Tensor:
    if model.config.n_classes:
        return model.classify(tokens).float().logsumexp(-1).mean()
    return model(tokens).float().logsumexp(-1).mean()


def flops_per_sequence(mcfg: ModelConfig) -> float:
    """Counted matmul FLOPs of one training step (forward + backward) on one sequence."""
    model = build_model(mcfg)
    tokens = torch.randint(0, mcfg.d_vocab, (2, mcfg.n_ctx))
    with FlopCounterMode(display=False) as counter:
        loss_of(model, tokens).backward()
    return counter.get_total_flops() / 2


def cpu_rate(mcfg: ModelConfig, batch: int = 4, steps: int = 3) -> tuple[float, str]:
    """(FLOP/s, precision) this CPU reaches training `mcfg` on `batch` sequences, the faster precision."""
    model = build_model(mcfg)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    tokens = torch.randint(0, mcfg.d_vocab, (batch, mcfg.n_ctx))
    flops = flops_per_sequence(mcfg) * batch
    best = (0.0, "fp32")
    for precision in ("fp32", "bf16"):
        def step():
            with autocast_for(torch.device("cpu"), precision):
                loss = loss_of(model, tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        rate = flops * steps / (time.perf_counter() - t0)
        best = max(best, (rate, precision))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--gpu-tflops", type=float, default=989.0, help="peak dense bf16 TFLOP/s of one GPU (H100 SXM: 989)")
    ap.add_argument("--mfu", type=float, default=0.3, help="fraction of that peak a run reaches")
    ap.add_argument("--scaling", type=float, default=0.9, help="efficiency of 8 GPUs data-parallel")
    args = ap.parse_args()
    torch.manual_seed(0)
    preset = load_preset(args.preset)
    gpu = args.gpu_tflops * 1e12 * args.mfu
    print(f"preset {preset.name}: {torch.get_num_threads()} CPU threads, GPU assumed at {args.mfu:.0%} of "
          f"{args.gpu_tflops:g} TFLOP/s, 8 GPUs at {args.scaling:.0%} scaling\n")
    print("| study | runs | optimizer steps | largest model | PFLOP | CPU: TFLOP/s here | CPU hours | "
          "GPU hours (1 GPU) | wall hours on 8 GPUs |")
    print("|---|---|---|---|---|---|---|---|---|")
    totals = [0.0, 0.0, 0.0, 0.0]
    for study, runs in study_runs(preset).items():
        per_shape: dict[str, float] = {}
        total = 0.0
        for cfg, mcfg in runs:
            key = repr(mcfg.to_dict())
            if key not in per_shape:
                per_shape[key] = flops_per_sequence(mcfg)
            total += per_shape[key] * cfg.steps * cfg.batch_size
        largest = max(runs, key=lambda r: per_shape[repr(r[1].to_dict())])[1]
        rate, precision = cpu_rate(largest)
        cpu_h, gpu_h = total / rate / 3600, total / gpu / 3600
        wall8 = gpu_h / 8 / args.scaling
        totals = [totals[0] + total, totals[1] + cpu_h, totals[2] + gpu_h, totals[3] + wall8]
        shape = f"d{largest.d_model} L{largest.n_layers} T{largest.n_ctx} V{largest.d_vocab}"
        steps = sum(cfg.steps for cfg, _ in runs)
        print(f"| {study} | {len(runs)} | {steps:,} | {shape} | {total / 1e15:,.1f} | {rate / 1e12:.2f} ({precision}) | "
              f"{cpu_h:,.0f} | {gpu_h:,.1f} | {wall8:,.2f} |")
    print(f"| total | | | | {totals[0] / 1e15:,.1f} | | {totals[1]:,.0f} | {totals[2]:,.1f} | {totals[3]:,.2f} |")


if __name__ == "__main__":
    main()
