"""Does training several tiny runs in one process pay? N models of the quick preset's shape trained one after
another, against the same N trained as one stacked model, two ways:

* ours under vmap: our `Transformer`s stacked with `torch.func.stack_module_state`, one vmap'd step;
* by hand: a plain model written with a leading run dimension (batched matmuls over the runs, one op per
  step for all of them), against the same code with one run, N times. This is the best stacking can do
  without vmap's own overhead.

    python benchmarks/bench_stacked.py                          # mixit and standard, 3 runs, 1 thread
    python benchmarks/bench_stacked.py --variants mixit --runs 4 --threads 2
    python benchmarks/bench_stacked.py --precision bf16
    python benchmarks/bench_stacked.py --d-model 16 --seq 3 --batch 512   # the memorization study's shape

Every column does the same work per step: each model's forward and backward on its own batch of
sequences and an AdamW step (over the stacked tensors, which is the same update element by element). The
loss is the masked mean computed densely (vmap cannot index by a boolean mask). Prints ms per step of all N
runs, one by one against stacked, the two alternating, median of --repeats blocks.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.func import functional_call, stack_module_state, vmap  # noqa: E402

from mixit_lab.models import ModelConfig, build_model  # noqa: E402
from mixit_lab.training.machine import keep_freed_memory  # noqa: E402
from mixit_lab.training.precision import autocast_for  # noqa: E402

HEADS = {"mixit": 16, "standard": 4}  # as in the quick preset's algorithmic studies


def dense_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    weight = mask[:, 1:].flatten()
    return (ce * weight).sum() / weight.sum()


def adamw_step(optimizer: torch.optim.Optimizer, precision: str, loss_of) -> None:
    """One training step: the loss `loss_of()` under the precision's autocast, its backward, an optimizer step."""
    with autocast_for(torch.device("cpu"), precision):
        loss = loss_of()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def steps_for(variant: str, runs: int, seq: int, batch: int, d_model: int, precision: str):
    models = [build_model(ModelConfig(variant=variant, d_model=d_model, n_layers=2, n_heads=HEADS.get(variant, 4),
                                      n_ctx=seq, d_vocab=16, seed=s)) for s in range(runs)]
    tokens = torch.randint(0, 16, (runs, batch, seq))
    mask = torch.zeros(runs, batch, seq)
    mask[..., seq // 2:] = 1
    optimizers = [torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3) for m in models]

    def one_by_one():
        for m, opt, x, w in zip(models, optimizers, tokens, mask):
            adamw_step(opt, precision, lambda: dense_loss(m(x), x, w))

    params, buffers = stack_module_state(models)
    trainable = {k: models[0].get_parameter(k).requires_grad for k in params}
    params = {k: v.detach().requires_grad_(trainable[k]) for k, v in params.items()}
    skeleton = copy.deepcopy(models[0]).to("meta")
    opt = torch.optim.AdamW([p for p in params.values() if p.requires_grad], lr=1e-3)
    loss_of = vmap(lambda p, b, x, w: dense_loss(functional_call(skeleton, (p, b), (x,)), x, w))

    def stacked():  # independent runs: the sum gives each its own gradient
        adamw_step(opt, precision, lambda: loss_of(params, buffers, tokens, mask).sum())

    return one_by_one, stacked


class HandStacked(nn.Module):
    """`runs` independent Llama-style models as tensors with a leading run dimension: RMSNorm, softmax attention
    with a causal mask (mixit: fixed mixing matrices and learned positions instead), a gated MLP (SiLU; mixit
    LeakyReLU), untied unembedding. Every matmul is one batched matmul over the runs."""

    def __init__(self, variant: str, runs: int, d: int, layers: int, heads: int, seq: int, vocab: int):
        super().__init__()
        self.mixit, self.heads = variant == "mixit", heads
        weight = lambda *shape: nn.Parameter(torch.randn(runs, *shape) * 0.02)  # noqa: E731
        self.embed, self.unembed = weight(vocab, d), weight(d, vocab)
        self.pos = weight(1, seq, d) if self.mixit else None
        self.norms = nn.Parameter(torch.ones(2 * layers + 1, runs, 1, d))
        self.attn_in = nn.ParameterList(weight(d, d if self.mixit else 3 * d) for _ in range(layers))  # (q, k,) v
        self.attn_out = nn.ParameterList(weight(d, d) for _ in range(layers))
        self.mlp_in = nn.ParameterList(weight(d, 8 * d) for _ in range(layers))  # gate and up together
        self.mlp_out = nn.ParameterList(weight(4 * d, d) for _ in range(layers))
        causal = torch.ones(seq, seq).tril()
        if self.mixit:  # [layer, run, 1 (batch), head, q, k]
            self.register_buffer("mixing", torch.eye(seq) + torch.randn(layers, runs, 1, heads, seq, seq) * causal / seq**0.5)
        self.register_buffer("mask", torch.zeros(seq, seq).masked_fill(causal == 0, float("-inf")))

    def forward(self, tokens: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
        """tokens, scored [run, batch, pos] -> the sum over runs of each run's masked mean loss."""
        R, B, T = tokens.shape
        D = self.embed.shape[-1]
        x = torch.gather(self.embed, 1, tokens.reshape(R, -1, 1).expand(-1, -1, D))  # [run, batch * pos, d]
        if self.pos is not None:
            x = (x.view(R, B, T, D) + self.pos[:, :, :T]).view(R, B * T, D)
        for i in range(len(self.attn_in)):
            y = F.rms_norm(x, (D,)) * self.norms[2 * i]
            if self.mixit:
                v = torch.bmm(y, self.attn_in[i]).view(R, B, T, self.heads, -1).transpose(2, 3)
                z = (self.mixing[i, :, :, :, :T, :T].to(v.dtype) @ v).transpose(2, 3)
            else:
                q, k, v = torch.bmm(y, self.attn_in[i]).view(R * B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
                scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + self.mask[:T, :T]
                z = (torch.softmax(scores.float(), -1).to(v.dtype) @ v).transpose(1, 2)
            x = x + torch.bmm(z.reshape(R, B * T, D), self.attn_out[i])
            gate, up = torch.bmm(F.rms_norm(x, (D,)) * self.norms[2 * i + 1], self.mlp_in[i]).chunk(2, -1)
            act = F.leaky_relu(gate, 0.9) if self.mixit else F.silu(gate)
            x = x + torch.bmm(act * up, self.mlp_out[i])
        logits = torch.bmm(F.rms_norm(x, (D,)) * self.norms[-1], self.unembed).view(R, B, T, -1)[:, :, :-1]
        ce = F.cross_entropy(logits.flatten(0, 2).float(), tokens[:, :, 1:].flatten(), reduction="none").view(R, -1)
        weight = scored[:, :, 1:].reshape(R, -1)
        return ((ce * weight).sum(1) / weight.sum(1)).sum()  # each run's own mean: independent gradients


def hand_steps_for(variant: str, runs: int, seq: int, batch: int, d_model: int, precision: str):
    """(N one-run models stepped one after another, one N-run model stepped once), by hand."""
    def make(n: int):
        torch.manual_seed(n)
        model = HandStacked(variant, n, d_model, 2, HEADS.get(variant, 4), seq, 16)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        tokens = torch.randint(0, 16, (n, batch, seq))
        scored = torch.zeros(n, batch, seq)
        scored[..., seq // 2:] = 1

        return lambda: adamw_step(opt, precision, lambda: model(tokens, scored))

    singles = [make(1) for _ in range(runs)]
    return (lambda: [step() for step in singles]), make(runs)


def median_ms(pair, steps: int, repeats: int) -> tuple[float, float]:
    """Median ms per step of each of two step functions, alternating blocks of `steps` steps."""
    times: tuple[list[float], list[float]] = ([], [])
    for fn in pair:
        fn()
        fn()
    for _ in range(repeats):
        for spent, fn in zip(times, pair):
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            spent.append((time.perf_counter() - t0) / steps * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


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
    keep_freed_memory()  # as the trainer does
    print(f"{args.runs} runs, d_model {args.d_model}, 2 layers, batch {args.batch}, seq {args.seq}, {args.precision}, "
          f"{args.threads} thread(s)")
    print("| variant | ours one by one (ms/step) | ours stacked under vmap | vmap speed-up "
          "| plain one by one | plain stacked by hand | by-hand speed-up |")
    print("|---|---|---|---|---|---|---|")
    for variant in args.variants:
        ours = median_ms(steps_for(variant, args.runs, args.seq, args.batch, args.d_model, args.precision),
                         args.steps, args.repeats)
        hand = median_ms(hand_steps_for(variant, args.runs, args.seq, args.batch, args.d_model, args.precision),
                         args.steps, args.repeats)
        print(f"| {variant} | {ours[0]:.1f} | {ours[1]:.1f} | {ours[0] / ours[1]:.2f}x "
              f"| {hand[0]:.1f} | {hand[1]:.1f} | {hand[0] / hand[1]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
