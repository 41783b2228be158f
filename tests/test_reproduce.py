"""`mixit reproduce`: presets, corpus choice, the resumable pipeline end to end, and the report's verdicts."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from reproduce.pipeline import (
    TextChoice, check_not_stale, choose_text, load_preset, preset_names, preset_runs,
)
from reproduce.report import build_tables, check_findings, corpus_line
from training import TrainConfig

from conftest import ROOT


def _no_hub(name):
    raise RuntimeError("no network here")


# --------------------------------------------------------------------------- presets and corpora
def test_every_preset_loads_and_expands():
    assert {"smoke", "quick", "paper"} <= set(preset_names())
    no_text = {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True)}
    for name in preset_names():
        runs = preset_runs(load_preset(name), no_text)
        assert runs and all("/" in run for run, _ in runs)
        assert not any(cfg.task in ("lm", "sentiment") for _, cfg in runs)  # no corpus: the text studies drop out
        assert len({run for run, _ in runs}) == len(runs)


def test_a_text_study_trains_on_the_chosen_corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of a small corpus, long enough for a few windows.\n" for i in range(400)))
    text = {"lm": TextChoice({"text_file": [str(corpus)]}), "sentiment": TextChoice(skipped=True)}
    lm = [cfg for _, cfg in preset_runs(load_preset("smoke"), text) if cfg.task == "lm"]
    assert lm and all(cfg.task_params["text_file"] == [str(corpus)] for cfg in lm)


def test_smoke_preset_covers_every_variant_on_every_algorithmic_task():
    from models import VARIANTS
    from training.tasks import ALGORITHMIC_TASKS

    runs = preset_runs(load_preset("smoke"), {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True)})
    pairs = {(cfg.variant, cfg.task) for _, cfg in runs}
    assert {(v, t) for v in VARIANTS for t in ALGORITHMIC_TASKS} <= pairs


def test_bad_presets_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="preset 'nope' is not one of: .*smoke"):
        load_preset("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("studies: {a: {tasks: [addition], steps: 3}}\n")
    with pytest.raises(ValueError, match=r"study 'a' has unknown keys \['steps'\]"):
        load_preset(bad)
    bad.write_text("studies: {a: {tasks: [addition], variants: [nope]}}\n")
    with pytest.raises(ValueError, match="study 'a': variant 'nope'"):
        preset_runs(load_preset(bad), {})


def test_text_corpus_choice(tmp_path, monkeypatch):
    import reproduce.pipeline as pipeline

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n")
    given = choose_text("lm", [str(corpus)], hub_check=_no_hub)
    assert given.params == {"text_file": [str(corpus)]} and not given.skipped
    with pytest.raises(ValueError, match="no such file"):
        choose_text("lm", [str(tmp_path / "missing.txt")])
    # ../shared/data (here a stand-in folder with the same layout) comes before the Hub ...
    data = tmp_path / "shared" / "data"
    for kind in ("lm", "sentiment"):
        for rel in pipeline.TEXT_SOURCES[kind]["local"]:
            (data / rel).parent.mkdir(parents=True, exist_ok=True)
            (data / rel).write_text("x\t1\n")
    monkeypatch.setattr(pipeline, "_shared_data_dirs", lambda: [data])
    local = choose_text("sentiment", None, hub_check=_no_hub)
    assert local.params == {"text_file": [str(data / "sentiment-sentences" / "yelp_labelled.txt")]}
    assert "../shared/data/sentiment-sentences/yelp_labelled.txt" in local.note and "1,000 Yelp" in local.note
    # ... and the Hub's small fixed datasets come last (never WikiText-103 or all of yelp_polarity).
    monkeypatch.setattr(pipeline, "_shared_data_dirs", lambda: [])
    asked = []
    hub = {kind: choose_text(kind, None, hub_check=asked.append) for kind in ("lm", "sentiment")}
    assert asked == ["wikitext-2-v1-valid-test", "yelp_polarity-1k"]
    assert hub["lm"].params == {"dataset": "wikitext-2-v1-valid-test"} and "WikiText-2" in hub["lm"].note
    assert hub["sentiment"].params == {"dataset": "yelp_polarity-1k"} and "500 per class" in hub["sentiment"].note


def test_hub_fallbacks_are_small_and_fixed():
    from training.text import HUB_DATASETS

    import reproduce.pipeline as pipeline

    lm, sentiment = (HUB_DATASETS[pipeline.TEXT_SOURCES[k]["hub"]] for k in ("lm", "sentiment"))
    # The same text as ../shared/data/wikitext-2 (valid.txt + test.txt, the v1 splits), held out like those files.
    assert (lm.kind, lm.repo, lm.config, lm.splits, lm.held_out, lm.lines) == (
        "text", "Salesforce/wikitext", "wikitext-2-v1", ("validation", "test"), None, True)
    # A fixed sample of 1,000 reviews from the (streamed) test split only.
    assert (sentiment.kind, sentiment.splits, sentiment.held_out, sentiment.streamed, sentiment.per_class) == (
        "labelled", ("test",), None, True, 500)


def test_no_corpus_anywhere_skips_with_a_note(monkeypatch):
    import reproduce.pipeline as pipeline

    monkeypatch.setattr(pipeline, "_shared_data_dirs", lambda: [])
    choice = choose_text("lm", None, hub_check=_no_hub)
    assert choice.skipped and "skipped" in choice.note and "--text-file" in choice.note


def test_a_run_trained_with_another_config_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = TrainConfig(task="addition", steps=100)
    (run / "run.json").write_text(json.dumps({"train": {**cfg.to_dict(), "steps": 50}}))
    with pytest.raises(ValueError, match="steps=50, the preset now says steps=100"):
        check_not_stale(run, cfg)
    (run / "run.json").write_text(json.dumps({"train": cfg.to_dict()}))
    check_not_stale(run, cfg)


# --------------------------------------------------------------------------- verdicts
def _tables(**overrides):
    empty = build_tables(Path("/nonexistent-runs-dir"))
    return {**empty, **overrides}


def test_missing_data_is_not_measured_never_holds():
    findings = check_findings(_tables())
    assert [f["holds"] for f in findings] == [None] * 7
    assert all("not measured" in f["ours"] for f in findings)


def test_retrieval_verdict_follows_the_criterion():
    def table(mixit):
        rows = [("standard", 100.0), ("frozen_mlp", 99.0), ("frozen_qk", 95.0), ("mixit", mixit)]
        return pd.DataFrame([{"task": "retrieval(pairs=8)", "variant": v, "accuracy": a} for v, a in rows])

    assert check_findings(_tables(table1_retrieval=table(20.0)))[0]["holds"] is True
    assert check_findings(_tables(table1_retrieval=table(80.0)))[0]["holds"] is False


def test_lm_verdict_needs_frozen_qk_closer_to_standard():
    def table(qk):
        return pd.DataFrame({"variant": ["standard", "frozen_qk", "mixit"], "log_ppl": [4.0, qk, 4.6]})

    assert check_findings(_tables(table2_lm=table(4.1)))[1]["holds"] is True
    assert check_findings(_tables(table2_lm=table(4.4)))[1]["holds"] is False  # ordered, but not much closer


def test_report_names_the_corpus_of_each_text_table():
    manifest = {"text": {
        "lm": {"note": "lm: ../shared/data/wikitext-2/valid.txt (WikiText-2)", "skipped": False},
        "sentiment": {"note": "sentiment: skipped: no corpus given", "skipped": True},
    }}
    assert corpus_line(manifest, "lm", "Corpus") == "**Corpus**: ../shared/data/wikitext-2/valid.txt (WikiText-2)."
    assert corpus_line(manifest, "sentiment", "Sentiment rows") == "**Sentiment rows**: none; skipped: no corpus given."
    assert corpus_line({}, "lm", "Corpus") == "**Corpus**: none (this preset has no lm study)."


# --------------------------------------------------------------------------- end to end
def _reproduce_cmd(tmp_path: Path, corpora: dict[str, Path]) -> list[str]:
    """The smoke preset on the generated corpora (tests/corpora.py): the text studies run without ../shared."""
    return [sys.executable, "-m", "training.cli", "reproduce", "--preset", "smoke", "--workers", "2", "--quiet",
            "--out", str(tmp_path / "runs"), "--report-dir", str(tmp_path / "report"),
            "--figures-dir", str(tmp_path / "figs"),
            "--text-file", str(corpora["lm"]), "--sentiment-file", str(corpora["sentiment"])]


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, generated_corpora):
    """Start the smoke reproduction, kill it (with its workers) once a few runs finished, then rerun it."""
    tmp = tmp_path_factory.mktemp("smoke")
    cmd = _reproduce_cmd(tmp, generated_corpora)
    proc = subprocess.Popen(cmd, cwd=tmp, env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if len(list((tmp / "runs").glob("*/*/summary.json"))) >= 3:
            break
        time.sleep(0.5)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = len(list((tmp / "runs").glob("*/*/summary.json")))
    done = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=900)
    return tmp, done, killed, finished_before, cmd


@pytest.mark.slow
def test_killed_midway_then_rerun_completes_everything(smoke):
    tmp, done, killed, finished_before, _ = smoke
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = json.loads((tmp / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "finished" and manifest["preset"] == "smoke"
    runs = manifest["runs"]
    assert killed and finished_before < len(runs) == 57  # it really was interrupted
    # The text studies ran, on the generated corpora given on the command line (never ../shared/data).
    assert sum(r.startswith("lm/") for r in runs) == 3 and sum(r.startswith("sentiment/") for r in runs) == 2
    for kind in ("lm", "sentiment"):
        assert not manifest["text"][kind]["skipped"] and manifest["text"][kind]["note"].endswith("(given)")
    for run in runs:
        run_dir = tmp / "runs" / run
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished", run
        assert (run_dir / "analysis" / "analysis.json").is_file(), run
    assert (tmp / "runs" / "signal" / "signal.csv").is_file() and (tmp / "runs" / "speed" / "speed.csv").is_file()
    assert f"train: {len(runs)} runs, {finished_before} already finished" in done.stdout


@pytest.mark.slow
def test_every_figure_and_report_table_exists(smoke):
    import figures

    tmp, done, _, _, _ = smoke
    for name in figures.FIGURES:
        for ext in ("png", "pdf"):
            path = tmp / "figs" / f"{name}.{ext}"
            assert path.is_file() and path.stat().st_size > 1000, path
    report = (tmp / "report" / "report.md").read_text()
    for title in ("## Findings", "Table 1", "Table 2", "Table 3", "Table 4", "Table 6", "Table 7",
                  "## Induction heads", "## Training speed", "## Figures"):
        assert title in report, title
    findings = pd.read_csv(tmp / "report" / "findings.csv")
    assert list(findings["id"]) == list(range(1, 8))
    for table in ("table1_retrieval", "table2_lm", "table3_tasks", "table4_memorize", "table6_depth",
                  "table7_signal", "speed"):
        assert len(pd.read_csv(tmp / "report" / f"{table}.csv")) > 0, table
    assert sorted(pd.read_csv(tmp / "report" / "table2_lm.csv")["variant"]) == ["frozen_qk", "mixit", "standard"]
    assert (pd.read_csv(tmp / "report" / "table3_tasks.csv")["task"].str.startswith("sentiment")).sum() == 2
    # Each text table names its corpus.
    assert "**Corpus**: " in report and "articles.txt (given)." in report
    assert "**Sentiment rows**: " in report and "sentences.txt (given)." in report


@pytest.mark.slow
def test_rerun_trains_and_analyses_nothing(smoke):
    tmp, _, _, _, cmd = smoke
    stamps = {p: p.stat().st_mtime_ns for p in (tmp / "runs").glob("*/*/checkpoint/model.safetensors")}
    again = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 to train" in again.stdout
    assert "analyze: 0 computed" in again.stdout
    assert "signal: cached" in again.stdout and "speed: cached" in again.stdout
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp / "runs").glob("*/*/checkpoint/model.safetensors")}
