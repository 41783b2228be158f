"""run.json has one parser: mixit_lab.training.rundir.read_run_info, giving a typed RunInfo (mixit_lab.training.runinfo),
and a Run (mixit_lab.training.run) adds the run's summary, metrics and analysis, each read on demand and once."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import ROOT
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.run import Run
from mixit_lab.training.rundir import read_run_info, run_lock
from mixit_lab.training.runinfo import ALLOWED_KEYS, Provenance, RunInfo

PACKAGES = ("models", "training", "analysis", "figures", "reproduce", "cli")
PARSER = ("training/rundir.py", "read_run_info")  # the one function that opens and parses run.json
# Readers not switched yet because another change owns their file: each entry says which call replaces it.
NOT_YET_SWITCHED: set[tuple[str, str]] = set()  # (file, function) of a reader not yet switched: none
READERS = {"read_json", "load", "loads", "open", "read_text", "read_bytes"}


def _mentions_run_json(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and n.id == "RUN_FILE") or (isinstance(n, ast.Attribute) and n.attr == "RUN_FILE")
               or (isinstance(n, ast.Constant) and n.value == "run.json") for n in ast.walk(node))


def _reads_a_file(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            name = n.func.id if isinstance(n.func, ast.Name) else n.func.attr if isinstance(n.func, ast.Attribute) else ""
            if name in READERS:
                return True
    return False


def run_json_readers() -> set[tuple[str, str]]:
    """(file, function) of every function of the packages and app.py that names run.json and reads a file."""
    found = set()
    for path in [*(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")), ROOT / "app.py"]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ROOT).as_posix()
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for fn in functions:
            if _mentions_run_json(fn) and _reads_a_file(fn):
                found.add((rel, fn.name))
        module_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if any(_mentions_run_json(n) for n in module_level) and any(_reads_a_file(n) for n in module_level):
            found.add((rel, "<module>"))
    return found


def test_only_the_parser_opens_or_parses_run_json():
    assert run_json_readers() - NOT_YET_SWITCHED == {PARSER}


def test_the_scan_finds_a_reader_that_parses_run_json_itself(tmp_path, monkeypatch):
    tree = ast.parse("def peek(d):\n    return json.loads((d / RUN_FILE).read_text())\n")
    assert _mentions_run_json(tree) and _reads_a_file(tree)
    assert not _reads_a_file(ast.parse("def is_run(d):\n    return (d / RUN_FILE).is_file()\n"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runinfo") / "add"
    cfg = TrainConfig(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, steps=2,
                      batch_size=8, eval_every=2, eval_samples=16)
    train(cfg, out, progress=False)
    return out


def _write(tmp_path: Path, data) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "run.json").write_text(data if isinstance(data, str) else json.dumps(data))
    return run


def test_a_trained_runs_record_is_typed(run_dir):
    info = read_run_info(run_dir)
    assert isinstance(info, RunInfo) and info.path == run_dir / "run.json" and info.run_dir == run_dir
    assert info.train.steps == 2 and info.model.d_model == 16 and info.model.n_layers == 1
    assert info.task.name == "addition" and info.task.params["digits"] == 2
    assert info.task.import_path.endswith(":Addition") and info.task.data_fingerprint is None
    assert isinstance(info.provenance, Provenance) and info.provenance.command
    assert info.provenance.versions["torch"]
    with pytest.raises(Exception):  # frozen
        info.train = {}  # type: ignore[misc]
    changed = info.train
    changed.steps, changed.task_params["digits"] = 3, 9  # a copy: the record, shared by every reader, stays
    assert read_run_info(run_dir).train.steps == 2 and read_run_info(run_dir).train.task_params == {"digits": 2}
    with pytest.raises(TypeError):  # the file's sections are read-only
        info["train"]["steps"] = 3  # type: ignore[index]
    assert info["train"]["steps"] == 2 and info.to_dict()["task"]["name"] == "addition"  # the file's own form


def test_every_key_the_trainer_writes_is_known(run_dir):
    """run.json's keys are the parser's allowed keys: a key added to the trainer's provenance fails here."""
    written = json.loads((run_dir / "run.json").read_text())
    assert set(written) == set(ALLOWED_KEYS)


@pytest.mark.parametrize("change, expected", [
    ({"trian": {}}, r"unknown keys \['trian'\]"),
    ({"train": {"steps": 3}}, "no 'train' section naming the task"),
    ({"model": {"d_model": 16, "colour": "red"}}, r"model: unknown model config keys \['colour'\]"),
    ({"task": ["addition"]}, "task=.* must be a mapping"),
    ({"git_dirty": "yes"}, "git_dirty='yes' must be a bool"),
])
def test_a_bad_key_or_value_is_one_error_naming_the_file(run_dir, tmp_path, change, expected):
    run = _write(tmp_path, {**json.loads((run_dir / "run.json").read_text()), **change})
    with pytest.raises(ValueError, match=expected) as e:
        read_run_info(run)
    assert str(e.value).startswith(str(run / "run.json")) and "\n" not in str(e.value)


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", b"\xff\xfe{".decode("latin-1"), ""])
def test_a_damaged_run_json_is_a_value_error_naming_it(tmp_path, content):
    run = _write(tmp_path, content)
    with pytest.raises(ValueError, match="cannot read run description|expected a JSON object") as e:
        read_run_info(run)
    assert str(run / "run.json") in str(e.value)


def test_a_missing_run_json_is_a_value_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="run.json: cannot read run description"):
        read_run_info(tmp_path)


def test_a_hand_written_run_json_with_only_the_train_section_reads(tmp_path):
    info = read_run_info(_write(tmp_path, {"train": {"task": "khop", "task_params": {"hops": 2}}}))
    assert info.model is None and info.task.name == "khop" and dict(info.task.params) == {"hops": 2}
    assert info.provenance == Provenance()


def test_the_data_fingerprint_is_checked_in_one_place(tmp_path):
    info = read_run_info(_write(tmp_path, {"train": {"task": "lm"}, "task": {"name": "lm", "data_fingerprint": "abc"}}))

    class Task:
        data_fingerprint = "abc"

    info.check_data(Task())
    Task.data_fingerprint = "xyz"
    with pytest.raises(ValueError, match=r"run.json: the lm data \(corpus or tokenizer\) differ"):
        info.check_data(Task())


def test_a_run_adds_the_summary_and_reads_the_analysis_when_asked(run_dir, tmp_path):
    record = Run(run_dir)
    assert isinstance(record.train_config, TrainConfig) and record.train_config.steps == 2
    assert isinstance(read_run_info(run_dir).train, TrainConfig)  # run.json's train section, typed
    assert record.status == "finished" and record.message is None and record.scores["step"] == 2
    assert record.analysis() is None and record.analysis_summary("memory") is None
    assert [m["step"] for m in record.metrics][-1] == 2
    run = _write(tmp_path, (run_dir / "run.json").read_text())
    assert Run(run).status == "interrupted" and Run(run).scores == {}  # no process writes it
    with run_lock(run):
        assert Run(run).status == "running"
    (run / "summary.json").write_text(json.dumps({"status": "diverged", "message": "non-finite loss at step 1"}))
    record = Run(run)
    assert (record.status, record.message) == ("diverged", "non-finite loss at step 1")
    (run / "analysis").mkdir()
    (run / "analysis" / "analysis.json").write_text(json.dumps({"summary": {"memory": {"bits": 3.0}}}))
    assert record.analysis_summary("memory") == {"bits": 3.0}  # read now, on demand
    (run / "summary.json").write_text("{oops")
    with pytest.raises(ValueError, match="summary.json: cannot read run summary"):
        Run(run).status
    assert record.status == "diverged"  # a Run keeps what it read


def test_a_run_reads_each_file_once(run_dir, tmp_path):
    """A Run's files are read on first use and kept: removed afterwards, they still answer (what lets the report,
    the figures and the explorer share one Run per run and read each file once)."""
    import shutil

    from mixit_lab.analysis.runs import read_analysis_table, read_metrics

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "analysis").mkdir(exist_ok=True)
    (copy / "analysis" / "analysis.json").write_text(json.dumps({"summary": {"memory": {"bits": 3.0}}}))
    (copy / "analysis" / "heads.csv").write_text("layer,head,induction,previous_token\n0,0,0.5,0.1\n")
    run = Run(copy)
    seen = (run.info.train.steps, run.status, len(run.metrics), run.analysis_summary("memory"),
            len(read_analysis_table(run, "heads")), len(read_metrics(run)))
    for name in ("run.json", "summary.json", "metrics.jsonl", "analysis"):
        shutil.rmtree(copy / name) if (copy / name).is_dir() else (copy / name).unlink()
    assert (run.info.train.steps, run.status, len(run.metrics), run.analysis_summary("memory"),
            len(read_analysis_table(run, "heads")), len(read_metrics(run))) == seen
    assert Run(copy) == run and hash(Run(copy)) == hash(run)  # one directory, one Run


def test_a_train_section_trainconfig_refuses_is_named_as_run_json(tmp_path):
    run = _write(tmp_path, {"train": {"task": "addition", "stepz": 3}})
    with pytest.raises(ValueError, match=r"run.json: train: unknown train config keys \['stepz'\]"):
        read_run_info(run)
