"""`make gpu-check`'s script in its dry form: the same steps as on a GPU (device tests, a short run of every study
shape of a preset with its step time, a one-process torchrun, runs packed and then analysed, compared and opened in
the explorer on the CPU), on this CPU at tiny sizes with the smoke preset's shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # trains ~30 tiny runs and starts torchrun and Streamlit

ROOT = Path(__file__).resolve().parent.parent


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
    opened = json.loads((out / "opened.json").read_text())
    assert opened["ok"] and {"standard", "mixit"} <= set(opened)
    assert all(opened[v]["logits_relative_error"] < 1e-6 for v in ("standard", "mixit"))
