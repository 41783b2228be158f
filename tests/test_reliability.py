"""What a run directory promises under concurrent writers, changed settings, OS errors and signals.

Each test injects the fault (a second writer, an edited setting, a read-only or full disk, Ctrl-C, a
SIGTERM to the explorer) and checks the documented outcome and exit status (docs/promises.md, "What we promise").
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from mixit_lab.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE
from mixit_lab.cli.main import main
from conftest import ROOT
from mixit_lab.models import load_model
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.rundir import RunLocked, find_checkpoint, run_lock
from mixit_lab.training.sweep import run_sweep
from mixit_lab.training.settings import SettingsChanged

TINY = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, batch_size=16,
            lr=3e-3, eval_every=10, eval_samples=64, log_every=5)
TRAIN_ARGS = ["--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
              "--batch-size", "16", "--eval-every", "10", "--eval-samples", "64", "--quiet"]


def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- one writer per run
def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, capsys):
    run = tmp_path / "run"
    with run_lock(run):
        with pytest.raises(RunLocked, match=rf"PID {os.getpid()}"):
            train(TrainConfig(**TINY, steps=10), run, resume=True, progress=False)
        code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
        assert code == EXIT_USAGE and f"PID {os.getpid()}" in err and err.count("\n") == 1
    assert train(TrainConfig(**TINY, steps=10), run, resume=True, progress=False)["status"] == "finished"


def test_a_sweep_leaves_a_run_that_another_process_writes(tmp_path):
    cfg = TrainConfig(**TINY, steps=10)
    with run_lock(tmp_path / "busy"):
        table = run_sweep([("busy", cfg), ("free", cfg)], tmp_path, progress=False)
    status = dict(zip(table["run"], table["status"]))
    assert status == {"busy": "running elsewhere", "free": "finished"}
    assert not (tmp_path / "busy" / "run.json").exists()  # untouched


@pytest.mark.slow
def test_two_concurrent_sweeps_train_each_run_once(tmp_path):
    """Two `mixit sweep` processes into one folder: one trains every run, its metrics in order; the other is
    refused (exit 2, one line naming the folder's holder), or finds every run finished if it started after."""
    argv = [sys.executable, "-m", "mixit_lab.cli", "sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard",
            "mixit", "--seeds", "0", "1", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "60",
            "--batch-size", "16", "--eval-every", "20", "--eval-samples", "64", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 2]), outputs
    assert all("PID" in err and err.count("\n") == 1 for p, (_, err) in zip(procs, outputs) if p.returncode == 2)
    runs = [d for d in tmp_path.iterdir() if (d / "run.json").is_file()]
    assert len(runs) == 4
    for run in runs:
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps)) and steps[-1] == 60, (run.name, steps)
        assert json.loads((run / "summary.json").read_text())["status"] == "finished"


# --------------------------------------------------------------------------- resume continues exactly this run
def test_resume_refuses_other_settings_even_on_a_finished_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)[0] == EXIT_OK
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "20", "--lr", "0.01", "--out", str(run), "--resume"],
                           capsys)
    assert code == EXIT_USAGE and "differs in steps, lr" in err and "steps=10 in the run, steps=20 now" in err
    assert json.loads((run / "summary.json").read_text())["step"] == 10  # untouched
    with pytest.raises(SettingsChanged):
        run_sweep([("run", TrainConfig(**{**TINY, "lr": 0.01}, steps=10))], tmp_path, progress=False)


def test_resume_needs_a_run(tmp_path, capsys):
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(tmp_path / "none"), "--resume"],
                           capsys)
    assert code == EXIT_USAGE and "holds no run to resume" in err and not (tmp_path / "none").exists()


def test_a_typo_in_a_presets_train_block_is_a_usage_error(tmp_path, capsys):
    preset = tmp_path / "p.yaml"
    preset.write_text("train: {stpes: 3}\nstudies: {a: {tasks: [addition]}}\n")
    code, _, err = run_cli(["reproduce", "--preset", str(preset), "--dry-run"], capsys)
    assert code == EXIT_USAGE and "train has unknown keys ['stpes']" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- OS errors are one line, exit 2
def test_out_naming_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(tmp_path / "file")], capsys)
    assert code == EXIT_USAGE and err.count("\n") == 1 and str(tmp_path / "file") in err


@pytest.mark.parametrize("code, reason", [(errno.EROFS, "Read-only file system"), (errno.ENOSPC, "No space left")])
def test_a_read_only_or_full_disk_is_one_line(tmp_path, capsys, monkeypatch, code, reason):
    import mixit_lab.training.trainer as trainer_mod

    def refuse(path, data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(trainer_mod, "write_json", refuse)
    exit_code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(tmp_path / "run")], capsys)
    assert exit_code == EXIT_USAGE and reason in err and "run.json" in err and err.count("\n") == 1


def test_a_run_without_a_checkpoint_yet_is_named_as_such(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"train": TrainConfig(**TINY).to_dict()}))
    with pytest.raises(FileNotFoundError, match="run directory without a checkpoint yet"):
        find_checkpoint(run)
    with pytest.raises(FileNotFoundError, match=r"checkpoint/config\.json"):
        load_model(run)


def test_ctrl_c_on_a_sweep_hints_at_rerunning_it(tmp_path, capsys, monkeypatch):
    import mixit_lab.training.jobs as jobs_mod  # where the sweep's worker calls train

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs_mod, "train", interrupted)
    code, _, err = run_cli(["sweep", "--tasks", "addition", "--variants", "standard", "--steps", "5",
                            "--out", str(tmp_path)], capsys)
    assert code == EXIT_INTERRUPTED and "rerun the same command" in err and "--resume" not in err


def test_a_sigterm_that_a_library_rethrows_as_a_plain_interrupt_still_exits_143(tmp_path, capsys, monkeypatch):
    """Ray's ray.get catches the KeyboardInterrupt that a signal handler raises inside it and raises a plain one in
    its place; the exit status follows the signal, not the exception's class (was: 130 or 143 by the timing)."""
    import mixit_lab.training.jobs as jobs_mod  # where the sweep's worker calls train

    def like_ray(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None
        raise AssertionError("SIGTERM did not interrupt the sweep")

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    argv = ["sweep", "--tasks", "addition", "--variants", "standard", "--steps", "5", "--out"]
    monkeypatch.setattr(jobs_mod, "train", like_ray)
    code, _, err = run_cli([*argv, str(tmp_path / "a")], capsys)
    assert code == EXIT_TERMINATED and "terminated" in err
    monkeypatch.setattr(jobs_mod, "train", ctrl_c)  # the next command starts afresh: a Ctrl-C is a Ctrl-C
    code, _, err = run_cli([*argv, str(tmp_path / "b")], capsys)
    assert code == EXIT_INTERRUPTED and "interrupted" in err


# --------------------------------------------------------------------------- the explorer stops on SIGTERM
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_mixit_app_stops_on_a_signal_and_frees_its_port(tmp_path, sig):
    port = _free_port()
    # As from a terminal: under `nohup` (SIGHUP ignored, and inherited) the explorer rightly survives a hangup.
    proc = subprocess.Popen([sys.executable, "-m", "mixit_lab.cli", "app", str(tmp_path), "--port", str(port), "--headless"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 90
        while not _listening(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the explorer did not start"
            time.sleep(0.5)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port), "something still serves on the port"
    finally:
        if proc.poll() is None:
            proc.kill()


def _listening_addresses(port: int) -> set[str]:
    """The IPv4/IPv6 addresses a socket listens on at `port`, from /proc/net/tcp{,6} (Linux)."""
    found = set()
    for name, width in (("tcp", 8), ("tcp6", 32)):
        table = f"/proc/net/{name}"
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                else:  # four little-endian 32-bit words
                    found.add(socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads the listening sockets from /proc/net/tcp (Linux)")
@pytest.mark.parametrize("host, expected, warned", [(None, {"127.0.0.1"}, False), ("0.0.0.0", {"0.0.0.0"}, True)])
def test_mixit_app_listens_on_loopback_unless_told(tmp_path, host, expected, warned):
    port = _free_port()
    argv = [sys.executable, "-m", "mixit_lab.cli", "app", str(tmp_path), "--port", str(port), "--headless"]
    proc = subprocess.Popen(argv + (["--host", host] if host else []), cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while not _listening_addresses(port):
            assert proc.poll() is None and time.monotonic() < deadline, "the explorer did not start"
            time.sleep(0.5)
        assert _listening_addresses(port) == expected
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert ("warning: serving on 0.0.0.0" in err) == warned


# --------------------------------------------------------------------------- checkpoints verify themselves
def test_flipped_bytes_in_the_weights_are_refused_naming_the_file(tmp_path, capsys):
    from mixit_lab.models.checkpoint import CheckpointError

    run = tmp_path / "run"
    train(TrainConfig(**TINY, steps=10), run, progress=False)
    weights = run / "checkpoint" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-7] ^= 0xFF  # inside the last tensor's data: the file still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: contents do not match the SHA-256"):
        load_model(run)
    code, _, err = run_cli(["analyze", str(run), "--n-seqs", "4", "--seq-len", "4"], capsys)
    assert code == EXIT_USAGE and "model.safetensors" in err and err.count("\n") == 1


def test_a_kill_between_the_swaps_steps_is_recovered_on_resume(tmp_path):
    """The state a kill leaves after the old checkpoint moved aside and before the new one moved in:
    resume puts back a complete checkpoint, keeps the metrics, and ends as an uninterrupted run."""
    import shutil

    from safetensors.torch import load_file

    cfg = TrainConfig(**TINY, steps=20)
    train(cfg, tmp_path / "whole", progress=False)
    run = tmp_path / "run"
    train(cfg, run, progress=False)  # checkpoints at steps 10 and 20
    (run / "summary.json").unlink()  # as if killed while saving step 20: the old state aside, the new one not in
    old = run / ".checkpoint.old-killed"
    old.mkdir()
    (run / "checkpoint").rename(old / "checkpoint")
    (run / ".checkpoint.tmp-killed").mkdir()  # a save killed half-way
    metrics = (run / "metrics.jsonl").read_text()
    summary = train(cfg, run, resume=True, progress=False)
    assert summary["status"] == "finished" and summary["step"] == 20
    assert (run / "metrics.jsonl").read_text() == metrics  # continued, not restarted from step 0
    assert not list(run.glob(".checkpoint.*"))  # leftovers cleaned
    a = load_file(str(run / "checkpoint" / "model.safetensors"))
    b = load_file(str(tmp_path / "whole" / "checkpoint" / "model.safetensors"))
    assert all(a[k].equal(b[k]) for k in a)


TIMING = ("tokens_per_s", "elapsed_s")  # what a resumed run cannot share with an uninterrupted one


def _metrics(run) -> list[dict]:
    """run/metrics.jsonl without the timing columns."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_a_resume_between_two_logs_logs_the_same_training_loss(tmp_path, monkeypatch):
    """Stopped at a checkpoint half-way between two logged steps, the resumed run logs at the next one the
    mean loss over the same steps as a run that never stopped (the window travels in the trainer state)."""
    import contextlib

    import mixit_lab.training.trainer as trainer

    cfg = TrainConfig(**{**TINY, "log_every": 10}, steps=30, checkpoint_every=5)
    train(cfg, tmp_path / "whole", progress=False)
    swap = trainer.atomic_directory

    @contextlib.contextmanager
    def swap_then_stop(path, *args, **kwargs):
        with swap(path, *args, **kwargs) as tmp:
            yield tmp
        if path.name == "checkpoint" and _checkpoint_step(path.parent) == 15:
            raise KeyboardInterrupt  # once the checkpoint of step 15 is in place
    monkeypatch.setattr(trainer, "atomic_directory", swap_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(trainer, "atomic_directory", swap)
    assert _checkpoint_step(tmp_path / "run") == 15
    train(cfg, tmp_path / "run", resume=True, progress=False)
    assert [r["step"] for r in _metrics(tmp_path / "run")] == [10, 20, 30]
    assert _metrics(tmp_path / "run") == _metrics(tmp_path / "whole")


def _checkpoint_step(run) -> int:
    """The step of run's current checkpoint (0 before the first, or while one is being swapped in)."""
    try:
        return int(json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_ends_as_an_uninterrupted_run(tmp_path):
    """Real SIGKILLs (no cleanup runs) at random moments, then --resume until done: the same weights and
    the same metrics (timing aside) as a run that was never killed."""
    import random

    from safetensors.torch import load_file

    steps, out = 400, tmp_path / "killed"
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    argv = [sys.executable, "-m", "mixit_lab.cli", "train", *TRAIN_ARGS, "--steps", str(steps), "--checkpoint-every", "5",
            "--eval-every", "100", "--tracker", "tensorboard", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    rng = random.Random(0)
    kills = 0
    # Kill points are checkpoints, not seconds or a count of kills, so the test holds at any machine speed:
    # each start is killed once its checkpoint reaches a random step of the next quarter of the run (the
    # first at once, the others a random few milliseconds later: mid-step, mid-checkpoint). A start that
    # finishes before its kill point (a very fast machine) is simply not killed.
    for i, low in enumerate((20, 110, 200, 290)):
        target = rng.randrange(low, low + 80)
        proc = subprocess.Popen(argv + (["--resume"] if (out / "run.json").exists() else []), cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and _checkpoint_step(out) < target:
            time.sleep(0.002)
        if i:
            time.sleep(rng.uniform(0, 0.05))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            kills += not (out / "summary.json").exists()  # killed before it finished
        proc.wait()
    done = subprocess.run(argv + (["--resume"] if (out / "run.json").exists() else []), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert kills >= 1  # the first start is killed at its checkpoint, before step 100 of 400
    whole = tmp_path / "whole"
    subprocess.run([a if a != str(out) else str(whole) for a in argv], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=600)
    a = load_file(str(out / "checkpoint" / "model.safetensors"))
    b = load_file(str(whole / "checkpoint" / "model.safetensors"))
    assert all(a[k].equal(b[k]) for k in a)
    assert _metrics(out) == _metrics(whole)
    assert [r["step"] for r in _metrics(out) if "eval_loss" in r] == [100, 200, 300, 400]
    # TensorBoard too: every logged step once, none lost with a kill (flushed with each checkpoint)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in _metrics(out)]


@pytest.mark.parametrize("umask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_atomic_files_and_directories_get_the_modes_the_umask_gives(tmp_path, umask, file_mode, dir_mode):
    # mkstemp/mkdtemp make 0600 files and 0700 directories: others on a shared file system (a Ray or Slurm
    # cluster, an explorer run by another account) could not read checkpoints or reports.
    from mixit_lab.models.files import atomic_directory, write_text

    old = os.umask(umask)
    try:
        write_text(tmp_path / "report.md", "x")
        with atomic_directory(tmp_path / "checkpoint") as d:
            write_text(d / "weights.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "report.md").stat().st_mode & 0o777 == file_mode
    assert (tmp_path / "checkpoint").stat().st_mode & 0o777 == dir_mode
    assert (tmp_path / "checkpoint" / "weights.json").stat().st_mode & 0o777 == file_mode


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_every_file_of_a_run_follows_the_umask(tmp_path, umask):
    # safetensors writes its files 0600 whatever the umask: the weights and the optimizer state must not be the
    # only files of a run that another account on a shared file system cannot read.
    out = tmp_path / "run"
    code = (f"import os, sys; os.umask({umask:#o}); from mixit_lab.cli.main import main; sys.exit(main(sys.argv[1:]))")
    argv = ["train", "--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
            "--steps", "4", "--batch-size", "8", "--eval-every", "2", "--eval-samples", "16", "--device", "cpu",
            "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"model.safetensors", "trainer_state.safetensors"} <= {p.name for p in files}
    wrong = {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in files
             if p.stat().st_mode & 0o777 != 0o666 & ~umask}
    assert not wrong, wrong
    dirs = [p for p in out.rglob("*") if p.is_dir()]
    assert all(p.stat().st_mode & 0o777 == 0o777 & ~umask for p in dirs), [oct(p.stat().st_mode) for p in dirs]


@pytest.mark.parametrize("argv, named", [
    (["sweep", "examples/grid.yaml", "--d-mod", "32", "--dry-run"], "--d-mod"),
    (["train", "--task", "addition", "--out", "x", "--npr", "2"], "--npr"),
    (["reproduce", "--preset", "smoke", "--dry", "--out", "x"], "--dry"),
])
@pytest.mark.slow  # a fresh interpreter per case; tests/test_cli_contract.py runs the same refusal in-process
def test_abbreviated_options_are_refused_through_the_real_command(tmp_path, argv, named):
    # argparse would take --d-mod for --d-model, while the sweep looks for the literal option to know what the
    # user set: the run trained width 64. Refused as an unknown option instead, exit 2, one line.
    done = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == EXIT_USAGE, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "unrecognized arguments" in lines[0]


@pytest.mark.parametrize("argv", [
    pytest.param(["train", "--out", "run"], marks=pytest.mark.slow),
    pytest.param(["sweep", "--tasks", "dyck", "--variants", "standard", "--seeds", "0", "1", "--workers", "2", "--out",
                  "sweep"], marks=pytest.mark.slow),
], ids=["train", "sweep-workers"])
def test_a_warning_is_one_line_without_library_source(tmp_path, argv):
    # Dyck with 8 pairs: the first batch overlaps the eval set and TrainStream warns. Python's default format
    # adds the file, the line number and a line of the library's source under the message.
    small = ["--max-pairs", "8", "--steps", "2", "--batch-size", "128", "--d-model", "16", "--n-layers", "1",
             "--n-heads", "2", "--eval-every", "2"]
    extra = ["--task", "dyck", "--quiet"] if argv[0] == "train" else []
    done = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv, *small, *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == EXIT_OK, done.stderr[-2000:]
    # (a sweep's progress bar may share the line: the warning is what follows it)
    warned = [line[line.index("TrainStream") - len("warning: "):] for line in done.stderr.splitlines()
              if "TrainStream" in line]
    assert warned and all(line.startswith("warning: TrainStream:") and line.endswith("(UserWarning)") for line in warned)
    assert "warnings.warn(" not in done.stderr and ".py:" not in done.stderr


# --------------------------------------------------------------------------- a worker killed by the system
def _killed_on_three(x):
    """A job that SIGKILLs its own worker process on job 3 (what the OOM killer does), else returns x * 10."""
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


@pytest.mark.slow  # worker processes
def test_a_killed_pool_worker_fails_its_job_and_the_others_finish():
    from mixit_lab.training.pool import WorkerDied, pool_map

    got = list(pool_map(_killed_on_three, list(range(6)), 2, failed=lambda job, error: (job, error)))
    assert sorted(r for r in got if isinstance(r, int)) == [0, 10, 20, 40, 50]
    [(job, error)] = [r for r in got if isinstance(r, tuple)]
    assert job == 3 and isinstance(error, WorkerDied) and "killed by SIGKILL" in str(error)
    with pytest.raises(WorkerDied, match="SIGKILL"):  # without a stand-in the death is raised, never waited on
        list(pool_map(_killed_on_three, [1, 3], 2))


@pytest.mark.slow
def test_a_sweep_whose_worker_is_killed_finishes_the_others_and_exits_1(tmp_path):
    # A real SIGKILL of the process training one run of a two-worker sweep: it used to wait forever.
    from mixit_lab.training.rundir import LOCK_FILE

    argv = [sys.executable, "-m", "mixit_lab.cli", "sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard",
            "mixit", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--batch-size", "16", "--steps", "3000",
            "--eval-every", "1000", "--workers", "2", "--seeds", "0", "--out", str(tmp_path / "sweep")]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        victim = None
        while victim is None:  # whichever run's writer shows up first, once it is training (its lock names it)
            assert proc.poll() is None and time.monotonic() < deadline, "no run started"
            for lock in (tmp_path / "sweep").glob(f"*/{LOCK_FILE}"):
                pid = lock.read_text().strip()
                if pid and (lock.parent / "metrics.jsonl").exists():
                    victim = (lock.parent.name, int(pid))
                    break
            time.sleep(0.2)
        os.kill(victim[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    killed = [line for line in out.splitlines() if victim[0] in line]
    assert killed and "error" in killed[0], out
    assert "(1 not finished)" in out
    summary = (tmp_path / "sweep" / "summary.csv").read_text()
    assert "WorkerDied: worker process killed by SIGKILL" in summary and summary.count("finished") == 1


# --------------------------------------------------------------------------- YAML numbers as people write them
GRID = """variants: [standard]
tasks: [{addition: {digits: 2}}]
sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]
lrs: [LR]
train: {steps: 10, weight_decay: WD}
"""
PRESET = """train: {steps: 10, weight_decay: WD}
studies:
  s: {variants: [standard], tasks: [{addition: {digits: 2}}], sizes: [{d_model: 16, n_layers: 1, n_heads: 2}],
      lrs: [LR]}
skip: [signal, speed]
"""


@pytest.mark.parametrize("command", ["sweep", pytest.param("reproduce", marks=pytest.mark.slow)])
@pytest.mark.parametrize("lr, wd, problem", [("3e-3", "1e-2", None),
                                              pytest.param("1E-3", "0", None, marks=pytest.mark.slow),
                                              pytest.param("fast", "0.1", "lr='fast' must be a number",
                                                           marks=pytest.mark.slow),
                                              ("0.1", "lots", "weight_decay='lots' must be a number")])
def test_yaml_numbers_with_exponents_are_numbers_and_other_types_one_line(tmp_path, command, lr, wd, problem):
    # YAML 1.1 reads 3e-3 (no dot) as a string: grids and presets written that way ended in a traceback.
    text = (GRID if command == "sweep" else PRESET).replace("LR", lr).replace("WD", wd)
    (tmp_path / "f.yaml").write_text(text)
    where = [str(tmp_path / "f.yaml")] if command == "sweep" else ["--preset", str(tmp_path / "f.yaml")]
    done = subprocess.run([sys.executable, "-m", "mixit_lab.cli", command, *where, "--dry-run", "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if problem is None:
        assert done.returncode == EXIT_OK, done.stderr
        assert f"lr{float(lr):g}" in done.stdout
    else:
        assert done.returncode == EXIT_USAGE
        assert done.stderr.count("\n") == 1 and problem in done.stderr and "Traceback" not in done.stderr


def test_a_start_that_failed_before_its_first_checkpoint_does_not_block_the_corrected_command(tmp_path, capsys):
    # What a start that failed (or was killed) before its first checkpoint leaves: run.json and some metrics.
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"train": {"task": "addition", "steps": 99}}))
    (run / "metrics.jsonl").write_text('{"step": 0, "loss": 9.0}\n')
    code, out, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_OK, err
    assert json.loads((run / "run.json").read_text())["train"]["steps"] == 10
    assert '"loss": 9.0' not in (run / "metrics.jsonl").read_text()  # the old start's lines are gone
    # A run with a checkpoint is kept: the same command is refused.
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_USAGE and "already holds a run" in err


def test_a_folder_that_is_not_a_free_run_says_what_it_holds(tmp_path, capsys):
    """The refusal names what is there: other files (no run), a damaged run.json, a run another process writes
    (its PID, before any advice to resume), or a run and how far it got."""
    other = tmp_path / "other"
    (other / "tensorboard").mkdir(parents=True)
    (other / "README.md").write_text("notes")
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(other)], capsys)
    assert code == EXIT_USAGE and "holds no run but other files (README.md, tensorboard/)" in err, err
    run = tmp_path / "run"
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_OK, err
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_USAGE and "already holds a run (finished); pass --resume" in err, err
    with run_lock(run):  # another writer, as a second process would see it
        code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_USAGE and f"another process (PID {os.getpid()}) is writing" in err and "--resume" not in err, err
    (run / "run.json").write_text('{"train": ')
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--steps", "10", "--out", str(run)], capsys)
    assert code == EXIT_USAGE and "whose run.json cannot be read (" in err, err


def test_a_checkpoint_read_while_the_trainer_swaps_it_is_one_generation_never_corrupt(tmp_path):
    """Reads racing a writer that saves a new generation again and again: every read gives one generation's
    weights (a config and weights from two generations were once called corrupt)."""
    import threading

    from mixit_lab.models import ModelConfig, build_model, save_model

    models = [build_model(ModelConfig(variant="standard", d_model=16, n_layers=1, n_heads=2, n_ctx=8, d_vocab=11,
                                      seed=s)) for s in range(2)]
    path = tmp_path / "checkpoint"
    save_model(models[0], path)
    stop, errors = threading.Event(), []

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            save_model(models[i % 2], path)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        seen = set()
        for _ in range(150):
            try:
                loaded = load_model(path)
            except Exception as e:  # noqa: BLE001 - what a reader would be told
                errors.append(f"{type(e).__name__}: {e}")
                continue
            seen.add(next(i for i, m in enumerate(models) if torch.equal(m.W_E, loaded.W_E)))
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert seen  # generations were read (both, usually)
