"""mixit_lab.analysis.runs: the run-directory loader shared by the report, the figures and the explorer."""

import json

import pytest

from mixit_lab.analysis.runs import load_runs, read_metrics, task_label
from mixit_lab.training.run import read_analysis
from mixit_lab.training.rundir import find_runs
from mixit_lab.training import TrainConfig, train


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for group, variant in (("a", "standard"), ("a-wide", "mixit")):
        cfg = TrainConfig(task="addition", task_params={"digits": 2}, variant=variant, d_model=16, n_layers=1,
                          n_heads=2, steps=4, batch_size=8, eval_every=2, eval_samples=32)
        train(cfg, root / group / f"add_{variant}", progress=False)
    return root


def test_finds_nested_runs_and_reads_their_rows(runs_root):
    assert [p.name for p in find_runs(runs_root)] == ["add_standard", "add_mixit"]
    df = load_runs(runs_root)
    assert list(df["group"]) == ["a", "a"] and list(df["study"]) == ["a", "a-wide"]
    assert list(df["variant"]) == ["standard", "mixit"]
    assert (df["status"] == "finished").all() and (df["step"] == 4).all()
    assert df["task_label"].iloc[0] == "addition(digits=2)"
    assert df["params_trainable"].iloc[0] > 0 and df["has_checkpoint"].all()
    assert read_analysis(df["path"].iloc[0]) is None


def test_metrics_skip_a_line_cut_off_by_a_kill(runs_root, tmp_path):
    run = runs_root / "a" / "add_standard"
    full = read_metrics(run)
    assert list(full["step"]) == sorted(full["step"]) and "eval_acc" in full
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + '{"step": 9, "lo')
    assert len(read_metrics(cut)) == len(full)


def test_a_corrupt_or_unfinished_run_is_a_row_not_an_exception(runs_root, tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{not json")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "run.json").write_text((runs_root / "a" / "add_standard" / "run.json").read_text())
    df = load_runs(tmp_path).set_index("run")
    assert df.loc["bad", "status"] == "corrupt" and "JSONDecodeError" in df.loc["bad", "error"]
    assert df.loc["half", "status"] == "interrupted" and df.loc["half", "variant"] == "standard"
    assert load_runs(tmp_path / "bad").iloc[0]["status"] == "corrupt"  # a run directory as the root


def test_empty_root_gives_empty_table_with_columns(tmp_path):
    df = load_runs(tmp_path)
    assert df.empty and "variant" in df.columns


def test_task_label_hides_file_lists():
    assert task_label("lm", {"text_file": ["x/valid.txt"], "seq_len": 64}) == "lm(seq_len=64)"
    assert task_label("dyck", {}) == "dyck"


def test_a_diverged_or_failed_run_keeps_its_message_in_the_table(runs_root, tmp_path):
    """summary.json's message is why a run stopped; the table (and the explorer) show it for any failed status."""
    for name, status in (("div", "diverged"), ("err", "error"), ("elsewhere", "running elsewhere")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.json").write_text((runs_root / "a" / "add_standard" / "run.json").read_text())
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": status, "message": f"why {name}",
                                                                  "step": 3}))
    df = load_runs(tmp_path).set_index("run")
    assert df.loc["div", "status"] == "diverged" and df.loc["div", "error"] == "why div"
    assert df.loc["err", "error"] == "why err" and df.loc["elsewhere", "error"] == "why elsewhere"
    assert df.loc["div", "step"] == 3
    assert load_runs(runs_root)["error"].isna().all()  # a finished run has no message


def test_a_run_json_with_an_unknown_key_is_a_corrupt_row_naming_the_file(runs_root, tmp_path):
    info = json.loads((runs_root / "a" / "add_standard" / "run.json").read_text())
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "run.json").write_text(json.dumps({**info, "trian": {}}))
    row = load_runs(tmp_path).iloc[0]
    assert row["status"] == "corrupt" and "run.json" in row["error"] and "'trian'" in row["error"]
