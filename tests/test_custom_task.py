"""A researcher's own task, end to end: examples/my_task.py trained by the real `mixit train --task
module:Class`, analysed by `mixit analyze` in a new process, opened in the explorer, loaded with `load_run`;
and the task vocabulary every checkpoint now carries (to_str_tokens, TransformerLens's test_prompt)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from mixit_lab.training import TASKS, TrainConfig, load_run, train
from mixit_lab.training.tasks import TaskNotTrusted, trust_task_code
from mixit_lab.training.tasks.registry import TRUST_ENV

TASK = "examples.my_task:ReverseTask"
SMALL = ["--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--batch-size", "32", "--eval-every", "20",
         "--eval-samples", "64", "--device", "cpu", "--quiet"]


def _mixit(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The installed `mixit` command (whose sys.path does not hold the current directory), else `python -m mixit_lab.cli`."""
    script = shutil.which("mixit", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "mixit_lab.cli"]
    return subprocess.run([*command, *argv], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture
def registry():
    """TASKS as it was before the test (an in-process `mixit train --task module:Class` registers the class)."""
    saved = dict(TASKS)
    yield
    TASKS.clear()
    TASKS.update(saved)


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory) -> Path:
    """examples/my_task.py trained through the real command, from the repository root, then analysed by a
    second `mixit` process (which has never seen the task registered)."""
    run = tmp_path_factory.mktemp("custom") / "runs" / "custom" / "reverse"
    done = _mixit(["train", "--task", TASK, "--length", "3", "--digits", "4", "--steps", "40", *SMALL,
                   "--out", str(run)], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    done = _mixit(["analyze", str(run), "--n-seqs", "8", "--eval-samples", "32", "--trust-tasks"], cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return run


@pytest.mark.slow
def test_cli_trains_a_task_of_ones_own_and_a_new_process_analyses_it(reverse_run):
    info = json.loads((reverse_run / "run.json").read_text())
    fingerprint = info["task"].pop("eval_fingerprint")  # of the held-out rows (checked when the task is rebuilt)
    source, sha = info["task"].pop("source_file"), info["task"].pop("source_sha256")  # the file, relative to the run
    assert (reverse_run / source).resolve() == (ROOT / "examples" / "my_task.py").resolve() and len(sha) == 64
    assert info["task"] == {"name": "reverse", "import_path": TASK, "length": 3, "digits": 4}  # resolved parameters
    assert isinstance(fingerprint, str) and len(fingerprint) == 24
    assert info["train"]["task"] == "reverse" and info["train"]["task_params"] == {"length": 3, "digits": 4}
    analysis = json.loads((reverse_run / "analysis" / "analysis.json").read_text())
    assert {"heads", "ablation", "components", "patching"} <= set(analysis["computed"]), analysis["skipped"]
    assert set(analysis["skipped"]) == {"memory", "task_induction"}  # the memorize and k-hop analyses only
    for table in ("heads", "ablation", "components", "patching"):
        assert (reverse_run / "analysis" / f"{table}.csv").is_file()
    assert analysis["summary"]["patching"]["clean_logit_diff"] is not None  # ReverseTask.patching_pairs


@pytest.mark.slow
def test_analyze_says_in_one_line_which_module_a_run_needs(reverse_run, tmp_path):
    elsewhere = tmp_path / "elsewhere"  # examples.my_task does not import from here
    elsewhere.mkdir()
    done = _mixit(["analyze", str(reverse_run), "--out", str(tmp_path / "out"), "--n-seqs", "4", "--trust-tasks"],
                  cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if "cannot rebuild task" in line]
    assert len(warning) == 1 and "'examples.my_task'" in warning[0] and str(reverse_run) in warning[0]
    skipped = json.loads((tmp_path / "out" / "reverse" / "analysis.json").read_text())["skipped"]
    assert "ModuleNotFoundError" in skipped["ablation"]


@pytest.mark.slow
def test_load_run_gives_the_model_with_the_tasks_vocabulary(reverse_run, monkeypatch):
    with pytest.raises(TaskNotTrusted, match="--trust-tasks, or mixit_lab.training.tasks.trust_task_code"):
        load_run(reverse_run)
    monkeypatch.setenv(TRUST_ENV, TASK)  # consent to this import path alone
    run = load_run(reverse_run)
    assert type(run.task).__name__ == "ReverseTask" and run.task.params == {"length": 3, "digits": 4}
    assert run.train_config.task == "reverse" and run.model_config == run.model.config
    assert run.summary["status"] == "finished" and run.metrics[-1]["step"] == 40 and run.path == reverse_run
    tokens, _ = run.task.eval_set(1)
    assert run.model.to_str_tokens(tokens[0]) == [run.task.vocab[i] for i in tokens[0].tolist()]
    assert run.model.to_tokens("1 2 3 >").tolist() == [[1, 2, 3, 10]]  # no BOS: the task has none


@pytest.mark.slow
def test_the_explorer_opens_a_run_of_ones_own_task(reverse_run, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(reverse_run.parent.parent)])
    monkeypatch.setenv(TRUST_ENV, "1")  # as `mixit app --trust-tasks` sets it
    for view, state in [("Runs", {}), ("Run", {}), ("Attention", {}), ("Heads", {"heads_runs": ["custom/reverse"]}),
                        ("Predict", {})]:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.session_state["view"] = view
        at.session_state["selected"] = ["custom/reverse"]
        for key, value in state.items():
            at.session_state[key] = value
        at.run()
        assert not at.exception, (view, [e.value for e in at.exception])
        assert not at.error, (view, [e.value for e in at.error])
        if view == "Attention":
            assert at.radio(key="attn_source").value == "Eval sample"  # its task was rebuilt from run.json
        if view == "Heads":  # its stored patching (ReverseTask.patching_pairs), drawn as for retrieval
            assert any("Activation patching" in h.value for h in at.subheader), [h.value for h in at.subheader]
        if view == "Predict":
            tokens = next(f.value for f in at.dataframe if "token" in f.value.columns)["token"]
            assert set(tokens) <= {*map(str, range(10)), ">", "<pad>"}


def test_bad_task_import_paths_are_one_line_exit_2(registry, tmp_path, capsys):
    from mixit_lab.cli.main import main

    for spec, message in [("no_such_module:Task", "cannot import task module 'no_such_module'"),
                          ("examples.my_task:Nope", "module 'examples.my_task' has no 'Nope'"),
                          ("examples.my_task:torch", "names a module, not a subclass of mixit_lab.training.tasks.Task")]:
        assert main(["train", "--task", spec, "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("mixit train: error: --task: ") and message in err and err.count("\n") == 1, err
    exits = tmp_path / "exits.py"  # a module that ends the process when imported: one line, exit 2, not 0
    exits.write_text("import sys\nsys.exit(0)\n")
    assert main(["train", "--task", f"{exits}:Task", "--out", str(tmp_path / "run")]) == 2
    assert "(SystemExit: 0)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_task_registered_in_python_trains_and_loads_back(registry, tmp_path, monkeypatch):
    from examples.my_task import ReverseTask
    from mixit_lab.training import register_task

    register_task(ReverseTask)
    cfg = TrainConfig(task="reverse", task_params={"length": 3}, d_model=16, n_layers=1, n_heads=2, steps=4,
                      batch_size=16, eval_every=4, eval_samples=16, device="cpu")
    summary = train(cfg, tmp_path / "reverse", progress=False)
    TASKS.pop("reverse")  # as in a new process: run.json's import path finds the class, with consent
    monkeypatch.setenv(TRUST_ENV, "")
    trust_task_code(TASK)
    run = load_run(summary["run_dir"])
    assert isinstance(run.task, ReverseTask) and run.task.params == {"length": 3, "digits": 10}
    assert run.summary["step"] == 4 and "run_dir" not in run.summary  # summary.json itself holds no path


def test_test_prompt_and_to_str_tokens_work_on_an_algorithmic_run(tmp_path, capsys):
    from mixit_lab.models import load_model
    from transformer_lens.utilities import test_prompt

    cfg = TrainConfig(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, steps=4,
                      batch_size=16, eval_every=4, eval_samples=16, device="cpu")
    run_dir = Path(train(cfg, tmp_path / "add", progress=False)["run_dir"])
    assert (run_dir / "checkpoint" / "tokenizer.json").is_file()
    model = load_model(run_dir)
    tokens, _ = load_run(run_dir).task.eval_set(1)
    assert model.to_str_tokens(tokens[0])[:3] == [model.to_string(t) for t in tokens[0, :3]]
    assert model.to_string(tokens[0]).split()[2] == "+"
    capsys.readouterr()
    test_prompt("1 2 + 3 4 =", "s4 s6 s0 <stop>", model, top_k=2)
    out = capsys.readouterr().out
    assert "Tokenized prompt: ['1', '2', '+', '3', '4', '=']" in out and "Tokenized answer: ['s4', 's6', 's0', '<stop>']" in out

    (run_dir / "checkpoint" / "tokenizer.json").unlink()  # a checkpoint from before checkpoints carried one
    assert load_model(run_dir).tokenizer is None
    old = load_run(run_dir)
    assert old.model.to_str_tokens(torch.tensor([1, 10, 11])) == ["1", "+", "="]


@pytest.mark.slow
def test_opening_a_runs_folder_imports_no_task_code_without_consent(tmp_path, monkeypatch):
    """A runs folder whose task module writes a marker when imported: analyze, figures and every explorer page leave
    the marker alone (task-specific parts skipped, saying how to consent); --trust-tasks imports it."""
    folder = tmp_path / "given"
    folder.mkdir()
    source = (ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "marker_reverse"')
    module = folder / "marker_task.py"
    source = source.replace("from __future__ import annotations\n", "")  # the marker line comes first
    module.write_text("from pathlib import Path\nPath(__file__).with_name('imported.marker').touch()\n" + source)
    marker, run = folder / "imported.marker", folder / "runs" / "m"
    done = _mixit(["train", "--task", f"{module}:ReverseTask", "--length", "3", "--digits", "4", "--steps", "10",
                   *SMALL, "--out", str(run)], cwd=folder)
    assert done.returncode == 0 and marker.is_file(), done.stderr  # training it is running it: the user asked
    marker.unlink()
    done = _mixit(["analyze", str(run), "--n-seqs", "4"], cwd=folder)
    assert done.returncode == 0 and not marker.exists(), done.stderr
    skipped = json.loads((run / "analysis" / "analysis.json").read_text())["skipped"]
    assert "--trust-tasks" in skipped["ablation"]
    done = _mixit(["figures", str(run.parent), "--out", str(tmp_path / "figures")], cwd=folder)
    assert "Traceback" not in done.stderr and not marker.exists(), done.stderr
    monkeypatch.delenv(TRUST_ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(run.parent)])
    for view in ("Runs", "Run", "Attention", "Heads", "Predict"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.session_state["view"] = view
        at.session_state["selected"] = ["m"]
        at.session_state["heads_runs"] = ["m"]
        at.run()
        assert not at.exception and not marker.exists(), (view, [e.value for e in at.exception])
    done = _mixit(["analyze", str(run), "--n-seqs", "4", "--force", "--trust-tasks"], cwd=folder)
    assert done.returncode == 0 and marker.is_file(), done.stderr


def test_a_task_whose_rule_changed_after_training_is_refused_by_analyze_and_resume(tmp_path):
    """The task file edited after training (the answer no longer reversed): rebuilding the task names the change in
    one line; `mixit analyze` warns and skips the task's analyses, `mixit train --resume` refuses (exit 2)."""
    module = tmp_path / "edited_task.py"
    source = (ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "edited_reverse"')
    module.write_text(source)
    run, task = tmp_path / "runs" / "e", f"{module}:ReverseTask"
    train_argv = ["train", "--task", task, "--length", "3", "--digits", "4", "--steps", "20", *SMALL, "--out", str(run)]
    done = _mixit(train_argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    module.write_text(source.replace("x.flip(1)", "x"))  # the rule changed: copy instead of reverse
    done = _mixit(["analyze", str(run), "--n-seqs", "4", "--trust-tasks"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "gives other held-out rows than the run was evaluated on" in done.stderr and "Traceback" not in done.stderr
    skipped = json.loads((run / "analysis" / "analysis.json").read_text())["skipped"]
    assert "rule, generator or data changed" in skipped["ablation"]
    said = [line for line in done.stdout.splitlines() if line.startswith("  skipped ") and "ablation" in line]
    assert len(said) == 1 and "rule, generator or data changed" in said[0], done.stdout  # said, not only in the file
    (run / "summary.json").unlink()  # as if killed after its last checkpoint: a resume would train on
    done = _mixit([*train_argv, "--resume"], cwd=tmp_path)
    assert done.returncode == 2 and "held-out rows" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    module.write_text(source)  # restored: the run resumes
    done = _mixit([*train_argv, "--resume"], cwd=tmp_path)
    assert done.returncode == 0 and (run / "summary.json").is_file(), done.stderr


def test_a_built_in_tasks_changed_parameters_are_noticed_when_rebuilt(tmp_path):
    from mixit_lab.training import run_task
    from mixit_lab.training.runinfo import TaskChanged

    run = tmp_path / "r"
    train(TrainConfig(task="retrieval", task_params={"pairs": 4, "num_values": 8}, d_model=16, n_layers=1, n_heads=2,
                      steps=2, eval_every=2, eval_samples=32, batch_size=8, device="cpu"), run, progress=False)
    assert run_task(run).name == "retrieval"  # unchanged: rebuilt and checked
    info = json.loads((run / "run.json").read_text())
    info["train"]["task_params"]["num_values"] = 9  # a hand edit, or another default in a later version
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(TaskChanged, match="other held-out rows"):
        run_task(run)
    assert run_task(run, check=False).name == "retrieval"


@pytest.mark.slow
def test_the_explorer_shows_runs_whose_task_broke_as_one_line_and_keeps_working(tmp_path, monkeypatch):
    """Beside a good run, copies whose task file was deleted, whose rule or seq_len changed, or whose `_sample` now
    raises: with consent to import them, every page opens for every run selected, the broken ones named in a line."""
    folder = tmp_path / "given"
    folder.mkdir()
    source = (ROOT / "examples" / "my_task.py").read_text()
    (folder / "good.py").write_text(source.replace('name = "reverse"', 'name = "rev_good"'))
    runs = folder / "runs"
    done = _mixit(["train", "--task", f"{folder / 'good.py'}:ReverseTask", "--length", "3", "--digits", "4", "--steps",
                   "10", *SMALL, "--out", str(runs / "good")], cwd=folder)
    assert done.returncode == 0, done.stderr
    broken = {"deleted": None, "changed": source.replace("x.flip(1)", "x"),
              "raises": source.replace("x = torch.randint", "raise RuntimeError('boom')\n        x = torch.randint"),
              "longer": source.replace("self.seq_len = 2 * length + 1", "self.seq_len = 2 * length + 3")}
    for name, text in broken.items():
        shutil.copytree(runs / "good", runs / name)
        record = runs / name / "run.json"
        record.write_text(record.read_text().replace("good.py", f"{name}.py"))
        if text is not None:
            (folder / f"{name}.py").write_text(text.replace('name = "reverse"', f'name = "rev_{name}"'))
    monkeypatch.setenv(TRUST_ENV, "1")
    monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(runs)])
    for view in ("Run", "Attention", "Heads", "Predict"):
        for run in ["good", *broken]:
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
            at.session_state["view"] = view
            at.session_state["selected"] = [run]
            at.session_state["heads_runs"] = ["good", *broken]
            at.run()
            assert not at.exception, (view, run, [e.value for e in at.exception])
            if view == "Attention" and run == "raises":
                assert any("RuntimeError when built: boom" in w.value for w in at.warning), at.warning


@pytest.mark.parametrize("bad, expected", [
    ("tokens[5:, 0] = 99", "_sample gave token id 99, outside 0..11"),  # past the first rows get_task draws
    ("tokens[3, 0] = -1", "_sample gave token id -1, outside 0..11"),
    ("mask[4:] = False", "every row's mask needs an answer position"),
    ("return tokens.tolist(), mask.tolist()", "_sample gave tuple of ['list', 'list']; expected a tuple (tokens, mask)"),
])
def test_every_batch_a_task_draws_is_checked_in_one_line_naming_it(tmp_path, bad, expected):
    source = (ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "badrows"')
    source = source.replace("        return tokens, mask\n", f"        if n > 2:\n            {bad}\n        return tokens, mask\n", 1)
    (tmp_path / "bad_rows.py").write_text(source)
    done = _mixit(["train", "--task", f"{tmp_path / 'bad_rows.py'}:ReverseTask", "--length", "3", "--steps", "5", *SMALL,
                   "--out", str(tmp_path / "run")], cwd=tmp_path)
    assert done.returncode == 2 and f"badrows: {expected}" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "run" / "checkpoint").exists(), done.stderr


def test_a_task_whose_code_raises_is_one_line_naming_it(tmp_path):
    source = (ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "raiser"')
    source = source.replace("x = torch.randint", "raise KeyError('no digits here')\n        x = torch.randint", 1)
    (tmp_path / "raiser.py").write_text(source)
    done = _mixit(["train", "--task", f"{tmp_path / 'raiser.py'}:ReverseTask", "--steps", "5", *SMALL,
                   "--out", str(tmp_path / "run")], cwd=tmp_path)
    assert done.returncode == 2 and "raiser: KeyError when built: 'no digits here'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_runs_folder_moved_with_its_task_file_still_rebuilds_the_task(tmp_path, monkeypatch):
    """run.json records the task file relative to the run: the folder moved elsewhere (its absolute import path
    gone) still names and rebuilds its task; a file edited since, its rows unchanged, is rebuilt with a warning."""
    from mixit_lab.training import run_task

    home = tmp_path / "home"
    home.mkdir()
    source = (ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "moved_reverse"')
    (home / "moving_task.py").write_text(source)
    done = _mixit(["train", "--task", f"{home / 'moving_task.py'}:ReverseTask", "--length", "3", "--steps", "5",
                   *SMALL, "--out", str(home / "runs" / "m")], cwd=home)
    assert done.returncode == 0, done.stderr
    moved = tmp_path / "elsewhere"
    home.rename(moved)  # the recorded absolute path no longer exists
    monkeypatch.setenv(TRUST_ENV, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        task = run_task(moved / "runs" / "m")
    assert task.name == "moved_reverse" and task.length == 3
    (moved / "moving_task.py").write_text(source + "\n# a comment added later\n")
    with pytest.warns(UserWarning, match="moving_task.py changed since the run trained"):
        run_task(moved / "runs" / "m")


@pytest.mark.slow
def test_a_sweep_takes_ones_own_task_by_import_path_and_names_and_records_it_as_train_does(tmp_path):
    """`mixit sweep --tasks path/to/file.py:Class` on two worker processes (which have never seen the class), and a
    grid file naming it: run folders named by the task's name, run.json's task section as `mixit train` writes it."""
    task_file = tmp_path / "my_task.py"  # a task of one's own, under a name of its own
    task_file.write_text((ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "reverse-s"'))
    small = [*SMALL[:-1], "--steps", "10", "--eval-every", "10"]  # a sweep has no --quiet
    done = _mixit(["sweep", "--tasks", f"{task_file}:ReverseTask", "--length", "3", "--variants", "standard", "mixit",
                   "--workers", "2", *small, "--out", str(tmp_path / "sweep")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = sorted(p.parent for p in (tmp_path / "sweep").glob("*/run.json"))
    assert [r.name.split("__")[:2] for r in runs] == [["reverse-s_length3", "mixit"], ["reverse-s_length3", "standard"]]
    done = _mixit(["train", "--task", f"{task_file}:ReverseTask", "--length", "3", *small, "--quiet",
                   "--out", str(tmp_path / "train")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    by_train = json.loads((tmp_path / "train" / "run.json").read_text())["task"]
    by_sweep = json.loads((runs[1] / "run.json").read_text())["task"]
    assert by_sweep.pop("source_file") == "../../my_task.py" and by_train.pop("source_file") == "../my_task.py"
    assert by_sweep == by_train and by_sweep["import_path"] == f"{task_file}:ReverseTask"

    (tmp_path / "grid.yaml").write_text(f"tasks: [{{my_task.py:ReverseTask: {{length: 2}}}}]\nvariants: [standard]\n")
    done = _mixit(["sweep", str(tmp_path / "grid.yaml"), "--dry-run", "--out", str(tmp_path / "g")], cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("reverse-s_length2__standard__"), done.stderr
    done = _mixit(["sweep", "--tasks", "my_task.py:Nope", "--out", str(tmp_path / "g")], cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "has no 'Nope'" in done.stderr, done.stderr


@pytest.mark.slow
def test_a_presets_own_task_trains_and_is_analysed_on_worker_processes(tmp_path):
    """A preset naming a task file: `mixit reproduce` on 2 workers trains and analyses its runs (the workers import
    the file with the consent the preset gives), and its run folders keep the names the task is written with."""
    (tmp_path / "my_task.py").write_text((ROOT / "examples" / "my_task.py").read_text())
    (tmp_path / "mine.yaml").write_text(
        "train: {steps: 10, batch_size: 16, eval_every: 10, eval_samples: 32}\n"
        "studies:\n  own: {variants: [standard, mixit], tasks: [{my_task.py:ReverseTask: {length: 3}}],"
        " sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]}\n"
        "analysis: {n_seqs: 4, seq_len: 8, eval_samples: 16}\nskip: [signal, speed]\n")
    done = _mixit(["reproduce", "--preset", "mine.yaml", "--workers", "2", "--out", "runs", "--report-dir", "report",
                   "--figures-dir", "figs"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = sorted((tmp_path / "runs" / "own").glob("*/run.json"))
    assert [r.parent.name.split("__")[:2] for r in runs] == [["my_task.py:ReverseTask_length3", "mixit"],
                                                             ["my_task.py:ReverseTask_length3", "standard"]]
    for run in runs:
        analysis = json.loads((run.parent / "analysis" / "analysis.json").read_text())
        assert "heads" in analysis["computed"] and not any("consent" in r for r in analysis["skipped"].values())
