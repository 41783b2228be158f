"""`make gpu-check`'s script in its dry form: the same steps as on a GPU (device tests, a short run of every study
shape of a preset with its step time, a one-process torchrun, runs packed and then analysed, compared and opened in
the explorer on the CPU, several runs at once through the pool pinned to one GPU), on this CPU at tiny sizes with the
smoke preset's shapes; and how that last step adds up the runs' rates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check import aggregate_rate  # noqa: E402


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
    hours = json.loads((out / "hours.json").read_text())
    assert hours[-1]["study"] == "total" and hours[-1]["runs_unmeasured"] == 0 and hours[-1]["seconds"] > 0
    opened = json.loads((out / "opened.json").read_text())
    assert opened["ok"] and {"standard", "mixit"} <= set(opened)
    assert all(opened[v]["logits_relative_error"] < 1e-6 for v in ("standard", "mixit"))
    curve = json.loads((out / "curve.json").read_text())  # through the pool, each worker given the slot's GPU
    assert [r["n"] for r in curve] == [1, 2] and all(r["error"] is None for r in curve)
    assert all(r["worker_gpus"] == [r["slot_gpu"]] and r["steps_per_s_over_wall"] > 0 for r in curve)
    assert all(r["aggregate_steps_per_s"] is None or len(r["per_run_steps_per_s"]) == r["n"] for r in curve)
