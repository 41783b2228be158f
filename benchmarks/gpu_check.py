"""The CUDA path, run once: device tests, one short bf16 run of every study shape of the paper preset with its
measured step time, a one-process torchrun run, and a CUDA-trained checkpoint analysed and opened in the
explorer on a CPU.

    make gpu-check                                        # a GPU here: the whole check; none: the dry form
    python benchmarks/gpu_check.py device --out gpu-check # on the GPU machine: writes gpu-check/*.json and
                                                          # gpu-check/cuda_runs.tar.gz (runs + device logits)
    python benchmarks/gpu_check.py open gpu-check/cuda_runs.tar.gz   # on any CPU: analyse, compare, open
    python benchmarks/gpu_check.py all --dry --out gpu-check          # both, on this CPU at tiny sizes
    python benchmarks/gpu_check.py device --curve --out gpu-check     # only several runs on one GPU: curve.json

`device` needs torch and the project's runtime dependencies but not Streamlit (the explorer is opened by
`open`, on the CPU the checkpoint travels to). Every step writes its JSON as soon as it ends, so a check cut
short still leaves what it measured. The dry form runs the same steps on the CPU with tiny models (gloo for
torchrun), so the script is tested where no GPU is (tests/test_gpu_check.py).

Step time of a shape: a real `train()` of STEPS steps (log every STEPS/4, evaluate every STEPS/2, checkpoint at
each evaluation), timed between the logs at STEPS/4 and STEPS/2 and between 3*STEPS/4 and STEPS (the smaller of
the two; neither holds an evaluation), so start-up and compilation stay out. The evaluation and checkpoint
cost is what the log after the first evaluation adds beyond its steps. The paper preset's hours are then
each run's steps x its shape's step time + its evaluations x their cost, summed.

Several runs on one GPU (`--curve`, and the last step of `device`): for N in 1, 2, 4, 8, 16 (dry: 1 and 2), N
short runs of the preset's retrieval shape trained at once through the sweep's pool (`pool_map`, every worker pinned
to the first GPU by its CUDA_VISIBLE_DEVICES, as `--runs-per-gpu` pins them). Aggregate optimizer steps a second:
in the window every run was training in (from the latest first log to the earliest last one, on the machine's
monotonic clock that the processes share), each run's steps between its logs inside it over their time, summed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from mixit_lab.training.placement import gpu_slots, gpus_here, slot_environments  # noqa: E402
from mixit_lab.training.pool import pool_map  # noqa: E402
from mixit_lab.training.sweep import TrainJob, train_one  # noqa: E402
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


# ---------------------------------------------------------------- several runs on one GPU, through the pool

def curve_run(job: TrainJob) -> dict[str, Any]:
    """One run of a curve point, in a pool worker: the sweep's own job (train_one), then its logs as (step, clock
    time) (evaluations left out) and the CUDA_VISIBLE_DEVICES its worker saw."""
    row = train_one(job)
    end = time.perf_counter()
    logs = []
    if row["status"] == "finished":
        started = end - row["elapsed_s"]  # the trainer's clock at its first step, near enough (ms)
        records = map(json.loads, (Path(job.run_dir) / "metrics.jsonl").read_text().splitlines())
        logs = [(r["step"], started + r["elapsed_s"]) for r in records if "eval_loss" not in r]
    return {"status": row["status"], "message": row.get("message"), "steps": row.get("step") or 0, "logs": logs,
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}


def aggregate_rate(runs: list[list[tuple[int, float]]]) -> dict[str, Any]:
    """Aggregate steps a second of runs trained at once, from each one's logs as (step, clock time): the window all
    were training in (the latest first log to the earliest last log), each run's steps a second between its first
    and last log inside it, summed. steps_per_s is None when a run has fewer than two logs there (hardly overlapped)."""
    start, end = max(logs[0][1] for logs in runs), min(logs[-1][1] for logs in runs)
    rates = []
    for logs in runs:
        inside = [(step, t) for step, t in logs if start <= t <= end]
        if len(inside) < 2 or inside[-1][1] <= inside[0][1]:
            return {"steps_per_s": None, "overlap_s": round(max(end - start, 0.0), 2), "per_run": []}
        rates.append((inside[-1][0] - inside[0][0]) / (inside[-1][1] - inside[0][1]))
    return {"steps_per_s": round(sum(rates), 1), "overlap_s": round(end - start, 2),
            "per_run": [round(r, 1) for r in rates]}


def curve_point(n: int, cfg: TrainConfig, work: Path, gpu: str) -> dict[str, Any]:
    """n runs of `cfg` (seeds 0..n-1) at once on n pool workers, every one pinned to `gpu`."""
    point = work / "curve" / f"n{n}"
    shutil.rmtree(point, ignore_errors=True)  # fresh runs: a finished one would be skipped
    jobs = [TrainJob(f"r{i}", {**cfg.to_dict(), "seed": i}, str(point / f"r{i}"), "gpu-check") for i in range(n)]
    lost = lambda job, error: {"status": "error", "message": f"{type(error).__name__}: {error}", "logs": []}  # noqa: E731
    t0 = time.perf_counter()
    rows = list(pool_map(curve_run, jobs, n, lost, worker_env=slot_environments(gpu_slots([gpu], n, n))))
    wall = time.perf_counter() - t0
    failed = [r for r in rows if r["status"] != "finished" or not r["logs"]]
    if failed:
        return {"n": n, "error": str(failed[0].get("message") or "no logs")[:300], "wall_s": round(wall, 1)}
    rate = aggregate_rate([r["logs"] for r in rows])
    return {"n": n, "aggregate_steps_per_s": rate["steps_per_s"], "per_run_steps_per_s": rate["per_run"],
            "overlap_s": rate["overlap_s"], "steps_per_s_over_wall": round(sum(r["steps"] for r in rows) / wall, 1),
            "wall_s": round(wall, 1), "slot_gpu": gpu, "worker_gpus": sorted({str(r["gpu"]) for r in rows}), "error": None}


def time_curve(out: Path, work: Path, preset_name: str, dry: bool, device: str, data: Path) -> list[dict[str, Any]]:
    """The curve over N runs at once (dry: 1 and 2 tiny runs on the CPU); curve.json rewritten after each point."""
    shape = next((cfg for key, (cfg, _) in shapes(preset_name).items() if key[:2] == ("retrieval", "standard")), None)
    if shape is None:
        raise SystemExit(f"gpu_check: preset {preset_name!r} has no retrieval study with a standard model to time")
    steps = 40 if dry else 600
    short = short_config(shape, dry, steps, device, corpora(data, work))
    cfg = TrainConfig.from_dict({**short.to_dict(), "log_every": steps // 20, "eval_every": steps,
                                 **({"precision": "fp32"} if dry else {})})  # a CPU's bf16 may be emulated: slow
    gpu = (gpus_here() or ["0"])[0]  # the first GPU (dry, on a machine without one: a name nothing reads)
    rows = []
    for n in (1, 2) if dry else (1, 2, 4, 8, 16):
        rows.append(curve_point(n, cfg, work, gpu))
        r = rows[-1]
        print(f"  {n:>2} runs on GPU {gpu}: " + (f"{r['aggregate_steps_per_s']} steps/s together "
              f"(each {r['per_run_steps_per_s']}, {r['overlap_s']} s overlap; {r['steps_per_s_over_wall']} over the "
              f"wall)" if r["error"] is None else f"error {r['error']}"), flush=True)
        write(out, "curve", rows)
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

def device_phase(out: Path, work: Path, dry: bool, preset: str, data: Path, studies: list[str] | None,
                 curve_only: bool = False) -> bool:
    """Everything that needs the device (with `studies`: only those studies' step times; `curve_only`: only several
    runs on one GPU); True when all passed."""
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here; run the dry form (--dry) or `make gpu-check` on a GPU")
    out.mkdir(parents=True, exist_ok=True)
    write(out, "environment", environment(torch.device(device)))
    if studies:
        rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data, studies)
        return all(r["error"] is None for r in rows)
    if curve_only:
        return all(r["error"] is None for r in time_curve(out, work, preset, dry, device, data))
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
    rows = time_shapes(out, work, preset, dry, device, 8 if dry else 40, data)
    hours = preset_hours(rows, preset)
    write(out, "hours", hours)
    for h in hours:
        print(f"  {h['study']:<11} {h['runs']:>4} runs {h['steps']:>10,} steps {h['hours']:>8} h"
              + (f" ({h['runs_unmeasured']} unmeasured)" if h["runs_unmeasured"] else ""))
    curve = time_curve(out, work, preset, dry, device, data)
    return (all(r["rc"] == 0 for r in runs.values()) and tr["ok"] and tests["rc"] == 0
            and all(r["error"] is None for r in rows) and all(r["error"] is None for r in curve))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=["device", "open", "all"])
    parser.add_argument("tarball", nargs="?", help="open: the device phase's cuda_runs.tar.gz")
    parser.add_argument("--out", default="gpu-check", help="folder for the results (default: gpu-check)")
    parser.add_argument("--dry", action="store_true", help="on the CPU at tiny sizes (the same steps)")
    parser.add_argument("--preset", default="paper", help="whose study shapes to time (default: paper)")
    parser.add_argument("--studies", nargs="+", metavar="STUDY",
                        help="device: only time these studies' shapes (no runs, torchrun or tests)")
    parser.add_argument("--curve", action="store_true",
                        help="device: only the curve of several runs on one GPU (no runs, torchrun, tests or step times)")
    parser.add_argument("--work", type=Path, help="folder for the runs it trains (default: OUT/work)")
    parser.add_argument("--data", type=Path, default=DATA, help="the corpora folder (default: ../shared/data)")
    args = parser.parse_args()
    out, ok = Path(args.out), True
    out.mkdir(parents=True, exist_ok=True)
    if args.phase in ("device", "all"):
        ok = device_phase(out, args.work or out / "work", args.dry, args.preset, args.data, args.studies, args.curve)
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
