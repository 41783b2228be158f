"""The exit-code promise (docs/promises.md) through the real `mixit` command: bad input is exit 2 and one line.

Each case runs `python -m mixit_lab.cli ...` in a subprocess, as a shell would, so the code between the parser and
the library (what catches which error, what it prints) is what is tested. Every case asserts the exit
code, that stderr is one line, and that the line names the bad value.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mixit_lab.cli.common import EXIT_USAGE
from conftest import ROOT

SMALL = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "2", "--quiet"]


def _mixit(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=cwd, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})


# Each case runs through the real command (`python -m cli`, a fresh interpreter: `make test`) and, for the
# fast loop (`make test-fast`), through mixit_lab.cli.main.main in this process: the same parser, handlers and
# error handling, without a second of interpreter start-up per case.
RUNNERS = [pytest.param("python -m cli", marks=pytest.mark.slow, id="python -m cli"), pytest.param("main", id="main")]


@pytest.fixture
def mixit(request, monkeypatch, capsys):
    """mixit(argv, cwd) -> CompletedProcess, through the runner the test is parametrized with."""
    def in_process(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
        from mixit_lab.cli.main import main

        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(argv)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(argv, code, out, err)

    return _mixit if request.param == "python -m cli" else in_process


def _stale_run(tmp: Path) -> Path:
    """A runs folder holding the smoke preset's first run trained with other settings (more steps)."""
    from mixit_lab.reproduce.corpora import TextChoice
    from mixit_lab.reproduce.pipeline import preset_runs
    from mixit_lab.reproduce.preset import load_preset

    skipped = {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True)}
    name, cfg = preset_runs(load_preset("smoke"), skipped)[0]
    run = tmp / "runs" / name
    run.mkdir(parents=True)
    changed = {**cfg.to_dict(), "steps": cfg.steps + 1}
    (run / "run.json").write_text(json.dumps({"train": changed}))
    return tmp / "runs"


# (case id, argv with {tmp} for the test's folder, what the one line must name)
CASES = [
    ("unknown flag", ["train", "--task", "addition", "--out", "{tmp}/r", "--bogus"], "--bogus"),
    ("abbreviated flag", ["train", "--task", "addition", "--out", "{tmp}/r", "--d-mod", "32"], "--d-mod"),
    ("bad number", ["train", "--task", "addition", "--out", "{tmp}/r", "--lr", "abc"], "'abc'"),
    ("zero steps", ["train", "--task", "addition", "--out", "{tmp}/r", "--steps", "0"], "steps=0"),
    ("unknown task", ["train", "--task", "nosuch", "--out", "{tmp}/r"], "nosuch"),
    ("empty --out", ["train", "--task", "addition", "--out", ""], "empty path"),
    ("--out is a file", ["train", "--task", "addition", "--out", "{tmp}/afile", *SMALL], "afile"),
    ("non-number model option", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option",
                                 "qk_init_std=abc"], "abc"),
    ("model option the task refuses", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option",
                                       "n_classes=3"], "n_classes=3"),
    ("k-hop with only null answers", ["train", "--task", "khop", "--hops", "20", "--length", "4", "--out", "{tmp}/r"],
     "hops=20"),
    ("task option for another task", ["train", "--task", "addition", "--pairs", "4", "--out", "{tmp}/r"], "--pairs"),
    ("resume nothing", ["train", "--task", "addition", "--out", "{tmp}/none", "--resume"], "none"),
    ("freeze an unknown part", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "wings"], "wings"),
    ("missing grid file", ["sweep", "{tmp}/nogrid.yaml", "--dry-run"], "nogrid.yaml"),
    ("grid value of the wrong type", ["sweep", "{tmp}/badgrid.yaml", "--dry-run"], "lr='fast'"),
    ("zero workers", ["sweep", "--tasks", "addition", "--workers", "0", "--out", "{tmp}/s", *SMALL[:-1]],
     "--workers=0"),
    ("unknown preset", ["reproduce", "--preset", "nosuch", "--dry-run"], "nosuch"),
    ("unreadable preset", ["reproduce", "--preset", "{tmp}/broken.yaml", "--dry-run"], "broken.yaml"),
    ("missing corpus", ["reproduce", "--preset", "smoke", "--text-file", "{tmp}/nosuch.txt", "--dry-run",
                        "--out", "{tmp}/runs"], "nosuch.txt"),
    ("bad precision", ["reproduce", "--preset", "smoke", "--precision", "half", "--dry-run"], "half"),
    ("runs trained otherwise", ["reproduce", "--preset", "smoke", "--dry-run", "--out", "{tmp}/runs",
                                "--text-file", "{tmp}/lm.txt", "--sentiment-file", "{tmp}/sentiment.txt"], "steps"),
    ("figures of nothing", ["figures", "{tmp}/noruns"], "noruns"),
    ("figures into a file", ["figures", "{tmp}", "--out", "{tmp}/afile"], "afile is not a directory"),
    ("figures below a file", ["figures", "{tmp}", "--out", "{tmp}/afile/sub"], "afile is a file"),
    ("analyze nothing", ["analyze", "{tmp}/nocheckpoint"], "nocheckpoint"),
    ("explorer on nothing", ["app", "{tmp}/noruns", "--headless"], "noruns"),
    ("explorer port", ["app", "{tmp}", "--port", "0"], "--port=0"),
    ("explorer empty host", ["app", "{tmp}", "--host", ""], "--host"),
    ("freeze mix on softmax attention", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "mix"],
     "'mix' does not apply"),
    ("freeze qk on mixit", ["train", "--task", "addition", "--variant", "mixit", "--out", "{tmp}/r", "--freeze", "qk"],
     "'qk' does not apply"),
    ("freeze what the variant freezes", ["train", "--task", "addition", "--variant", "frozen_qk", "--out", "{tmp}/r",
                                         "--model-option", "freeze=qk"], "'qk' does not apply"),
    ("freeze everything", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "embed,qk,v,o,mlp",
                           "--freeze", "norms,unembed"], "nothing left to train"),
    ("freeze a layer with no number", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "v@"], "'v@'"),
    ("freeze a head out of range", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "v@0.h9"],
     "head 'h9' is not one of h0..h"),
    ("freeze a head of the MLP", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "mlp@0.h1"],
     "'mlp@0.h1'"),
    ("freeze a head without a layer", ["train", "--task", "addition", "--out", "{tmp}/r", "--freeze", "o.h1"],
     "'o.h1': a head needs a layer"),
    ("more processes than cores or GPUs", ["train", "--task", "addition", "--out", "{tmp}/r", "--nproc", "4096",
                                          "--batch-size", "4096", *SMALL], "--nproc=4096"),
    # The one eval-size rule (mixit_lab.training.resolve.check_eval_size): 1..65,536, or a larger fixed held-out set's
    # size; the same refusal from mixit train, a sweep and a preset
    ("eval samples above the cap", ["train", "--task", "retrieval", "--out", "{tmp}/r", "--eval-samples", "100000"],
     "eval_samples=100000 is too many: a run evaluates on at most 65536 held-out rows (every evaluation scores them "
     "all); allowed: 1..65536"),
    ("eval samples above the cap, a small held-out set", ["train", "--task", "modadd", "--out", "{tmp}/r",
                                                         "--eval-samples", "65537"],
     "eval_samples=65537 is too many: a run evaluates on at most 65536 held-out rows"),
    ("eval samples above a larger held-out set", ["train", "--task", "memorize", "--out", "{tmp}/r", "--eval-samples",
                                                  "262145"],
     "eval_samples=262145 is too many: task 'memorize' holds out 262144 rows; allowed: 1..262144"),
    ("eval samples of 0", ["train", "--task", "modadd", "--out", "{tmp}/r", "--eval-samples", "0"],
     "eval_samples=0 must be a positive integer"),
    ("a sweep's eval samples above the cap", ["sweep", "--tasks", "addition", "--eval-samples", "70000", "--dry-run"],
     "eval_samples=70000 is too many"),
    ("a preset's eval samples above the cap", ["reproduce", "--preset", "{tmp}/bigeval.yaml", "--dry-run"],
     "eval_samples=70000 is too many"),
    ("a sweep of no variants", ["sweep", "{tmp}/novariants.yaml", "--dry-run"], "variants=[]"),
    ("a sweep of no tasks", ["sweep", "{tmp}/notasks.yaml", "--out", "{tmp}/r", *SMALL[:-1]], "tasks=[]"),
    ("a sweep of no seeds", ["sweep", "{tmp}/noseeds.yaml", "--out", "{tmp}/r", *SMALL[:-1]], "seeds=[]"),
    ("attention twice", ["train", "--task", "addition", "--out", "{tmp}/r", "--attention", "mixing", "--attention",
                         "softmax"], "--attention given 2 times"),
    # Values argparse accepts and a library below the CLI refuses with a ValueError, before any work starts
    # (mixit_lab.cli.common.input_errors): exit 2 and one line, not exit 1.
    ("batch size TrainConfig refuses", ["train", "--task", "addition", "--out", "{tmp}/r", "--batch-size", "0"],
     "mixit train: error: batch_size=0"),
    ("task parameter get_task refuses", ["train", "--task", "addition", "--out", "{tmp}/r", "--digits", "0"],
     "mixit train: error: addition: digits=0"),
    ("model shape ModelConfig refuses", ["train", "--task", "addition", "--out", "{tmp}/r", "--n-heads", "3"],
     "mixit train: error: d_model=128 must be divisible by n_heads=3"),
    ("a sweep's task parameter get_task refuses", ["sweep", "--tasks", "addition", "--digits", "0", "--dry-run",
                                                  "--out", "{tmp}/s"], "mixit sweep: error: addition: digits=0"),
    ("a sweep's device", ["sweep", "--tasks", "addition", "--device", "bogus", "--out", "{tmp}/s", *SMALL[:-1]],
     "device='bogus'"),
    ("a preset key", ["reproduce", "--preset", "{tmp}/badkey.yaml", "--dry-run"], "unknown keys ['bogus']"),
    ("a preset study's train key", ["reproduce", "--preset", "{tmp}/badtrain.yaml", "--dry-run"], "'bogus'"),
    ("analyze on a misspelled device", ["analyze", "{tmp}/ckpt", "--device", "bogus"], "--device='bogus'"),
    # Model options that would change nothing are refused, not recorded (mixit_lab.models.config.FIELD_USE)
    ("residual scale on standard", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option",
                                    "residual_scale=0.5"], "residual_scale=0.5 has no effect on variant standard"),
    ("tau0 on standard", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option", "tau0=3"],
     "tau0=3 has no effect"),
    ("sink head on standard", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option", "sink_head=false"],
     "sink_head=False has no effect on variant standard; it applies to variant mixit"),
    ("qk init std on mixit", ["train", "--task", "addition", "--variant", "mixit", "--out", "{tmp}/r",
                              "--model-option", "qk_init_std=0.1"], "qk_init_std=0.1 has no effect on variant mixit"),
    ("a model option twice", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option", "init_std=0.1",
                              "--model-option", "init_std=0.2"],
     "mixit train: error: --model-option 'init_std=0.2': init_std is already set"),
    ("extra that is not a mapping", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option", "extra=5"],
     "extra=5 must be a mapping"),
    ("an infinite init std", ["train", "--task", "addition", "--out", "{tmp}/r", "--model-option", "init_std=1e400"],
     "init_std=inf must be a finite number"),
    ("a sweep file's unknown model_extra key", ["sweep", "{tmp}/badextra.yaml", "--dry-run"],
     "badextra.yaml: model_extra has unknown keys ['qk_std']; allowed: "),
    ("a preset's unknown model_extra key", ["reproduce", "--preset", "{tmp}/badextra_study.yaml", "--dry-run"],
     "badextra_study.yaml: study 'a': train: model_extra has unknown keys ['qk_std']"),
    ("a sweep's model_extra no model uses", ["sweep", "{tmp}/unused.yaml", "--dry-run"],
     "model_extra residual_scale=0.5 has no effect on any model of this grid"),
    ("a sweep's duplicate runs", ["sweep", "{tmp}/dup.yaml", "--dry-run"],
     "grid has duplicate runs: addition__standard+freeze-v__"),
    # A run.json cut short is named with what to do, never a traceback (was: a 21-line JSONDecodeError traceback)
    ("a damaged run.json, train --resume", ["train", "--task", "addition", "--out", "{tmp}/damaged/run", "--resume",
                                           *SMALL], "{tmp}/damaged/run/run.json: cannot read run description"),
    ("a damaged run.json in a sweep", ["sweep", "--tasks", "addition", "--out", "{tmp}/damaged", *SMALL[:-1]],
     "run.json: cannot read run description (JSONDecodeError"),
    # A sweep's --out is checked before anything runs, --dry-run too (as mixit reproduce's output folders)
    ("a sweep into a file, dry run", ["sweep", "--tasks", "addition", "--out", "{tmp}/afile", "--dry-run"],
     "--out {tmp}/afile is not a directory"),
    ("a sweep into a file", ["sweep", "--tasks", "addition", "--out", "{tmp}/afile", *SMALL[:-1]],
     "--out {tmp}/afile is not a directory"),
    ("a sweep below a file", ["sweep", "--tasks", "addition", "--out", "{tmp}/afile/sub", "--dry-run"],
     "--out {tmp}/afile/sub is not a directory (its parent {tmp}/afile is a file)"),
    ("epoch sampling of an endless task", ["train", "--task", "addition", "--sampling", "epochs", "--out", "{tmp}/r",
                                           *SMALL], "sampling='epochs' needs a task whose training set is finite"),
    ("an unknown sampling", ["train", "--task", "memorize", "--sampling", "shuffled", "--out", "{tmp}/r", *SMALL],
     "--sampling: invalid choice: 'shuffled'"),
    ("an unknown precision", ["train", "--task", "addition", "--precision", "bogus", "--out", "{tmp}/r", *SMALL],
     "--precision: invalid choice: 'bogus'"),
    ("a tune's batch size TrainConfig refuses", ["tune", "--task", "addition", "--lrs", "1e-3", "1e-2", "--out",
                                                "{tmp}/t", "--batch-size", "0"], "mixit tune: error: batch_size=0"),
    # Several runs per GPU (--runs-per-gpu): a count below 1, both it and --gpus-per-run, runs that train on the CPU
    ("a sweep's runs per GPU of 0", ["sweep", "--tasks", "addition", "--runs-per-gpu", "0", "--dry-run", "--out",
                                     "{tmp}/s"], "--runs-per-gpu: '0' is not allowed: give a whole number >= 1"),
    ("a reproduction's runs per GPU of 0", ["reproduce", "--preset", "smoke", "--runs-per-gpu", "0", "--dry-run",
                                            "--out", "{tmp}/runs"], "--runs-per-gpu: '0' is not allowed"),
    ("runs per GPU and GPUs per run", ["sweep", "--tasks", "addition", "--runs-per-gpu", "2", "--gpus-per-run", "0.5",
                                       "--executor", "ray", "--out", "{tmp}/s", *SMALL[:-1]],
     "--runs-per-gpu=2 and --gpus-per-run=0.5 both set a run's share of a GPU; give one"),
    # Runs stacked in a process (--stack): a count below 1, for a sweep and for mixit tune
    ("a sweep's stack of 0", ["sweep", "--tasks", "addition", "--stack", "0", "--dry-run", "--out", "{tmp}/s"],
     "--stack: '0' is not allowed: give a whole number >= 1"),
    ("a tuning's stack of 'four'", ["tune", "--task", "addition", "--lrs", "1e-3", "3e-3", "--stack", "four",
                                    "--out", "{tmp}/t"], "--stack: 'four' is not allowed"),
    ("runs per GPU for runs on the CPU", ["sweep", "--tasks", "addition", "--device", "cpu", "--runs-per-gpu", "2",
                                          "--out", "{tmp}/s", *SMALL[:-1]],
     "--runs-per-gpu=2: the runs train on the CPU (device 'cpu')"),
    ("a model larger than the machine", ["train", "--task", "addition", "--d-model", "1048576", "--n-heads", "4",
                                         "--steps", "1", "--out", "{tmp}/r"],
     "a model of d_model=1048576, n_layers=2, d_vocab="),
]
if Path("/proc/self").is_dir():
    CASES.append(("a run into /proc", ["train", "--task", "addition", "--out", "/proc/mixit-run", *SMALL],
                  "--out /proc/mixit-run cannot be written"))
    CASES.append(("a sweep into /proc", ["sweep", "--tasks", "addition", "--out", "/proc/mixit-sweep", "--dry-run"],
                  "--out /proc/mixit-sweep cannot be written"))
if not torch.cuda.is_available():
    CASES.append(("a GPU that is not there", ["train", "--task", "addition", "--out", "{tmp}/r", "--device", "cuda"],
                  "cuda"))
    CASES.append(("analyze on a GPU that is not there", ["analyze", "{tmp}/ckpt", "--device", "cuda"], "cuda"))
    CASES.append(("a GPU that is not there, on 2 processes", ["train", "--task", "addition", "--out", "{tmp}/r",
                                                             "--device", "cuda", "--nproc", "2", *SMALL], "cuda"))


@pytest.mark.parametrize("mixit", RUNNERS, indirect=True)
@pytest.mark.parametrize("argv, named", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_exit_2_and_one_line_naming_the_value(tmp_path, generated_corpora, mixit, argv, named):
    (tmp_path / "afile").write_text("not a directory")
    (tmp_path / "badgrid.yaml").write_text("variants: [standard]\ntasks: [addition]\nlrs: [fast]\n")
    (tmp_path / "broken.yaml").write_text("studies: [unclosed\n")
    (tmp_path / "novariants.yaml").write_text("variants: []\ntasks: [addition]\n")
    (tmp_path / "notasks.yaml").write_text("variants: [standard]\ntasks: []\n")
    (tmp_path / "noseeds.yaml").write_text("tasks: [addition]\nseeds: []\n")
    (tmp_path / "badkey.yaml").write_text("bogus: 1\nstudies:\n  a: {tasks: [addition]}\n")
    (tmp_path / "badtrain.yaml").write_text("studies:\n  a: {tasks: [addition], train: {bogus: 1}}\n")
    (tmp_path / "bigeval.yaml").write_text("train: {eval_samples: 70000}\nstudies:\n  a: {tasks: [addition]}\n")
    (tmp_path / "badextra.yaml").write_text("tasks: [addition]\ntrain: {model_extra: {qk_std: 0.1}}\n")
    (tmp_path / "badextra_study.yaml").write_text("studies:\n  a: {tasks: [addition], train: {model_extra: {qk_std: 0.1}}}\n")
    (tmp_path / "unused.yaml").write_text("variants: [standard]\ntasks: [addition]\n"
                                          "train: {model_extra: {residual_scale: 0.5}}\n")
    (tmp_path / "dup.yaml").write_text("variants: [{standard: {freeze: 'v,v'}}, {standard: {freeze: v}}]\n"
                                       "tasks: [addition]\n")
    if "{tmp}/ckpt" in argv:  # a bare checkpoint to analyse
        from mixit_lab.models import ModelConfig, build_model

        tiny = ModelConfig(d_model=16, n_layers=1, n_heads=2, d_vocab=8, n_ctx=8)
        build_model(tiny).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "lm.txt").write_text(generated_corpora["lm"].read_text())
    (tmp_path / "sentiment.txt").write_text(generated_corpora["sentiment"].read_text())
    if "{tmp}/damaged" in " ".join(argv):  # a run cut short: its run.json half written, as a killed copy leaves it
        from mixit_lab.training.sweep import run_name
        from mixit_lab.training.config import TrainConfig

        cfg = TrainConfig(task="addition", d_model=16, n_layers=1, n_heads=2, steps=2)
        for run in (tmp_path / "damaged" / "run", tmp_path / "damaged" / run_name(cfg)):
            run.mkdir(parents=True)
            (run / "run.json").write_text('{"train": {"task": "addi')
    if named == "steps":  # the runs folder holds a run of the preset trained with other settings
        _stale_run(tmp_path)
    done = mixit([a.replace("{tmp}", str(tmp_path)) for a in argv], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_USAGE, done.stderr[-1500:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert named.replace("{tmp}", str(tmp_path)) in lines[0], lines[0]
    assert not (tmp_path / "r").exists(), "a refused start must not leave a run directory"


@pytest.mark.parametrize("argv", [["--freeze", "v", "--freeze", "o"], ["--model-option", "freeze=v", "--freeze", "o"],
                                  ["--freeze", "v,o", "--freeze", "v"]],
                         ids=["--freeze twice", "model option and --freeze", "a repeat"])
@pytest.mark.parametrize("mixit", RUNNERS, indirect=True)
def test_freeze_options_add_up(tmp_path, mixit, argv):
    """Every --freeze and a --model-option freeze=... together: none is dropped, each entry once."""
    done = mixit(["train", "--task", "addition", "--out", str(tmp_path / "r"), *argv, *SMALL], tmp_path)
    assert done.returncode == 0, done.stderr[-1500:]
    config = json.loads((tmp_path / "r" / "run.json").read_text())["model"]
    assert config["freeze"] == ["v", "o"]


@pytest.mark.parametrize("mixit", RUNNERS, indirect=True)
def test_the_explorer_on_a_port_in_use_is_one_line_naming_it(tmp_path, mixit, monkeypatch):
    from mixit_lab.cli import app

    monkeypatch.setattr(app.os, "execv", lambda *a: pytest.fail("must not start Streamlit"))  # in this process
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = mixit(["app", str(tmp_path), "--port", str(port), "--headless"], tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == EXIT_USAGE and len(lines) == 1, done.stderr[-1500:]
    assert f"--port={port} is already in use" in lines[0]


def test_a_value_error_after_work_starts_is_a_bug_not_bad_input(tmp_path, monkeypatch):
    """mixit_lab.cli.common's boundary, the other side: a ValueError raised once training has started is not turned into exit 2
    or a one-line message; it propagates, so `python -m cli` prints its traceback and exits 1."""
    import mixit_lab.cli.main
    import mixit_lab.cli.train
    def broken(*args, **kwargs):
        raise ValueError("a bug in the trainer")

    monkeypatch.setattr(mixit_lab.cli.train, "train", broken)
    with pytest.raises(ValueError, match="a bug in the trainer"):
        mixit_lab.cli.main.main(["train", "--task", "addition", "--out", str(tmp_path / "r"), *SMALL])


def test_input_errors_makes_one_line_naming_the_command():
    """A multi-line ValueError raised while validating becomes one CLIError line; other exceptions pass through."""
    from mixit_lab.cli.common import CLIError, input_errors

    with pytest.raises(CLIError, match=r"^mixit sweep: error: first second$"):
        with input_errors("sweep"):
            raise ValueError("first\nsecond")
    with pytest.raises(RuntimeError):
        with input_errors("sweep"):
            raise RuntimeError("not the user's")
