"""The trainer's stack of runs (training/stack.py, `mixit sweep --stack N`) against each run's own step, on this
machine: ms for one optimizer step of K runs, taken one run after another (the trainer's own step, as `train` takes
it) and as one stacked step (`StackedStep`, as `train_stack` takes it).

    python benchmarks/bench_stack.py                      # retrieval, standard and mixit, K = 1, 4, 16, width 16
    python benchmarks/bench_stack.py --d-model 64 --batch 128 --runs 1 4

At width 16 and batch 4 the arithmetic is nothing and a step is its dispatch: what the host does for each step, which
on a GPU is what sets the pace of the paper's small models. There, K runs' own steps cost K times one run's host time,
and a stack's step the host time printed for K (its kernels are as many as one run's, K times as wide). On a CPU the
arithmetic of every run is done by the same cores either way, so a stack does not pay here at larger sizes (see
docs/benchmarks.md, "Runs stacked in one process"). Each figure is the median of --repeats blocks of --steps steps,
the two ways alternating, one torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.machine import keep_freed_memory  # noqa: E402
from mixit_lab.training.parallel import Ranks  # noqa: E402
from mixit_lab.training.stack import StackedStep  # noqa: E402
from mixit_lab.training.trainer import RunLoop, open_loop  # noqa: E402


def opened(cfg: TrainConfig, k: int, work: Path) -> list[RunLoop]:
    """k runs of `cfg` (seeds 0..k-1) opened as the trainer opens them, about to step."""
    loops = [open_loop(TrainConfig.from_dict({**cfg.to_dict(), "seed": i}), work / f"r{i}", False, None,
                       torch.device("cpu"), Ranks(), stacked=True) for i in range(k)]
    for loop in loops:
        loop.begin(False, None)
    return loops


def one_by_one(loops: list[RunLoop]) -> Callable[[], None]:
    """A step of every run, one after another, each its trainer's own step."""
    def step() -> None:
        for loop in loops:
            with loop.model.trusted_inputs():
                loop._train_step(loop.stream.next())
            loop.n_pending = 0  # the read at a log, without its sync: the buffer is reused
    return step


def stacked(loops: list[RunLoop]) -> Callable[[], None]:
    """A step of every run as one stacked step."""
    stack = StackedStep(loops)

    def step() -> None:
        stack.step([loop.stream.next() for loop in loops], [loop.cfg.lr for loop in loops])
        for loop in loops:
            loop.n_pending = 0
    return step


def median_ms(ways: list[Callable[[], None]], steps: int, repeats: int) -> list[float]:
    """Each way's median ms a step over `repeats` blocks of `steps` steps, the ways alternating block by block."""
    times: list[list[float]] = [[] for _ in ways]
    for way in ways:
        way()  # warm up
    for _ in range(repeats):
        for i, way in enumerate(ways):
            t0 = time.perf_counter()
            for _ in range(steps):
                way()
            times[i].append((time.perf_counter() - t0) / steps * 1e3)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["standard", "mixit"])
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 16], help="K: runs a stack")
    parser.add_argument("--d-model", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()  # as the trainer does on a CPU
    print(f"retrieval, width {args.d_model}, 2 layers, batch {args.batch}, fp32, 1 thread; ms a step of all K runs")
    print(f"{'variant':<10} {'K':>3} {'one by one':>11} {'stacked':>9} {'ratio':>6}")
    for variant in args.variants:
        cfg = TrainConfig(task="retrieval", variant=variant, d_model=args.d_model, n_layers=2, n_heads=2,
                          batch_size=args.batch, steps=10**6, log_every=10**6, eval_samples=16, device="cpu",
                          precision="fp32")
        for k in args.runs:
            with tempfile.TemporaryDirectory() as work:
                alone, together = opened(cfg, k, Path(work) / "a"), opened(cfg, k, Path(work) / "s")
                a, s = median_ms([one_by_one(alone), stacked(together)], args.steps, args.repeats)
            print(f"{variant:<10} {k:>3} {a:>11.2f} {s:>9.2f} {a / s:>5.2f}x", flush=True)


if __name__ == "__main__":
    main()
