"""Data-parallel training under torchrun (mixit_lab.training.parallel): 2 CPU processes over gloo train the same run
as 1 process with the same global batch, and a run killed mid-way resumes, on 2 processes or on 1, to
the weights of the run that was never killed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mixit_lab.training.parallel import torchrun_command
from mixit_lab.training.config import TrainConfig
from mixit_lab.training.trainer import train

ROOT = Path(__file__).resolve().parent.parent
STEPS = 150  # long runs drift apart by float reduction order alone (1e-3 relative by step 250)
ARGS = ["--task", "addition", "--digits", "2", "--variant", "mixit", "--d-model", "32", "--n-layers", "1",
        "--n-heads", "4", "--lr", "0.003", "--batch-size", "16", "--steps", str(STEPS), "--eval-every", "50",
        "--eval-samples", "64", "--checkpoint-every", "5", "--quiet"]
CONFIG = TrainConfig(task="addition", task_params={"digits": 2}, variant="mixit", d_model=32, n_layers=1, n_heads=4,
                     lr=0.003, batch_size=16, steps=STEPS, eval_every=50, eval_samples=64, checkpoint_every=5)
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
pytestmark = [pytest.mark.slow,  # torchrun: a few processes each importing torch
              pytest.mark.skipif(CORES < 2, reason="--nproc 2 on CPU needs 2 cores (mixit train refuses more "
                                                   "processes than cores)")]


def mixit_train(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mixit_lab.cli", "train", *ARGS, *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def finish(proc: subprocess.Popen) -> None:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-10000:]  # room for a crashed worker's faulthandler stack


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoint" / "model.safetensors"))


def assert_close_weights(a: Path, b: Path, atol: float) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=atol, rtol=0, msg=k)


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "two"
    finish(mixit_train("--nproc", "2", "--out", str(out)))
    return out


def test_two_processes_train_the_same_run_as_one(two_process_run, tmp_path):
    one = tmp_path / "one"
    train(CONFIG, one, progress=False)
    a, b = records(one), records(two_process_run)
    assert [r["step"] for r in a] == [r["step"] for r in b] and len(a) == STEPS // 10
    for ra, rb in zip(a, b):  # the whole loss curve, and every eval
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4, abs=1e-6), ra["step"]
        if "eval_loss" in ra:
            assert rb["eval_loss"] == pytest.approx(ra["eval_loss"], rel=1e-4, abs=1e-6)
    assert a[-1]["loss"] < 0.8 * a[0]["loss"]  # it trained
    assert_close_weights(one, two_process_run, atol=1e-4)
    summary = json.loads((two_process_run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["processes"] == 2 and summary["backend"] == "gloo"
    assert json.loads((one / "summary.json").read_text())["backend"] is None  # alone: no process group


def test_one_process_under_torchrun_forms_a_group_and_trains_the_same_run(two_process_run, tmp_path):
    """torchrun with one process goes through the process group and DistributedDataParallel (gloo here, NCCL on
    a GPU: the path N GPUs take), and trains the same run as two processes, in micro-batches of 5 rows too (the
    gradients exchanged on the last slice only)."""
    one = tmp_path / "torchrun-one"
    argv = ["mixit_lab.cli", "train", *ARGS, "--micro-batch-size", "5", "--out", str(one)]
    finish(subprocess.Popen(torchrun_command(1, argv), cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    summary = json.loads((one / "summary.json").read_text())
    assert summary["processes"] == 1 and summary["backend"] == "gloo"
    for ra, rb in zip(records(one), records(two_process_run)):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4, abs=1e-6), ra["step"]


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process and all its descendants, and wait until every one is dead.

    torchrun starts each worker in a session of its own, so killing torchrun's process group misses
    them: left alive, they go on training (or clean up) while the test copies and resumes the run.
    """
    def parent_of(pid: str) -> int | None:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    tree, frontier = [proc.pid], {proc.pid} if Path("/proc").is_dir() else set()  # no /proc: the group only
    while frontier:  # found before any is killed: an orphan's parent becomes init
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and parent_of(p) in frontier]
        tree += children
        frontier = set(children)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in tree[1:]) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_killed_two_process_run_resumes_to_the_same_weights(two_process_run, tmp_path):
    killed = tmp_path / "killed"
    proc = mixit_train("--nproc", "2", "--out", str(killed), start_new_session=True)
    state = killed / "checkpoint" / "trainer_state.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if state.is_file() and json.loads(state.read_text() or "{}").get("step", 0) >= 20:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    kill_tree(proc)  # torchrun and both workers, no cleanup
    assert not (killed / "summary.json").exists()  # it really stopped mid-way
    step = json.loads(state.read_text())["step"]
    assert 20 <= step < STEPS

    on_one = tmp_path / "on_one"
    shutil.copytree(killed, on_one)
    finish(mixit_train("--nproc", "2", "--out", str(killed), "--resume"))
    assert_close_weights(killed, two_process_run, atol=1e-6)
    assert [r["step"] for r in records(killed)] == [r["step"] for r in records(two_process_run)]

    # the stream state in a checkpoint is the global batch's: another number of processes goes on the same way
    train(CONFIG, on_one, resume=True, progress=False)
    assert_close_weights(on_one, two_process_run, atol=1e-4)


def test_nproc_must_divide_the_batch(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mixit_lab.cli", "train", *ARGS, "--nproc", "3", "--out", str(tmp_path / "r")],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "mixit train: error: --batch-size=16 must be divisible by --nproc=3"
    assert not (tmp_path / "r").exists()


def test_a_torchrun_run_opens_and_analyses_like_any_other(two_process_run, tmp_path):
    from mixit_lab.analysis import explore as ex
    from mixit_lab.analysis import explore_model as em
    from mixit_lab.analysis.analyze import analyze_checkpoint

    status, result = analyze_checkpoint(two_process_run / "checkpoint", tmp_path / "analysis",
                                        {"n_seqs": 4, "seq_len": 4, "eval_samples": 32}, device="cpu")
    assert status == "computed" and result["model"]["variant"] == "mixit" and result["computed"]

    root = ex.open_root(two_process_run.parent)  # what the explorer lists and loads
    row = ex.list_runs(root).set_index("run").loc[two_process_run.name]
    assert row["status"] == "finished" and row["variant"] == "mixit"
    assert len(ex.read_run_metrics(root, two_process_run)) == STEPS // 10
    model = ex.load_run_model(root, two_process_run)
    tokens = ex.task_of(root, two_process_run).eval_set(1)[0][0]
    assert em.attention_patterns(model, tokens).shape == (1, 4, len(tokens), len(tokens))
