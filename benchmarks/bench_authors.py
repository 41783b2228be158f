"""Our training step next to the authors' model (`modeling_llama.py` of princeton-pli/MixiT), side by side.

    python benchmarks/bench_authors.py --authors-repo ../MixiT --authors-python ../authors-env/bin/python

Their model needs transformers 4.51 (ours needs a newer one, through TransformerLens), so it runs in a
second interpreter: `--authors-python` is a Python with torch and transformers==4.51.3, `--authors-repo`
a clone of their repository (nothing of it is copied here). Two worker processes, one per model, stay
up for the whole run and are asked in turn for a block of `--steps` timed steps (after one warm-up
step), so drift on a shared machine hits both alike; the table gives medians of `--repeats` blocks.

One step is forward, backward and AdamW at the shapes of benchmarks/bench_step.py: their
`LlamaForCausalLM` with `shaped_attention="vanilla"` (standard, sdpa attention) or `"mixing"` (MixiT,
no rotary, base width 512), attention and MLP biases on and MLP width 4 x d_model, as their trainers
set them; ours built from the same sizes. Their step runs in fp32 (their scripts' CPU precision),
ours in fp32 and in bf16 autocast. Both workers run with the malloc settings of our trainer's
`keep_freed_memory()`, set through GLIBC_TUNABLES (`--authors-default-malloc` leaves theirs with
glibc's defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE_NAMES = ("algorithmic", "lm", "quick")  # bench_step.SHAPES; the workers get the sizes with each request


def build(who: str, shape: tuple[int, ...], variant: str, authors_repo: str | None):
    """(loss function of a token batch, optimizer, token batch) for one model of
    shape = (d_model, n_layers, n_heads, batch, seq, vocab)."""
    import torch

    d, layers, heads, batch, seq, vocab = shape
    if who == "authors":
        sys.path.insert(0, authors_repo)
        from modeling_llama import LlamaForCausalLM, MixingLlamaConfig  # their file, from their clone

        extra = dict(shaped_attention="mixing", do_rope=False, base_hidden_size=512) if variant == "mixit" else {}
        model = LlamaForCausalLM(MixingLlamaConfig(
            vocab_size=vocab, hidden_size=d, intermediate_size=4 * d, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=seq,
            attention_bias=True, mlp_bias=True, use_cache=False, **extra)).train()

        def loss_fn(x):
            return model(input_ids=x, labels=x).loss
    else:
        sys.path.insert(0, str(ROOT))
        from mixit_lab.models import ModelConfig, build_model

        model = build_model(ModelConfig(variant=variant, d_model=d, n_layers=layers, n_heads=heads, n_ctx=seq,
                                        d_vocab=vocab, seed=0)).train()

        def loss_fn(x):
            return model(x, return_type="loss")
    tokens = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    if who == "authors":  # AdamW's defaults, as their trainers get it from transformers' Trainer
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    else:  # the trainer's AdamW (fused on CPU)
        from mixit_lab.training.optim import build_optimizer

        optimizer = build_optimizer(model, 1e-4, 0.0, (0.9, 0.999), torch.device("cpu"))
    return loss_fn, optimizer, tokens


def worker(who: str, authors_repo: str | None) -> None:
    """Answer 'variant precision steps d_model n_layers n_heads batch seq vocab' lines on stdin with the
    mean ms per step."""
    import torch

    torch.manual_seed(0)
    built = {}
    for line in sys.stdin:
        variant, precision, steps, *sizes = line.split()
        shape = tuple(map(int, sizes))
        if (shape, variant) not in built:
            built[shape, variant] = build(who, shape, variant, authors_repo)
        loss_fn, optimizer, tokens = built[shape, variant]

        def step():
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = loss_fn(tokens)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        step()  # warm-up (and the first step's allocations)
        t0 = time.perf_counter()
        for _ in range(int(steps)):
            step()
        print(json.dumps((time.perf_counter() - t0) / int(steps) * 1e3), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--authors-repo", required=True, help="a clone of princeton-pli/MixiT (holds modeling_llama.py)")
    p.add_argument("--authors-python", required=True, help="a Python with torch and transformers==4.51.3")
    p.add_argument("--shapes", nargs="+", choices=SHAPE_NAMES, default=["algorithmic", "lm"])
    p.add_argument("--variants", nargs="+", choices=["standard", "mixit"], default=["standard", "mixit"])
    p.add_argument("--steps", type=int, default=3, help="timed steps per block (quick shape: 10x)")
    p.add_argument("--repeats", type=int, default=3, help="blocks per model, alternating")
    p.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"],
                   help="ours in these (bf16: where the CPU has native bf16; emulated it is 10x slower or worse)")
    p.add_argument("--authors-default-malloc", action="store_true", help="their worker keeps glibc's defaults")
    p.add_argument("--worker", choices=["ours", "authors"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.authors_repo)
    if not (Path(args.authors_repo) / "modeling_llama.py").is_file():
        sys.exit(f"--authors-repo {args.authors_repo}: no modeling_llama.py there (clone princeton-pli/MixiT)")
    sys.path.insert(0, str(ROOT))
    from bench_step import SHAPES  # noqa: E402 (beside this file)
    from mixit_lab.training.machine import KEPT_MALLOC_SETTINGS

    # keep_freed_memory()'s settings, from the start of each worker (their interpreter cannot import ours).
    kept = {**os.environ, "GLIBC_TUNABLES": ":".join(f"glibc.malloc.{k}={v}" for k, v in KEPT_MALLOC_SETTINGS.items())}
    common = [__file__, "--authors-repo", str(Path(args.authors_repo).resolve()), "--authors-python", args.authors_python]
    workers = {
        "authors": subprocess.Popen([args.authors_python, *common, "--worker", "authors"], text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    env=os.environ if args.authors_default_malloc else kept),
        "ours": subprocess.Popen([sys.executable, *common, "--worker", "ours"], text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=kept),
    }

    def ask(who: str, *request) -> float:
        workers[who].stdin.write(" ".join(map(str, request)) + "\n")
        workers[who].stdin.flush()
        answer = workers[who].stdout.readline()
        if not answer:
            sys.exit(f"the {who} worker stopped (see its error above)")
        return float(answer)

    print(f"ms per training step (forward, backward, AdamW), medians of {args.repeats} alternating blocks")
    print(f"{'shape':<12} {'variant':<9} {'authors fp32':>13} {'ours fp32':>10} {'speed-up':>9} "
          f"{'ours bf16':>10} {'speed-up':>9}")
    try:
        for shape in args.shapes:
            steps = args.steps * (10 if shape == "quick" else 1)
            for variant in args.variants:
                times = {"authors": [], "fp32": [], "bf16": []}
                for _ in range(args.repeats):
                    times["authors"].append(ask("authors", variant, "fp32", steps, *SHAPES[shape]))
                    for precision in args.precisions:
                        times[precision].append(ask("ours", variant, precision, steps, *SHAPES[shape]))
                a = statistics.median(times["authors"])
                cells = [f"{m:10.1f} {a / m:8.2f}x" if times[k] else f"{'-':>10} {'-':>9}"
                         for k in ("fp32", "bf16") for m in [statistics.median(times[k]) if times[k] else 0.0]]
                print(f"{shape:<12} {variant:<9} {a:13.1f} {' '.join(cells)}", flush=True)
    finally:
        for w in workers.values():
            w.stdin.close()
            w.wait()


if __name__ == "__main__":
    main()
