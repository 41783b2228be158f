"""Three CPU choices of the training step, measured side by side in one process.

    python benchmarks/bench_kernels.py                 # 1 thread, as each worker of a sweep
    python benchmarks/bench_kernels.py --threads 2 --repeats 8

1. Attention: fused `scaled_dot_product_attention` vs the plain ops (q k^T, masked softmax, @ v), forward
   and backward, in fp32 and bf16, at the quick preset's attention shapes and the two of
   benchmarks/bench_step.py; q, k and v are views of one [batch, pos, 3, head, d_head] projection, as in
   the model. "plain" takes the softmax along the last dimension; "keys-first" computes the scores as
   [batch, head, key, query] and takes it along dimension -2; "keys-outer" copies them to
   [key, batch, head, query] and takes it along dimension 0 (vectorised over everything else). The model
   takes the plain ops on CPU up to `MATH_ATTENTION_MAX_LEN[dtype]` positions, keys-outer up to
   `KEYS_OUTER_MAX_LEN`, keys-first up to `KEYS_FIRST_MAX_LEN`.
2. MixiT's mixing, forward and backward: each head's fixed [query, key] matrix broadcast over the batch
   (batch x head tiny matmuls) vs one matmul per head with the values laid out [head, key, batch * d_head],
   which the model uses up to `MIX_PER_HEAD_MAX_D_HEAD`.
3. Memory: one training step of a quick-preset k-hop model with glibc malloc's default thresholds vs
   `keep_freed_memory()`, with the minor page faults per step, in a process of its own (a fresh allocator).

Blocks of steps alternate between the choices and the median block is reported: on a shared machine,
only alternating measurements are comparable.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mixit_lab.models.attention.kernels import (  # noqa: E402
    KEYS_FIRST_MAX_LEN, KEYS_OUTER_MAX_LEN, MATH_ATTENTION_MAX_LEN, MIX_PER_HEAD_MAX_D_HEAD)
from mixit_lab.training.tasks import TrainStream  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.loss import task_loss  # noqa: E402
from mixit_lab.training.machine import keep_freed_memory  # noqa: E402
from mixit_lab.training.resolve import resolve  # noqa: E402
from mixit_lab.models import build_model  # noqa: E402

# (batch, heads, positions, d_head): memorize, modular addition, 3-digit addition (16 heads),
# retrieval (8 pairs), k-hop, the LM study; bench_step.py's algorithmic and LM shapes.
ATTENTION_SHAPES = [(512, 4, 3, 4), (128, 4, 5, 16), (128, 16, 13, 4), (128, 4, 19, 16), (128, 4, 33, 16),
                    (32, 4, 64, 32), (1000, 4, 34, 32), (32, 8, 128, 32)]


def fused(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def causal_bias(t: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(t, t, dtype=dtype).masked_fill_(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))


def plain(q, k, v, scale):
    scores = (q @ k.transpose(-1, -2)) * scale + causal_bias(q.shape[-2], q.dtype)
    return torch.softmax(scores, dim=-1) @ v


def keys_first(q, k, v, scale):
    scores_kq = (k @ q.transpose(-1, -2)) * scale + causal_bias(q.shape[-2], q.dtype).T
    return torch.softmax(scores_kq, dim=-2).transpose(-1, -2) @ v


def keys_outer(q, k, v, scale):
    scores = torch.add(causal_bias(q.shape[-2], q.dtype).T[:, None, None, :],
                       (k @ q.transpose(-1, -2)).permute(2, 0, 1, 3).contiguous(), alpha=scale)
    return torch.softmax(scores, dim=0).permute(1, 2, 3, 0) @ v


def alternate(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds per block for each callable, blocks alternating; one warm-up round first."""
    times = {name: [] for name in fns}
    for r in range(repeats + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def longest_winning(rows: list[tuple[int, float]]) -> int | None:
    """The largest size s such that the candidate won (ratio < 1) at every measured size up to s; None if it lost at
    the smallest. rows: (size, candidate time / incumbent time)."""
    best = None
    for size, ratio in sorted(rows):
        if ratio >= 1:
            break
        best = size
    return best


def attention_table(repeats: int, calls: int) -> dict[str, list[tuple[int, float]]]:
    """Print the attention comparison; return, per choice, (positions, ratio) rows for the thresholds."""
    def limits(table):
        return ", ".join(f"{str(k).removeprefix('torch.')} {v}" for k, v in table.items())

    print(f"attention, forward + backward, ms per call (plain ops up to {limits(MATH_ATTENTION_MAX_LEN)} positions; "
          f"keys-outer up to {KEYS_OUTER_MAX_LEN}; keys-first up to {KEYS_FIRST_MAX_LEN})")
    print(f"{'batch, heads, pos, d_head':>28} {'dtype':>6} {'fused sdpa':>11} {'plain':>8} {'keys-first':>11} "
          f"{'best/fused':>11} {'keys-outer':>11} {'outer/first':>12}")
    found: dict[str, list[tuple[int, float]]] = {}
    for B, H, T, E in ATTENTION_SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            qkv = torch.randn(B, T, 3, H, E, dtype=dtype, requires_grad=True)
            grad = torch.randn(B, H, T, E, dtype=dtype)
            reps = max(1, calls * 128 * 64 // (B * T * max(T, 16)))  # fewer calls for the big shapes

            def block(fn):
                def run():
                    for _ in range(reps):
                        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
                        fn(q, k, v, E**-0.5).backward(grad)
                return run

            med = alternate({"fused": block(fused), "plain": block(plain), "keys-first": block(keys_first),
                             "keys-outer": block(keys_outer)}, repeats)
            ms = {name: sec / reps * 1e3 for name, sec in med.items()}
            best = min(ms["plain"], ms["keys-first"], ms["keys-outer"])
            print(f"{str((B, H, T, E)):>28} {str(dtype).removeprefix('torch.'):>6} {ms['fused']:>11.2f} "
                  f"{ms['plain']:>8.2f} {ms['keys-first']:>11.2f} {best / ms['fused']:>11.2f} "
                  f"{ms['keys-outer']:>11.2f} {ms['keys-outer'] / ms['keys-first']:>12.2f}")
            found.setdefault(f"plain {str(dtype).removeprefix('torch.')}", []).append((T, best / ms["fused"]))
            if dtype == torch.float32:
                found.setdefault("keys-outer", []).append((T, ms["keys-outer"] / ms["keys-first"]))
    return found


# (batch, heads, positions, d_head) of the quick preset's MixiT runs: memorization, 3-digit addition and depth
# (16 heads of width 4), retrieval, k-hop, the LM study; bench_step.py's algorithmic shape.
MIXING_SHAPES = [(512, 4, 2, 4), (128, 16, 13, 4), (128, 16, 9, 4), (128, 4, 19, 16), (128, 16, 33, 4),
                 (32, 4, 64, 32), (1000, 4, 34, 32)]


def mix_broadcast(A, v):
    return (A @ v.transpose(1, 2)).transpose(1, 2)


def mix_per_head(A, v):
    b, t, h, e = v.shape
    return (A @ v.permute(2, 1, 0, 3).reshape(h, t, b * e)).view(h, t, b, e).permute(2, 1, 0, 3)


def mixing_table(repeats: int, calls: int) -> list[tuple[int, float]]:
    """Print the mixing comparison; return (d_head, per head / broadcast) rows in fp32 for the threshold."""
    print("MixiT mixing, forward + backward (and the output projection's input copy), ms per call "
          f"(per head used up to d_head {MIX_PER_HEAD_MAX_D_HEAD})")
    print(f"{'batch, heads, pos, d_head':>28} {'dtype':>6} {'broadcast':>10} {'per head':>9} {'per head/broadcast':>19}")
    found = []
    for B, H, T, E in MIXING_SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            A = torch.randn(H, T, T, dtype=dtype).tril()
            v = torch.randn(B, T, H, E, dtype=dtype, requires_grad=True)
            grad = torch.randn(B, T, H * E, dtype=dtype)
            reps = max(1, calls * 128 * 64 // (B * T * max(T, 16)))

            def block(fn):
                def run():
                    for _ in range(reps):
                        fn(A, v).reshape(B, T, H * E).backward(grad)
                return run

            med = alternate({"broadcast": block(mix_broadcast), "per head": block(mix_per_head)}, repeats)
            ms = {name: sec / reps * 1e3 for name, sec in med.items()}
            print(f"{str((B, H, T, E)):>28} {str(dtype).removeprefix('torch.'):>6} {ms['broadcast']:>10.2f} "
                  f"{ms['per head']:>9.2f} {ms['per head'] / ms['broadcast']:>19.2f}")
            if dtype == torch.float32:
                found.append((E, ms["per head"] / ms["broadcast"]))
    return found


def print_thresholds(attention: dict[str, list[tuple[int, float]]], mixing: list[tuple[int, float]]) -> None:
    """The thresholds of models/attention/kernels.py beside what this machine's measurements would set them to: the
    largest measured size up to which the faster path won at every measured size (a lower bound: the measured
    sizes are few)."""
    def show(value: int | None) -> str:
        return "never (it lost at the smallest size)" if value is None else str(value)

    print("thresholds: models/attention/kernels.py (tuned on a 2-core AMD EPYC) | what this machine's measurements give")
    for dtype in (torch.float32, torch.bfloat16):
        name = f"plain {str(dtype).removeprefix('torch.')}"
        print(f"  MATH_ATTENTION_MAX_LEN[{str(dtype).removeprefix('torch.')}] = {MATH_ATTENTION_MAX_LEN[dtype]} | "
              f"{show(longest_winning(attention.get(name, [])))}")
    print(f"  KEYS_OUTER_MAX_LEN = {KEYS_OUTER_MAX_LEN} | {show(longest_winning(attention.get('keys-outer', [])))}")
    print(f"  MIX_PER_HEAD_MAX_D_HEAD = {MIX_PER_HEAD_MAX_D_HEAD} | {show(longest_winning(mixing))}")


def memory_table(repeats: int, steps: int) -> None:
    cfg = TrainConfig(task="khop", task_params={"hops": 1, "length": 16, "alphabet": 6}, variant="frozen_qk",
                      d_model=64, n_layers=3, n_heads=4, model_extra={"qk_init_std": 0.125}, batch_size=128)
    task = cfg.build_task(None)
    model = build_model(resolve(cfg, task=task, device=False).model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    stream = TrainStream(task, cfg.batch_size, seed=0)
    faults = {"glibc defaults": [], "keep_freed_memory": []}

    def block(keep: bool, name: str):
        def run():
            keep_freed_memory(keep)
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for _ in range(steps):
                loss = task_loss(model, task, stream.next())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            faults[name].append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps)
        return run

    med = alternate({"glibc defaults": block(False, "glibc defaults"),
                     "keep_freed_memory": block(True, "keep_freed_memory")}, repeats)
    print(f"training step, k-hop frozen_qk (d_model 64, 3 layers, batch 128, {task.seq_len} positions)")
    print(f"{'malloc':>20} {'ms/step':>8} {'page faults/step':>17}")
    for name, sec in med.items():
        print(f"{name:>20} {sec / steps * 1e3:>8.1f} {statistics.median(faults[name][1:]):>17.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memory-only", action="store_true", help="only the malloc comparison")
    ap.add_argument("--repeats", type=int, default=6, help="alternating blocks per choice")
    ap.add_argument("--steps", type=int, default=10, help="training steps (or 2x attention calls) per block")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} thread(s)\n")
    if not args.memory_only:
        attention = attention_table(args.repeats, 2 * args.steps)
        print()
        mixing = mixing_table(args.repeats, 2 * args.steps)
        print()
        print_thresholds(attention, mixing)
        # The allocator comparison needs a fresh process: after the attention table's large tensors have come
        # and gone, glibc's defaults no longer hand the step's buffers back (0 page faults either way).
        print(flush=True)
        subprocess.run([sys.executable, __file__, "--memory-only", "--threads", str(args.threads),
                        "--repeats", str(args.repeats), "--steps", str(args.steps)], check=True)
    elif sys.platform.startswith("linux"):
        memory_table(args.repeats, args.steps)
    else:
        print("(malloc thresholds: glibc only; skipped)")


if __name__ == "__main__":
    main()
