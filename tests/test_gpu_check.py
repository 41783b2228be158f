"""`make gpu-check`'s script in its dry form: the same steps as on a GPU (device tests, a short run of every study
shape of a preset with its step time, eager against a CUDA graph, the paper LM step's MFU, a one-process torchrun,
runs packed and then analysed, compared and opened in the explorer on the CPU, several runs at once through the pool
pinned to one GPU, several runs stacked in one process), on this CPU at tiny sizes with the smoke preset's shapes; and
how the pool's curve adds up the runs' rates, when the LM step tries smaller passes, and that a stack size that runs
out of memory is recorded and the next one runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check_steps import aggregate_rate  # noqa: E402


def test_the_curve_sums_each_runs_rate_inside_the_window_all_of_them_trained_in():
    # run a logs from t=0 at 10 steps/s; run b starts at t=1 at 5 steps/s and ends first, at t=3
    a = [(s, s / 10) for s in range(10, 60, 10)]  # t = 1 .. 5
    b = [(s, 1 + s / 5) for s in range(0, 15, 5)]  # t = 1 .. 3
    rate = aggregate_rate([a, b])
    assert rate == {"steps_per_s": 15.0, "overlap_s": 2.0, "per_run": [10.0, 5.0]}
    later = [(s, 10 + s / 5) for s in range(0, 15, 5)]  # trained after a had finished: no shared window
    assert aggregate_rate([a, later])["steps_per_s"] is None


@pytest.mark.slow  # trains ~30 tiny runs and starts torchrun, Streamlit and pool workers
def test_the_dry_gpu_check_runs_every_step_and_passes(tmp_path):
    out = tmp_path / "gc"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "all", "--dry", "--preset", "smoke",
                           "--data", str(tmp_path / "no-corpora"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "gpu-check: passed (dry, CPU)" in done.stdout
    torchrun = json.loads((out / "torchrun.json").read_text())
    assert torchrun["summary"]["backend"] == "gloo" and torchrun["summary"]["processes"] == 1
    rows = json.loads((out / "shapes.json").read_text())
    assert {r["study"] for r in rows} >= {"lm", "sentiment", "memorize"}  # text studies on the made-up corpus
    assert all(r["error"] is None and r["step_ms"] > 0 for r in rows)
    graphs = json.loads((out / "graph.json").read_text())  # eager against --cuda-graph through train()
    assert graphs and all(g["error"] is None and g["eager_step_ms"] > 0 and g["graph_step_ms"] > 0 for g in graphs)
    # on the CPU no step is replayed: both runs are the eager run, to the digit
    assert all(g["replayed"] is False and g["weights_relative_difference"] == 0 for g in graphs)
    hours = json.loads((out / "hours.json").read_text())
    assert hours[-1]["study"] == "total" and hours[-1]["runs_unmeasured"] == 0 and hours[-1]["seconds"] > 0
    lm = json.loads((out / "lm.json").read_text())  # the paper LM shape, tiny: one pass, its rate against a measured peak
    assert lm["error"] is None and lm["micro_batch_size"] is None and len(lm["attempts"]) == 1
    assert lm["step_ms"] > 0 and lm["tflop_per_step"] > 0 and 0 < lm["mfu"] == lm["of_measured"]
    assert lm["peak_source"].startswith("measured") and lm["chunked_loss"] is False and lm["flash_attention"] is None
    opened = json.loads((out / "opened.json").read_text())
    assert opened["ok"] and {"standard", "mixit"} <= set(opened)
    assert all(opened[v]["logits_relative_error"] < 1e-6 for v in ("standard", "mixit"))
    curve = json.loads((out / "curve.json").read_text())  # through the pool, each worker given the slot's GPU
    assert [r["n"] for r in curve] == [1, 2] and all(r["error"] is None for r in curve)
    assert all(r["worker_gpus"] == [r["slot_gpu"]] and r["steps_per_s_over_wall"] > 0 for r in curve)
    assert all(r["aggregate_steps_per_s"] is None or len(r["per_run_steps_per_s"]) == r["n"] for r in curve)
    stack = json.loads((out / "stack.json").read_text())  # the same shape's runs stacked in one process
    assert stack["error"] is None and [p["k"] for p in stack["points"]] == [1, 2, 1, 2]
    assert all(p["aggregate_steps_per_s"] > 0 and p["speedup"] > 0 for p in stack["points"])


def test_the_dry_gpu_check_times_shapes_as_a_runs_share_of_a_stack(tmp_path):
    out = tmp_path / "gc"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "device", "--dry", "--preset", "smoke",
                           "--studies", "algorithmic", "--stack", "2", "--data", str(tmp_path / "no-corpora"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    rows = json.loads((out / "shapes.json").read_text())
    assert rows and all(r["stack_error"] is None and r["step_ms"] > 0 for r in rows)
    # the smoke preset's one seed: a task's standard, frozen_qk, frozen_mlp and random runs stack, MixiT and shaped alone
    assert {r["variant"]: r["stack"] for r in rows} == {"standard": 2, "frozen_qk": 2, "frozen_mlp": 2, "random": 2,
                                                        "mixit": 1, "shaped": 1}
    assert len(list((out / "work" / "shapes").glob("*/s1/summary.json"))) == 4  # each stack's 2nd seed
    hours = json.loads((out / "hours.json").read_text())  # the preset's hours from the runs' shares
    assert hours[-1]["study"] == "total" and hours[-1]["seconds"] > 0
    assert [h["runs_unmeasured"] for h in hours if h["study"] == "algorithmic"] == [0]


def test_the_preset_hours_stack_the_runs_that_stack_at_the_slowest_of_their_shapes():
    """Paper retrieval: per task, standard, frozen_qk and frozen_mlp's 9 runs are one stack, mixit's 3 another."""
    import gpu_check_steps as gpu_check

    ms = {"standard": 1.0, "frozen_qk": 3.0, "frozen_mlp": 2.0, "mixit": 0.5}  # a run's share of its stack's step
    sizes = gpu_check.stack_sizes("paper", 16)  # what `device --stack 16` times each shape in
    keys = [k for k in gpu_check.shapes("paper") if k[0] == "retrieval"]
    assert {k[1]: sizes[k] for k in keys} == {"standard": 9, "frozen_qk": 9, "frozen_mlp": 9, "mixit": 3}
    rows = [{"key": list(k), "step_ms": ms[k[1]], "eval_ms": 10.0, "stack": sizes[k]} for k in keys]
    retrieval = gpu_check.preset_hours(rows, "paper")[0]
    stacks = 4 * (3.0 * 9 + 0.5 * 3)  # 4 tasks: a stack of 9 at frozen_qk's time, one of 3 at mixit's
    assert retrieval["study"] == "retrieval" and retrieval["runs_unmeasured"] == 0
    assert retrieval["seconds"] == pytest.approx(round(20_000 * stacks / 1e3 + 48 * 20 * 10.0 / 1e3, 1))
    alone = [{**r, "stack": 1} for r in rows]  # timed alone: each run at its own step time
    runs = 4 * 3 * sum(ms.values())
    assert gpu_check.preset_hours(alone, "paper")[0]["seconds"] == pytest.approx(round(20_000 * runs / 1e3 + 9.6, 1))


def test_the_lm_step_tries_smaller_passes_only_when_out_of_memory(tmp_path, monkeypatch):
    """One pass first; out of memory, halves; another failure is the result. MFU from the counted FLOPs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check_steps as gpu_check
    import torch

    def raising(error: Exception):
        def fail(*args, **kwargs):
            raise error
        return fail

    cfg = gpu_check.TrainConfig(device="cpu", batch_size=8)
    for error, oom in ((torch.OutOfMemoryError("CUDA out of memory"), True), (ValueError("bad"), False)):
        monkeypatch.setattr(gpu_check, "train", raising(error))
        row = gpu_check.lm_attempt(cfg, None, tmp_path / "r", 8)
        assert row["out_of_memory"] is oom and row["error"].startswith(type(error).__name__)
    tried = []

    def attempt(cfg, micro, run_dir, steps):
        tried.append(micro)
        return {"micro_batch_size": micro, "out_of_memory": micro is None, "error": "OOM" if micro is None else None,
                "step_ms": 100.0, "chunked_loss": False}

    monkeypatch.setattr(gpu_check, "lm_attempt", attempt)
    monkeypatch.setattr(gpu_check, "lm_flops", lambda run_dir, device: {"flops_per_row": 1e9, "flash_attention": None})
    result = gpu_check.lm_mfu(tmp_path, tmp_path / "work", True, "cpu", tmp_path / "no-corpora", 8)
    assert tried == [None, 4] and result["error"] is None and result["micro_batch_size"] == 4
    assert result["tflop_per_step"] == 8e-3 and result["tflops"] == 0.08  # 1 GFLOP x 8 rows in 0.1 s
    assert result["mfu"] == pytest.approx(0.08 / result["peak_tflops"], rel=1e-3)
    assert json.loads((tmp_path / "lm.json").read_text())["attempts"][0]["out_of_memory"] is True


def test_the_quick_preset_step_plans_the_reproduction_in_its_dry_form(tmp_path):
    """`device --only quick` on the CPU: the smoke preset's plan through the real command (on a GPU: the quick preset,
    trained, timed)."""
    out = tmp_path / "gc"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "device", "--dry", "--only", "quick",
                           "--data", str(tmp_path / "no-corpora"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    quick = json.loads((out / "quick.json").read_text())
    assert quick["rc"] == 0 and "--dry-run" in quick["argv"] and "smoke" in quick["argv"]
    assert "precision=" in quick["tail"]  # the plan's lines: one per run


def test_the_stack_step_times_stacks_of_one_and_two_runs_in_its_dry_form(tmp_path):
    """`device --only stack` on the CPU: one and two tiny runs stacked in one process through the trainer's loops,
    each stack's time a step, aggregate rate and ratio to one run's (on a GPU: 1 to 16 runs of the paper's retrieval
    shape)."""
    out = tmp_path / "gc"
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "device", "--dry", "--only", "stack",
                           "--data", str(tmp_path / "no-corpora"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    stack = json.loads((out / "stack.json").read_text())
    assert stack["error"] is None and (stack["d_model"], stack["batch_size"], stack["precision"]) == (16, 8, "fp32")
    assert stack["warmup_steps"] > 0 and stack["timed_steps"] > 0
    points = stack["points"]  # eager, then as a CUDA graph (on the CPU: eager too, never replayed)
    assert [(p["k"], p["graph"]) for p in points] == [(1, False), (2, False), (1, True), (2, True)]
    assert not any(p["replayed"] for p in points)
    for p in points:
        assert p["error"] is None and p["out_of_memory"] is False and "peak_gib" not in p  # peak memory on CUDA only
        assert p["ms_per_step"] > 0 and 0 < p["host_batch_ms"] < p["ms_per_step"]
        # the aggregate rate counts every run's steps: K steps each stacked step
        assert p["aggregate_steps_per_s"] == pytest.approx(p["k"] * 1e3 / p["ms_per_step"], rel=1e-2)
    one, two = (p["aggregate_steps_per_s"] for p in points[2:])
    assert points[2]["speedup"] == 1.0 and points[3]["speedup"] == pytest.approx(two / one, abs=0.01)
    ran = out / "work" / "stack" / "graph-k2"
    assert sorted(p.name for p in ran.iterdir() if p.name.startswith("r")) == ["r0", "r1"]


def test_a_stack_that_runs_out_of_memory_is_recorded_and_the_next_size_runs(tmp_path, monkeypatch):
    """Out of memory is a point's result, not the step's error; any other error is the step's."""
    import gpu_check_steps as gpu_check
    import torch

    def steps(error: Exception | None):
        def fake(k, cfg, run_dir, warmup, timed, graph):
            if k == 1 and error is not None:
                raise error
            return {"ms_per_step": 10.0 * k, "host_batch_ms": 1.0, "aggregate_steps_per_s": 100.0}
        return fake

    monkeypatch.setattr(gpu_check, "stack_steps", steps(torch.cuda.OutOfMemoryError("CUDA out of memory")))
    data = tmp_path / "no-corpora"
    result = gpu_check.time_stack(tmp_path, tmp_path / "work", "paper", True, "cpu", data)
    first, second = result["points"][:2]  # eager; then the same as a graph
    assert result["error"] is None and first["out_of_memory"] is True and first["error"].startswith("OutOfMemoryError")
    assert second["error"] is None and second["aggregate_steps_per_s"] == 100.0 and second["speedup"] is None
    assert json.loads((tmp_path / "stack.json").read_text()) == json.loads(json.dumps(result))
    monkeypatch.setattr(gpu_check, "stack_steps", steps(ValueError("bad")))
    assert gpu_check.time_stack(tmp_path, tmp_path / "work", "paper", True, "cpu", data)["error"] == "ValueError: bad"
    monkeypatch.setattr(gpu_check, "stack_steps", steps(None))
    points = gpu_check.time_stack(tmp_path, tmp_path / "work", "paper", True, "cpu", data)["points"]
    assert [p["speedup"] for p in points] == [1.0, 1.0] * 2
