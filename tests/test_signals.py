"""SIGTERM and Ctrl-C to `mixit sweep` (on the local pool or `--executor ray`) and `mixit reproduce` stop every worker,
keep finished runs, say how to continue and exit 143 / 130, with no traceback (after a SIGKILL of the command, its
workers end themselves); a second sweep or reproduction into a folder in use is refused at once (docs/promises.md).

Each test starts the real command (two workers, tiny runs of a few seconds), signals it once its first run has
finished, and then looks for every process it had started (/proc: Linux only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mixit_lab.cli.common import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED, EXIT_USAGE
from conftest import ROOT
from mixit_lab.training.rundir import LOCK_FILE, RUNS_SUMMARY, SUMMARY_FILE

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds processes in /proc (Linux)")]

# Runs of a few seconds each: long enough that a signal after the first finished run finds the others training.
TINY = ["--batch-size", "16", "--steps", "400", "--eval-every", "100", "--eval-samples", "64"]
SWEEP = ["sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard", "mixit", "--seeds", "0", "1",
         "--d-model", "16", "--n-layers", "1", "--n-heads", "2", *TINY, "--workers", "2"]
PRESET = """name: tiny-signals
train: {batch_size: 16, steps: 400, eval_every: 100, eval_samples: 64, log_every: 10}
studies:
  s: {variants: [standard, mixit], tasks: [{addition: {digits: 2}}], sizes: [{d_model: 16, n_layers: 1, n_heads: 2}],
      seeds: [0, 1], lrs: [0.003]}
skip: [signal, speed]
"""


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM as from a terminal (a test run in the background ignores SIGINT)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _start(argv: list[str], cwd: Path = ROOT) -> subprocess.Popen:
    """The real `mixit ARGV` in a session of its own, so that a Ctrl-C can go to its process group as a terminal's."""
    return subprocess.Popen([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_signals)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent PID) of a process from /proc, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1])


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid`."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))):
            children.setdefault(stat[1], []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (stat := _stat(p)) and stat[0] not in "ZX"}


def _finished(out: Path) -> set[Path]:
    """The run folders under `out` whose summary says finished. os.walk, not rglob: a checkpoint's temporary folder
    renamed away while it looks is skipped, where rglob raises FileNotFoundError."""
    summaries = [Path(folder) / SUMMARY_FILE for folder, _, files in os.walk(out) if SUMMARY_FILE in files]
    return {s.parent for s in summaries if json.loads(s.read_text()).get("status") == "finished"}


def _signal_after_the_first_run(proc: subprocess.Popen, out: Path, sig: int, group: bool) -> tuple[set[int], set[Path]]:
    """Wait for a finished run while the others train, then send `sig`; the processes it had started, and the
    runs finished by then."""
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while not _finished(out):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        seen |= _descendants(proc.pid)
        time.sleep(0.2)
    seen |= _descendants(proc.pid)
    done = _finished(out)
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    return seen, done


def _check_stopped(proc: subprocess.Popen, seen: set[int], code: int) -> str:
    """The command exited with `code`, said how to continue, printed no traceback, and left no process behind."""
    try:
        _, err = proc.communicate(timeout=120)  # a worker left alive would hold the pipe open
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err[-3000:]
    if code != -signal.SIGKILL:  # a SIGKILL leaves the command no word to say
        assert "rerun the same command to continue" in err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert len(seen) >= 2, f"the workers were never seen: {seen}"
    deadline = time.monotonic() + 15
    while _alive(seen) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(seen), f"processes left running: {_alive(seen)}"
    return err


def _weights(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("checkpoint/model.safetensors"))}


@pytest.mark.parametrize("sig, group, code", [(signal.SIGTERM, False, EXIT_TERMINATED),
                                              (signal.SIGINT, True, EXIT_INTERRUPTED),
                                              (signal.SIGKILL, False, -signal.SIGKILL)],
                         ids=["sigterm", "ctrl-c", "sigkill-workers-end-themselves"])
def test_a_signal_stops_a_sweep_and_its_workers_and_the_rerun_finishes_it(tmp_path, sig, group, code):
    out = tmp_path / "sweep"
    proc = _start([*SWEEP, "--out", str(out)])
    seen, done = _signal_after_the_first_run(proc, out, sig, group)
    kept = {run: (run / SUMMARY_FILE).read_bytes() for run in done}
    _check_stopped(proc, seen, code)
    assert _finished(out) >= done and not (out / RUNS_SUMMARY).exists()  # no summary of an unfinished sweep
    assert len(_finished(out)) < 4, "the sweep finished before the signal: nothing was interrupted"

    again = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *SWEEP, "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == EXIT_OK, again.stderr[-3000:]
    assert len(_finished(out)) == 4 and (out / RUNS_SUMMARY).read_text().count("finished") == 4
    assert {run: (run / SUMMARY_FILE).read_bytes() for run in done} == kept  # finished runs were not trained again
    if sig == signal.SIGTERM:  # the interrupted runs resumed to the very weights of a sweep never interrupted
        reference = tmp_path / "reference"
        whole = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *SWEEP, "--out", str(reference)], cwd=ROOT,
                               capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert whole.returncode == EXIT_OK, whole.stderr[-3000:]
        assert _weights(out) == _weights(reference) and len(_weights(out)) == 4


@pytest.mark.parametrize("sig, group, code", [(signal.SIGTERM, False, EXIT_TERMINATED),
                                              (signal.SIGINT, True, EXIT_INTERRUPTED)], ids=["sigterm", "ctrl-c"])
def test_a_signal_stops_a_reproduction_and_its_workers_and_the_rerun_finishes_it(tmp_path, sig, group, code):
    (tmp_path / "tiny.yaml").write_text(PRESET)
    argv = ["reproduce", "--preset", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "runs"), "--report-dir",
            str(tmp_path / "report"), "--figures-dir", str(tmp_path / "figures"), "--workers", "2", "--quiet"]
    out = tmp_path / "runs"
    proc = _start(argv)
    seen, done = _signal_after_the_first_run(proc, out, sig, group)
    _check_stopped(proc, seen, code)
    assert _finished(out) >= done and len(_finished(out)) < 4

    again = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in again.stderr, again.stderr[-3000:]
    assert len(_finished(out)) == 4 and (out / "s" / RUNS_SUMMARY).read_text().count("finished") == 4


def test_a_second_sweep_into_a_folder_in_use_is_refused_at_once(tmp_path):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / RUNS_SUMMARY).write_text("run,status\nold,stale\n")  # a summary from before: it must not survive
    # Runs of some seconds: at 400 steps a loaded machine finished all four while the second command was still
    # importing torch, and the second then found a folder no longer in use (exit 0, correctly).
    sweep = [*SWEEP, "--steps", "4000"]
    first = _start([*sweep, "--out", str(out)])
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob(f"*/{LOCK_FILE}")):  # the first sweep holds the folder and is training
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.2)
        second = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *sweep, "--out", str(out)], cwd=ROOT,
                                capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert second.returncode == EXIT_USAGE, second.stderr[-3000:]
        assert second.stderr.count("\n") == 1 and str(out) in second.stderr and f"PID {first.pid}" in second.stderr
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == EXIT_OK, err[-3000:]
    summary = (out / RUNS_SUMMARY).read_text()
    assert summary.count("finished") == 4 and "stale" not in summary


@pytest.mark.parametrize("sig, group, code", [(signal.SIGTERM, False, EXIT_TERMINATED),
                                              (signal.SIGINT, True, EXIT_INTERRUPTED)], ids=["sigterm", "ctrl-c"])
def test_a_signal_stops_a_ray_sweep_and_its_tasks_and_the_rerun_finishes_it(tmp_path, sig, group, code):
    # Was: ray.init took SIGTERM over: a C++ stack dump and SIGABRT (exit 134), no resume hint.
    pytest.importorskip("ray")
    out = tmp_path / "sweep"
    # Runs of some seconds: the next two, started on warm workers, take under a second at 400 steps, so they could
    # finish while ray.shutdown() ends the job (it does not stop tasks at once), and nothing would be interrupted.
    sweep = [*SWEEP, "--steps", "2000"]
    proc = _start([*sweep, "--executor", "ray", "--out", str(out)])
    seen, done = _signal_after_the_first_run(proc, out, sig, group)
    kept = {run: (run / SUMMARY_FILE).read_bytes() for run in done}
    _check_stopped(proc, seen, code)  # Ray's own processes (its GCS, raylet, the workers) are gone too
    assert _finished(out) >= done and len(_finished(out)) < 4 and not (out / RUNS_SUMMARY).exists()

    again = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *sweep, "--out", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert again.returncode == EXIT_OK, again.stderr[-3000:]
    assert len(_finished(out)) == 4 and {run: (run / SUMMARY_FILE).read_bytes() for run in done} == kept


def test_a_second_reproduction_into_a_folder_in_use_is_refused_at_once(tmp_path):
    # Was: no lock; the second trained beside the first ("running elsewhere"), exit 1, a stale summary and report.
    (tmp_path / "tiny.yaml").write_text(PRESET)
    out = tmp_path / "runs"
    (out / "s").mkdir(parents=True)
    (out / "s" / RUNS_SUMMARY).write_text("run,status\nold,stale\n")  # a summary from before: it must not survive

    def argv(name: str) -> list[str]:
        return ["reproduce", "--preset", "tiny.yaml", "--out", "runs", "--report-dir", f"report-{name}",
                "--figures-dir", f"figures-{name}", "--workers", "2", "--quiet"]

    first = _start(argv("first"), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not list(out.glob(f"s/*/{LOCK_FILE}")):  # the first holds the folder and is training
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
            time.sleep(0.2)
        manifest = (out / "reproduce.json").read_bytes()
        second = subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv("second")], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert second.returncode == EXIT_USAGE, second.stderr[-3000:]
        assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, second.stderr
        assert str(out) in second.stderr or "runs is being written" in second.stderr
        assert f"PID {first.pid}" in second.stderr and second.stdout == ""
        assert (out / "reproduce.json").read_bytes() == manifest  # the second wrote nothing
        _, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == EXIT_OK, err[-3000:]
    summary = (out / "s" / RUNS_SUMMARY).read_text()
    assert summary.count("finished") == 4 and "stale" not in summary and "running elsewhere" not in summary
    assert json.loads((out / "reproduce.json").read_text())["report_dir"] == "report-first"
    assert (tmp_path / "report-first" / "report.md").is_file()
    assert not (tmp_path / "report-second").exists() and not (tmp_path / "figures-second").exists()
