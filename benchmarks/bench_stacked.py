"""Does training several tiny runs in one process pay? N models of the quick preset's shape, trained
one after another, against the same N stacked (torch.func.stack_module_state) under one vmap'd step.

    python benchmarks/bench_stacked.py                          # mixit and standard, 3 runs, 1 thread
    python benchmarks/bench_stacked.py --variants mixit --runs 4 --threads 2
    python benchmarks/bench_stacked.py --precision bf16
    python benchmarks/bench_stacked.py --d-model 16 --seq 3 --batch 512   # the memorization study's shape

Both do the same work per step: each model's forward and backward on its own batch of 128 sequences
and an AdamW step (over the stacked tensors, which is the same update element by element). The loss is
the masked mean computed densely (vmap cannot index by a boolean mask). Prints ms per step of all N
runs, the two alternating, median of --repeats blocks.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402

from models import ModelConfig, build_model  # noqa: E402
from training.trainer import autocast_for  # noqa: E402

HEADS = {"mixit": 16, "standard": 4}  # as in the quick preset's algorithmic studies


def dense_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    weight = mask[:, 1:].flatten()
    return (ce * weight).sum() / weight.sum()


def steps_for(variant: str, runs: int, seq: int, batch: int, d_model: int, precision: str):
    amp = lambda: autocast_for(torch.device("cpu"), precision)  # noqa: E731
    models = [build_model(ModelConfig(variant=variant, d_model=d_model, n_layers=2, n_heads=HEADS.get(variant, 4),
                                      n_ctx=seq, d_vocab=16, seed=s)) for s in range(runs)]
    tokens = torch.randint(0, 16, (runs, batch, seq))
    mask = torch.zeros(runs, batch, seq)
    mask[..., seq // 2:] = 1
    optimizers = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3) for m in models]

    def one_by_one():
        for m, opt, x, w in zip(models, optimizers, tokens, mask):
            with amp():
                loss = dense_loss(m(x), x, w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    params, buffers = stack_module_state(models)
    trainable = {k: models[0].get_parameter(k).requires_grad for k in params}
    params = {k: v.detach().requires_grad_(trainable[k]) for k, v in params.items()}
    skeleton = copy.deepcopy(models[0]).to("meta")
    opt = torch.optim.AdamW([p for p in params.values() if p.requires_grad], lr=1e-3)
    loss_of = vmap(lambda p, b, x, w: dense_loss(functional_call(skeleton, (p, b), (x,)), x, w))

    def stacked():
        with amp():
            loss = loss_of(params, buffers, tokens, mask).sum()  # independent runs: each gets its own gradient
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return one_by_one, stacked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="+", default=["mixit", "standard"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=13, help="13: 3-digit addition")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.runs} runs, d_model {args.d_model}, 2 layers, batch {args.batch}, seq {args.seq}, {args.precision}, "
          f"{args.threads} thread(s)")
    print("| variant | one by one (ms/step) | stacked + vmap (ms/step) | stacked speed-up |")
    print("|---|---|---|---|")
    for variant in args.variants:
        one_by_one, stacked = steps_for(variant, args.runs, args.seq, args.batch, args.d_model, args.precision)
        times: dict[str, list[float]] = {"one": [], "stacked": []}
        for fn in (one_by_one, stacked):
            fn()
            fn()
        for _ in range(args.repeats):
            for name, fn in (("one", one_by_one), ("stacked", stacked)):
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    fn()
                times[name].append((time.perf_counter() - t0) / args.steps * 1000)
        one, st = statistics.median(times["one"]), statistics.median(times["stacked"])
        print(f"| {variant} | {one:.1f} | {st:.1f} | {one / st:.2f}x |")


if __name__ == "__main__":
    main()
