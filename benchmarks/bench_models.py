"""Training throughput of every variant: tokens/s for a full step (forward, backward, AdamW).

    python benchmarks/bench_models.py                      # d_model 256, 4 layers, seq 128, batch 32
    python benchmarks/bench_models.py --device cuda --d-model 512 --n-layers 12 --seq 256
    python benchmarks/bench_models.py --csv speed.csv      # also write the table (the speed.csv format)

Prints one line per variant with parameter counts, tokens/s and time per sample relative to
standard (the paper reports frozen_qk and mixit as 23.9% and 32.0% faster per sample). The
measurement is mixit_lab.training.benchmark.measure_throughput.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mixit_lab.models import VARIANTS  # noqa: E402
from mixit_lab.training.benchmark import measure_throughput  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--steps", type=int, default=10, help="steps per timed repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--csv", type=Path, default=None, help="write the table to this CSV file")
    args = p.parse_args()
    df = measure_throughput(args.variants, d_model=args.d_model, n_layers=args.n_layers, n_heads=args.n_heads,
                            seq_len=args.seq, batch_size=args.batch, vocab=args.vocab, steps=args.steps,
                            repeats=args.repeats, warmup=args.warmup, device=args.device, compile=args.compile)
    print(f"device={df['device'].iloc[0]} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"d_model={args.d_model} n_layers={args.n_layers} n_heads={args.n_heads} seq={args.seq} "
          f"batch={args.batch} vocab={args.vocab}")
    print(f"{'variant':<11}{'trainable':>11}{'frozen':>10}{'step ms':>10}{'tokens/s':>12}{'ms/sample':>11}"
          f"{'time vs standard':>18}")
    for r in df.itertuples():
        rel = "—" if math.isnan(r.relative_to_standard) else f"{r.relative_to_standard:+.1%}"
        print(f"{r.variant:<11}{r.params_trainable:>11,}{r.params_frozen:>10,}{r.step_ms:>10.1f}"
              f"{r.tokens_per_s:>12,.0f}{r.ms_per_sample:>11.3f}{rel:>18}")
    if args.csv is not None:
        df.to_csv(args.csv, index=False)
        print(f"table written to {args.csv}")


if __name__ == "__main__":
    main()
