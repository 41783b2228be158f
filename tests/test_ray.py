"""Sweeps on Ray (mixit_lab.training.sweep.Executor("ray")): a local Ray trains the same run directories as the
process pool, skips finished runs, records a failed run as a row, and a missing Ray is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from mixit_lab.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard", "mixit", "--seeds", "0", "1",
         "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "30", "--batch-size", "16",
         "--eval-every", "30", "--eval-samples", "64", "--workers", "2"]


def sweep(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "mixit_lab.cli", *SWEEP, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def final(out: Path) -> dict[str, tuple]:
    table = pd.read_csv(out / "summary.csv")
    return {r.run: (r.status, r.eval_loss, r.eval_acc) for r in table.itertuples()}


@pytest.mark.slow  # starts a local Ray
def test_a_ray_sweep_trains_the_runs_the_pool_trains(tmp_path):
    pytest.importorskip("ray")
    pool, ray = tmp_path / "pool", tmp_path / "ray"
    done = sweep("--out", str(pool))
    assert done.returncode == 0, done.stderr[-3000:]
    done = sweep("--out", str(ray), "--executor", "ray")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(final(ray)) == 4 and final(ray) == final(pool)  # same seeds, same numbers, one process per run
    for run in final(ray):
        assert json.loads((ray / run / "run.json").read_text())["command"].startswith("mixit sweep")

    # rerunning skips the finished runs: nothing is trained again
    stamps = {p: p.stat().st_mtime_ns for p in ray.glob("*/summary.json")}
    again = sweep("--out", str(ray), "--executor", "ray")
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in ray.glob("*/summary.json")} == stamps


@pytest.mark.slow  # starts a local Ray
def test_a_failed_ray_run_is_a_row_and_the_others_finish(tmp_path):
    pytest.importorskip("ray")
    from mixit_lab.training.sweep import Executor, run_sweep
    from mixit_lab.training.config import TrainConfig

    base = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, steps=20,
                batch_size=16, eval_every=20, eval_samples=64)
    runs = [("good", TrainConfig(**base)), ("diverges", TrainConfig(**base, lr=1e30))]
    table = run_sweep(runs, tmp_path, workers=Executor("ray", workers=2), progress=False)
    status = dict(zip(table["run"], table["status"]))
    assert status["good"] == "finished" and status["diverges"] == "error"
    assert "non-finite" in table.set_index("run").loc["diverges", "message"]


def test_missing_ray_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    code = main([*SWEEP, "--out", str(tmp_path / "s"), "--executor", "ray"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == ("mixit sweep: error: executor 'ray' needs Ray, which is not installed: "
                                 "pip install 'mixit-lab[ray]'")
    assert not (tmp_path / "s").exists()


def test_ray_options_need_the_ray_executor(tmp_path, capsys):
    code = main([*SWEEP, "--out", str(tmp_path / "s"), "--address", "auto"])
    assert code == 2 and "--address, --cpus-per-run and --gpus-per-run need --executor ray" in capsys.readouterr().err


@pytest.mark.slow  # two interpreters importing Ray
def test_an_address_where_nothing_listens_fails_in_seconds_in_one_line(tmp_path):
    pytest.importorskip("ray")
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on: bound, then released
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        start = time.monotonic()
        done = sweep("--out", str(tmp_path / "s"), "--executor", "ray", "--address", address)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
        assert address in lines[0] and "no Ray cluster answers" in lines[0]
        assert time.monotonic() - start < 60  # Ray itself retries for minutes
    assert not (tmp_path / "s").exists()


def test_gpus_per_run_beyond_this_machines_gpus_is_one_line(tmp_path, capsys):
    """Without --address, Ray starts here: asking each run for more GPUs than there are would wait forever."""
    pytest.importorskip("ray")
    import torch

    gpus = torch.cuda.device_count()
    code = main([*SWEEP, "--out", str(tmp_path / "s"), "--executor", "ray", "--gpus-per-run", str(gpus + 1)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"--gpus-per-run={gpus + 1}" in err and f"allowed: 0..{gpus}" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.slow  # a Ray cluster, then a sweep joining it
def test_a_sweep_joins_a_cluster_at_its_address_and_runs_declare_their_cpus(tmp_path):
    """--address joins a running cluster (here one started by this test); --cpus-per-run is what each run
    declares and the threads it trains with; --gpus-per-run 0 asks for no GPU."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=3, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        address = ray.get_runtime_context().gcs_address
        out = tmp_path / "s"
        done = sweep("--out", str(out), "--executor", "ray", "--address", address, "--cpus-per-run", "3",
                     "--gpus-per-run", "0", "--variants", "standard", "--seeds", "0")
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        ray.shutdown()
    runs = final(out)
    assert len(runs) == 1 and all(status == "finished" for status, _, _ in runs.values())
    info = json.loads(next(out.glob("*/run.json")).read_text())
    assert info["torch_threads"] == 3  # the CPUs each run declares (logical: the cluster has 3)


def test_reproduce_takes_the_ray_executor_options(tmp_path, capsys):
    """mixit reproduce --executor ray: the options are checked and the runs listed (a dry run: the smoke preset
    itself on Ray takes minutes, as on the pool)."""
    pytest.importorskip("ray")
    argv = ["reproduce", "--preset", "smoke", "--dry-run", "--out", str(tmp_path / "runs"), "--executor", "ray"]
    assert main([*argv, "--cpus-per-run", "1", "--gpus-per-run", "0"]) == 0
    assert "runs into" in capsys.readouterr().out
    assert main([*argv, "--address", "nonsense"]) == 2
    assert "address='nonsense'" in capsys.readouterr().err


def test_check_ray_address_answers_in_seconds():
    """The check itself (no Ray needed): nothing listening is a ValueError naming the address, fast; a
    malformed address is refused; auto and local are left to Ray."""
    import socket
    import time

    from mixit_lab.training.sweep import check_ray_address

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(ValueError, match=f"address='127.0.0.1:{port}': no Ray cluster answers there"):
        check_ray_address(f"127.0.0.1:{port}")
    assert time.monotonic() - start < 10
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        check_ray_address("127.0.0.1")
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_ray_address(f"ray://127.0.0.1:{listening.getsockname()[1]}")  # something answers: Ray's to judge
    for address in (None, "auto", "local"):
        check_ray_address(address)


class _RayCalls:
    """What `mixit_lab.training.sweep._stop` asks of Ray, recorded."""

    def __init__(self) -> None:
        self.calls: list = []

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    def cancel(self, ref, force: bool) -> None:
        self.calls.append(("cancel", ref, force))


@pytest.mark.parametrize("started, expected", [(True, ["shutdown"]),
                                               (False, [("cancel", "a", True), ("cancel", "b", True)])],
                         ids=["ray-started-here", "ray-started-by-the-caller"])
def test_pending_ray_tasks_end_with_the_ray_started_here_and_are_cancelled_in_the_callers(started, expected):
    # Was: each pending task cancelled, then ray.shutdown(): on a Ctrl-C that caught a task finishing, Ray's core
    # worker completed a task its cancel had already failed and aborted the command (exit 1 for 130, a C++ dump).
    from mixit_lab.training.sweep import _stop

    ray = _RayCalls()
    _stop(ray, {"a": "job a", "b": "job b"}, started)
    assert ray.calls == expected
