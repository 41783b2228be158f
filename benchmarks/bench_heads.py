"""Time `mixit_lab.analysis.heads.head_scores` (all scores of every head, copying included) per variant.

    python benchmarks/bench_heads.py                       # 4 layers, 8 heads, d_model 128, 64 sequences of 2 x 64
    python benchmarks/bench_heads.py --d-model 256 --variants standard mixit --device cuda

Prints one line per variant: the median wall time of one head_scores call over --repeats calls
(after one warm-up call), and the same for mixit_lab.analysis.attention.attention_stats on 64 random
sequences of the same length for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mixit_lab.analysis.attention import attention_stats  # noqa: E402
from mixit_lab.analysis.heads import head_scores  # noqa: E402
from mixit_lab.models import VARIANTS, ModelConfig, build_model  # noqa: E402


def timed(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--n-heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--n-seqs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=64, help="length of r; sequences are [r, r]")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}; "
          f"{args.n_layers} layers x {args.n_heads} heads, d_model {args.d_model}, "
          f"{args.n_seqs} sequences of 2 x {args.seq_len} tokens")
    for variant in args.variants:
        cfg = ModelConfig(variant=variant, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                          n_ctx=2 * args.seq_len, d_vocab=args.vocab, seed=0)
        model = build_model(cfg).to(device)
        heads_s = timed(lambda: head_scores(model, n_seqs=args.n_seqs, seq_len=args.seq_len), args.repeats, device)
        stats_s = timed(lambda: attention_stats(model, n_seqs=args.n_seqs), args.repeats, device)
        print(f"{variant:>10}  head_scores {heads_s * 1000:7.1f} ms   attention_stats {stats_s * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
