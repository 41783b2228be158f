"""benchmarks/bench_load.py builds a runs folder of copied seeds that mixit reproduce takes as its own, and times it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_load_benchmark_builds_runs_the_reproduction_reuses_and_prints_its_timings(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_load.py"), "--out", str(tmp_path),
                           "--seeds", "2", "--repeats", "1"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "48 finished, analysed runs" in done.stdout
    for name in ("mixit reproduce (nothing to do)", "mixit figures", "explorer start on Compare",
                 "Compare page, shown again"):
        assert any(line.startswith(name) and len(line.split()) >= 3 for line in done.stdout.splitlines()), name
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "finished" and not manifest.get("failed_analyses")  # the copies were analysed
    copy = json.loads((tmp_path / "runs" / "algorithmic" /
                       "addition_digits2__mixit__d16_l1_h2__lr0.003__s1" / "run.json").read_text())
    assert copy["train"]["seed"] == 1
