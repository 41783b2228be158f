"""Where a preset's training time goes: each run's step split into data, forward, backward, clipping and the
optimizer, and how much of it is a fixed per-step cost that does not grow with the batch.

    python benchmarks/bench_phases.py                        # the quick preset, 1 thread (as each of its workers)
    python benchmarks/bench_phases.py --studies memorize depth-random --steps 100

For every distinct run of the preset (seeds share a shape, so seed 0 stands for them) it builds the model,
task stream and optimizer as the trainer does (`build_optimizer`, `TrainStream`, `autocast_for` in the
preset's precision, `keep_freed_memory()`) and times `--steps` steps after a warm-up, each phase on its own
clock. The same step at batch 1 gives the fixed cost: Python, dispatch and per-tensor work that a smaller or
stacked batch cannot remove. The last table weighs each run by its steps and seeds, so it estimates how the
preset's summed training time divides between phases and between fixed and size-proportional work.
Text studies need their corpus in ../shared/data (they are skipped otherwise; no download is tried).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mixit_lab.models import build_model  # noqa: E402
from mixit_lab.models.seeds import derive_seed  # noqa: E402
from mixit_lab.reproduce.corpora import choose_text  # noqa: E402
from mixit_lab.reproduce.pipeline import preset_runs  # noqa: E402
from mixit_lab.reproduce.preset import TEXT_KINDS, load_preset  # noqa: E402
from mixit_lab.training.tasks import TrainStream  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.loss import task_loss  # noqa: E402
from mixit_lab.training.machine import keep_freed_memory, pick_device  # noqa: E402
from mixit_lab.training.optim import build_optimizer  # noqa: E402
from mixit_lab.training.precision import autocast_for  # noqa: E402
from mixit_lab.training.resolve import resolve  # noqa: E402

PHASES = ("data", "forward", "backward", "clip", "optimizer")


def no_hub(name: str) -> None:
    raise RuntimeError("not tried (benchmark)")


def time_phases(cfg: TrainConfig, batch_size: int, steps: int, warmup: int, cache: Path) -> dict[str, float]:
    """Mean ms per step of each phase of the trainer's step for `cfg` at `batch_size`."""
    task = cfg.build_task(cache)
    device = pick_device("cpu")
    model = build_model(resolve(cfg, task=task, device=False).model).to(device)
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, device)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    stream = TrainStream(task, batch_size, seed=derive_seed(cfg.seed, "data"), eval_n=cfg.eval_samples)
    spent = collections.Counter()
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        batch = stream.next()
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr_at(step)
        t1 = time.perf_counter()
        with autocast_for(device, cfg.precision):
            loss = task_loss(model, task, batch)
        loss.item()
        t2 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip or float("inf"))
        bool(torch.isfinite(norm))
        t4 = time.perf_counter()
        optimizer.step()
        t5 = time.perf_counter()
        if step >= warmup:
            for name, seconds in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                spent[name] += seconds * 1000 / steps
    return dict(spent)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="quick", help="a preset name or YAML file (default: quick)")
    ap.add_argument("--studies", nargs="+", help="only these studies (default: all)")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per run and batch size")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=".token_cache", help="where text tasks cache their tokens")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    warnings.filterwarnings("ignore", message="TrainStream:")  # a small task's eval-set overlap, as in the preset
    preset = load_preset(args.preset)
    text = {kind: choose_text(kind, None, hub_check=no_hub) for kind in TEXT_KINDS}
    runs = preset_runs(preset, text)
    seeds = collections.Counter()
    chosen: dict[tuple, tuple[str, TrainConfig]] = {}
    for name, cfg in runs:
        study = name.split("/")[0]
        if args.studies and study not in args.studies:
            continue
        key = (study, repr({**cfg.to_dict(), "seed": 0}))
        seeds[key] += 1
        chosen.setdefault(key, (name, cfg))
    skipped = [c.note for c in text.values() if c.skipped]
    print(f"preset {preset.name}: {len(chosen)} distinct runs, {args.threads} thread(s), {args.steps} steps each"
          + (f"; {'; '.join(skipped)}" if skipped else ""))
    print("\n| run | precision | ms/step | data | forward | backward | clip | optimizer | batch-1 step (fixed) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    weighted = collections.Counter()
    fixed_total = total = 0.0
    for key, (name, cfg) in chosen.items():
        full = time_phases(cfg, cfg.batch_size, args.steps, args.warmup, Path(args.cache))
        one = time_phases(cfg, 1, args.steps, args.warmup, Path(args.cache))
        step_ms, fixed_ms = sum(full.values()), sum(one.values())
        weight = cfg.steps * seeds[key] / 1000  # seconds of the preset's summed training time per ms of step
        for phase in PHASES:
            weighted[phase] += full[phase] * weight
        total += step_ms * weight
        fixed_total += min(fixed_ms, step_ms) * weight
        shares = " | ".join(f"{100 * full[p] / step_ms:.0f}%" for p in PHASES)
        label = name.rsplit("__lr", 1)[0]  # study/run name without its lr and seed
        print(f"| {label} | {cfg.precision} | {step_ms:.1f} | {shares} | {fixed_ms:.1f} ({100 * fixed_ms / step_ms:.0f}%) |",
              flush=True)
    print(f"\nThe preset's training time, estimated from these steps (sum over runs and seeds, evaluation left out): "
          f"{total:,.0f} s")
    print("| phase | seconds | share |")
    print("|---|---:|---:|")
    for phase in PHASES:
        print(f"| {phase} | {weighted[phase]:,.0f} | {100 * weighted[phase] / total:.0f}% |")
    print(f"| of which fixed per-step cost (a batch-1 step) | {fixed_total:,.0f} | {100 * fixed_total / total:.0f}% |")


if __name__ == "__main__":
    main()
