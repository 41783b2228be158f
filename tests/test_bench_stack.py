"""benchmarks/bench_stack.py runs and prints its figures: a stack of runs against each run's own step."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_stack_benchmark_prints_both_ways_for_each_stack_size():
    done = subprocess.run([sys.executable, "benchmarks/bench_stack.py", "--variants", "mixit", "--runs", "1", "2",
                           "--steps", "2", "--repeats", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = re.findall(r"^mixit\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$", done.stdout, re.M)
    assert [int(k) for k, *_ in rows] == [1, 2]
    for _, alone, stacked, ratio in rows:
        assert float(alone) > 0 and float(stacked) > 0
        assert abs(float(ratio) - float(alone) / float(stacked)) < 0.02
