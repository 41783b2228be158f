"""The CUDA path, run once: device tests, one short bf16 run of every study shape of the paper preset with its
measured step time, a one-process torchrun run, and a CUDA-trained checkpoint analysed and opened in the
explorer on a CPU.

    make gpu-check                                        # a GPU here: the whole check; none: the dry form
    python benchmarks/gpu_check.py device --out gpu-check # on the GPU machine: writes gpu-check/*.json and
                                                          # gpu-check/cuda_runs.tar.gz (runs + device logits)
    python benchmarks/gpu_check.py open gpu-check/cuda_runs.tar.gz   # on any CPU: analyse, compare, open
    python benchmarks/gpu_check.py all --dry --out gpu-check          # both, on this CPU at tiny sizes

`device` needs torch and the project's runtime dependencies but not Streamlit (the explorer is opened by
`open`, on the CPU the checkpoint travels to). Every step writes its JSON as soon as it ends, so a check cut
short still leaves what it measured. The dry form runs the same steps on the CPU with tiny models (gloo for
torchrun), so the script is tested where no GPU is (tests/test_gpu_check.py).

Step time of a shape: a real `train()` of STEPS steps (log every STEPS/4, evaluate every STEPS/2, checkpoint at
each evaluation), timed between the logs at STEPS/4 and STEPS/2 and between 3*STEPS/4 and STEPS (the smaller of
the two; neither holds an evaluation), so start-up and compilation stay out. The evaluation and checkpoint
cost is what the log after the first evaluation adds beyond its steps. The paper preset's hours are then
each run's steps x its shape's step time + its evaluations x their cost, summed.
"""

from __future__ import annotations

import argparse
import dataclasses
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

def device_phase(out: Path, work: Path, dry: bool, preset: str, data: Path, studies: list[str] | None) -> bool:
    """Everything that needs the device (with `studies`: only those studies' step times); True when all passed."""
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here; run the dry form (--dry) or `make gpu-check` on a GPU")
    out.mkdir(parents=True, exist_ok=True)
    write(out, "environment", environment(torch.device(device)))
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
    return (all(r["rc"] == 0 for r in runs.values()) and tr["ok"] and tests["rc"] == 0
            and all(r["error"] is None for r in rows + graphs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["device", "open", "all"])
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
    if args.phase in ("device", "all"):
        ok = device_phase(out, args.work or out / "work", args.dry, args.preset, args.data, args.studies)
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
