"""The CUDA path, run once: device tests, one short bf16 run of every study shape of the paper preset with its
measured step time, the LM step's share of the card's rate (MFU), a one-process torchrun run, and a CUDA-trained
checkpoint analysed and opened in the explorer on a CPU.

    make gpu-check                                        # a GPU here: the whole check; none: the dry form
    python benchmarks/gpu_check.py device --out gpu-check # on the GPU machine: writes gpu-check/*.json and
                                                          # gpu-check/cuda_runs.tar.gz (runs + device logits)
    python benchmarks/gpu_check.py open gpu-check/cuda_runs.tar.gz   # on any CPU: analyse, compare, open
    python benchmarks/gpu_check.py all --dry --out gpu-check          # both, on this CPU at tiny sizes
    python benchmarks/gpu_check.py device --only engine   # only the engine's measurements: graph.json, lm.json,
                                                          # curve.json and stack.json (--only graph, lm, curve or
                                                          # stack: one of them)
    python benchmarks/gpu_check.py device --only quick    # mixit reproduce --preset quick, timed: quick.json
    python benchmarks/gpu_check.py device --studies algorithmic retrieval --stack 16   # those studies' shapes and
                                                          # hours, each run a 16th of a stack (shapes, hours.json)

`device` needs torch and the project's runtime dependencies but not Streamlit (the explorer is opened by
`open`, on the CPU the checkpoint travels to); on a machine with no package index, benchmarks/gpu_bundle.py gathers
the wheels it lacks and the corpora. Every step writes its JSON as soon as it ends, so a check cut
short still leaves what it measured. The dry form runs the same steps on the CPU with tiny models (gloo for
torchrun), so the script is tested where no GPU is (tests/test_gpu_check.py).

Step time of a shape: a real `train()` of STEPS steps (log every STEPS/4, evaluate every STEPS/2, checkpoint at
each evaluation), timed between the logs at STEPS/4 and STEPS/2 and between 3*STEPS/4 and STEPS (the smaller of
the two; neither holds an evaluation), so start-up and compilation stay out. The evaluation and checkpoint
cost is what the log after the first evaluation adds beyond its steps. The paper preset's hours are then
each run's steps x its shape's step time + its evaluations x their cost, summed. With `--stack N` each shape trains
seeds as one stack through `train_stack`, N of them or as many as stack with it in the preset where fewer (a task's
standard, frozen_qk and frozen_mlp runs stack together), as `mixit reproduce --stack N` would, and its times are a
run's share (the stack's over its size); a shape whose stack fails (out of memory) is timed alone, as the pipeline
would train it.

The LM step (lm.json): the paper preset's LM shape (12 layers, d_model 512, 256 positions, batch 512) timed the same
way, the batch in one pass (halves, then quarters, where it runs out of memory); its FLOPs counted by
FlopCounterMode on the trained model (every matmul and attention, forward and backward, no recomputation), so
TFLOP/s and MFU against the card's dense bf16 peak (DENSE_BF16_TFLOPS, else a measured matmul), and peak memory.

Eager against a CUDA graph (graph.json): four of the engine's shapes (retrieval standard and MixiT, memorize, the
deepest MixiT depth model) each trained twice through `train()` from one seed, eager and with `cuda_graph`: both step
times, whether the step was replayed, and how far apart the final weights are.

Several runs on one GPU (curve.json): for N in 1, 2, 4, 8, 16 (dry: 1 and 2), N
short runs of the preset's retrieval shape trained at once through the sweep's pool (`pool_map`, every worker pinned
to the first GPU by its CUDA_VISIBLE_DEVICES, as `--runs-per-gpu` pins them). Aggregate optimizer steps a second:
in the window every run was training in (from the latest first log to the earliest last one, on the machine's
monotonic clock that the processes share), each run's steps between its logs inside it over their time, summed.

Several runs stacked in one process (stack.json): for K in 1, 2, 4, 8, 16 (dry: 1 and 2), K runs of the curve's shape
(seeds 0..K-1) opened by the trainer (`open_loop`) and stepped as one `StackedStep` (mixit_lab.training.stack), a step
being what `train_stack`'s loop takes (each run's batch made on the host, the stacked step): 5 warm-up steps, then 50
timed with the device synchronized only at their ends (dry: 2 and 4); every K eager, then every K with the stacked
step captured as a CUDA graph (`graph`; whether it replayed: `replayed`). Per point: ms a stacked step, the aggregate
steps a second (K runs' steps over the time), its ratio to K=1's of the same step (speedup), peak memory; a K that
runs out of GPU memory says so and the next K runs. Read beside curve.json: the same runs, one process against one
process each.
"""

from __future__ import annotations

import argparse
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

from gpu_check_steps import (corpora, graph_check, lm_mfu, preset_hours, time_curve, time_shapes,  # noqa: E402
                             time_stack, write)

DATA = ROOT.parent / "shared" / "data"  # the corpora beside the checkout (see its README); --data elsewhere
SMALL_RUN = ["--task", "retrieval", "--pairs", "4", "--num-values", "16", "--d-model", "64", "--n-layers", "2",
             "--n-heads", "4", "--lr", "3e-3", "--batch-size", "128", "--eval-every", "100", "--eval-samples", "256"]


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


# ---------------------------------------------------------------- the quick preset end to end

def quick_preset(out: Path, work: Path, dry: bool, data: Path) -> dict[str, Any]:
    """`mixit reproduce --preset quick` on this machine with the engine's settings (on CUDA: every step a graph, runs
    placed --runs-per-gpu's default), timed whole: training, analysis, figures and the report. Dry: the smoke preset's
    plan only (--dry-run), so the command's wiring is tested where the preset would take an hour."""
    texts = corpora(data, work)
    argv = [sys.executable, "-m", "mixit_lab.cli", "reproduce", "--preset", "smoke" if dry else "quick", "--quiet",
            "--out", str(work / "quick" / "runs"), "--report-dir", str(work / "quick" / "report"),
            "--figures-dir", str(work / "quick" / "figures"),
            "--text-file", *texts["lm"], "--sentiment-file", *texts["sentiment"]]
    if (data / "sst-2" / "train.tsv").is_file():
        argv += ["--sst2-dir", str(data / "sst-2")]
    argv += ["--dry-run"] if dry else ["--cuda-graph"]
    result = run(argv, timeout=3600, env=python_env())
    runs = [p for p in (work / "quick" / "runs").rglob("summary.json")]
    result.update(finished_runs=len(runs), minutes=round(result["seconds"] / 60, 2))
    write(out, "quick", result)
    print(f"quick preset end to end: rc {result['rc']}, {result['finished_runs']} runs, {result['minutes']} min",
          flush=True)
    return result


# ---------------------------------------------------------------- the command

ENGINE = ("graph", "lm", "curve", "stack")  # --only engine: the training engine's measurements, one short call
ONLY = (*ENGINE, "engine", "quick")  # --only quick: the quick preset end to end (longer: a call of its own)


def engine_steps(out: Path, work: Path, dry: bool, preset: str, data: Path, which: tuple[str, ...]) -> bool:
    """The engine's measurements named in `which` (ENGINE); True when each ran without an error."""
    steps = 8 if dry else 40
    rows = graph_check(out, work, preset, dry, "cpu" if dry else "cuda", steps, data) if "graph" in which else []
    lm = lm_mfu(out, work, dry, "cpu" if dry else "cuda", data, steps) if "lm" in which else {"error": None}
    rows += time_curve(out, work, preset, dry, "cpu" if dry else "cuda", data) if "curve" in which else []
    stack = time_stack(out, work, preset, dry, "cpu" if dry else "cuda", data) if "stack" in which else {"error": None}
    return all(r["error"] is None for r in rows) and lm["error"] is None and stack["error"] is None


def device_phase(out: Path, work: Path, dry: bool, preset: str, data: Path, studies: list[str] | None,
                 only: str | None = None, stack: int = 1) -> bool:
    """Everything that needs the device (with `studies`: only those studies' step times; `only`: one of ENGINE's
    measurements, or "engine" for all of them); True when all passed. `stack` N > 1: the shapes' times (and the
    preset's hours) are those of runs trained N seeds to a stack."""
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here; run the dry form (--dry) or `make gpu-check` on a GPU")
    out.mkdir(parents=True, exist_ok=True)
    write(out, "environment", environment(torch.device(device)))
    if only == "quick":
        return quick_preset(out, work, dry, data)["rc"] == 0
    if only:
        return engine_steps(out, work, dry, preset, data, ENGINE if only == "engine" else (only,))
    if studies:
        rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data, studies, stack)
        write(out, "hours", preset_hours(rows, preset))
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
    rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data, stack=stack)
    hours = preset_hours(rows, preset)
    write(out, "hours", hours)
    for h in hours:
        print(f"  {h['study']:<11} {h['runs']:>4} runs {h['steps']:>10,} steps {h['hours']:>8} h"
              + (f" ({h['runs_unmeasured']} unmeasured)" if h["runs_unmeasured"] else ""))
    engine = engine_steps(out, work, dry, preset, data, ENGINE)
    return (all(r["rc"] == 0 for r in runs.values()) and tr["ok"] and tests["rc"] == 0
            and all(r["error"] is None for r in rows) and engine)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["device", "open", "all"])
    parser.add_argument("tarball", nargs="?", help="open: the device phase's cuda_runs.tar.gz")
    parser.add_argument("--out", default="gpu-check", help="folder for the results (default: gpu-check)")
    parser.add_argument("--dry", action="store_true", help="on the CPU at tiny sizes (the same steps)")
    parser.add_argument("--preset", default="paper", help="whose study shapes to time (default: paper)")
    parser.add_argument("--studies", nargs="+", metavar="STUDY",
                        help="device: only time these studies' shapes (no runs, torchrun or tests)")
    parser.add_argument("--only", choices=ONLY,
                        help="device: only eager against a CUDA graph (graph.json), the LM step's MFU (lm.json), several "
                             "runs on one GPU (curve.json), several runs stacked in one process (stack.json), those "
                             "four (engine), or the quick preset end to end (quick.json): no runs, torchrun, tests or "
                             "shapes")
    parser.add_argument("--stack", type=int, default=1, metavar="N",
                        help="device: time each shape as a run's share of N seeds trained as one stack, as mixit "
                             "reproduce --stack N (default: 1, each run alone); hours.json then gives the preset's "
                             "hours in stacks of N")
    parser.add_argument("--work", type=Path, help="folder for the runs it trains (default: OUT/work)")
    parser.add_argument("--data", type=Path, default=DATA, help="the corpora folder (default: ../shared/data)")
    args = parser.parse_args()
    out, ok = Path(args.out), True
    out.mkdir(parents=True, exist_ok=True)
    if args.phase in ("device", "all"):
        if args.stack < 1:
            parser.error(f"--stack={args.stack} is not allowed: give a whole number >= 1")
        ok = device_phase(out, args.work or out / "work", args.dry, args.preset, args.data, args.studies, args.only,
                          args.stack)
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
