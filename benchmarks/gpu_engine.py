"""What one GPU gives the paper preset's shapes today, and what a step without host reads, replayed as a CUDA
graph, and several runs per GPU would give: the measurements behind the GPU engine.

    python benchmarks/gpu_engine.py --out gpu-engine          # on a GPU machine: about 6 minutes
    python benchmarks/gpu_engine.py --out gpu-engine --dry    # the same parts on this CPU at tiny sizes

Parts, each written to OUT/PART.json as it ends (a call cut short keeps what it measured):
  steps  one process, the retrieval, memorize and 16-layer depth shapes: ms per optimizer step of the trainer's own
         step (`RunLoop._train_step`: batch made on the host; it read the loss back and checked it every step when
         docs/benchmarks.md's numbers were taken, it now keeps both on the device), of a step with no
         host read (the same model and AdamW, batches already on the device, the loss over every position weighted
         by the mask, divergence counted on the device), and of that step captured once as a CUDA graph and
         replayed; with the graph's weights against the eager step's after the same batches.
  lm     the paper preset's LM step (12 layers, d_model 512, 256 positions, batch 512, 27k vocabulary): ms per step
         and the share of the card's measured and datasheet dense bf16 rate: micro-batches of 128 (today), one pass,
         and one pass whose cross-entropy is taken in row chunks recomputed in the backward pass (no full
         [batch, pos, vocab] logits), with fused AdamW.
  curve  N processes at once on one GPU (1, 2, 4, 8, 16), each training the retrieval shape: aggregate optimizer
         steps a second of the trainer's step and of the replayed graph, each process timed over the same window.
  tests  the tests marked `device` (tests/test_devices.py).
The step without host reads lives here, not in the trainer: this measures whether it pays before it is built.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from gpu_check import python_env  # noqa: E402
from gpu_check_steps import shapes, short_config  # noqa: E402
from mixit_lab.models.config import ModelConfig  # noqa: E402
from mixit_lab.models import build_model  # noqa: E402
from mixit_lab.training.loss import masked_loss  # noqa: E402
from mixit_lab.training.parallel import Ranks  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.resolve import resolve  # noqa: E402
from mixit_lab.training.trainer import RunLoop  # noqa: E402

DATASHEET_BF16_TFLOPS = 989.0  # H100/H200 SXM dense bf16
LM_VOCAB = 27_000  # the paper preset's LM vocabulary on its corpora (docs/benchmarks.md)
STEP_SHAPES = [("retrieval", "standard", 2), ("retrieval", "mixit", 2), ("memorize", "standard", 2),
               ("depth", "mixit", 16)]


def write(out: Path, name: str, data: Any) -> None:
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def shape_config(study: str, variant: str, n_layers: int, dry: bool, device: str) -> TrainConfig:
    """The paper preset's run of that study, variant and depth (its longest task), as the short bf16 run gpu_check
    times (tiny in the dry form)."""
    for (s, v, _, _, layers, _), (cfg, _) in shapes("paper").items():
        if (s, v, layers) == (study, variant, n_layers):
            return short_config(cfg, dry, 40, device, {})
    raise KeyError((study, variant, n_layers))


def build_loop(cfg: TrainConfig, work: Path) -> RunLoop:
    """The trainer's own loop for cfg (its model, AdamW and data stream), ready to step."""
    device = torch.device(cfg.device)
    run = resolve(cfg, work / "cache", device=device)
    loop = RunLoop(cfg, work / "run", run, Ranks(), "bf16" if device.type == "cuda" else "fp32")
    loop.prepare()
    return loop


# ---------------------------------------------------------------- a step with no host read, and its graph

def stream_of(model, tokens: torch.Tensor) -> torch.Tensor:
    """The model's final normalised residual stream, as `residual_stream` computes it minus its input checks (each a
    host read): the batches are the task's own."""
    resid = model.hook_embed(model.embed(tokens))
    if hasattr(model, "pos_embed"):
        resid = resid + model.hook_pos_embed(model.pos_embed(tokens))
    for block in model.blocks:
        resid = block(resid, None)
    return model.ln_final(resid)


def weighted_loss(model, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy at every position, weighted by the mask: masked_loss's value with fixed shapes."""
    logits = model.unembed(stream_of(model, tokens)[:, :-1]).float()
    weight = mask[:, 1:].flatten().float()
    ce = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    return (ce * weight).sum() / weight.sum()


class StaticStep:
    """The trainer's optimizer step (learning rate, loss, backward, clipping, AdamW) with no host read: the lr is a
    device tensor, a non-finite loss or gradient norm is counted on the device (`bad`), batches are copied into
    fixed buffers. `capture()` records it as a CUDA graph; `__call__` then replays it."""

    def __init__(self, loop: RunLoop, batches: list[tuple[torch.Tensor, torch.Tensor]]):
        self.loop, self.model, self.batches, self.device = loop, loop.model, batches, loop.device
        cfg, cuda = loop.cfg, loop.device.type == "cuda"
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        decay = [p for p in self.params if p.ndim >= 2]
        rest = [p for p in self.params if p.ndim < 2]
        self.lr = torch.tensor(cfg.lr, device=self.device) if cuda else cfg.lr  # a tensor lr needs capturable
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                      {"params": rest, "weight_decay": 0.0}], lr=self.lr, betas=cfg.betas,
                                     foreach=True, capturable=cuda)
        self.tokens, self.mask = (t.clone() for t in batches[0])
        self.bad = torch.zeros((), device=self.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.autocast = (lambda: torch.autocast("cuda", torch.bfloat16, cache_enabled=False)) if cuda else None
        self.i = 0

    def body(self) -> None:
        with self.autocast() if self.autocast else torch.enable_grad():
            loss = weighted_loss(self.model, self.tokens, self.mask)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.loop.cfg.grad_clip, foreach=True)
        self.bad += (~torch.isfinite(loss)).float() + (~torch.isfinite(norm)).float()
        self.opt.step()

    def load_next(self) -> None:
        tokens, mask = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.tokens.copy_(tokens, non_blocking=True)
        self.mask.copy_(mask, non_blocking=True)
        if isinstance(self.lr, torch.Tensor):
            self.lr.fill_(self.loop.cfg.lr)  # the schedule's rate, set on the device (constant here)

    def __call__(self) -> None:
        self.load_next()
        if self.graph is not None:
            self.graph.replay()
            return
        self.opt.zero_grad(set_to_none=True)
        self.body()

    def capture(self, warmup: int = 3) -> None:
        """PyTorch's whole-step capture: a few eager steps on a side stream, then one recorded step."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                self()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        self.load_next()
        with torch.cuda.graph(self.graph):
            self.body()
        self.graph.replay()  # the recorded step was not run: run it


def device_batches(loop: RunLoop, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [tuple(t.to(loop.device) for t in loop.stream.next()) for _ in range(n)]


def ms_per_step(step: Callable[[], None], device: torch.device, n: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync(device)
    return round((time.perf_counter() - t0) / n * 1e3, 3)


def graph_agrees(cfg: TrainConfig, work: Path, steps: int = 8) -> float:
    """Relative difference of all weights after `steps` steps on the same batches: replayed graph against eager."""
    weights = []
    for graph in (False, True):
        torch.manual_seed(0)
        loop = build_loop(cfg, work / f"agree{int(graph)}")
        static = StaticStep(loop, device_batches(loop, steps))
        if graph:
            static.capture(warmup=3)  # 4 of the steps
            for _ in range(steps - 4):
                static()
        else:
            for _ in range(steps):
                static()
        weights.append(torch.cat([p.detach().float().flatten() for p in loop.model.parameters()]))
    return float((weights[1] - weights[0]).norm() / weights[0].norm())


def time_steps(out: Path, work: Path, dry: bool, device: str, n: int) -> list[dict[str, Any]]:
    rows = []
    for study, variant, layers in STEP_SHAPES:
        cfg = shape_config(study, variant, layers, dry, device)
        row: dict[str, Any] = {"study": study, "variant": variant, "n_layers": layers, "d_model": cfg.d_model,
                               "batch_size": cfg.batch_size}
        try:
            loop = build_loop(cfg, work / f"{study}-{variant}-{layers}")
            row["trainer_ms"] = ms_per_step(lambda: loop._train_step(loop.stream.next()), loop.device, n)
            static = StaticStep(loop, device_batches(loop, 8))
            row["no_host_read_ms"] = ms_per_step(static, loop.device, n)
            if loop.device.type == "cuda":
                static.capture()
                row["graph_ms"] = ms_per_step(static, loop.device, 4 * n)
                row["graph_vs_eager_rel"] = graph_agrees(cfg, work / "agree")
            row["diverged_count"] = float(static.bad)
        except Exception as e:  # noqa: BLE001 - one shape's failure is a row; the others run
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        rows.append(row)
        print("steps", row, flush=True)
        write(out, "steps", rows)
    return rows


# ---------------------------------------------------------------- the LM step

def chunked_loss(model, tokens: torch.Tensor, rows: int = 8192) -> torch.Tensor:
    """Mean next-token cross-entropy, the unembedding and softmax taken `rows` rows at a time and recomputed in the
    backward pass: the full [rows, vocab] logits never exist at once."""
    resid = stream_of(model, tokens)[:, :-1].flatten(0, 1)
    targets = tokens[:, 1:].flatten()

    def piece(r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model.unembed(r).float(), t, reduction="sum")

    total = sum(checkpoint(piece, resid[i:i + rows], targets[i:i + rows], use_reentrant=False)
                for i in range(0, resid.shape[0], rows))
    return total / targets.numel()


def matmul_tflops(device: torch.device, n: int = 8192, reps: int = 20) -> float:
    """Measured dense bf16 matmul rate on random data (the ceiling METHOD.md asks for)."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def lm_flops_per_row(model, seq: int, device: torch.device) -> float:
    """Counted FLOPs (matmuls and attention) of one training step on one row, forward and backward."""
    from torch.utils.flop_counter import FlopCounterMode

    tokens = torch.randint(0, model.config.d_vocab, (2, seq), device=device)
    with FlopCounterMode(display=False) as counter:  # the model's FLOPs: no recomputation counted
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            loss = masked_loss(model, tokens, torch.ones_like(tokens, dtype=torch.bool))
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / 2


def lm_step(model, opt, tokens: torch.Tensor, micro: int, chunked: bool, device: torch.device) -> None:
    opt.zero_grad(set_to_none=True)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    for i in range(0, tokens.shape[0], micro):
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            part = tokens[i:i + micro]
            loss = chunked_loss(model, part) if chunked else masked_loss(model, part, mask[i:i + micro])
        (loss * part.shape[0] / tokens.shape[0]).backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0, foreach=True)
    opt.step()


def time_lm(out: Path, dry: bool, device_name: str) -> dict[str, Any]:
    device = torch.device(device_name)
    cfg = next(c for (s, v, *_), (c, m) in shapes("paper").items() if s == "lm" and v == "standard")
    mcfg = next(m for (s, v, *_), (c, m) in shapes("paper").items() if s == "lm" and v == "standard")
    data = {**mcfg.to_dict(), "d_vocab": 300 if dry else LM_VOCAB}
    if dry:
        data.update(d_model=32, n_layers=2, n_heads=2, n_ctx=32, d_mlp=None)
    model = build_model(ModelConfig.from_dict(data)).to(device)
    batch, seq = (8, 32) if dry else (cfg.batch_size, model.config.n_ctx)
    result: dict[str, Any] = {"batch": batch, "seq": seq, "d_model": model.config.d_model,
                              "n_layers": model.config.n_layers, "d_vocab": model.config.d_vocab}
    result["flops_per_step"] = lm_flops_per_row(model, seq, device) * batch
    result["measured_bf16_tflops"] = round(matmul_tflops(device, 512 if dry else 8192, 3 if dry else 20), 1)
    params = [p for p in model.parameters() if p.requires_grad]
    cases = [("micro-batches of 128, foreach AdamW (today)", 4 if dry else 128, False, False),
             ("one pass, foreach AdamW", batch, False, False),
             ("one pass, chunked cross-entropy, fused AdamW", batch, True, True),
             ("micro-batches of 256, chunked cross-entropy, fused AdamW", batch // 2, True, True)]
    for name, micro, chunked, fused in cases:
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=not fused, fused=fused and device.type == "cuda")
        tokens = torch.randint(0, model.config.d_vocab, (batch, seq), device=device)
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            ms = ms_per_step(lambda opt=opt: lm_step(model, opt, tokens, micro, chunked, device), device, 3, warmup=1)
            row = {"ms": ms, "tflops": round(result["flops_per_step"] / ms / 1e9, 1)}
            if device.type == "cuda":
                row["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
                row["mfu_datasheet"] = round(row["tflops"] / DATASHEET_BF16_TFLOPS, 3)
                row["of_measured"] = round(row["tflops"] / result["measured_bf16_tflops"], 3)
        except torch.OutOfMemoryError as e:
            row = {"error": f"out of memory: {str(e)[:200]}"}
        del opt
        model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        result[name] = row
        print("lm", name, row, flush=True)
        write(out, "lm", result)
    return result


# ---------------------------------------------------------------- several processes on one GPU

def wait_for(path: Path, timeout: float, procs: list[subprocess.Popen] = ()) -> None:
    """Until `path` exists; TimeoutError after `timeout` s, RuntimeError as soon as one of `procs` has ended."""
    end = time.time() + timeout
    while not path.exists():
        if time.time() > end:
            raise TimeoutError(path)
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a worker ended before {path.name}")
        time.sleep(0.02)


def worker(args: argparse.Namespace) -> None:
    """One of N processes: the trainer's step, then the replayed graph, each over the window the parent opens."""
    cfg = TrainConfig.from_dict(json.loads(Path(args.config).read_text()))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    loop = build_loop(cfg, work)
    static = StaticStep(loop, device_batches(loop, 8))
    for _ in range(5):
        loop._train_step(loop.stream.next())
    if loop.device.type == "cuda" and args.graph:
        static.capture()
    sync(loop.device)
    result = {}
    for phase, step in (("trainer", lambda: loop._train_step(loop.stream.next())), ("graph", static)):
        (work / f"ready-{phase}").touch()
        wait_for(Path(args.sync) / f"go-{phase}", 300)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            for _ in range(10):
                step()
            n += 10
        sync(loop.device)
        result[phase] = n / (time.perf_counter() - t0)
    (work / "result.json").write_text(json.dumps(result))


def curve_point(n: int, cfg: TrainConfig, work: Path, seconds: float, graph: bool) -> dict[str, Any]:
    """Aggregate steps a second of n processes, each timed over the same window."""
    point = work / f"n{n}"
    point.mkdir(parents=True)
    (point / "config.json").write_text(json.dumps(cfg.to_dict()))
    env = {**python_env(), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "worker", "--config", str(point / "config.json"),
                               "--work", str(point / f"w{i}"), "--sync", str(point), "--seconds", str(seconds),
                               *(["--graph"] if graph else [])],
                              env=env, stdout=subprocess.DEVNULL, stderr=open(point / f"w{i}.log", "w"))
             for i in range(n)]
    t0 = time.perf_counter()
    try:
        for phase in ("trainer", "graph"):
            for i in range(n):
                wait_for(point / f"w{i}" / f"ready-{phase}", 240, procs)
            (point / f"go-{phase}").touch()
        for p in procs:
            p.wait(timeout=120)
    except Exception as e:  # noqa: BLE001
        for p in procs:
            p.kill()
        logs = " | ".join((point / f"w{i}.log").read_text()[-300:] for i in range(min(n, 2)))
        return {"n": n, "error": f"{type(e).__name__}: {e}; {logs}"}
    rates = [json.loads((point / f"w{i}" / "result.json").read_text()) for i in range(n)]
    return {"n": n, "wall_s": round(time.perf_counter() - t0, 1),
            **{f"{ph}_steps_per_s": round(sum(r[ph] for r in rates), 1) for ph in ("trainer", "graph")},
            **{f"{ph}_per_process": [round(r[ph], 1) for r in rates] for ph in ("trainer", "graph")}}


def time_curve(out: Path, work: Path, dry: bool, device: str, ns: list[int], seconds: float,
               deadline: float, graph: bool) -> list[dict[str, Any]]:
    """The curve; its "graph" phase replays a CUDA graph where `graph` (capture worked in `steps`), else it runs the
    step with no host read eagerly."""
    cfg = shape_config("retrieval", "standard", 2, dry, device)
    rows = []
    for n in ns:
        if time.time() + 40 + 2 * seconds > deadline:
            rows.append({"n": n, "error": "skipped: out of time"})
            continue
        rows.append({**curve_point(n, cfg, work / "curve", seconds, graph), "graph_replayed": graph})
        print("curve", rows[-1], flush=True)
        write(out, "curve", rows)
    return rows


def time_streams(out: Path, work: Path, dry: bool, device: str, ns: list[int], reps: int) -> list[dict[str, Any]]:
    """N runs in one process, each its own model, AdamW and captured graph, replayed side by side on N CUDA
    streams: aggregate optimizer steps a second (on a CPU the steps run one after another, without graphs)."""
    cfg = shape_config("retrieval", "standard", 2, dry, device)
    cuda = device == "cuda"
    steps = []
    for i in range(max(ns)):
        static = StaticStep(loop := build_loop(cfg, work / f"stream{i}"), device_batches(loop, 8))
        if cuda:
            static.capture()
        steps.append(static)
    streams = [torch.cuda.Stream() if cuda else None for _ in steps]
    rows = []
    for n in ns:
        def one_round() -> None:
            for step, stream in zip(steps[:n], streams[:n]):
                with torch.cuda.stream(stream) if cuda else torch.enable_grad():
                    step()
        ms = ms_per_step(one_round, torch.device(device), reps, warmup=3)
        rows.append({"n": n, "round_ms": ms, "steps_per_s": round(n / ms * 1e3, 1)})
        print("streams", rows[-1], flush=True)
        write(out, "streams", rows)
    return rows


def time_lm_compiled(out: Path, dry: bool, device_name: str) -> dict[str, Any]:
    """The LM step in one pass with the model under torch.compile (default mode): ms, TFLOP/s, compile seconds."""
    device = torch.device(device_name)
    mcfg = next(m for (s, v, *_), (c, m) in shapes("paper").items() if s == "lm" and v == "standard")
    data = {**mcfg.to_dict(), "d_vocab": 300 if dry else LM_VOCAB}
    if dry:
        data.update(d_model=32, n_layers=2, n_heads=2, n_ctx=32, d_mlp=None)
    model = build_model(ModelConfig.from_dict(data)).to(device)
    batch, seq = (8, 32) if dry else (512, model.config.n_ctx)
    flops = lm_flops_per_row(model, seq, device) * batch

    def loss_of(t: torch.Tensor) -> torch.Tensor:  # the model without its input checks, and the loss, compiled together
        logits = model.unembed(stream_of(model, t[:, :-1])).float()
        return F.cross_entropy(logits.flatten(0, 1), t[:, 1:].flatten())

    compiled = torch.compile(loss_of)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, model.config.d_vocab, (batch, seq), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            loss = compiled(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], 1.0, foreach=True)
        opt.step()

    result: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        step()
        sync(device)
        result["first_step_s"] = round(time.perf_counter() - t0, 1)
        ms = ms_per_step(step, device, 3, warmup=1)
        result.update(ms=ms, tflops=round(flops / ms / 1e9, 1), mfu_datasheet=round(flops / ms / 1e9 / DATASHEET_BF16_TFLOPS, 3))
        if device.type == "cuda":
            result["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 1)
    except Exception as e:  # noqa: BLE001
        result["error"] = f"{type(e).__name__}: {e}"[:400]
    print("lm compiled", result, flush=True)
    write(out, "lm_compiled", result)
    return result


def device_tests(dry: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", "tests/test_devices.py"]
    t0 = time.perf_counter()
    done = subprocess.run(argv + (["-k", "cpu"] if dry else []), cwd=ROOT, env=python_env(), capture_output=True,
                          text=True, timeout=120)
    return {"rc": done.returncode, "seconds": round(time.perf_counter() - t0, 1), "tail": done.stdout[-600:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", nargs="?", default="all", choices=["all", "worker"])
    parser.add_argument("--out", default="gpu-engine")
    parser.add_argument("--dry", action="store_true", help="on the CPU at tiny sizes")
    parser.add_argument("--parts", nargs="+", default=["steps", "lm", "curve", "tests"])
    parser.add_argument("--ns", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--seconds", type=float, default=6.0, help="curve: each window's seconds")
    parser.add_argument("--budget-s", type=float, default=380.0, help="curve points that would end later are skipped")
    parser.add_argument("--config"), parser.add_argument("--work"), parser.add_argument("--sync")
    parser.add_argument("--graph", action="store_true", help="worker: capture and replay the step as a CUDA graph")
    args = parser.parse_args()
    if args.phase == "worker":
        worker(args)
        return 0
    deadline = time.time() + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() and not args.dry else "cpu"
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        write(out, "environment", {"name": p.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                                   "memory_gib": round(p.total_memory / 2**30, 1), "sms": p.multi_processor_count})
    with tempfile.TemporaryDirectory() as tmp:
        work, n_steps = Path(tmp), 5 if args.dry else 50
        graph = False
        if "steps" in args.parts:
            rows = time_steps(out, work, args.dry, device, n_steps)
            graph = "graph_ms" in rows[0]
        if "lm" in args.parts:
            time_lm(out, args.dry, device)
        if "streams" in args.parts:
            time_streams(out, work, args.dry, device, args.ns, 5 if args.dry else 100)
        if "lmc" in args.parts:
            time_lm_compiled(out, args.dry, device)
        if "curve" in args.parts:
            time_curve(out, work, args.dry, device, args.ns, args.seconds, deadline, graph)
    if "tests" in args.parts:
        write(out, "tests", device_tests(args.dry))
    print("gpu-engine: results in", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
