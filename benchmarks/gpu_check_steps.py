"""The measurements of `make gpu-check` (benchmarks/gpu_check.py) that train through the trainer: the step time of
every study shape of a preset and the preset's hours from them, eager against the step as a CUDA graph, the paper
LM step's share of the card's rate, several runs at once on one GPU (a process each), and several runs stacked in
one process. Each writes its JSON as soon as it ends.
How each is timed is said in gpu_check.py's docstring.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import shutil
import sys
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
from mixit_lab.training.jobs import TrainJob, train_one  # noqa: E402
from mixit_lab.training.stack import stack_key, stack_refusal, train_stack  # noqa: E402
from mixit_lab.training.trainer import train  # noqa: E402

TEXT = ["wikitext-2/valid.txt", "wikitext-2/test.txt", "tinyshakespeare/input.txt"]
LABELLED = "sentiment-sentences/yelp_labelled.txt"


def write(out: Path, name: str, data: Any) -> None:
    """One step's result as out/name.json, written when the step ends."""
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str))


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
                data: Path, studies: list[str] | None = None, stack: int = 1) -> list[dict[str, Any]]:
    """Step time of every shape; shapes.json rewritten after each, so a check cut short keeps what it measured. With
    `stack` N > 1 each shape trains seeds as one stack (mixit_lab.training.stack) of the size `mixit reproduce --stack N`
    would give it (stack_sizes), and its times are a run's share (the stack's divided by its size); a shape whose stack
    fails trains alone."""
    rows, texts = [], corpora(data, work)
    sizes = stack_sizes(preset_name, stack)
    for i, (key, (cfg, mcfg)) in enumerate(shapes(preset_name).items()):
        study, variant, _, d, n_layers, heads = key
        if studies and study not in studies:
            continue
        short = short_config(cfg, dry, steps, device, texts)
        run_dir = work / "shapes" / f"{i:02d}-{study}-{variant}-L{n_layers}"
        t0 = time.perf_counter()
        row = shape_time(short, run_dir, steps, sizes[key])
        rows.append({"key": list(key), "study": study, "variant": variant, "d_model": d, "n_layers": n_layers, "n_heads": heads,
                     "task": cfg.task, "seq_len": mcfg.n_ctx, "batch_size": short.batch_size,
                     "wall_s": round(time.perf_counter() - t0, 1), **row})
        share = f" (a run's share of a stack of {row['stack']})" if row["stack"] > 1 else ""
        print(f"  {study:<11} {variant:<10} d{d} L{n_layers} h{heads} T{mcfg.n_ctx}: {row['step_ms']} ms/step, eval "
              f"{row['eval_ms']} ms{share} {row['error'] or ''}", flush=True)
        write(out, "shapes", rows)
    return rows


def stack_sizes(preset_name: str, stack: int) -> dict[tuple, int]:
    """The stack each shape (shape_key) trains in with `mixit reproduce --stack N`: N, or its largest group of runs
    that stack (stack_key) where that is smaller; 1 for runs that cannot stack (stack_refusal), as plan_jobs groups them."""
    sizes: dict[tuple, int] = {}
    for study, runs in study_runs(load_preset(preset_name)).items():
        groups: dict[str, list[tuple]] = {}
        for i, (cfg, _) in enumerate(runs):
            groups.setdefault(str(i) if stack_refusal(cfg) else stack_key(cfg), []).append(shape_key(study, cfg))
        for keys in groups.values():
            for key in keys:
                sizes[key] = max(sizes.get(key, 1), min(stack, len(keys)))
    return sizes


def shape_time(short: TrainConfig, run_dir: Path, steps: int, stack: int) -> dict[str, Any]:
    """One shape's step and evaluation times: a run's share of a stack of `stack` seeds, or of a run alone (stack 1,
    or a stack that failed: out of memory, say); an error that stops the run alone too is the row's error."""
    if stack > 1:
        try:
            cfgs = [TrainConfig.from_dict({**short.to_dict(), "seed": seed}) for seed in range(stack)]
            summaries = train_stack(cfgs, [run_dir / f"s{seed}" for seed in range(stack)], progress=False)
            times = step_time(run_dir / "s0", steps)
            return {"step_ms": round(times["step_ms"] / stack, 3), "eval_ms": round(times["eval_ms"] / stack, 1),
                    "tokens_per_s": summaries[0].get("tokens_per_s"), "stack": stack, "stack_error": None, "error": None}
        except Exception as e:  # noqa: BLE001 - the pipeline trains a failed stack's runs alone: so does this
            stack_error = f"{type(e).__name__}: {e}"[:300]
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    else:
        stack_error = None
    try:
        summary = train(short, run_dir / "alone", progress=False)
        row = {**step_time(run_dir / "alone", steps), "tokens_per_s": summary.get("tokens_per_s"), "error": None}
    except Exception as e:  # noqa: BLE001 - one shape's failure (out of memory, say) is a row; the others run
        row = {"step_ms": None, "eval_ms": None, "error": f"{type(e).__name__}: {e}"[:300]}
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return {**row, "stack": 1, "stack_error": stack_error}


def preset_hours(rows: list[dict[str, Any]], preset_name: str) -> list[dict[str, Any]]:
    """Each study's hours on this device: every run's steps at its shape's measured step and evaluation times. Where
    every shape was timed in stacks of N (shape_time), the runs that stack together (stack_key: seeds, rates, and
    variants built alike, such as standard, frozen_qk and frozen_mlp) train N to a stack, each stack at the slowest
    of their shapes' stack step times (a stack of variants computes every weight's gradient, as standard's does; a
    smaller last stack is charged in full); each run's evaluations apart."""
    measured = {tuple(r["key"]): r for r in rows}
    table = []
    for study, runs in study_runs(load_preset(preset_name)).items():
        seconds, missing = 0.0, 0
        groups: dict[str, list[tuple[TrainConfig, dict[str, Any]]]] = {}
        for cfg, _ in runs:
            r = measured.get(shape_key(study, cfg))
            if r is None or r["step_ms"] is None:
                missing += 1
                continue
            groups.setdefault(stack_key(cfg), []).append((cfg, r))
        for group in groups.values():
            seconds += _group_seconds(group)
        table.append({"study": study, "runs": len(runs), "steps": sum(c.steps for c, _ in runs),
                      "seconds": round(seconds, 1), "hours": round(seconds / 3600, 2), "runs_unmeasured": missing})
    total = sum(t["seconds"] for t in table)  # summed unrounded-to-hours: a small preset's studies each round to 0 h
    table.append({"study": "total", "runs": sum(t["runs"] for t in table), "steps": sum(t["steps"] for t in table),
                  "seconds": round(total, 1), "hours": round(total / 3600, 2),
                  "runs_unmeasured": sum(t["runs_unmeasured"] for t in table)})
    return table


def _group_seconds(group: list[tuple[TrainConfig, dict[str, Any]]]) -> float:
    """The seconds that runs which can stack take (preset_hours): stacked N at a time where every shape was timed in
    stacks of N (stack_sizes: N, or the group's size where smaller), else each alone at its own step time; every run's
    evaluations apart."""
    cfg = group[0][0]
    n = min(r.get("stack", 1) for _, r in group)
    if n > 1 and all(r.get("stack", 1) == n for _, r in group):
        stacks = -(-len(group) // n)  # ceil: the stacks this group trains in
        seconds = stacks * cfg.steps * max(r["step_ms"] for _, r in group) * n / 1e3
    else:
        seconds = sum(c.steps * r["step_ms"] / 1e3 for c, r in group)
    return seconds + sum((c.steps // c.eval_every) * r["eval_ms"] / 1e3 for c, r in group)


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


def retrieval_shape(preset_name: str) -> TrainConfig:
    """The preset's retrieval study with a standard model: the small shape the curve and the stack time."""
    shape = next((cfg for key, (cfg, _) in shapes(preset_name).items() if key[:2] == ("retrieval", "standard")), None)
    if shape is None:
        raise SystemExit(f"gpu_check: preset {preset_name!r} has no retrieval study with a standard model to time")
    return shape


def time_curve(out: Path, work: Path, preset_name: str, dry: bool, device: str, data: Path) -> list[dict[str, Any]]:
    """The curve over N runs at once (dry: 1 and 2 tiny runs on the CPU); curve.json rewritten after each point."""
    shape = retrieval_shape(preset_name)
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


# ---------------------------------------------------------------- several runs stacked in one process

STACK_SIZES = (1, 2, 4, 8, 16)  # runs in one stack: the curve's counts of processes, for reading the two side by side


def stack_steps(k: int, cfg: TrainConfig, run_dir: Path, warmup: int, steps: int, graph: bool) -> dict[str, Any]:
    """k runs of `cfg` (seeds 0..k-1) opened as the trainer opens them and stepped as one StackedStep: `warmup` steps,
    a read of their losses, then `steps` timed steps with the device synchronized only at their ends. A step is what
    train_stack's loop takes: each run's batch made on the host, its rate from its schedule, the stacked step (with
    `graph`: captured as a CUDA graph after its warm-up and replayed, on CUDA)."""
    from mixit_lab.training.parallel import Ranks
    from mixit_lab.training.stack import StackedStep, check_stackable
    from mixit_lab.training.trainer import open_loop

    cfgs = [TrainConfig.from_dict({**cfg.to_dict(), "seed": i}) for i in range(k)]
    check_stackable(cfgs)
    device = torch.device(cfg.device)
    loops = [open_loop(c, run_dir / f"r{i}", False, None, device, Ranks()) for i, c in enumerate(cfgs)]
    for loop in loops:
        loop.begin(False, None)  # as train_stack: the model in training mode, the clock started; no tracker
    stack, host = StackedStep(loops, graph), [0.0]

    def one_step() -> None:
        t0 = time.perf_counter()
        batches = [loop.stream.next() for loop in loops]
        host[0] += time.perf_counter() - t0
        stack.step(batches, [loop.cfg.lr_at(loop.step) for loop in loops])

    for _ in range(warmup):
        one_step()
    for loop in loops:
        loop.settle()  # the trainer's read (a host sync): the pending buffer empty, the warm-up's losses finite
    host[0] = 0.0
    t0 = time.perf_counter()
    for _ in range(steps):
        one_step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    for loop in loops:
        loop.settle()  # TrainingDiverged if a timed step's loss or gradient norm was not finite
    return {"ms_per_step": round(seconds / steps * 1e3, 3), "host_batch_ms": round(host[0] / steps * 1e3, 3),
            "aggregate_steps_per_s": significant(k * steps / seconds), "replayed": stack.graph is not None}


def stack_point(k: int, cfg: TrainConfig, work: Path, warmup: int, steps: int, graph: bool) -> dict[str, Any]:
    """One stack size: stack_steps' times and (CUDA) peak memory, or the error it ended with; running out of GPU
    memory is recorded (out_of_memory) and the memory freed, so that the next size still runs."""
    run_dir = work / "stack" / f"{'graph' if graph else 'eager'}-k{k}"
    shutil.rmtree(run_dir, ignore_errors=True)  # new runs: open_loop refuses none, and the sizes share no file
    cuda = cfg.device == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    row: dict[str, Any] = {"k": k, "graph": graph, "out_of_memory": False, "error": None}
    try:
        row.update(stack_steps(k, cfg, run_dir, warmup, steps, graph))
    except torch.cuda.OutOfMemoryError as e:  # a measurement, not a failure: the card holds fewer runs
        row.update(out_of_memory=True, error=f"OutOfMemoryError: {e}"[:300])
    except Exception as e:  # noqa: BLE001 - one size's failure is its row; the other sizes run
        row["error"] = f"{type(e).__name__}: {e}"[:300]
    gc.collect()  # the stack and its loops, held by a caught error's frames until now
    if cuda:
        row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.empty_cache()
    return row


def stack_line(row: dict[str, Any]) -> str:
    """One stack size's result in words, for the check's output."""
    if row["error"] is not None:
        return "out of memory" if row["out_of_memory"] else f"error {row['error']}"
    peak = f", peak {row['peak_gib']} GiB" if "peak_gib" in row else ""
    return (f"{row['ms_per_step']} ms a step, {row['aggregate_steps_per_s']} steps/s together ({row['speedup']}x one "
            f"run's), batches {row['host_batch_ms']} ms{peak}")


def time_stack(out: Path, work: Path, preset_name: str, dry: bool, device: str, data: Path) -> dict[str, Any]:
    """Aggregate optimizer steps a second of K runs stacked in one process (STACK_SIZES; dry: 1 and 2 tiny runs on
    the CPU) at the curve's shape, eager and then replayed as a CUDA graph (on the CPU both eager), and each K's rate
    over K=1's of the same step (speedup); stack.json rewritten after each. Its error is the first that was not
    running out of memory."""
    warmup, steps = (2, 4) if dry else (5, 50)
    if device == "cpu":
        from mixit_lab.training.machine import keep_freed_memory

        keep_freed_memory()  # as train_stack does on a CPU
    short = short_config(retrieval_shape(preset_name), dry, warmup + steps, device, corpora(data, work))
    cfg = TrainConfig.from_dict({**short.to_dict(), "log_every": max(warmup, steps), "eval_every": warmup + steps,
                                 **({"precision": "fp32"} if dry else {})})  # the pending buffer holds a timed block
    result: dict[str, Any] = {"study": "retrieval", "variant": "standard", "d_model": cfg.d_model,
                              "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "batch_size": cfg.batch_size,
                              "precision": cfg.precision, "warmup_steps": warmup, "timed_steps": steps, "points": []}
    for graph, k in [(g, k) for g in (False, True) for k in ((1, 2) if dry else STACK_SIZES)]:
        row = stack_point(k, cfg, work, warmup, steps, graph)
        one = next((r for r in result["points"] if r["graph"] == graph), row)  # K=1 of the same step
        rate, base = row.get("aggregate_steps_per_s"), one.get("aggregate_steps_per_s")
        row["speedup"] = round(rate / base, 2) if rate and base else None
        result["points"].append(row)
        result["error"] = next((r["error"] for r in result["points"] if r["error"] and not r["out_of_memory"]), None)
        print(f"  stack of {k:>2}{' as a CUDA graph' if graph else ''}: {stack_line(row)}", flush=True)
        write(out, "stack", result)
    return result
