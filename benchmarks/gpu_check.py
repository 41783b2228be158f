"""The CUDA path, run once: device tests, one short bf16 run of every study shape of the paper preset with its
measured step time, the LM step's share of the card's rate (MFU), a one-process torchrun run, and a CUDA-trained
checkpoint analysed and opened in the explorer on a CPU.

    make gpu-check                                        # a GPU here: the whole check; none: the dry form
    python benchmarks/gpu_check.py device --out gpu-check # on the GPU machine: writes gpu-check/*.json and
                                                          # gpu-check/cuda_runs.tar.gz (runs + device logits)
    python benchmarks/gpu_check.py open gpu-check/cuda_runs.tar.gz   # on any CPU: analyse, compare, open
    python benchmarks/gpu_check.py all --dry --out gpu-check          # both, on this CPU at tiny sizes
    python benchmarks/gpu_check.py lm --out gpu-check     # only the LM step's MFU: gpu-check/lm.json

`device` needs torch and the project's runtime dependencies but not Streamlit (the explorer is opened by
`open`, on the CPU the checkpoint travels to). Every step writes its JSON as soon as it ends, so a check cut
short still leaves what it measured. The dry form runs the same steps on the CPU with tiny models (gloo for
torchrun), so the script is tested where no GPU is (tests/test_gpu_check.py).

Step time of a shape: a real `train()` of STEPS steps (log every STEPS/4, evaluate every STEPS/2, checkpoint at
each evaluation), timed between the logs at STEPS/4 and STEPS/2 and between 3*STEPS/4 and STEPS (the smaller of
the two; neither holds an evaluation), so start-up and compilation stay out. The evaluation and checkpoint
cost is what the log after the first evaluation adds beyond its steps. The paper preset's hours are then
each run's steps x its shape's step time + its evaluations x their cost, summed.

The LM step (lm.json): the paper preset's LM shape (12 layers, d_model 512, 256 positions, batch 512) timed the same
way, the batch in one pass (halves, then quarters, where it runs out of memory); its FLOPs counted by
FlopCounterMode on the trained model (every matmul and attention, forward and backward, no recomputation), so
TFLOP/s and MFU against the card's dense bf16 peak (DENSE_BF16_TFLOPS, else a measured matmul), and peak memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from paper_cost import study_runs  # noqa: E402
from mixit_lab.reproduce.preset import load_preset  # noqa: E402
from mixit_lab.training.tasks import TASKS  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.trainer import train  # noqa: E402

DATA = ROOT.parent / "shared" / "data"  # the corpora beside the checkout (see its README); --data elsewhere
TEXT = ["wikitext-2/valid.txt", "wikitext-2/test.txt", "tinyshakespeare/input.txt"]
LABELLED = "sentiment-sentences/yelp_labelled.txt"
SMALL_RUN = ["--task", "retrieval", "--pairs", "4", "--num-values", "16", "--d-model", "64", "--n-layers", "2",
             "--n-heads", "4", "--lr", "3e-3", "--batch-size", "128", "--eval-every", "100", "--eval-samples", "256"]


def write(out: Path, name: str, data: Any) -> None:
    """One step's result as out/name.json, written when the step ends."""
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


def python_env() -> dict[str, str]:
    """The environment of the subprocesses: this checkout importable, output unbuffered."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run(argv: list[str], timeout: int = 600, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command; its exit code, seconds and the end of its output."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env or python_env(), capture_output=True, text=True, timeout=timeout)
    return {"argv": argv[1:], "rc": done.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "tail": (done.stdout + done.stderr)[-2500:]}


def environment(device: torch.device) -> dict[str, Any]:
    """What the check ran on."""
    info = {"torch": torch.__version__, "device": str(device), "python": sys.version.split()[0]}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda,
                    capability=f"{props.major}.{props.minor}", bf16=torch.cuda.is_bf16_supported(),
                    nccl=".".join(map(str, torch.cuda.nccl.version())))
    return info


def device_tests(dry: bool) -> dict[str, Any]:
    """The tests marked `device` (tests/test_devices.py), on this machine's devices."""
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "device", "-p", "no:cacheprovider", "tests/test_devices.py"]
    return run(argv + (["-k", "cpu"] if dry else []))


# ---------------------------------------------------------------- step times of the paper preset's shapes

def corpora(data: Path, out: Path) -> dict[str, list[str]]:
    """The text studies' files: the corpora under `data`, or (none there) a made-up corpus in `out` whose step
    times are the same (a step's cost depends on the shapes, not on the words; the vocabulary may come out smaller)."""
    if all((data / f).is_file() for f in [*TEXT, LABELLED]):
        return {"lm": [str(data / f) for f in TEXT], "sentiment": [str(data / LABELLED)]}
    words = [f"w{i}" for i in range(4000)]
    g = torch.Generator().manual_seed(0)
    pick = lambda n: " ".join(words[i] for i in torch.randint(0, len(words), (n,), generator=g).tolist())  # noqa: E731
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    text, labelled = out / "corpus" / "text.txt", out / "corpus" / "labelled.txt"
    text.write_text("\n\n".join(pick(200) for _ in range(400)))
    labelled.write_text("".join(f"{pick(12)}\t{i % 2}\n" for i in range(400)))
    return {"lm": [str(text)], "sentiment": [str(labelled)]}


def shape_key(study: str, cfg: TrainConfig) -> tuple:
    """A model shape of a study: its variant (with a grid model's settings), width, depth and heads."""
    return study, cfg.variant, json.dumps(cfg.model_extra, sort_keys=True), cfg.d_model, cfg.n_layers, cfg.n_heads


def shapes(preset_name: str) -> dict[tuple, tuple[TrainConfig, Any]]:
    """One config per shape (shape_key) of the preset's studies: its longest task, its training settings."""
    chosen: dict[tuple, tuple[TrainConfig, Any]] = {}
    for study, runs in study_runs(load_preset(preset_name)).items():
        for cfg, mcfg in runs:
            key = shape_key(study, cfg)
            if key not in chosen or mcfg.n_ctx > chosen[key][1].n_ctx:
                chosen[key] = (cfg, mcfg)
    return chosen


def short_config(cfg: TrainConfig, dry: bool, steps: int, device: str, texts: dict[str, list[str]]) -> TrainConfig:
    """The short run of one shape: the study's model, task and batch (tiny in the dry form), STEPS steps in bf16."""
    data = cfg.to_dict()
    if TASKS[cfg.task].needs_corpus:
        data["task_params"] = {**cfg.task_params, "text_file": texts["sentiment" if TASKS[cfg.task].is_classifier()
                                                                     else "lm"]}
        if dry:
            data["task_params"].update(seq_len=32, **({"vocab_size": 300} if "vocab_size" in cfg.task_params else {}))
    if dry:
        data.update(d_model=16, n_heads=2, n_layers=min(cfg.n_layers, 2), batch_size=8, eval_samples=16)
        data["task_params"] = {k: min(v, 8) if k in ("n", "pairs", "digits", "max_pairs") and isinstance(v, int)
                               else v for k, v in data["task_params"].items()}
        data["task_params"] = {**data["task_params"], **({"p": 7} if cfg.task == "modadd" else {})}
    data.update(steps=steps, log_every=steps // 4, eval_every=steps // 2, checkpoint_every=None, warmup_steps=0,
                precision="bf16", device=device, keep_checkpoints=0)
    return TrainConfig.from_dict(data)


def step_time(run_dir: Path, steps: int) -> dict[str, float]:
    """Milliseconds per training step and per evaluation (with its checkpoint), from a short run's log."""
    elapsed = {r["step"]: r["elapsed_s"] for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}
    q = steps // 4
    step_s = min(elapsed[2 * q] - elapsed[q], elapsed[4 * q] - elapsed[3 * q]) / q
    eval_s = max(elapsed[3 * q] - elapsed[2 * q] - q * step_s, 0.0)
    return {"step_ms": round(step_s * 1e3, 3), "eval_ms": round(eval_s * 1e3, 1)}


def time_shapes(out: Path, work: Path, preset_name: str, dry: bool, device: str, steps: int,
                data: Path, studies: list[str] | None = None) -> list[dict[str, Any]]:
    """Step time of every shape; shapes.json rewritten after each, so a check cut short keeps what it measured."""
    rows, texts = [], corpora(data, work)
    for i, (key, (cfg, mcfg)) in enumerate(shapes(preset_name).items()):
        study, variant, _, d, n_layers, heads = key
        if studies and study not in studies:
            continue
        short = short_config(cfg, dry, steps, device, texts)
        run_dir = work / "shapes" / f"{i:02d}-{study}-{variant}-L{n_layers}"
        t0 = time.perf_counter()
        try:
            summary = train(short, run_dir, progress=False)
            row = {**step_time(run_dir, steps), "tokens_per_s": summary.get("tokens_per_s"), "error": None}
        except Exception as e:  # noqa: BLE001 - one shape's failure (out of memory, say) is a row; the others run
            row = {"step_ms": None, "eval_ms": None, "error": f"{type(e).__name__}: {e}"[:300]}
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        rows.append({"key": list(key), "study": study, "variant": variant, "d_model": d, "n_layers": n_layers, "n_heads": heads,
                     "task": cfg.task, "seq_len": mcfg.n_ctx, "batch_size": short.batch_size,
                     "wall_s": round(time.perf_counter() - t0, 1), **row})
        print(f"  {study:<11} {variant:<10} d{d} L{n_layers} h{heads} T{mcfg.n_ctx}: "
              f"{row['step_ms']} ms/step, eval {row['eval_ms']} ms {row['error'] or ''}", flush=True)
        write(out, "shapes", rows)
    return rows


def preset_hours(rows: list[dict[str, Any]], preset_name: str) -> list[dict[str, Any]]:
    """Each study's hours on this device: every run's steps at its shape's measured step and evaluation times."""
    measured = {tuple(r["key"]): r for r in rows}
    table = []
    for study, runs in study_runs(load_preset(preset_name)).items():
        seconds, missing = 0.0, 0
        for cfg, _ in runs:
            r = measured.get(shape_key(study, cfg))
            if r is None or r["step_ms"] is None:
                missing += 1
                continue
            seconds += cfg.steps * r["step_ms"] / 1e3 + (cfg.steps // cfg.eval_every) * r["eval_ms"] / 1e3
        table.append({"study": study, "runs": len(runs), "steps": sum(c.steps for c, _ in runs),
                      "seconds": round(seconds, 1), "hours": round(seconds / 3600, 2), "runs_unmeasured": missing})
    total = sum(t["seconds"] for t in table)  # summed unrounded-to-hours: a small preset's studies each round to 0 h
    table.append({"study": "total", "runs": sum(t["runs"] for t in table), "steps": sum(t["steps"] for t in table),
                  "seconds": round(total, 1), "hours": round(total / 3600, 2),
                  "runs_unmeasured": sum(t["runs_unmeasured"] for t in table)})
    return table


# ---------------------------------------------------------------- the step as a CUDA graph, through train()

GRAPH_SHAPES = (("retrieval", "standard"), ("retrieval", "mixit"), ("memorize", "standard"), ("depth", "mixit"))


def graph_shapes(preset_name: str) -> list[tuple[tuple, TrainConfig]]:
    """One shape per GRAPH_SHAPES entry (the deepest where a study has several): the engine measurements' shapes."""
    chosen: dict[tuple[str, str], tuple[tuple, TrainConfig]] = {}
    for key, (cfg, _) in shapes(preset_name).items():
        pick = key[:2]
        if pick in GRAPH_SHAPES and (pick not in chosen or cfg.n_layers > chosen[pick][1].n_layers):
            chosen[pick] = (key, cfg)
    return [chosen[p] for p in GRAPH_SHAPES if p in chosen]


def graph_check(out: Path, work: Path, preset_name: str, dry: bool, device: str, steps: int,
                data: Path) -> list[dict[str, Any]]:
    """Each GRAPH_SHAPES shape trained twice through train() from the same seed, eager and with --cuda-graph: the step
    times, whether the step was replayed (summary.json's cuda_graph), and how far apart the final weights are."""
    from mixit_lab.models import load_model

    rows, texts = [], corpora(data, work)
    for key, cfg in graph_shapes(preset_name):
        row: dict[str, Any] = {"study": key[0], "variant": key[1], "d_model": key[3], "n_layers": key[4], "error": None}
        weights = []
        try:
            for graph in (False, True):
                short = dataclasses.replace(short_config(cfg, dry, steps, device, texts), cuda_graph=graph)
                run_dir = work / "graph" / f"{key[0]}-{key[1]}-L{key[4]}-{'graph' if graph else 'eager'}"
                summary = train(short, run_dir, progress=False)
                row[f"{'graph' if graph else 'eager'}_step_ms"] = step_time(run_dir, steps)["step_ms"]
                row["replayed"] = summary.get("cuda_graph")
                weights.append(torch.cat([p.detach().float().flatten() for p in load_model(run_dir).parameters()]))
            row["speedup"] = round(row["eager_step_ms"] / max(row["graph_step_ms"], 1e-9), 2)
            row["weights_relative_difference"] = float((weights[1] - weights[0]).norm() / weights[0].norm())
        except Exception as e:  # noqa: BLE001 - one shape's failure is a row; the others run
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
        print(f"  graph {row['study']:<10} {row['variant']:<9} L{row['n_layers']}: eager {row.get('eager_step_ms')} ms, "
              f"graph {row.get('graph_step_ms')} ms (replayed: {row.get('replayed')}), weights apart "
              f"{row.get('weights_relative_difference', float('nan')):.1e} {row['error'] or ''}", flush=True)
        write(out, "graph", rows)
    return rows


# ---------------------------------------------------------------- the LM step's share of the card's rate

# Dense bf16 tensor-core TFLOP/s from the datasheets, by a substring of torch.cuda.get_device_name(); the first that
# matches counts ("H100 PCIe" and "H100 NVL" before the SXM card's "H100"). Another card's peak is measured.
DENSE_BF16_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0)]


def significant(x: float) -> float:
    """x to 4 significant digits: a CPU's rates are a few GFLOP/s, a GPU's hundreds of TFLOP/s."""
    return float(f"{x:.4g}")


def matmul_tflops(device: torch.device, n: int, reps: int) -> float:
    """The measured rate of an n x n x n bf16 matmul on random data, TFLOP/s."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(2):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def peak_tflops(device: torch.device, dry: bool) -> dict[str, Any]:
    """The card's dense bf16 peak: the datasheet's for a known card, else a measured 8192^3 bf16 matmul (on a CPU,
    512^3), labelled; the measured rate is given either way."""
    measured = matmul_tflops(device, 512 if dry else 8192, 3 if dry else 20)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    known = next((tflops for part, tflops in DENSE_BF16_TFLOPS if part in name), None)
    return {"device_name": name, "peak_tflops": known or significant(measured),
            "peak_source": "datasheet" if known else f"measured ({512 if dry else 8192}^3 bf16 matmul)",
            "measured_tflops": significant(measured)}


def lm_flops(run_dir: Path, device: str, rows: int = 2) -> dict[str, Any]:
    """The trained model's FLOPs per row of a training step (forward and backward, every matmul and attention,
    counted by FlopCounterMode on `rows` rows: no recomputation counted), its vocabulary and positions; and
    whether the step runs with SDPA's flash kernel alone allowed (None on a CPU, whose short sequences skip SDPA)."""
    from torch.utils.flop_counter import FlopCounterMode

    from mixit_lab.models import load_model
    from mixit_lab.training.loss import masked_loss

    model = load_model(run_dir, device).train()
    tokens = torch.randint(0, model.config.d_vocab, (rows, model.config.n_ctx), device=device)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    with FlopCounterMode(display=False) as counter:
        with torch.autocast(tokens.device.type, torch.bfloat16):
            loss = masked_loss(model, tokens, mask)
        loss.backward()
    flash: bool | str | None = None
    if tokens.device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        try:  # the training step's forward and backward with no other SDPA kernel allowed
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                with torch.autocast("cuda", torch.bfloat16):
                    loss = masked_loss(model, tokens, mask)
                loss.backward()
            flash = True
        except RuntimeError as e:
            flash = f"no: {e}"[:300]
    return {"flops_per_row": counter.get_total_flops() / rows, "d_vocab": model.config.d_vocab,
            "seq_len": model.config.n_ctx, "flash_attention": flash}


def lm_attempt(cfg: TrainConfig, micro: int | None, run_dir: Path, steps: int) -> dict[str, Any]:
    """One short run of the LM shape at `micro` rows a pass (None: the batch in one pass): its step time, peak
    memory and whether its loss was taken in chunks, or the error it ended with ("out_of_memory" says which)."""
    from mixit_lab.training.loss import loss_chunk_rows

    short = TrainConfig.from_dict({**cfg.to_dict(), "micro_batch_size": micro})
    cuda = short.device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    row: dict[str, Any] = {"micro_batch_size": micro, "out_of_memory": False, "error": None}
    try:
        summary = train(short, run_dir, progress=False)
        model = json.loads((run_dir / "run.json").read_text())["model"]
        rows = (micro or short.batch_size) * (model["n_ctx"] - 1)  # every position but the last predicts one
        row.update(step_time(run_dir, steps), tokens_per_s=summary.get("tokens_per_s"),
                   chunked_loss=loss_chunk_rows(rows, model["d_vocab"]) < rows)
    except torch.OutOfMemoryError as e:  # the caller tries smaller passes
        row.update(out_of_memory=True, error=f"OutOfMemoryError: {e}"[:300])
    except Exception as e:  # noqa: BLE001 - the step's failure is its result, written like any other
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    if cuda:
        gc.collect()  # what the failed pass held, before the next one measures its peak
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1)
        torch.cuda.empty_cache()
    return row


def lm_mfu(out: Path, work: Path, dry: bool, device: str, data: Path, steps: int) -> dict[str, Any]:
    """The paper preset's LM step (standard variant) through the real `train()`: ms a step, TFLOP/s and MFU against
    the card's dense bf16 peak, peak memory; the batch in one pass, else (out of memory) in halves, then quarters.
    Written as out/lm.json."""
    cfg, _ = next(v for k, v in shapes("paper").items() if k[0] == "lm" and k[1] == "standard")
    short = short_config(cfg, dry, steps, device, corpora(data, work))
    result: dict[str, Any] = {"batch_size": short.batch_size, "d_model": short.d_model, "n_layers": short.n_layers,
                              "n_heads": short.n_heads, **peak_tflops(torch.device(device), dry), "attempts": []}
    for micro in (None, short.batch_size // 2, short.batch_size // 4):
        row = lm_attempt(short, micro, work / "lm" / f"micro-{micro or 'all'}", steps)
        result["attempts"].append(row)
        if not row["out_of_memory"]:
            break
    ok = result["attempts"][-1]
    result["error"] = ok["error"]
    if ok["error"] is None:
        counted = lm_flops(work / "lm" / f"micro-{ok['micro_batch_size'] or 'all'}", device)
        flops = counted.pop("flops_per_row") * short.batch_size
        tflops = flops / (ok["step_ms"] / 1e3) / 1e12
        result.update(counted, **{k: ok[k] for k in ("micro_batch_size", "step_ms", "chunked_loss")},
                      peak_gib=ok.get("peak_gib"), tflop_per_step=significant(flops / 1e12),
                      tflops=significant(tflops), mfu=significant(tflops / result["peak_tflops"]),
                      of_measured=significant(tflops / result["measured_tflops"]))
    write(out, "lm", result)
    print(f"  lm step: {result.get('step_ms')} ms, {result.get('tflops')} TFLOP/s, MFU {result.get('mfu')} of "
          f"{result['peak_tflops']} ({result['peak_source']}), peak {result.get('peak_gib')} GiB, passes of "
          f"{result.get('micro_batch_size') or result['batch_size']} rows {result['error'] or ''}", flush=True)
    return result


# ---------------------------------------------------------------- torchrun, and a checkpoint for the CPU

def torchrun_one(work: Path, device: str, dry: bool) -> dict[str, Any]:
    """A one-process torchrun run (NCCL on CUDA, gloo on a CPU): trains through the process group and DDP."""
    from mixit_lab.training.parallel import torchrun_command

    run_dir = work / "torchrun"
    steps = "20" if dry else "200"
    result = run(torchrun_command(1, ["mixit_lab.cli", "train", *SMALL_RUN, "--variant", "mixit", "--steps", steps,
                                      "--device", device, "--quiet", "--out", str(run_dir)]))
    summary = run_dir / "summary.json"
    result["summary"] = json.loads(summary.read_text()) if summary.is_file() else None
    result["ok"] = result["rc"] == 0 and bool(result["summary"]) and result["summary"]["backend"] == (
        "nccl" if device == "cuda" else "gloo")
    return result


def device_logits(run_dir: Path, device: str) -> dict[str, torch.Tensor]:
    """The run's model on `device` in float32, on a fixed batch: the tokens and its logits, to compare on a CPU."""
    from mixit_lab.models import load_model

    model = load_model(run_dir, device).eval()
    tokens = torch.randint(0, model.config.d_vocab, (8, model.config.n_ctx), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(tokens.to(device)).float().cpu()
    return {"tokens": tokens, "logits": logits}


def cuda_runs(out: Path, work: Path, device: str, dry: bool) -> dict[str, Any]:
    """Train standard and mixit with the real command on the device; pack the runs and their device logits
    as out/cuda_runs.tar.gz."""
    from safetensors.torch import save_file

    bundle, results = work / "bundle", {}
    for variant in ("standard", "mixit"):
        run_dir = bundle / "runs" / "retrieval" / variant
        results[variant] = run([sys.executable, "-m", "mixit_lab.cli", "train", *SMALL_RUN, "--variant", variant, "--steps",
                                "20" if dry else "300", "--device", device, "--quiet", "--out", str(run_dir)])
        if results[variant]["rc"] == 0:
            (bundle / "logits").mkdir(parents=True, exist_ok=True)
            save_file(device_logits(run_dir, device), str(bundle / "logits" / f"{variant}.safetensors"))
    with tarfile.open(out / "cuda_runs.tar.gz", "w:gz") as tar:
        tar.add(bundle, arcname="cuda_runs")
    return results


# ---------------------------------------------------------------- on a CPU: analyse, compare, open

EXPLORER = """
import sys
from streamlit.testing.v1 import AppTest
sys.argv = ["app.py", "--runs", sys.argv[1]]
at = AppTest.from_file("explorer/app.py", default_timeout=180).run()
assert not at.exception, [e.value for e in at.exception]
for page in ("pages/runs.py", "pages/attention.py"):
    at.switch_page(page).run()
    assert not at.exception and not at.error, (page, [e.value for e in [*at.exception, *at.error]])
print("pages", [h.value for h in at.header])
"""


def open_on_cpu(tarball: Path, out: Path) -> dict[str, Any]:
    """Unpack the device's runs; on the CPU: the same logits, `mixit analyze`, the explorer's pages."""
    from safetensors.torch import load_file

    from mixit_lab.models import load_model

    with tarfile.open(tarball) as tar:
        tar.extractall(out, filter="data")
    root, env = out / "cuda_runs", {**python_env(), "CUDA_VISIBLE_DEVICES": ""}
    results: dict[str, Any] = {}
    for logits_file in sorted((root / "logits").glob("*.safetensors")):
        variant, saved = logits_file.stem, load_file(str(logits_file))
        run_dir = root / "runs" / "retrieval" / variant
        with torch.no_grad():
            here = load_model(run_dir, "cpu").eval()(saved["tokens"]).float()
        error = float((here - saved["logits"]).norm() / saved["logits"].norm())
        analyze = run([sys.executable, "-m", "mixit_lab.cli", "analyze", str(run_dir), "--device", "cpu", "--n-seqs", "8",
                       "--seq-len", "16", "--eval-samples", "64"], env=env)
        results[variant] = {"logits_relative_error": error, "analyze_rc": analyze["rc"],
                            "analysis": (run_dir / "analysis" / "analysis.json").is_file(), "tail": analyze["tail"]}
    results["explorer"] = run([sys.executable, "-c", EXPLORER, str(root / "runs")], env=env)
    results["ok"] = {"standard", "mixit"} <= set(results) and results["explorer"]["rc"] == 0 and all(
        r["analyze_rc"] == 0 and r["analysis"] and r["logits_relative_error"] < 1e-3
        for k, r in results.items() if k not in ("explorer", "ok"))
    return results


# ---------------------------------------------------------------- the command

def device_phase(out: Path, work: Path, dry: bool, preset: str, data: Path, studies: list[str] | None,
                 only_lm: bool = False) -> bool:
    """Everything that needs the device (with `studies`: only those studies' step times; only_lm: only the LM step's
    MFU); True when all passed."""
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here; run the dry form (--dry) or `make gpu-check` on a GPU")
    out.mkdir(parents=True, exist_ok=True)
    write(out, "environment", environment(torch.device(device)))
    if only_lm:
        return lm_mfu(out, work, dry, device, data, 8 if dry else 40)["error"] is None
    if studies:
        rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data, studies)
        return all(r["error"] is None for r in rows)
    runs = cuda_runs(out, work, device, dry)
    write(out, "cuda_runs", runs)
    print(f"runs on {device}: " + ", ".join(f"{v} rc {r['rc']} ({r['seconds']} s)" for v, r in runs.items()), flush=True)
    tr = torchrun_one(work, device, dry)
    write(out, "torchrun", tr)
    print(f"torchrun, one process: rc {tr['rc']}, backend {(tr['summary'] or {}).get('backend')} ({tr['seconds']} s)",
          flush=True)
    tests = device_tests(dry)
    write(out, "tests", tests)
    print(f"device tests: rc {tests['rc']}: {tests['tail'].strip().splitlines()[-1]}", flush=True)
    graphs = graph_check(out, work, preset, dry, device, 8 if dry else 40, data)
    rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data)
    hours = preset_hours(rows, preset)
    write(out, "hours", hours)
    for h in hours:
        print(f"  {h['study']:<11} {h['runs']:>4} runs {h['steps']:>10,} steps {h['hours']:>8} h"
              + (f" ({h['runs_unmeasured']} unmeasured)" if h["runs_unmeasured"] else ""))
    lm = lm_mfu(out, work, dry, device, data, 8 if dry else 40)
    return (all(r["rc"] == 0 for r in runs.values()) and tr["ok"] and tests["rc"] == 0
            and all(r["error"] is None for r in rows + graphs) and lm["error"] is None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["device", "open", "all", "lm"], help="lm: only the LM step's MFU (lm.json)")
    parser.add_argument("tarball", nargs="?", help="open: the device phase's cuda_runs.tar.gz")
    parser.add_argument("--out", default="gpu-check", help="folder for the results (default: gpu-check)")
    parser.add_argument("--dry", action="store_true", help="on the CPU at tiny sizes (the same steps)")
    parser.add_argument("--preset", default="paper", help="whose study shapes to time (default: paper)")
    parser.add_argument("--studies", nargs="+", metavar="STUDY",
                        help="device: only time these studies' shapes (no runs, torchrun or tests)")
    parser.add_argument("--work", type=Path, help="folder for the runs it trains (default: OUT/work)")
    parser.add_argument("--data", type=Path, default=DATA, help="the corpora folder (default: ../shared/data)")
    args = parser.parse_args()
    out, ok = Path(args.out), True
    out.mkdir(parents=True, exist_ok=True)
    if args.phase in ("device", "all", "lm"):
        ok = device_phase(out, args.work or out / "work", args.dry, args.preset, args.data, args.studies,
                          only_lm=args.phase == "lm")
    if args.phase in ("open", "all"):
        opened = open_on_cpu(Path(args.tarball or out / "cuda_runs.tar.gz"), (args.work or out / "work") / "opened")
        write(out, "opened", opened)
        print("on the CPU: " + ", ".join(f"{k}: logits {v['logits_relative_error']:.1e}, analyze rc {v['analyze_rc']}"
                                         for k, v in opened.items() if isinstance(v, dict) and "analyze_rc" in v)
              + f"; explorer rc {opened['explorer']['rc']}")
        ok = ok and opened["ok"]
    print("gpu-check:", "passed" if ok else "FAILED", f"({'dry, CPU' if args.dry else 'CUDA'}); results in {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
