"""Writes that fail (a full disk, a read-only one, a file where a folder belongs) through the real commands.

Every write failure of checkpoints, analyses, figures and the report is one line on stderr naming the path
and the cause, exit 2, never a traceback, and what was finished stays; `mixit reproduce` checks every output
folder before it trains (and in --dry-run). A real small file system (tmpfs, 200 KiB) is used where the
machine allows mounting one (root); monkeypatched ENOSPC covers what a tmpfs cannot reach deterministically
and runs everywhere. docs/promises.md lists these promises.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mixit_lab.cli.common import EXIT_FAILED, EXIT_USAGE
from mixit_lab.cli.main import main
from conftest import ROOT

TRAIN_ARGS = ["--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
              "--batch-size", "16", "--eval-every", "10", "--eval-samples", "64", "--quiet"]
TINY_PRESET = (
    "train: {steps: 4, batch_size: 8, eval_every: 4, eval_samples: 16}\n"
    "studies:\n  algorithmic: {variants: [standard], tasks: [{addition: {digits: 2}}],"
    " sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]}\n"
    "analysis: {n_seqs: 4, seq_len: 8, eval_samples: 16}\nskip: [signal, speed]\n")
NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"
READ_ONLY = os.strerror(errno.EROFS)  # "Read-only file system"


def mixit(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The real command, in a fresh interpreter, as a shell runs it."""
    return subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    """mixit_lab.cli.main.main in this process (for the monkeypatched faults)."""
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str, *named: str) -> None:
    """`err` is one line, no traceback, naming each of `named`."""
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for text in named:
        assert text in err, (text, err)


# --------------------------------------------------------------------------- a real small disk
def _mount_small_disk(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the monkeypatched tests cover the same paths)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KiB tmpfs at tmp_path/disk, unmounted after the test (skipped where mount is not permitted)."""
    disk = tmp_path / "disk"
    _mount_small_disk(disk)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path) -> None:
    """Fill `disk` to the last byte: any later write of data fails with ENOSPC."""
    with open(disk / "filler", "wb", buffering=0) as fh:
        for size in (64 * 1024, 4096, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC


def read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """A folder with one tiny finished run (`run`), from which `task_accuracy` can be drawn."""
    from mixit_lab.training import TrainConfig, train

    root = tmp_path_factory.mktemp("runs")
    train(TrainConfig(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, batch_size=16,
                      eval_every=10, eval_samples=64, steps=10), root / "run", progress=False)
    return root


# --------------------------------------------------------------------------- checkpoints
def test_a_full_disk_while_saving_a_checkpoint_is_one_line(small_disk, tmp_path):
    # Was: a 22-line traceback (safetensors' SafetensorError is no OSError and names no file), exit 1.
    run = small_disk / "run"
    done = mixit(["train", *TRAIN_ARGS, "--d-model", "64", "--n-layers", "2", "--steps", "10", "--out", str(run)],
                 tmp_path)
    assert done.returncode == EXIT_USAGE
    # the checkpoint file the user knows, not the hidden folder the atomic write builds it in (.checkpoint.tmp-*)
    one_line(done.stderr, f"{run / 'checkpoint' / 'model.safetensors'}: {NO_SPACE}")
    assert ".tmp-" not in done.stderr
    assert json.loads((run / "run.json").read_text())  # what was written before stays readable


def test_a_full_disk_under_the_token_cache_names_the_entry_and_the_cause(small_disk, monkeypatch):
    # Was: numpy's "800000 requested and 204800 written", naming no file and no cause.
    import numpy as np

    from mixit_lab.cli.common import os_error_line
    from mixit_lab.training.tasks.cache import cached_array

    with pytest.raises(OSError) as full:
        cached_array(small_disk / "cache", "k", lambda: np.zeros(100_000, dtype=np.int64))
    assert os_error_line("train", full.value) == f"mixit train: error: {small_disk / 'cache' / 'tokens-k.npy'}: {NO_SPACE}"
    assert not [p for p in (small_disk / "cache").iterdir()]  # no partial entry left to be read as one
    roomy = os.statvfs_result((4096, 4096, 10**6, 10**6, 10**6, 10**6, 10**6, 10**6, 0, 255))
    monkeypatch.setattr(os, "statvfs", lambda path: roomy)  # a short write on a disk with room: said as it is
    with pytest.raises(OSError) as short:
        cached_array(small_disk / "cache", "k2", lambda: np.zeros(100_000, dtype=np.int64))
    assert short.value.errno == errno.EIO and "requested and" in short.value.strerror

def test_a_full_disk_at_the_second_checkpoint_keeps_the_first(tmp_path, capsys, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    from mixit_lab.models import load_model

    real, calls = safetensors.torch.save_file, []

    def full_after_one_checkpoint(tensors, filename, metadata=None):
        calls.append(filename)
        if len(calls) > 2:  # the model and the trainer state of the first checkpoint fit
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(safetensors.torch, "save_file", full_after_one_checkpoint)
    run = tmp_path / "run"
    code, _, err = run_main(["train", *TRAIN_ARGS, "--steps", "20", "--out", str(run)], capsys)
    assert code == EXIT_USAGE
    one_line(err, f"mixit train: error: {run / 'checkpoint' / 'model.safetensors'}: {NO_SPACE}")
    assert ".tmp-" not in err  # was: RUN/.checkpoint.tmp-XXXX/model.safetensors, a folder the user never sees
    monkeypatch.undo()
    assert json.loads((run / "checkpoint" / "trainer_state.json").read_text())["step"] == 10
    load_model(run / "checkpoint")  # the first checkpoint is whole


# --------------------------------------------------------------------------- analyses
def test_analysis_onto_a_full_disk_is_one_line(small_disk, runs_dir, tmp_path):
    fill(small_disk)
    done = mixit(["analyze", str(runs_dir / "run"), "--out", str(small_disk / "an"), "--n-seqs", "4", "--seq-len",
                  "8", "--eval-samples", "16"], tmp_path)
    assert done.returncode == EXIT_USAGE
    one_line(done.stderr, str(small_disk / "an"), NO_SPACE)


def test_analysis_onto_a_read_only_disk_is_refused_before_it_starts(small_disk, runs_dir, tmp_path):
    read_only(small_disk)
    done = mixit(["analyze", str(runs_dir / "run"), "--out", str(small_disk / "an")], tmp_path)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    one_line(done.stderr, "--out", str(small_disk / "an"), READ_ONLY)


def test_an_analysis_that_cannot_be_written_is_one_line(runs_dir, tmp_path, capsys, monkeypatch):
    import mixit_lab.models.files
    def full(path, data):
        raise OSError(errno.ENOSPC, NO_SPACE, str(path))

    monkeypatch.setattr(mixit_lab.models.files, "write_json", full)  # mixit_lab.analysis.analyze imports it where it writes
    code, _, err = run_main(["analyze", str(runs_dir / "run"), "--out", str(tmp_path / "an"), "--n-seqs", "4",
                             "--seq-len", "8", "--eval-samples", "16"], capsys)
    assert code == EXIT_USAGE
    one_line(err, str(tmp_path / "an"), NO_SPACE)


# --------------------------------------------------------------------------- figures
def test_figures_onto_a_full_disk_are_one_line(small_disk, runs_dir, tmp_path):
    # Was: one traceback per figure, exit 1.
    fill(small_disk)
    done = mixit(["figures", str(runs_dir), "--out", str(small_disk / "figs")], tmp_path)
    assert done.returncode == EXIT_USAGE
    one_line(done.stderr, str(small_disk / "figs" / "task_accuracy."), NO_SPACE)


def test_figures_onto_a_read_only_disk_are_refused_before_drawing(small_disk, runs_dir, tmp_path):
    read_only(small_disk)
    done = mixit(["figures", str(runs_dir), "--out", str(small_disk / "figs")], tmp_path)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    one_line(done.stderr, "--out", str(small_disk / "figs"), READ_ONLY)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_figures_that_cannot_be_written_are_one_line_without_tracebacks(runs_dir, tmp_path, capsys, monkeypatch,
                                                                       code):
    import mixit_lab.figures.style
    def refuse(fig, out_dir, name, dpi=0):
        raise OSError(code, os.strerror(code), str(Path(out_dir) / f"{name}.png"))

    monkeypatch.setattr(mixit_lab.figures.style, "save", refuse)
    exit_code, out, err = run_main(["figures", str(runs_dir), "--out", str(tmp_path / "figs")], capsys)
    assert exit_code == EXIT_USAGE
    one_line(err, str(tmp_path / "figs" / "task_accuracy.png"), os.strerror(code))
    assert f"FAILED: cannot write {tmp_path / 'figs' / 'task_accuracy.png'}" in out


def test_figures_only_that_draws_nothing_says_so_and_fails(runs_dir, tmp_path, capsys):
    # Was: exit 0 with nothing drawn.
    code, out, err = run_main(["figures", str(runs_dir), "--out", str(tmp_path / "figs"), "--only", "speed",
                               "signal_depth"], capsys)
    assert code == EXIT_FAILED and "0 of 2 figures" in out
    one_line(err, "nothing drawn", "speed", "signal_depth", "no speed/speed.csv")
    assert run_main(["figures", str(runs_dir), "--out", str(tmp_path / "figs"), "--only", "task_accuracy"],
                    capsys)[0] == 0


# --------------------------------------------------------------------------- mixit reproduce: output folders first
@pytest.mark.parametrize("option", ["--out", "--report-dir", "--figures-dir"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_every_output_folder_of_reproduce_is_checked_before_training(tmp_path, option, dry_run):
    # Was: --dry-run checked none; a file as --report-dir failed after all training; as --figures-dir every figure.
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    (tmp_path / "afile").write_text("x")
    dirs = {"--out": "runs", "--report-dir": "report", "--figures-dir": "figs", option: "afile/sub"}
    argv = ["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", *(a for kv in dirs.items() for a in kv)]
    done = mixit(argv + ["--dry-run"] * dry_run, tmp_path)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    one_line(done.stderr, option, "afile/sub", "is a file")
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


def test_a_read_only_report_dir_is_refused_before_training(small_disk, tmp_path):
    read_only(small_disk)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    done = mixit(["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs",
                  "--report-dir", str(small_disk / "report"), "--figures-dir", "figs"], tmp_path)
    assert done.returncode == EXIT_USAGE
    one_line(done.stderr, "--report-dir", str(small_disk / "report"), READ_ONLY)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_sweep_onto_a_read_only_disk_is_refused_before_training(small_disk, tmp_path, dry_run):
    # Was: --dry-run listed the runs (exit 0); a sweep failed later, on its first write.
    read_only(small_disk)
    done = mixit(["sweep", "--tasks", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads",
                  "2", "--steps", "4", "--out", str(small_disk / "sweep")] + ["--dry-run"] * dry_run, tmp_path)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    one_line(done.stderr, "--out", str(small_disk / "sweep"), READ_ONLY)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc on this machine")
def test_reproduce_into_proc_is_one_line_exit_2(tmp_path):
    # Was: exit 1.
    done = mixit(["reproduce", "--preset", "smoke", "--dry-run", "--out", "/proc/mixit-runs"], tmp_path)
    assert done.returncode == EXIT_USAGE
    one_line(done.stderr, "--out /proc/mixit-runs")


def test_a_report_that_cannot_be_written_is_one_line_and_keeps_the_runs(small_disk, tmp_path, capsys, monkeypatch):
    # The output folders pass the check (the disk has room for the probe); the report then meets a full disk.
    import mixit_lab.reproduce.pipeline
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    real = mixit_lab.reproduce.pipeline.report_stage

    def fill_then_report(*args, **kwargs):
        fill(small_disk)
        return real(*args, **kwargs)

    monkeypatch.setattr(mixit_lab.reproduce.pipeline, "report_stage", fill_then_report)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs",
                             "--report-dir", str(small_disk / "report"), "--figures-dir", "figs"], capsys)
    assert code == EXIT_USAGE
    one_line(err, str(small_disk / "report"), NO_SPACE)
    runs = list((tmp_path / "runs" / "algorithmic").glob("*/summary.json"))
    assert runs and all(json.loads(p.read_text())["status"] == "finished" for p in runs)
    assert (tmp_path / "figs" / "task_accuracy.png").is_file()
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "failed" and manifest["stopped_in"] == "report" and NO_SPACE in manifest["error"]


@pytest.mark.parametrize("code", [errno.EACCES, errno.ENOSPC])
def test_a_report_write_failure_is_recorded_in_reproduce_json_not_left_running(tmp_path, capsys, monkeypatch, code):
    # Was: the one line, but reproduce.json kept saying "running" of a reproduction that was over.
    import mixit_lab.reproduce.report
    report = tmp_path / "report" / "report.md"

    def unwritable(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(report))

    monkeypatch.setattr(mixit_lab.reproduce.report, "write_report", unwritable)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    argv = ["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs", "--report-dir",
            "report", "--figures-dir", "figs"]
    exit_code, _, err = run_main(argv, capsys)
    assert exit_code == EXIT_USAGE
    one_line(err, str(report), os.strerror(code))
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "failed" and manifest["stopped_in"] == "report"
    assert manifest["error"].endswith(f"Error: {report}: {os.strerror(code)}") and "findings" not in manifest
    assert "train" in manifest["timings_s"] and "report" not in manifest["timings_s"]
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert run_main(argv, capsys)[0] == 0  # the rerun writes the report and says so
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "finished" and "error" not in manifest and (tmp_path / "report" / "report.md").is_file()


# --------------------------------------------------------------------------- mixit reproduce: a failed analysis
def test_reproduce_with_a_failed_analysis_or_figure_write_finishes_and_exits_1_naming_them(tmp_path, capsys,
                                                                                          monkeypatch):
    # Was: exit 0 although the analysis failed. A figure it cannot write is a failed figure: the report is made.
    import mixit_lab.analysis.analyze
    import mixit_lab.figures.style
    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, NO_SPACE, "analysis.json")

    def full(fig, out_dir, name, dpi=0):
        raise OSError(errno.ENOSPC, NO_SPACE, str(Path(out_dir) / f"{name}.png"))

    monkeypatch.setattr(mixit_lab.analysis.analyze, "analyze_checkpoint", broken)
    monkeypatch.setattr(mixit_lab.figures.style, "save", full)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    code, out, err = run_main(["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs",
                               "--report-dir", "report", "--figures-dir", "figs"], capsys)
    assert code == EXIT_FAILED
    one_line(err, "analysis of algorithmic/", "figure(s) task_accuracy failed")
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "finished" and len(manifest["failed_analyses"]) == 1
    assert manifest["failed_analyses"][0].startswith("algorithmic/")
    assert NO_SPACE in manifest["failed_figures"]["task_accuracy"] and "figs/task_accuracy.png" in out
    assert (tmp_path / "report" / "report.md").is_file()


def test_two_thousand_failed_analyses_are_still_one_short_line(capsys):
    # Was: one line naming every run, 200,000 characters for 2,000 runs.
    from mixit_lab.cli.reproduce import _exit_status

    runs = [f"algorithmic/addition__standard__s{i}" for i in range(2000)]
    assert _exit_status({"failed_analyses": runs}) == EXIT_FAILED
    err = capsys.readouterr().err
    one_line(err, "analysis of 2000 runs (algorithmic/addition__standard__s0, ", "and 1997 more, in reproduce.json")
    assert len(err) < 300
