"""One training step (forward, backward, AdamW) of our models next to a plain-PyTorch reference of the same
architecture, in fp32 and bf16, with the achieved GFLOP/s as a fraction of this machine's matmul peak.

    python benchmarks/bench_step.py                       # the three shapes below, standard and mixit
    python benchmarks/bench_step.py --shapes quick --repeats 5

The reference is what a research script would write: nn.Linear projections (q, k, v, o; gate, up,
down), RMSNorm, rotate-half rotary embeddings and scaled_dot_product_attention for `standard`;
learned positions, the same fixed causal mixing matrices and a LeakyReLU gated MLP for `mixit`. It
has the same parameter count and FLOPs as ours, but not our hooks. "bf16" wraps the step in
torch.autocast(bfloat16) for both. Ours steps with the trainer's optimizer (`build_optimizer`: AdamW's fused
CPU kernel), the reference with `torch.optim.AdamW`'s defaults, as a research script would. FLOPs are counted analytically (matmuls only, backward = 2 x
forward). The peak is the best of square matmuls (n = 1024, 2048) in each precision, measured here
first. Times are medians of `--repeats` blocks of `--steps` steps, the two models alternating. On Linux
both run with `keep_freed_memory()`, as the trainer does. The last column, "bf16 vs ref fp32", is the
speed-up of our bf16 step over the reference's fp32 step: what mixed precision plus our kernels buy over
a plain fp32 research script.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from mixit_lab.models import ModelConfig, build_model  # noqa: E402
from mixit_lab.training.machine import keep_freed_memory  # noqa: E402
from mixit_lab.training.optim import build_optimizer  # noqa: E402
from mixit_lab.training.precision import autocast_for  # noqa: E402

# name: (d_model, n_layers, n_heads, batch, seq, vocab)
SHAPES = {
    "algorithmic": (128, 2, 4, 1000, 34, 16),  # the paper's algorithmic scale
    "lm": (256, 4, 8, 32, 128, 512),  # language-model scale
    "quick": (64, 2, 4, 128, 13, 16),  # the quick preset's tiny models (3-digit addition)
}


class RefBlock(nn.Module):
    def __init__(self, d: int, h: int, t: int, mixing: torch.Tensor | None):
        super().__init__()
        self.h, self.mixing = h, mixing
        self.n1, self.n2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        if mixing is None:  # MixiT has no queries or keys, like ours
            self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)
        self.v, self.o = nn.Linear(d, d), nn.Linear(d, d)
        m = 4 * d
        self.gate, self.up, self.down = nn.Linear(d, m), nn.Linear(d, m), nn.Linear(m, d)
        inv = 1.0 / 10000 ** (torch.arange(0, d // h, 2).float() / (d // h))
        freqs = torch.outer(torch.arange(t).float(), inv)
        self.register_buffer("cos", torch.cat([freqs, freqs], -1).cos())
        self.register_buffer("sin", torch.cat([freqs, freqs], -1).sin())

    def rope(self, x):
        x1, x2 = x.chunk(2, -1)
        return x * self.cos + torch.cat([-x2, x1], -1) * self.sin

    def forward(self, x):
        b, t, d = x.shape
        y = self.n1(x)
        v = self.v(y).view(b, t, self.h, -1).transpose(1, 2)
        if self.mixing is None:
            q = self.rope(self.q(y).view(b, t, self.h, -1).transpose(1, 2))
            k = self.rope(self.k(y).view(b, t, self.h, -1).transpose(1, 2))
            z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            z = self.mixing.to(v.dtype) @ v
        x = x + self.o(z.transpose(1, 2).reshape(b, t, d))
        y = self.n2(x)
        gate = self.gate(y)
        act = F.silu(gate) if self.mixing is None else F.leaky_relu(gate, 0.9)
        return x + self.down(act * self.up(y))


class Reference(nn.Module):
    def __init__(self, variant: str, d: int, layers: int, h: int, t: int, vocab: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d) if variant == "mixit" else None
        mixing = None
        if variant == "mixit":
            mixing = torch.eye(t) + torch.randn(h, t, t).tril() / math.sqrt(t)
        self.blocks = nn.ModuleList(RefBlock(d, h, t, mixing) for _ in range(layers))
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def step_flops(variant: str, d: int, layers: int, h: int, b: int, t: int, vocab: int) -> float:
    """Matmul FLOPs of one training step (forward x 3)."""
    proj = (2 if variant == "mixit" else 4) * d * d + 3 * d * 4 * d  # V, O (+Q, K) and the gated MLP
    attn = (1 if variant == "mixit" else 2) * t * d  # A @ V (and Q K^T), per token, causal or not
    per_token = 2 * (layers * (proj + attn) + d * vocab)
    return 3.0 * per_token * b * t


def matmul_peak(dtype: torch.dtype) -> float:
    """Best GFLOP/s of square matmuls in `dtype` on this machine."""
    best = 0.0
    for n in (1024, 2048):
        a, c = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ c
        reps = 5
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ c
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9)
    return best


def make_step(model, loss_fn, tokens, precision: str, trainers_optimizer: bool):
    """One training step; ours takes the trainer's AdamW (fused on CPU), the reference AdamW's defaults."""
    device = torch.device("cpu")
    if trainers_optimizer:
        opt = build_optimizer(model, 1e-4, 0.0, (0.9, 0.999), device)
    else:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def step():
        with autocast_for(device, precision):
            loss = loss_fn(tokens)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    p.add_argument("--variants", nargs="+", choices=["standard", "mixit"], default=["standard", "mixit"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    keep_freed_memory()
    peak = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul peak: "
          f"fp32 {peak['fp32']:.0f} GFLOP/s, bf16 {peak['bf16']:.0f} GFLOP/s")
    print(f"{'shape':<12} {'variant':<9} {'prec':<5} {'ours ms':>8} {'ref ms':>8} {'ref/ours':>8} "
          f"{'GFLOP/s':>8} {'% peak':>7} {'bf16 vs ref fp32':>17}")
    for shape in args.shapes:
        d, layers, h, b, t, vocab = SHAPES[shape]
        tokens = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(0))
        for variant in args.variants:
            ours = build_model(ModelConfig(variant=variant, d_model=d, n_layers=layers, n_heads=h, n_ctx=t,
                                           d_vocab=vocab, seed=0)).train()
            ref = Reference(variant, d, layers, h, t, vocab).train()
            flops = step_flops(variant, d, layers, h, b, t, vocab)
            ref_fp32 = None
            for precision in ("fp32", "bf16"):
                steps = {"ours": make_step(ours, lambda x: ours(x, return_type="loss"), tokens, precision, True),
                         "ref": make_step(ref, ref, tokens, precision, False)}
                times: dict[str, list[float]] = {"ours": [], "ref": []}
                for s in steps.values():
                    s()  # warm-up
                for _ in range(args.repeats):
                    for name, s in steps.items():  # alternate, so drift hits both alike
                        t0 = time.perf_counter()
                        for _ in range(args.steps):
                            s()
                        times[name].append((time.perf_counter() - t0) / args.steps)
                o, r = statistics.median(times["ours"]), statistics.median(times["ref"])
                ref_fp32 = r if precision == "fp32" else ref_fp32
                achieved = flops / o / 1e9
                mixed = f"{ref_fp32 / o:16.2f}x" if precision == "bf16" else ""
                print(f"{shape:<12} {variant:<9} {precision:<5} {o * 1e3:8.1f} {r * 1e3:8.1f} {r / o:7.2f}x "
                      f"{achieved:8.1f} {100 * achieved / peak[precision]:6.1f}% {mixed}", flush=True)


if __name__ == "__main__":
    main()
