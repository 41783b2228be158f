"""How long a large runs folder takes to read: a no-op `mixit reproduce`, `mixit figures` and the explorer's Compare
page over thousands of finished, analysed runs.

    python benchmarks/bench_load.py --out /tmp/load               # 2,016 runs: 84 seeds x 6 variants x 4 tasks
    python benchmarks/bench_load.py --out /tmp/load --seeds 2     # 48 runs: a check that it works

It trains and analyses seed 0 of a toy preset through the real `mixit reproduce`, then copies each run to the other
seeds, giving each copy its seed wherever a run records one (run.json, summary.json, the checkpoint's config.json and
the weights' metadata, and the weights' hash config.json records), so that the reproduction takes them as its own
finished runs. A first `mixit reproduce` analyses the copies and makes the figures and the report; then each
command is timed as a user meets it, as a whole process (imports included), `--repeats` times: min, median, max.
The Compare page is timed in a fresh process (start: imports and the runs table, as the first page a server shows)
and then rendered again in that process (a user moving to it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRESET = """name: load
about: a toy preset copied to many seeds, to time reading a large runs folder (benchmarks/bench_load.py)
train: {{batch_size: 16, steps: 4, eval_every: 4, eval_samples: 32, eval_batch_size: 64, log_every: 2}}
skip: [signal, speed]
studies:
  algorithmic:
    variants: all
    tasks: [{{addition: {{digits: 2}}}}, {{retrieval: {{pairs: 3, num_values: 8}}}}, {{modadd: {{p: 11}}}},
            {{memorize: {{n: 4, d: 2}}}}]
    sizes: [{{d_model: 16, n_layers: 1, n_heads: 2}}]
    seeds: {seeds}
    lrs: [0.003]
"""
SEED = re.compile(r'"seed": 0\b')
COMPARE = """
import json, sys, time
from streamlit.testing.v1 import AppTest
sys.argv = ["app.py", "--runs", sys.argv[1]]
start = time.perf_counter()
at = AppTest.from_file({app!r}, default_timeout=900)
at.session_state["view"] = "Compare"
at.run()
first = time.perf_counter() - start
start = time.perf_counter()
at.run()
print(json.dumps({{"first": first, "again": time.perf_counter() - start, "errors": [e.value for e in at.exception]}}))
"""


def mixit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mixit_lab.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), **_env()})


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def reproduce_args(out: Path) -> list[str]:
    return ["reproduce", "--preset", str(out / "all.yaml"), "--out", str(out / "runs"), "--report-dir",
            str(out / "report"), "--figures-dir", str(out / "figures"), "--workers", "2"]


def give_seed(run: Path, seed: int) -> None:
    """Make a copy of seed 0's run the run of `seed` everywhere it records its seed, the weights' hash too."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    for name in ("run.json", "summary.json", "checkpoint/config.json"):
        path = run / name
        path.write_text(SEED.sub(f'"seed": {seed}', path.read_text()))
    weights = run / "checkpoint" / "model.safetensors"
    with safe_open(str(weights), "pt") as fh:
        metadata = {k: SEED.sub(f'"seed": {seed}', v) for k, v in fh.metadata().items()}
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    save_file(tensors, str(weights), metadata=metadata)
    config = run / "checkpoint" / "config.json"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    config.write_text(re.sub(r'"weights_sha256": "[0-9a-f]*"', f'"weights_sha256": "{digest}"', config.read_text()))


def build(out: Path, seeds: int) -> int:
    """The runs folder: seed 0 trained and analysed, copied to seeds 1..seeds-1; returns the number of runs."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "one.yaml").write_text(PRESET.format(seeds="[0]"))
    (out / "all.yaml").write_text(PRESET.format(seeds=list(range(seeds))))
    done = mixit("reproduce", "--preset", str(out / "one.yaml"), "--out", str(out / "runs"), "--workers", "2",
                 "--report-dir", str(out / "report"), "--figures-dir", str(out / "figures"), cwd=out)
    if done.returncode not in (0, 1):
        sys.exit(f"training seed 0 failed:\n{done.stderr[-2000:]}")
    for run in sorted((out / "runs" / "algorithmic").glob("*__s0")):
        for seed in range(1, seeds):
            copy = run.with_name(f"{run.name[:-1]}{seed}")
            if not copy.exists():
                shutil.copytree(run, copy)
                give_seed(copy, seed)
    mixit(*reproduce_args(out), cwd=out)  # analyses the copies, makes the figures and the report
    return len(list((out / "runs" / "algorithmic").glob("*/run.json")))


def timed(command: list[str], cwd: Path, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, capture_output=True, env={"PYTHONPATH": str(ROOT), **_env()})
        times.append(time.perf_counter() - start)
    return times


def line(name: str, times: list[float]) -> str:
    return f"{name:<34} {min(times):7.1f} {statistics.median(times):7.1f} {max(times):7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the runs folder is built (reused if there)")
    parser.add_argument("--seeds", type=int, default=84, help="seeds per setting (24 settings)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = args.out.resolve()
    runs = build(out, args.seeds)
    python = [sys.executable, "-m", "mixit_lab.cli"]
    print(f"{runs} finished, analysed runs in {out / 'runs'}; seconds, whole process:")
    print(f"{'':<34} {'min':>7} {'median':>7} {'max':>7}")
    print(line("mixit reproduce (nothing to do)", timed([*python, *reproduce_args(out)], out, args.repeats)))
    print(line("mixit figures", timed([*python, "figures", str(out / "runs"), "--out", str(out / "figures-again")],
                                      out, args.repeats)))
    script = COMPARE.format(app=str(ROOT / "app.py"))
    first, again = [], []
    for _ in range(args.repeats):
        done = subprocess.run([sys.executable, "-c", script, str(out / "runs")], capture_output=True, text=True,
                              env={"PYTHONPATH": str(ROOT), **_env()})
        result = json.loads(done.stdout.strip().splitlines()[-1])
        first.append(result["first"])
        again.append(result["again"])
    print(line("explorer start on Compare", first))
    print(line("Compare page, shown again", again))


if __name__ == "__main__":
    main()
