"""Damaged files in a run directory are named, never read as valid: a flipped or truncated trainer state, a
half-written run.json, an analysis table with wrong columns, a bad heads.csv, a damaged run in the explorer.

Each test damages a file as a failing disk or a killed copy would, then checks the documented outcome through the
real command where there is one (docs/promises.md, "What we promise")."""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import pytest

from mixit_lab.cli.common import EXIT_OK, EXIT_USAGE
from mixit_lab.cli.main import main
from mixit_lab.training import TrainConfig, train

TINY = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, batch_size=16,
            lr=3e-3, eval_every=10, eval_samples=64, log_every=5)
TRAIN_ARGS = ["--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
              "--batch-size", "16", "--eval-every", "10", "--eval-samples", "64", "--steps", "10", "--quiet"]
ANALYZE_ARGS = ["--n-seqs", "4", "--seq-len", "4"]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cut_in_half(path: Path) -> None:
    """A file as a kill in the middle of writing it in place leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> Path:
    """Two tiny trained and analysed runs in one study folder (copied by each test that damages them)."""
    root = tmp_path_factory.mktemp("analysed") / "runs"
    for seed in (0, 1):
        run = root / "algorithmic" / f"addition-{seed}"
        train(TrainConfig(**TINY, steps=10, seed=seed), run, progress=False)
        assert main(["analyze", str(run), *ANALYZE_ARGS]) == EXIT_OK
    return root


@pytest.fixture
def runs(analysed, tmp_path) -> Path:
    """A copy of the analysed runs folder, free to damage."""
    return Path(shutil.copytree(analysed, tmp_path / "runs"))


# --------------------------------------------------------------------------- the trainer state
@pytest.mark.parametrize("damage", ["flipped bit", "truncated"])
def test_a_damaged_trainer_state_is_refused_in_one_line(tmp_path, capsys, damage):
    """A flipped bit used to resume silently wrong (exit 0, accuracy 0.12 instead of 0.62), a truncated file gave a
    traceback: now the file is named with what to do, exit 2, and nothing is trained from it."""
    run = tmp_path / "run"
    assert main(["train", *TRAIN_ARGS, "--out", str(run)]) == EXIT_OK
    (run / "summary.json").unlink()  # as if killed after its last checkpoint
    capsys.readouterr()
    state = run / "checkpoint" / "trainer_state.safetensors"
    if damage == "flipped bit":
        data = bytearray(state.read_bytes())
        data[-7] ^= 0x01  # inside the last tensor's data: the file still parses
        state.write_bytes(bytes(data))
    else:
        cut_in_half(state)
    metrics = (run / "metrics.jsonl").read_text()
    code, _, err = run_cli(["train", *TRAIN_ARGS, "--out", str(run), "--resume"], capsys)
    assert code == EXIT_USAGE and err.count("\n") == 1, err
    assert "trainer_state.safetensors" in err and "delete the checkpoint folder" in err and "restore" in err
    assert not (run / "summary.json").exists() and (run / "metrics.jsonl").read_text() == metrics  # untouched


def test_an_intact_trainer_state_records_its_sha256(tmp_path):
    import hashlib
    import json

    run = tmp_path / "run"
    train(TrainConfig(**TINY, steps=10), run, progress=False)
    meta = json.loads((run / "checkpoint" / "trainer_state.json").read_text())
    data = (run / "checkpoint" / "trainer_state.safetensors").read_bytes()
    assert meta["state_sha256"] == hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- the report
def test_the_report_lists_a_half_written_run_json_and_a_table_with_wrong_columns(runs, tmp_path):
    """A run.json cut in half used to vanish from the report without a word; a components.csv with wrong columns
    stopped the report with a KeyError. Both are now listed as damaged, naming the file; the report is written."""
    from mixit_lab.analysis.runs import damaged_files, load_runs
    from mixit_lab.reproduce.report import write_report

    study = runs / "algorithmic"
    cut_in_half(study / "addition-0" / "run.json")
    (study / "addition-1" / "analysis" / "components.csv").write_text("x,y\n1,2\n")
    table = load_runs(runs)
    assert dict(zip(table["run"], table["status"]))["algorithmic/addition-0"] == "corrupt"
    damaged = damaged_files(table)
    assert {Path(f).name for f in damaged["file"]} == {"run.json", "components.csv"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_report(runs, tmp_path / "report", {"preset": "smoke"})
    report = (tmp_path / "report" / "report.md").read_text()
    section = report.split("## Damaged runs", 1)[1].split("\n## ", 1)[0]
    assert "algorithmic/addition-0" in section and "run.json" in section
    assert "algorithmic/addition-1" in section and "analysis/components.csv" in section
    assert any("components.csv: damaged analysis table" in str(w.message) for w in caught)  # one line, naming it


# --------------------------------------------------------------------------- mixit analyze
def test_analyze_recomputes_a_bad_heads_csv_instead_of_calling_it_cached(runs, capsys):
    run = runs / "algorithmic" / "addition-1"
    (run / "analysis" / "heads.csv").write_text("not,the,columns\n1,2,3\n")
    with pytest.warns(UserWarning, match=r"heads\.csv: damaged analysis table"):
        code, out, _ = run_cli(["analyze", str(run), *ANALYZE_ARGS], capsys)
    assert code == EXIT_OK and ": computed" in out and "cached" not in out
    from mixit_lab.analysis.runs import analysis_table_problem

    assert analysis_table_problem(run, "heads") is None  # rebuilt


def test_analyze_refuses_a_half_written_run_json_in_one_line(runs, capsys):
    run = runs / "algorithmic" / "addition-0"
    cut_in_half(run / "run.json")
    code, out, err = run_cli(["analyze", str(run), *ANALYZE_ARGS], capsys)
    assert code == EXIT_USAGE and "cached" not in out and err.count("\n") == 1
    assert "run.json" in err and "restore" in err


def test_a_bad_heads_csv_is_named_not_reported_missing(runs):
    from mixit_lab.analysis.runs import read_analysis_table

    (runs / "algorithmic" / "addition-0" / "analysis" / "heads.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.warns(UserWarning, match=r"addition-0/analysis/heads\.csv: damaged analysis table"):
        assert read_analysis_table(runs / "algorithmic" / "addition-0", "heads") is None
    assert read_analysis_table(runs / "algorithmic" / "addition-1", "heads") is not None



def test_analysis_records_are_the_tables_rows_and_a_damaged_table_is_named(runs):
    from mixit_lab.analysis.runs import read_analysis_records, read_analysis_table

    run = runs / "algorithmic" / "addition-1"
    expected = read_analysis_table(run, "components").to_dict("records")
    records = read_analysis_records(run, "components")
    assert len(records) == len(expected) and records[0].keys() == expected[0].keys()
    same = lambda a, b: a == b or (a != a and b != b)  # noqa: E731 (NaN equals NaN here)
    assert all(same(r[k], e[k]) for r, e in zip(records, expected) for k in e)
    (run / "analysis" / "components.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.warns(UserWarning, match=r"addition-1/analysis/components\.csv: damaged analysis table"):
        assert read_analysis_records(run, "components") is None

# --------------------------------------------------------------------------- figures
def test_figures_say_which_damaged_runs_they_leave_out(runs, tmp_path, capsys):
    cut_in_half(runs / "algorithmic" / "addition-0" / "run.json")
    with pytest.warns(UserWarning, match=r"1 damaged run\(s\) left out of the figures: algorithmic/addition-0"):
        code, _, _ = run_cli(["figures", str(runs), "--only", "task_accuracy", "--out", str(tmp_path / "f")], capsys)
    assert code in (0, 1)


# --------------------------------------------------------------------------- the explorer
@pytest.fixture
def app(monkeypatch):
    """The explorer (the checkout's app.py) on a runs folder, at a page, with query parameters set first."""
    from streamlit.testing.v1 import AppTest

    app_file = Path(__file__).resolve().parent.parent / "app.py"

    def run(runs_dir: Path, page: str, **query: str) -> AppTest:
        monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(runs_dir)])
        at = AppTest.from_file(str(app_file), default_timeout=120)
        for key, value in query.items():
            at.query_params[key] = value
        at.switch_page(f"explorer/pages/{page.lower()}.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


def test_the_explorer_shows_a_damaged_run_and_a_link_to_a_missing_one(app, runs):
    cut_in_half(runs / "algorithmic" / "addition-0" / "run.json")
    at = app(runs, "Runs")
    warning = "\n".join(str(w.value) for w in at.warning)
    assert "algorithmic/addition-0" in warning and "damaged" in warning and "run.json" in warning
    at = app(runs, "Run", run="algorithmic/no-such-run")
    assert "algorithmic/no-such-run" in "\n".join(str(w.value) for w in at.warning)
    assert "is not in this runs folder" in "\n".join(str(w.value) for w in at.warning)
    assert at.selectbox(key="run_run").value is None  # no other run opened in its place


def test_a_corpus_changed_before_resume_is_one_line_naming_it(tmp_path, capsys):
    # The run's tokens came from the corpus it began with; resuming on another would be silently wrong.
    from mixit_lab.cli.main import main
    from corpora import wikitext_like

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(wikitext_like(n_articles=20), encoding="utf-8")
    argv = ["train", "--task", "lm", "--text-file", str(corpus), "--tokenizer", "byte", "--seq-len", "16",
            "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "4", "--batch-size", "4",
            "--eval-every", "2", "--eval-samples", "8", "--device", "cpu", "--quiet", "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    (tmp_path / "run" / "summary.json").unlink()  # as if it had stopped before the end
    corpus.write_text(wikitext_like(n_articles=20, seed=1), encoding="utf-8")
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(corpus) in err and "run.json" in err, err
