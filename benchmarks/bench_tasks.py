"""Time every task generator: median time per 1,000-sample batch (default parameters).

Usage: python benchmarks/bench_tasks.py [--batch 1000] [--repeats 25] [--threads N]

Prints, per task, the median (and min) wall time of `task.sample(batch, generator)`
and of `TrainStream.next()` (which adds the eval-set filter), after one warm-up call.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere without installing

from mixit_lab.training.tasks import TASKS, TrainStream, get_task  # noqa: E402


def time_call(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, median of {args.repeats}")
    print(f"{'task':<10} {'params':<42} {'seq_len':>7} {'d_vocab':>7} {'sample ms':>10} {'(min)':>7} {'stream ms':>10}")
    for name in TASKS:
        task = get_task(name)
        generator = torch.Generator().manual_seed(0)
        med, low = time_call(lambda: task.sample(args.batch, generator), args.repeats)
        stream = TrainStream(task, batch_size=args.batch, seed=0)
        stream_med, _ = time_call(stream.next, args.repeats)
        params = ", ".join(f"{k}={v}" for k, v in task.params.items())
        print(
            f"{name:<10} {params:<42} {task.seq_len:>7} {task.d_vocab:>7} "
            f"{med * 1e3:>10.3f} {low * 1e3:>7.3f} {stream_med * 1e3:>10.3f}"
        )


if __name__ == "__main__":
    main()
