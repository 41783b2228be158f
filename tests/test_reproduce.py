"""`mixit reproduce`: presets, corpus choice, the resumable pipeline end to end, and the report's verdicts."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from mixit_lab.models import ModelConfig
from mixit_lab.reproduce.corpora import TextChoice, choose_text
from mixit_lab.reproduce.pipeline import check_not_stale, preset_runs
from mixit_lab.reproduce.preset import load_preset, preset_names
from mixit_lab.reproduce.report import corpus_line
from mixit_lab.reproduce.tables import INDUCTION_COLUMNS, build_tables
from mixit_lab.reproduce.verdicts import check_findings
from mixit_lab.training import TrainConfig

from conftest import ROOT


def _no_hub(name):
    raise RuntimeError("no network here")


# --------------------------------------------------------------------------- presets and corpora
def test_every_preset_loads_and_expands():
    assert {"smoke", "quick", "paper"} <= set(preset_names())
    no_text = {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True), "sst2": TextChoice(skipped=True)}
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
    from mixit_lab.models import VARIANTS
    from mixit_lab.training.tasks import ALGORITHMIC_TASKS

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
    bad.write_text("studies: {a: {tasks: [addition]}}\nanalyis: {n_seqs: 8}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: preset has unknown keys \['analyis'\]; allowed: .*'analysis'"):
        load_preset(bad)
    bad.write_text("studies: {a: {tasks: [addition], text: poems}}\n")
    with pytest.raises(ValueError, match="study 'a': text='poems' must be one of"):
        load_preset(bad)


@pytest.mark.parametrize("block, key", [
    ("train: {stpes: 3}", "stpes"),
    ("train: {steps: 0}", "steps=0"),
    ("studies: {a: {tasks: [addition], train: {lr: -1}}}", "lr=-1"),
    ("analysis: {n_seq: 8}", "n_seq"),
    ("analysis: {ablation: maybe}", "ablation='maybe'"),
    ("signal: {depht: [2]}", "depht"),
    ("signal: {depths: [0, 2]}", "depths=[0, 2]"),
    ("signal: {controls: {x: {variant: nope}}}", "nope"),
    ("speed: {steps: many}", "steps='many'"),
    ("speed: {variants: [standard, nope]}", "nope"),
    ("speed: {precison: fp32}", "precison"),
    ("signal: {sink_head: maybe}", "sink_head='maybe'"),  # a ModelConfig field, flat in the block
    ("signal: {model: {sink_head: false}}", "['model']"),  # ... never nested
    ("signal: {controls: {x: {variant: mixit, sink_hed: false}}}", "sink_hed"),
    ("signal: {n_seqs: 2.5}", "n_seqs=2.5"),
    ("speed: {compile: maybe}", "compile='maybe'"),
    ("speed: {warmup: -1}", "warmup=-1"),
    ("skip: [figures]", "figures"),
])
def test_every_block_of_a_preset_is_checked_before_anything_runs(tmp_path, capsys, block, key):
    """A typo or a bad value anywhere in a preset is one line naming the file, the block and the key, exit 2,
    from the real command, --dry-run too: not a TypeError after the whole training stage."""
    from mixit_lab.cli.main import main

    path = tmp_path / "typo.yaml"
    studies = "" if block.startswith("studies") else "studies: {a: {tasks: [addition]}}\n"
    path.write_text(studies + block + "\n")
    name = block.split(":")[0] if not block.startswith("studies") else "study 'a'"
    for dry in (["--dry-run"], []):
        code = main(["reproduce", "--preset", str(path), "--out", str(tmp_path / "runs"), "--quiet", *dry])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0, err
        assert err.startswith(f"mixit reproduce: error: {path}: {name}") and key in err, err
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_a_preset_is_typed_data_with_the_file_defaults(tmp_path):
    from mixit_lab.reproduce.preset import Preset

    path = tmp_path / "mine.yaml"
    path.write_text("train: {steps: 7}\nstudies: {a: {tasks: addition, seeds: 3}}\n")
    preset = load_preset(path)
    assert preset.name == "mine" and preset.train == {"steps": 7}
    study = preset.studies["a"]
    assert study.tasks == ["addition"] and study.seeds == [3] and study.variants == ["all"] and study.text is None
    assert Preset.from_dict(preset.to_dict()) == preset  # what reproduce.json records reads back
    quick = load_preset("quick")
    assert quick.text_kinds() == {"lm", "sentiment"} and all(s.tasks for s in quick.studies.values())


def test_precision_over_the_presets_own(tmp_path, capsys):
    from mixit_lab.cli.main import main

    path = tmp_path / "mine.yaml"
    path.write_text("train: {precision: bf16}\nstudies: {a: {tasks: addition}, b: {tasks: dyck, train: {precision: bf16}}}\n")
    no_text = {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True)}
    preset = load_preset(path)
    assert {cfg.precision for _, cfg in preset_runs(preset, no_text)} == {"bf16"}
    fp32 = preset.with_train(precision="fp32")  # a study's own setting is overridden too
    assert {cfg.precision for _, cfg in preset_runs(fp32, no_text)} == {"fp32"}
    assert preset.studies["b"].train == {"precision": "bf16"}  # the original is untouched
    with pytest.raises(ValueError, match=r"unknown keys \['precison'\]"):
        preset.with_train(precison="fp32")
    code = main(["reproduce", "--preset", str(path), "--precision", "fp32", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and out.count("precision=fp32") == len(preset_runs(preset, no_text)) == 12 and "bf16" not in out
    # quick's choice (docs/benchmarks.md): bf16 where this machine's bf16 matmuls pay, fp32 for the overhead-bound
    # width-16 study
    quick = load_preset("quick")
    assert quick.train["precision"] == "fast" and quick.studies["memorize"].train["precision"] == "fp32"


def test_text_corpus_choice(tmp_path, monkeypatch):
    import mixit_lab.reproduce.corpora as corpora

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n")
    given = choose_text("lm", [str(corpus)], hub_check=_no_hub)
    assert given.params == {"text_file": [str(corpus)]} and not given.skipped
    with pytest.raises(ValueError, match="no such file"):
        choose_text("lm", [str(tmp_path / "missing.txt")])
    # ../shared/data (here a stand-in folder with the same layout) comes before the Hub ...
    data = tmp_path / "shared" / "data"
    for kind in ("lm", "sentiment", "sst2"):
        for rel in (r for rels in corpora.TEXT_SOURCES[kind]["local"].values() for r in rels):
            (data / rel).parent.mkdir(parents=True, exist_ok=True)
            (data / rel).write_text("x\t1\n")
    monkeypatch.setattr(corpora, "_shared_data_dirs", lambda: [data])
    local = choose_text("sentiment", None, hub_check=_no_hub)
    assert local.params == {"text_file": [str(data / "sentiment-sentences" / "yelp_labelled.txt")]}
    assert "../shared/data/sentiment-sentences/yelp_labelled.txt" in local.note and "1,000 Yelp" in local.note
    sst2 = choose_text("sst2", None, hub_check=_no_hub)  # trains on train.tsv, reports on dev.tsv
    assert sst2.params == {"text_file": [str(data / "sst-2" / "train.tsv")], "test_file": [str(data / "sst-2" / "dev.tsv")]}
    assert choose_text("sst2", [str(data / "sst-2")]).params == sst2.params  # --sst2-dir: the folder
    with pytest.raises(ValueError, match="one folder holding train.tsv and dev.tsv"):
        choose_text("sst2", [str(data)])
    # ... and the Hub's small fixed datasets come last (never WikiText-103 or all of yelp_polarity).
    monkeypatch.setattr(corpora, "_shared_data_dirs", lambda: [])
    asked = []
    hub = {kind: choose_text(kind, None, hub_check=asked.append) for kind in ("lm", "sentiment", "sst2")}
    assert asked == ["wikitext-2-v1-valid-test", "yelp_polarity-1k", "sst2"]
    assert hub["lm"].params == {"dataset": "wikitext-2-v1-valid-test"} and "WikiText-2" in hub["lm"].note
    assert hub["sentiment"].params == {"dataset": "yelp_polarity-1k"} and "500 per class" in hub["sentiment"].note


def test_local_corpora_are_looked_for_beside_the_work_not_inside_site_packages(tmp_path, monkeypatch):
    """$MIXIT_DATA first, then ../shared/data beside the working directory, then beside a source checkout; an
    installed package (no pyproject.toml beside its folders) never looks beside site-packages."""
    import mixit_lab.reproduce.corpora as corpora

    given, beside_cwd, beside_checkout = tmp_path / "mine", tmp_path / "shared" / "data", tmp_path / "co" / "shared" / "data"
    for folder in (given, beside_cwd, beside_checkout, tmp_path / "work", tmp_path / "co" / "src"):
        folder.mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setattr(corpora, "PACKAGE_ROOT", tmp_path / "co" / "src")  # installed: no pyproject.toml there
    monkeypatch.delenv(corpora.DATA_ENV, raising=False)
    assert corpora._shared_data_dirs() == [beside_cwd]
    (tmp_path / "co" / "src" / "pyproject.toml").write_text("")  # a source checkout
    monkeypatch.setenv(corpora.DATA_ENV, str(given))
    assert corpora._shared_data_dirs() == [given, beside_cwd, beside_checkout]


def test_hub_fallbacks_are_small_and_fixed():
    from mixit_lab.training.tasks.hub import HUB_DATASETS

    import mixit_lab.reproduce.corpora as corpora

    lm, sentiment = (HUB_DATASETS[corpora.TEXT_SOURCES[k]["hub"]] for k in ("lm", "sentiment"))
    # The same text as ../shared/data/wikitext-2 (valid.txt + test.txt, the v1 splits), held out like those files.
    assert (lm.kind, lm.repo, lm.config, lm.splits, lm.held_out, lm.lines) == (
        "text", "Salesforce/wikitext", "wikitext-2-v1", ("validation", "test"), None, True)
    # A fixed sample of 1,000 reviews from the (streamed) test split only.
    assert (sentiment.kind, sentiment.splits, sentiment.held_out, sentiment.streamed, sentiment.per_class) == (
        "labelled", ("test",), None, True, 500)


def test_no_corpus_anywhere_skips_with_a_note(monkeypatch):
    import mixit_lab.reproduce.corpora as corpora

    monkeypatch.setattr(corpora, "_shared_data_dirs", lambda: [])
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


def test_a_run_whose_saved_model_another_default_built_is_refused(tmp_path):
    """Same settings, but the saved bidirectional MixiT has the rows of a former default: refused, naming the field.
    A causal model saved with either value is the same model and is reused."""
    from mixit_lab.models import build_model, save_model
    from mixit_lab.models.checkpoint import RUN_CHECKPOINT_DIR

    cfg = TrainConfig(task="sentiment", variant="mixit", steps=10)
    for causal, refused in ((False, True), (True, False)):
        run = tmp_path / f"causal{causal}"
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"train": cfg.to_dict()}))
        now = ModelConfig(variant="mixit", d_model=16, n_layers=1, n_heads=2, n_ctx=8, d_vocab=20, causal=causal,
                          n_classes=None if causal else 2)
        save_model(build_model(dataclasses.replace(now, mixing_centre="own")), run / RUN_CHECKPOINT_DIR)
        if refused:
            with pytest.raises(ValueError, match="mixing_centre='own' in its model, this version builds mixing_centre='causal'"):
                check_not_stale(run, cfg, now)
        else:
            check_not_stale(run, cfg, now)
        check_not_stale(run, cfg, dataclasses.replace(now, mixing_centre="own"))


# --------------------------------------------------------------------------- verdicts
def _tables(**overrides):
    empty = build_tables(Path("/nonexistent-runs-dir"))
    return {**empty, **overrides}


def test_missing_data_is_not_measured_never_holds():
    findings = check_findings(_tables())
    assert [f["holds"] for f in findings] == [None] * 7
    assert all("not measured" in f["ours"] for f in findings)


def test_a_report_is_swapped_in_whole_and_keeps_what_else_its_folder_holds(tmp_path, monkeypatch):
    """A report stopped half-way (here, by an interrupt after its first table) leaves the previous report whole;
    the next one replaces it whole: a table of the older reproduction goes, a figures folder and notes stay."""
    from mixit_lab.reproduce import report

    runs, folder = tmp_path / "runs", tmp_path / "report"
    runs.mkdir()
    report.write_report(runs, folder, {"preset": "first"})
    first = {p.name: p.read_bytes() for p in folder.iterdir()}
    (folder / "table9_gone.csv").write_text("a\n1\n")  # a table only an older reproduction wrote
    (folder / "notes.txt").write_text("mine")
    (folder / "figures").mkdir()
    (folder / "figures" / "a.png").write_bytes(b"png")
    (tmp_path / ".report.tmp-left").mkdir()  # what a SIGKILL while writing leaves beside it

    real, written = report.atomic_file, []

    def interrupted(path, *args, **kwargs):
        written.append(path)
        if len(written) == 2:
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(report, "atomic_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(runs, folder, {"preset": "second"})
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name in first} == first
    assert (folder / "table9_gone.csv").is_file() and all(p.parent != folder for p in written)  # written elsewhere
    monkeypatch.undo()
    report.write_report(runs, folder, {"preset": "second"})
    assert "preset `second`" in (folder / "report.md").read_text() and not (folder / "table9_gone.csv").exists()
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "figures" / "a.png").read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report", "runs"]  # no hidden copy left beside it
    with pytest.raises(ValueError, match="--report-dir .* holds the runs folder"):
        report.write_report(runs, tmp_path, {"preset": "third"})

def test_a_report_without_paper_runs_says_so_instead_of_a_table(tmp_path):
    from mixit_lab.reproduce.report import write_report

    (tmp_path / "runs").mkdir()
    findings = write_report(tmp_path / "runs", tmp_path / "report", {"preset": "beyond"})
    report = (tmp_path / "report" / "report.md").read_text()
    assert all(f["holds"] is None for f in findings) and "No run of this preset measures" in report
    assert "| # | finding |" not in report


def _seeds(mean, spread=0.0, n=3):
    """n per-seed values around `mean`, `spread` apart (0: every seed the same, an interval that is a point)."""
    return [mean + spread * (i - (n - 1) / 2) for i in range(n)]


def _acc(task, variant, values, **extra):
    """A row of an accuracy table (mixit_lab.reproduce.tables): mean, median and the per-seed values."""
    values = list(values)
    return {"task": task, "variant": variant, "accuracy": sum(values) / len(values),
            "median": sorted(values)[len(values) // 2], "values": values, **extra}


def test_retrieval_verdict_follows_the_criterion_on_intervals_over_seeds():
    def table(mixit, spread=0.0):
        rows = [("standard", 100.0), ("frozen_mlp", 99.0), ("frozen_qk", 95.0), ("mixit", mixit)]
        return pd.DataFrame([_acc("retrieval(pairs=8)", v, _seeds(a, spread if v == "mixit" else 0.0))
                             for v, a in rows])

    assert check_findings(_tables(table1_retrieval=table(20.0)))[0]["holds"] is True
    assert check_findings(_tables(table1_retrieval=table(80.0)))[0]["holds"] is False
    # frozen_qk - mixit = 35 points on the mean, but three seeds 20 points apart put the interval across 30
    wide = check_findings(_tables(table1_retrieval=table(60.0, spread=20.0)))[0]
    assert wide["holds"] is None and wide["verdict"] == "inconclusive" and "undecided" in wide["ours"]
    assert "frozen_qk - mixit +35.0 [" in wide["ours"]


def test_lm_verdict_needs_frozen_qk_closer_to_standard():
    def table(qk, spread=0.0):
        return pd.DataFrame({"variant": ["standard", "frozen_qk", "mixit"],
                             "log_ppl_values": [_seeds(4.0, spread), _seeds(qk, spread), _seeds(4.6, spread)]})

    assert check_findings(_tables(table2_lm=table(4.1)))[1]["holds"] is True
    assert check_findings(_tables(table2_lm=table(4.4)))[1]["holds"] is False  # ordered, but not much closer
    assert check_findings(_tables(table2_lm=table(4.1, spread=0.2)))[1]["verdict"] == "inconclusive"


def test_report_names_the_corpus_of_each_text_table():
    manifest = {"text": {
        "lm": {"note": "lm: ../shared/data/wikitext-2/valid.txt (WikiText-2)", "skipped": False},
        "sentiment": {"note": "sentiment: skipped: no corpus given", "skipped": True},
    }}
    assert corpus_line(manifest, "lm", "Corpus") == "**Corpus**: ../shared/data/wikitext-2/valid.txt (WikiText-2)."
    assert corpus_line(manifest, "sentiment", "Sentiment rows") == "**Sentiment rows**: none; skipped: no corpus given."
    assert corpus_line({}, "lm", "Corpus") == "**Corpus**: none (this preset has no lm study)."


def _finding(tables, number):
    found = check_findings(_tables(**tables))[number - 1]
    assert found["id"] == number
    return found


def _not_measured(found):
    return found["holds"] is None and "not measured" in found["ours"]


def test_algorithmic_tasks_verdict():
    def table(gaps, sentiment=(80.0, 78.0), items=4000):
        rows = [_acc(f"{task}(x=1)", v, _seeds(a), eval_items=items)
                for task, gap in gaps.items() for v, a in (("standard", 90.0), ("mixit", 90.0 - gap))]
        if sentiment is not None:
            rows += [_acc("sentiment(seq_len=64)", v, _seeds(a), eval_items=None)
                     for v, a in zip(("standard", "mixit"), sentiment)]
        return {"table3_tasks": pd.DataFrame(rows, columns=["task", "variant", "accuracy", "median", "values",
                                                            "eval_items"])}

    close = {"addition": 2.0, "dyck": 5.0, "modadd": 0.0, "memorize": 1.0}
    assert _finding(table(close), 3)["holds"] is True
    assert _finding(table({**close, "dyck": 6.0}), 3)["holds"] is False
    assert _finding(table(close, sentiment=(80.0, 74.0)), 3)["holds"] is False
    # One-sided: MixiT better than standard by any margin is not a failure.
    assert _finding(table({**close, "modadd": -9.0}), 3)["holds"] is True
    # Per task: the failing task is named with its numbers, the others still shown.
    found = _finding(table({**close, "dyck": 24.5}), 3)
    assert "dyck 90.0 vs 65.5, mixit - standard -24.5" in found["ours"] and "addition 90.0 vs 88.0" in found["ours"]
    # Only what was measured counts; nothing measured is "not measured".
    partial = _finding(table({"addition": 0.0}, sentiment=None), 3)
    assert partial["holds"] is True and "dyck not measured" in partial["ours"]
    assert _not_measured(_finding({}, 3))
    assert _not_measured(_finding(table({}, sentiment=None), 3))


def test_algorithmic_tasks_need_a_held_out_set_and_a_memorize_set_that_can_fail():
    def table(task, standard, mixit, items):
        rows = [_acc(f"{task}(x=1)", v, _seeds(a), eval_items=items) for v, a in (("standard", standard), ("mixit", mixit))]
        return {"table3_tasks": pd.DataFrame(rows)}

    # 27 held-out pairs: one pair is 3.7 points, too coarse for a 5-point margin, either way.
    small = _finding(table("modadd", 92.6, 80.0, 27), 3)
    assert _not_measured(small) and "27 held-out items, 3.7 points each" in small["ours"]
    assert _finding(table("modadd", 92.6, 80.0, 100), 3)["holds"] is False
    # A memorize set that both variants store completely cannot tell them apart.
    full = _finding(table("memorize", 100.0, 99.95, 4096), 3)
    assert _not_measured(full) and "both store every key" in full["ours"]
    assert _finding(table("memorize", 100.0, 92.0, 4096), 3)["holds"] is False
    assert _finding(table("memorize", 97.0, 96.0, 4096), 3)["holds"] is True


def test_a_stuck_seed_leaves_the_retrieval_verdict_undecided_and_is_named(tmp_path):
    # Three seeds per variant, standard's seed 1 stuck (as the quick preset's once was): the mean is 77.5,
    # the median 100, and the stuck seed is reported.
    rows = []
    for v, accs in {"standard": (1.0, 0.324, 1.0), "frozen_mlp": (1.0,) * 3, "frozen_qk": (1.0,) * 3,
                    "mixit": (0.15, 0.2, 0.17)}.items():
        for seed, acc in enumerate(accs):
            rows.append({"task": "retrieval", "task_label": "retrieval(pairs=8)", "variant": v, "seed": seed,
                         "eval_acc": acc})
    from mixit_lab.reproduce.selection import accuracy_stats

    acc = accuracy_stats(pd.DataFrame(rows), ["variant", "task_label"]).set_index("variant")
    assert acc.loc["standard", "acc"] == pytest.approx(77.47, abs=0.01) and acc.loc["standard", "median"] == 100.0
    assert acc.loc["standard", "stuck"] == "seed 1 at 32.4%" and acc.loc["frozen_qk", "stuck"] == ""
    assert acc.loc["standard", "acc_values"] == pytest.approx([100.0, 32.4, 100.0])  # in seed order
    t1 = acc.reset_index().rename(columns={"task_label": "task", "acc": "accuracy", "acc_values": "values"})
    found = _finding({"table1_retrieval": t1}, 1)
    # Its interval (mean 77.5) reaches from far below 90 to above 100: neither held nor failed, and named.
    assert found["holds"] is None and found["verdict"] == "inconclusive" and "standard seed 1 at 32.4%" in found["ours"]
    # Every seed stuck: standard's interval lies below 90, and it fails.
    t1.at[int(t1.index[t1["variant"] == "standard"][0]), "values"] = [32.4, 32.5, 32.3]
    assert _finding({"table1_retrieval": t1}, 1)["holds"] is False


# Memorization: per (variant, n) accuracy and bits; bits per trainable parameter from a fixed parameter count.
PARAMS = {"standard": 1000, "frozen_qk": 800, "mixit": 700, "frozen_mlp": 400}
PAPER_BPP = {"standard": 2.98, "frozen_qk": 2.25, "mixit": 2.18, "frozen_mlp": 1.13}


def _memorize_tables(bpp=PAPER_BPP, accuracy=0.6, growth=0.05, override=None, seeds=(0,), spread=0.0):
    """Two dataset sizes (n = 48, 96) per variant: the largest stores bpp * params bits at `accuracy`, the
    next smaller (1 - growth) times as many. `override` {(variant, n): {column: value}} edits rows; with
    several seeds, seed i's bits per parameter move by (i - mean) * spread."""
    from mixit_lab.reproduce.tables import memorize_regimes

    rows = []
    for seed in seeds:
        shift = (seed - sum(seeds) / len(seeds)) * spread
        for v, params in PARAMS.items():
            top = (bpp[v] + shift) * params
            for n, bits, acc in ((48, top * (1 - growth), 0.9), (96, top, accuracy)):
                row = {"variant": v, "n": n, "d": 2, "seed": seed, "accuracy": acc, "bits": bits,
                       "params_trainable": params, "bits_per_trainable_param": bits / params}
                row.update((override or {}).get((v, n), {}))
                rows.append(row)
    sizes = pd.DataFrame(rows)
    return {"table4_memorize": memorize_regimes(sizes), "table4_memorize_sizes": sizes}


def test_memorization_verdict_at_capacity():
    assert _finding(_memorize_tables(), 4)["holds"] is True
    assert "at capacity: bits/param 2.98 / 2.25 / 2.18 / 1.13" in _finding(_memorize_tables(), 4)["ours"]
    for wrong in ({**PAPER_BPP, "standard": 2.0},  # standard below frozen_qk
                  {**PAPER_BPP, "frozen_mlp": 2.5},  # frozen_mlp above mixit
                  {**PAPER_BPP, "frozen_qk": 2.8}):  # frozen_qk and mixit more than 25% apart
        assert _finding(_memorize_tables(bpp=wrong), 4)["holds"] is False, wrong


def test_memorization_standard_above_frozen_qk_only_where_its_interval_is():
    # 1.65 against 1.62 (the quick preset's numbers): ordered, but three seeds 0.04 apart leave it undecided.
    close = {**PAPER_BPP, "standard": 1.65, "frozen_qk": 1.62, "mixit": 1.5, "frozen_mlp": 1.0}
    found = _finding(_memorize_tables(bpp=close, seeds=(0, 1, 2), spread=0.04), 4)
    assert found["holds"] is None and found["verdict"] == "inconclusive"
    assert "standard - frozen_qk +0.030 [" in found["ours"]
    assert _finding(_memorize_tables(bpp=close, seeds=(0, 1, 2), spread=0.001), 4)["holds"] is True
    below = {**close, "standard": 1.5}  # standard below frozen_qk on every seed: fails
    assert _finding(_memorize_tables(bpp=below, seeds=(0, 1, 2), spread=0.001), 4)["holds"] is False


def test_memorization_in_the_paper_regime():
    # Standard stores every key at n = 48: that size is the paper's regime, judged by the same ordering.
    tables = _memorize_tables(override={(v, 48): {"accuracy": 1.0 if v == "standard" else 0.9} for v in PARAMS})
    t4 = tables["table4_memorize"]
    assert set(t4["regime"]) == {"fixed", "capacity"} and set(t4.loc[t4["regime"] == "fixed", "n"]) == {48}
    found = _finding(tables, 4)
    assert found["holds"] is True and "paper regime (n=48, standard stores every key)" in found["ours"]
    # In the fixed regime a frozen variant that stores nearly as much with fewer parameters beats standard.
    fixed_wrong = _memorize_tables(override={
        **{(v, 48): {"accuracy": 1.0 if v == "standard" else 0.9} for v in PARAMS},
        ("frozen_qk", 48): {"accuracy": 0.99, "bits_per_trainable_param": 3.5}})
    assert _finding(fixed_wrong, 4)["holds"] is False
    # No size that standard stores completely: the paper regime is not measured, capacity still judged.
    found = _finding(_memorize_tables(), 4)
    assert "paper regime not measured" in found["ours"] and found["holds"] is True


def test_memorization_is_not_measured_below_capacity():
    # The paper's ordering, but every variant stores the whole largest set: its bits are only a lower bound.
    full = _finding(_memorize_tables(accuracy=1.0), 4)
    assert "at capacity not measured (standard memorizes 100.0% at n=96" in full["ours"]
    assert _not_measured(_finding(_memorize_tables(accuracy=0.99), 4))
    assert _finding(_memorize_tables(accuracy=0.989), 4)["holds"] is True
    # Bits still growing (or falling) by more than 10% between the two largest sizes: no plateau.
    growing = _finding(_memorize_tables(growth=0.3), 4)
    assert _not_measured(growing) and "standard bits per parameter grow 30% from n=48 to n=96" in growing["ours"]
    assert _finding(_memorize_tables(growth=0.09), 4)["holds"] is True
    assert _not_measured(_finding(_memorize_tables(growth=0.11), 4))
    falling = _memorize_tables(override={("mixit", 48): {"bits": 2.18 * 700 * 1.5, "bits_per_trainable_param": 2.18 * 1.5}})
    assert "mixit bits per parameter fall 33% from n=48 to n=96" in _finding(falling, 4)["ours"]
    # More bits at the larger n from more parameters (a larger vocabulary) is still a plateau.
    more_params = _memorize_tables(growth=0.3, override={
        (v, 48): {"bits_per_trainable_param": PAPER_BPP[v] * 0.95} for v in PARAMS})
    assert _finding(more_params, 4)["holds"] is True
    # Every variant must be at capacity, not only standard.
    mlp = _finding(_memorize_tables(override={("frozen_mlp", 96): {"accuracy": 0.995}}), 4)
    assert _not_measured(mlp) and "frozen_mlp memorizes" in mlp["ours"] and "standard memorizes" not in mlp["ours"]
    # One dataset size cannot show a plateau.
    one = _memorize_tables()
    one["table4_memorize_sizes"] = one["table4_memorize_sizes"].query("n == 96")
    assert _not_measured(_finding(one, 4)) and "a plateau needs 2" in _finding(one, 4)["ours"]


def test_memorization_not_measured_without_every_variant():
    tables = _memorize_tables()
    tables["table4_memorize"] = tables["table4_memorize"].query("variant != 'frozen_mlp'")
    found = _finding(tables, 4)
    assert _not_measured(found) and "memorize/frozen_mlp missing" in found["ours"]


def test_depth_verdict():
    def tables(random_deep=30.0, mixit_deep=95.0, random_growth=20.0, mixit_growth=1.5):
        t6 = pd.DataFrame([{"variant": v, "n_layers": n, "accuracy": a, "values": _seeds(a)} for v, n, a in
                           (("random", 2, 80.0), ("random", 6, random_deep), ("mixit", 2, 100.0), ("mixit", 6, mixit_deep))])
        t7 = pd.DataFrame([{"variant": v, "d_model": 128, "depth": d, "covariance": c, "cosine": 0.5} for v, g in
                           (("random", random_growth), ("mixit", mixit_growth)) for d, c in ((2, 0.01), (32, 0.01 * g))])
        return {"table6_depth": t6, "table7_signal": t7}

    assert _finding(tables(), 5)["holds"] is True
    assert _finding(tables(random_deep=60.0), 5)["holds"] is False  # random loses only 20 points
    assert _finding(tables(mixit_deep=85.0), 5)["holds"] is False  # mixit loses 15
    assert _finding(tables(random_growth=5.0), 5)["holds"] is False  # random's covariance grows only 5x
    assert _finding(tables(mixit_growth=3.0), 5)["holds"] is False
    # Either half alone gives a verdict; neither is "not measured".
    only_signal = {"table7_signal": tables()["table7_signal"]}
    assert _finding(only_signal, 5)["holds"] is True and "depth accuracy not measured" in _finding(only_signal, 5)["ours"]
    assert _not_measured(_finding({}, 5))
    # A control row (MixiT without sink heads) is reported beside the verdict and does not change it.
    with_control = tables(mixit_growth=6.0)
    control = pd.DataFrame([{"variant": "mixit, no sink", "d_model": 128, "depth": d, "covariance": c, "cosine": 0.0}
                            for d, c in ((2, 3e-5), (32, -2e-5))])
    with_control["table7_signal"] = pd.concat([with_control["table7_signal"], control], ignore_index=True)
    found = _finding(with_control, 5)
    assert found["holds"] is False and "mixit (with sink heads, as the authors' model) x6.0" in found["ours"]
    assert "(mixit, no sink: covariance 3e-05 -> -2e-05)" in found["ours"]
    # Random's loss read on its interval: seeds 30 points apart at 6 layers put a 50-point mean across 30.
    wide = tables()
    wide["table6_depth"].at[1, "values"] = _seeds(30.0, 30.0)
    assert _finding(wide, 5)["verdict"] == "inconclusive"
    # The growth's interval from the signal stage's spread over its seeds
    spread = tables(random_growth=12.0)
    spread["table7_signal"] = spread["table7_signal"].assign(covariance_std=[0.0, 0.05, 0.0, 0.0], n_seeds=3)
    assert _finding(spread, 5)["verdict"] == "inconclusive" and "random x12.0 [" in _finding(spread, 5)["ours"]


def _induction(qk=None, mixit=None, standard=None):
    """An induction table: per variant, overrides of a frozen_qk-like row that satisfies the criterion."""
    base = {"run": "khop/x", "task_head": "L1H2", "task_score": 0.5, "task_shuffled": 0.1, "task_chance": 0.04,
            "task_positional": 0.27, "ablation_drop": 25.0, "repeat_head": "L1H0", "repeat_score": 0.3,
            "repeat_chance": 0.14}
    rows = [{"variant": "frozen_qk", **base, **(qk or {})},
            {"variant": "mixit", **base, "task_score": 0.05, "task_shuffled": 0.05, **(mixit or {})}]
    if standard is not None:
        rows.insert(0, {"variant": "standard", **base, **standard})
    return {"induction": pd.DataFrame(rows, columns=INDUCTION_COLUMNS)}


def test_induction_verdict_on_task_aligned_scores():
    found = _finding(_induction(), 6)
    assert found["holds"] is True
    assert ("over 1 frozen_qk seed(s) (best L1H2, 0.500): score / chance 12.50 (one seed), score - chance +0.460 "
            "(one seed), score - shuffled sources +0.400 (one seed), ablating it costs 25.0 (one seed) points") in found["ours"]
    assert "repeated tokens: frozen_qk 0.30" in found["ours"]
    # Over seeds: one seed's head that ablating costs nothing leaves the cost's interval across 10 points.
    seeds = _induction()["induction"]
    seeds = pd.concat([seeds, seeds.iloc[:1].assign(run="khop/y", ablation_drop=2.0),
                       seeds.iloc[:1].assign(run="khop/z", ablation_drop=24.0)], ignore_index=True)
    assert _finding({"induction": seeds}, 6)["verdict"] == "inconclusive"
    failing = {
        "at 3x chance but not chance + 0.1": {"task_score": 0.13, "task_shuffled": 0.0},
        "chance + 0.1 but not 3x chance": {"task_score": 0.5, "task_chance": 0.2, "task_shuffled": 0.0},
        "as high on shuffled sources (position alone)": {"task_score": 0.15, "task_shuffled": 0.149},
        "ablating it costs under 10 points": {"ablation_drop": 9.9},
    }
    for why, qk in failing.items():
        assert _finding(_induction(qk=qk), 6)["holds"] is False, why
    assert _finding(_induction(qk={"task_score": 0.14, "task_shuffled": 0.04}), 6)["holds"] is True  # both margins met
    assert _finding(_induction(mixit={"task_score": 0.08}), 6)["holds"] is False  # mixit at 2x chance
    assert _finding(_induction(mixit={"task_score": 0.079}), 6)["holds"] is True
    assert _finding(_induction(standard={"task_score": 0.0}), 6)["holds"] is True  # standard is not part of it


def test_induction_not_measured_without_task_aligned_data():
    assert _not_measured(_finding(_induction()["induction"].iloc[:1].pipe(lambda d: {"induction": d}), 6))
    # Only repeated-token scores (an analysis without the task-aligned score): not measured, never judged on them.
    repeat_only = _induction(qk={"task_score": None, "task_head": None}, mixit={"task_score": None})
    found = _finding(repeat_only, 6)
    assert _not_measured(found) and "frozen_qk" in found["ours"] and "mixit" in found["ours"]
    no_ablation = _finding(_induction(qk={"ablation_drop": None}), 6)
    assert _not_measured(no_ablation) and "ablation" in no_ablation["ours"]
    assert _not_measured(_finding(_induction(qk={"task_shuffled": None}), 6))


def test_speed_verdict():
    def table(qk, mixit, spread=0.5):
        return {"speed": pd.DataFrame({"variant": ["standard", "frozen_qk", "mixit"], "faster_pct": [0.0, qk, mixit],
                                       "faster_pct_values": [[], _seeds(qk, spread), _seeds(mixit, spread)]})}

    assert _finding(table(20.0, 30.0), 7)["holds"] is True
    assert _finding(table(20.0, -3.0), 7)["holds"] is False
    assert _finding(table(0.0, 30.0, spread=0.0), 7)["holds"] is False  # as fast is not faster
    # A saving whose interval over the stage's own timed blocks reaches 0 is noise, not a finding.
    noisy = _finding(table(9.7, 30.0, spread=12.0), 7)
    assert noisy["verdict"] == "inconclusive" and "frozen_qk saves +9.7 [" in noisy["ours"]
    assert _finding(table(40.0, 30.0, spread=12.0), 7)["holds"] is True
    # Only what was measured counts (as for the other findings), and the missing variant is named.
    partial = _finding({"speed": table(20.0, 30.0)["speed"].iloc[:2]}, 7)
    assert partial["holds"] is True and "mixit not measured (speed measurement missing)" in partial["ours"]
    assert _not_measured(_finding({"speed": table(20.0, 30.0)["speed"].iloc[:1]}, 7))
    # A speed table written before the timed blocks were recorded is not judged on the saving alone.
    assert _not_measured(_finding({"speed": table(20.0, 30.0)["speed"].drop(columns="faster_pct_values")}, 7))


def test_induction_table_reads_the_task_aligned_summary(tmp_path):
    # Fake analysed k-hop runs: two frozen_qk seeds (the higher task-aligned score is kept) and a mixit
    # run analysed before the task-aligned score existed (repeated-token score only).
    def run(name, variant, summary):
        path = tmp_path / "khop" / name
        (path / "analysis").mkdir(parents=True)
        (path / "run.json").write_text(json.dumps({"train": {"variant": variant, "task": "khop", "task_params": {}}}))
        (path / "summary.json").write_text(json.dumps({"status": "finished", "eval_acc": 0.9}))
        (path / "analysis" / "analysis.json").write_text(json.dumps({"summary": summary}))

    heads = {"top_induction": {"layer": 0, "head": 1, "score": 0.2}, "chance": {"induction": 0.14}}
    def aligned(score, drop):
        return {"top": {"layer": 1, "head": 2, "score": score, "shuffled": 0.05}, "chance": 0.04, "positional": 0.27,
                "ablation": {"method": "mean", "accuracy": 0.7, "accuracy_drop": drop}}

    run("qk-0", "frozen_qk", {"heads": heads, "task_induction": aligned(0.3, 0.2)})
    run("qk-1", "frozen_qk", {"heads": heads, "task_induction": aligned(0.6, 0.25)})
    run("mixit", "mixit", {"heads": heads})
    table = build_tables(tmp_path)["induction"]
    assert list(table.columns) == INDUCTION_COLUMNS
    assert list(table.loc[table["variant"] == "frozen_qk", "run"]) == ["khop/qk-1", "khop/qk-0"]  # every seed, best first
    ind = table.drop_duplicates("variant").set_index("variant")
    qk = ind.loc["frozen_qk"]
    assert qk["run"] == "khop/qk-1" and qk["task_score"] == 0.6 and qk["ablation_drop"] == pytest.approx(25.0)
    assert qk["task_head"] == "L1H2" and qk["repeat_head"] == "L0H1" and qk["repeat_chance"] == 0.14
    assert pd.isna(ind.loc["mixit", "task_score"]) and ind.loc["mixit", "repeat_score"] == 0.2
    assert _not_measured(check_findings(build_tables(tmp_path))[5])


# --------------------------------------------------------------------------- verdicts against the authors' code
def _dyck(standard, mixit):
    rows = [_acc("dyck(max_pairs=8)", v, _seeds(a), eval_items=4000) for v, a in (("standard", standard), ("mixit", mixit))]
    return _tables(table3_tasks=pd.DataFrame(rows))


def test_each_verdict_category_both_ways():
    from mixit_lab.reproduce.verdicts import check_findings as check

    def verdict(ours, theirs):
        return check(ours, theirs)[2]

    failing = _dyck(90.5, 66.0)
    # Our numbers hold: "holds", whatever the reference says.
    assert verdict(_dyck(100.0, 98.0), _dyck(100.0, 64.4))["verdict"] == "holds"
    # They fail, and the authors' code at the same settings fails too: the claim does not show at this size.
    agrees = verdict(failing, _dyck(100.0, 64.4))
    assert agrees["verdict"] == "agrees" and agrees["holds"] is False
    assert agrees["reference"].startswith("dyck 100.0 vs 64.4, mixit - standard -35.6")  # its measured parts, numbers
    assert agrees["verdict_text"] == "does not hold at this size: the authors' code agrees on Dyck"
    # They fail while the authors' code holds: a reproduction failure, named as such.
    failure = verdict(failing, _dyck(100.0, 97.0))
    assert failure["verdict"] == "reproduction_failure" and "reproduction failure" in failure["verdict_text"]
    # No reference for the failing part: said so, never read as agreement.
    for none in (None, _tables()):
        found = verdict(failing, none)
        assert found["verdict"] == "no_reference" and found["reference"] == "none at these settings"
    # Nothing measured on our side: "not measured", whatever the reference.
    assert verdict(_tables(), _dyck(100.0, 64.4))["verdict"] == "not_measured"


def test_a_failing_part_without_reference_is_not_covered_by_another_parts_agreement():
    from mixit_lab.reproduce.verdicts import check_findings as check

    ours = _dyck(90.5, 66.0)
    ours["table3_tasks"] = pd.concat([ours["table3_tasks"], pd.DataFrame([
        _acc("sentiment(seq_len=64)", v, _seeds(a)) for v, a in (("standard", 78.5), ("mixit", 54.5))])],
        ignore_index=True)
    found = check(ours, _dyck(100.0, 64.4))[2]
    assert found["verdict"] == "no_reference"  # sentiment fails with no reference
    assert found["verdict_text"] == "does not hold: the authors' code agrees on Dyck; sentiment has no reference"
    theirs = _dyck(100.0, 64.4)
    theirs["table3_tasks"] = pd.concat([theirs["table3_tasks"], pd.DataFrame([
        _acc("sentiment(seq_len=64)", v, _seeds(a)) for v, a in (("standard", 80.0), ("mixit", 79.0))])],
        ignore_index=True)
    failure = check(ours, theirs)[2]
    assert failure["verdict"] == "reproduction_failure"  # theirs holds on sentiment
    assert failure["verdict_text"] == ("does not hold: the authors' code holds on sentiment (a reproduction failure) "
                                       "and agrees on Dyck")


def _table3(gaps, items=4000):
    """Table 3 rows: per task, standard at 90% and mixit `gap` points below (medians)."""
    return pd.DataFrame([_acc(f"{task}(x=1)", v, _seeds(a), eval_items=items)
                         for task, gap in gaps.items() for v, a in (("standard", 90.0), ("mixit", 90.0 - gap))])


def test_a_verdict_says_each_case_once_naming_its_parts():
    # The quick preset's finding 3: four tasks fail; the authors' code fails on two of them and has nothing on
    # the other two. Each case is said once, never "no reference" and "agrees" of the same parts.
    ours = _tables(table3_tasks=_table3({"addition": 0.0, "dyck": 25.0, "modadd": 15.0, "memorize": 6.0,
                                         "sentiment": 24.0}))
    theirs = _tables(table3_tasks=_table3({"dyck": 18.0, "modadd": 15.0}))
    found = check_findings(ours, theirs)[2]
    assert found["verdict"] == "no_reference"
    assert found["verdict_text"] == ("does not hold: the authors' code agrees on Dyck and modular addition; "
                                     "memorize and sentiment have no reference")
    # Per part, the two sides and whether they agree: the Study page's rows.
    parts = {p["key"]: p for p in found["parts"]}
    assert [p["part"] for p in found["parts"]] == ["addition", "Dyck", "modular addition", "memorize", "sentiment"]
    assert parts["dyck"]["ours"].startswith("dyck 90.0 vs 65.0, mixit - standard -25.0")
    assert parts["dyck"]["reference"].startswith("dyck 90.0 vs 72.0")
    assert (parts["dyck"]["holds"], parts["dyck"]["agrees"]) == (False, True)
    assert parts["sentiment"]["reference"] is None and parts["sentiment"]["agrees"] is None
    assert parts["addition"]["holds"] is True and parts["addition"]["agrees"] is None  # no reference for it
    # Every part agreeing: "at this size", and the parts named once.
    all_agree = check_findings(_tables(table3_tasks=_table3({"dyck": 25.0, "modadd": 15.0})), theirs)[2]
    assert all_agree["verdict_text"] == ("does not hold at this size: the authors' code agrees on Dyck and modular "
                                         "addition")
    # Where the authors' code holds and ours does not, agrees is False.
    theirs_hold = _tables(table3_tasks=_table3({"dyck": 1.0}))
    assert check_findings(ours, theirs_hold)[2]["parts"][1]["agrees"] is False
    # No reference at all: the failing parts named, once.
    alone = check_findings(ours, None)[2]
    assert alone["verdict_text"] == "does not hold: Dyck, modular addition, memorize and sentiment have no reference"
    # A finding of one part keeps the one-phrase verdict.
    lm = pd.DataFrame({"variant": ["standard", "frozen_qk", "mixit"], "log_ppl_values": [[4.0], [4.4], [4.6]]})
    assert check_findings(_tables(table2_lm=lm))[1]["verdict_text"] == "does not hold; no reference at these settings"


def test_finding_4_and_5_verdicts_name_their_regimes_and_halves():
    ours = _memorize_tables(bpp={**PAPER_BPP, "standard": 2.0},
                            override={(v, 48): {"accuracy": 1.0 if v == "standard" else 0.9} for v in PARAMS})
    theirs = {**ours, "table4_memorize_sizes": ours["table4_memorize_sizes"].query("n == 48")}
    theirs["table4_memorize"] = ours["table4_memorize"].query("regime == 'fixed'")
    found = check_findings(_tables(**ours), _tables(**theirs))[3]
    assert found["verdict_text"] == ("does not hold: the authors' code agrees on the paper's regime; the capacity "
                                     "regime has no reference")


def test_thresholds_are_named_data_and_the_criterion_is_generated_from_them():
    from dataclasses import fields, replace

    from mixit_lab.reproduce.findings import AlgorithmicFinding, InductionFinding
    from mixit_lab.reproduce.findings import FINDINGS

    assert [f.title for f in FINDINGS][0] == "Retrieval needs learned attention (Table 1)" and len(FINDINGS) == 7
    three = FINDINGS[2]
    assert isinstance(three, AlgorithmicFinding) and "mixit - standard >= -5 points" in three.criterion()
    assert "only with >= 100 held-out items, and a memorize set only where" in three.criterion()
    # One threshold, changed in one place, moves the verdict and the criterion's text together.
    tables = _tables(table3_tasks=_table3({"dyck": 6.0}))
    assert overall_of(three, tables) is False
    wider = replace(three, margin=10.0)
    assert overall_of(wider, tables) is True and "mixit - standard >= -10 points" in wider.criterion()
    assert "frozen_qk - standard >= -10 points" in FINDINGS[0].criterion()
    induction = InductionFinding(min_drop=30.0)
    assert "costs >= 30 points" in induction.criterion() and overall_of(induction, _induction()) is False
    assert {f.name for f in fields(InductionFinding)} == {"min_ratio", "min_margin", "min_drop", "mixit_max_ratio"}


def overall_of(finding, tables):
    from mixit_lab.reproduce.verdicts import overall

    return overall(finding.check({**_tables(), **tables}))


def test_every_claim_is_one_of_its_findings_parts():
    from mixit_lab.reproduce.findings import FINDINGS

    examples = [_tables(table1_retrieval=pd.DataFrame([_acc("retrieval(pairs=8)", v, _seeds(90.0))
                                                       for v in ("standard", "frozen_mlp", "frozen_qk", "mixit")])),
                _tables(table3_tasks=_table3({"dyck": 1.0})), _tables(**_memorize_tables()), _tables(**_induction()),
                _tables()]
    for finding in FINDINGS:
        keys = [p.key for p in finding.parts()]
        assert len(set(keys)) == len(keys) and len({p.label for p in finding.parts()}) == len(keys)
        for tables in examples:
            assert [c.name for c in finding.check(tables)] == keys, finding.title


def _fake_run(root, study, name, variant, task, params, acc, seed=0, **sizes):
    train = {"variant": variant, "task": task, "task_params": params, "seed": seed, "d_model": 64, "n_layers": 2,
             "n_heads": 4, "lr": 0.003, "steps": 1000, "batch_size": 128, "weight_decay": 0.01, **sizes}
    path = root / study / name
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"train": train}))
    (path / "summary.json").write_text(json.dumps({"status": "finished", "eval_acc": acc}))


def test_the_reference_counts_only_at_our_settings(tmp_path):
    from mixit_lab.reproduce.reference import reference_runs
    from mixit_lab.reproduce.tables import reference_tables
    from mixit_lab.analysis.runs import load_runs

    dyck = {"max_pairs": 8}
    _fake_run(tmp_path, "algorithmic", "std", "standard", "dyck", dyck, 0.905)
    _fake_run(tmp_path, "algorithmic-mixit", "mix", "mixit", "dyck", dyck, 0.66, n_heads=16)

    def record(variant, value, seed=0, **change):
        study = "algorithmic-mixit" if variant == "mixit" else "algorithmic"
        rec = {"study": study, "task": "dyck", "task_params": dyck, "variant": variant, "d_model": 64,
               "n_layers": 2, "n_heads": 16 if variant == "mixit" else 4, "steps": 1000, "batch_size": 128,
               "lr": 0.003, "warmup_steps": 50, "weight_decay": 0.01, "seed": seed, "metric": "accuracy",
               "value": value}
        return {**rec, **change}

    records = [record("standard", 100.0), record("standard", 100.0, seed=1), record("mixit", 64.4),
               record("mixit", 66.4, seed=1),
               record("mixit", 10.0, steps=3000),  # other steps: another setting
               record("standard", 50.0, n_heads=16),  # standard at mixit's head count: no run of ours
               record("frozen_qk", 99.0)]  # no frozen_qk run of ours
    theirs = reference_runs(records, load_runs(tmp_path))
    assert sorted(zip(theirs["variant"], theirs["seed"])) == [("mixit", 0), ("mixit", 1), ("standard", 0), ("standard", 1)]
    assert set(theirs["eval_acc"]) == {1.0, 0.644, 0.664} and set(theirs["group"]) == {"algorithmic"}
    # The report's tables group by study: a record of another study at the same settings does not join this one.
    assert len(reference_tables(tmp_path, [record("standard", 20.0, study="schedule-dyck")])["table3_tasks"]) == 0
    t3 = reference_tables(tmp_path, records)["table3_tasks"].set_index("variant")
    assert t3.loc["mixit", "median"] == pytest.approx(65.4) and t3.loc["standard", "seeds"] == 2
    found = check_findings(build_tables(tmp_path), reference_tables(tmp_path, records))[2]
    assert found["verdict"] == "agrees" and "dyck 100.0 vs 65.4" in found["reference"]
    # A learning rate written as 3e-3 in YAML and 0.003 in JSON is the same setting; 1e-2 is not.
    assert len(reference_runs([record("standard", 100.0, lr=3e-3)], load_runs(tmp_path))) == 1
    assert len(reference_runs([record("standard", 100.0, lr=1e-2)], load_runs(tmp_path))) == 0
    # Warmup (ours: 5% of the steps unless set) and weight decay are settings too.
    assert len(reference_runs([record("standard", 100.0, warmup_steps=500)], load_runs(tmp_path))) == 0
    assert len(reference_runs([record("standard", 100.0, weight_decay=1e-3)], load_runs(tmp_path))) == 0
    # Side by side, per setting and variant: per-seed values, medians, and whether they differ beyond the spread.
    from mixit_lab.reproduce.reference import end_to_end

    e2e = end_to_end(load_runs(tmp_path), records).set_index("variant")
    assert list(e2e.index) == ["standard", "mixit"]
    assert e2e.loc["standard", "ours"] == "90.5" and e2e.loc["standard", "theirs"] == "100.0 / 100.0"
    assert e2e.loc["standard", "difference"] == pytest.approx(-9.5) and bool(e2e.loc["standard", "beyond_spread"])
    assert e2e.loc["mixit", "spread"] == pytest.approx(2.0) and not e2e.loc["mixit", "beyond_spread"]  # 66.0 vs 65.4
    # Their code at its own default schedule (warmup 500, recorded as schedule "authors") is no run of ours at ours,
    # but stands beside ours in the end-to-end table.
    own = [record("mixit", 30.0, warmup_steps=500, schedule="authors"),
           record("mixit", 32.0, seed=1, warmup_steps=500, schedule="authors")]
    assert len(reference_runs(own, load_runs(tmp_path))) == 0
    e2e = end_to_end(load_runs(tmp_path), records + own).set_index("variant")
    assert e2e.loc["mixit", "theirs_own_schedule"] == "30.0 / 32.0" and e2e.loc["mixit", "theirs_own_schedule_median"] == 31.0
    assert e2e.loc["standard", "theirs_own_schedule"] == "—" and e2e.loc["mixit", "schedule"] == "ours"
    # One setting's run recorded by two studies (a tuned study's seed 0 at the chosen rate) counts once.
    twice = own + [dict(own[0], study="schedule-dyck")]
    assert end_to_end(load_runs(tmp_path), records + twice).set_index("variant").loc["mixit", "theirs_own_schedule"] \
        == "30.0 / 32.0"
    # MixiT as the authors' depth script trains it shares our mixit run's settings.
    assert list(reference_runs([record("mixit_weight_frozen", 20.0, n_heads=16)], load_runs(tmp_path))["variant"]) == \
        ["mixit_weight_frozen"]


def test_the_report_reads_the_runs_once_and_findings_json_names_each_findings_runs(tmp_path, monkeypatch):
    import mixit_lab.reproduce.emergence
    import mixit_lab.reproduce.report
    import mixit_lab.reproduce.tables
    from mixit_lab.analysis.runs import load_runs

    runs_dir = tmp_path / "runs"
    for variant, acc in (("standard", 0.905), ("mixit", 0.66), ("frozen_qk", 0.9)):
        _fake_run(runs_dir, "algorithmic", f"dyck-{variant}", variant, "dyck", {"max_pairs": 8}, acc)
    _fake_run(runs_dir, "retrieval", "standard", "standard", "retrieval", {"pairs": 8}, 1.0)
    record = {"study": "algorithmic", "task": "dyck", "task_params": {"max_pairs": 8}, "variant": "mixit",
              "d_model": 64, "n_layers": 2, "n_heads": 4, "steps": 1000, "batch_size": 128, "lr": 0.003,
              "weight_decay": 0.01, "seed": 0, "metric": "accuracy", "value": 64.4}
    reads = []
    monkeypatch.setattr(mixit_lab.reproduce.report, "load_runs", lambda root: reads.append(root) or load_runs(root))
    for module in (mixit_lab.reproduce.tables, mixit_lab.reproduce.emergence):  # every builder takes the one table
        monkeypatch.setattr(module, "load_runs", lambda root: pytest.fail("a table builder read the runs again"))
    findings = mixit_lab.reproduce.report.write_report(runs_dir, tmp_path / "report", {"preset": "t"}, reference=[record])
    assert reads == [runs_dir]
    given = mixit_lab.reproduce.report.write_report(runs_dir, tmp_path / "again", {"preset": "t"}, reference=[record],
                                          runs=load_runs(runs_dir))
    assert len(reads) == 1 and given == findings

    saved = json.loads((tmp_path / "report" / "findings.json").read_text())
    three = saved[2]
    assert {"id", "finding", "criterion", "ours", "holds", "verdict", "verdict_text", "reference"} <= set(three)
    # Finding 3 compares standard and mixit: their dyck runs, not frozen_qk's, nor another table's.
    assert three["runs"] == ["algorithmic/dyck-mixit", "algorithmic/dyck-standard"]
    assert three["runs"] == sorted(load_runs(runs_dir).query("task == 'dyck' and variant != 'frozen_qk'")["run"])
    dyck = next(p for p in three["parts"] if p["part"] == "Dyck")
    assert dyck["ours"].startswith("dyck 90.5 vs 66.0, mixit - standard -24.5") and dyck["holds"] is False
    assert dyck["reference"] is None and dyck["agrees"] is None  # the record has no standard: not measured
    assert saved[0]["runs"] == ["retrieval/standard"] and saved[0]["parts"][0]["part"] == "retrieval"
    assert saved[6]["runs"] == []  # speed reads the speed stage's file, no run
    csv = pd.read_csv(tmp_path / "report" / "findings.csv")
    assert "runs" not in csv and "parts" not in csv and list(csv["id"]) == list(range(1, 8))


def test_the_beyond_table_reads_each_tasks_headline_metric(tmp_path):
    # A task judged by its loss (TASKS[...].headline, the language model's) is reported as log-perplexity.
    _fake_run(tmp_path, "beyond", "ret", "standard", "retrieval", {"pairs": 8}, 0.9)
    _fake_run(tmp_path, "beyond", "lm", "standard", "lm", {"seq_len": 64}, 0.3)
    (tmp_path / "beyond" / "lm" / "summary.json").write_text(json.dumps({"status": "finished", "eval_acc": 0.3,
                                                                          "eval_loss": 4.25}))
    beyond = build_tables(tmp_path)["beyond"].set_index("metric")
    assert beyond.loc["log-ppl", "value"] == pytest.approx(4.25)
    assert beyond.loc["accuracy %", "value"] == pytest.approx(90.0)


def test_the_recorded_reference_file_loads(tmp_path):
    from mixit_lab.reproduce.reference import REFERENCE_FILE, load_reference

    assert load_reference(tmp_path / "none.json") == []
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"records": {"x": 1}}))
    with pytest.raises(ValueError, match="bad.json"):
        load_reference(bad)
    if REFERENCE_FILE.is_file():  # the recorded file: every record names its provenance
        for rec in load_reference():
            assert {"task", "variant", "seed", "command", "authors_commit", "date", "machine"} <= set(rec), rec


# --------------------------------------------------------------------------- end to end
def _reproduce_cmd(tmp_path: Path, corpora: dict[str, Path]) -> list[str]:
    """The smoke preset on the generated corpora (tests/corpora.py): the text studies run without ../shared."""
    return [sys.executable, "-m", "mixit_lab.cli", "reproduce", "--preset", "smoke", "--workers", "2", "--quiet",
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
    time.sleep(2)  # the workers lead their own process groups and end themselves within 0.5 s of their parent
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
    assert killed and finished_before < len(runs) == 70  # it really was interrupted
    # The text studies ran, on the generated corpora given on the command line (never ../shared/data).
    assert sum(r.startswith("lm/") for r in runs) == 3 and sum(r.startswith("sentiment/") for r in runs) == 2
    for kind in ("lm", "sentiment"):
        assert not manifest["text"][kind]["skipped"] and manifest["text"][kind]["note"].endswith("(given)")
    for run in runs:
        run_dir = tmp / "runs" / run
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished", run
        assert (run_dir / "analysis" / "analysis.json").is_file(), run
    assert (tmp / "runs" / "signal" / "signal.csv").is_file() and (tmp / "runs" / "speed" / "speed.csv").is_file()
    signal_rows = pd.read_csv(tmp / "runs" / "signal" / "signal.csv")
    assert set(signal_rows["variant"]) == {"random", "mixit", "mixit, no sink"}  # the smoke preset's control
    no_sink = signal_rows[signal_rows["variant"] == "mixit, no sink"]
    assert not no_sink.set_index(["depth", "layer"])["cosine"].equals(
        signal_rows[signal_rows["variant"] == "mixit"].set_index(["depth", "layer"])["cosine"])
    assert f"train: {len(runs)} runs, {finished_before} already finished" in done.stdout


@pytest.mark.slow
def test_every_figure_and_report_table_exists(smoke):
    from mixit_lab import figures
    tmp, done, _, _, _ = smoke
    for name in figures.FIGURES:
        if name.startswith("lr_"):  # the smoke preset tries one rate per study: nothing to draw against the rate
            assert f"figure {name}: skipped: no tuning record" in done.stdout, name  # (tests/test_figures.py draws them)
            assert not (tmp / "figs" / f"{name}.png").exists()
            continue
        for ext in ("png", "pdf"):
            path = tmp / "figs" / f"{name}.{ext}"
            assert path.is_file() and path.stat().st_size > 1000, path
    report = (tmp / "report" / "report.md").read_text()
    for title in ("## Findings", "Table 1", "Table 2", "Table 3", "Table 4", "Table 6", "Table 7",
                  "## Induction heads", "## Beyond the paper", "## Training speed", "## Figures"):
        assert title in report, title
    findings = pd.read_csv(tmp / "report" / "findings.csv")
    assert list(findings["id"]) == list(range(1, 8))
    for table in ("table1_retrieval", "table2_lm", "table3_tasks", "table4_memorize", "table6_depth",
                  "table7_signal", "speed", "beyond"):
        assert len(pd.read_csv(tmp / "report" / f"{table}.csv")) > 0, table
    assert sorted(pd.read_csv(tmp / "report" / "table2_lm.csv")["variant"]) == ["frozen_qk", "mixit", "standard"]
    assert (pd.read_csv(tmp / "report" / "table3_tasks.csv")["task"].str.startswith("sentiment")).sum() == 2
    # Grid models have their own table, labelled, and stay out of the paper's.
    assert sorted(pd.read_csv(tmp / "report" / "beyond.csv")["variant"]) == [
        "mixit", "mixit [attention mixing,softmax]", "standard [freeze v,o]"]
    assert not pd.read_csv(tmp / "report" / "table1_retrieval.csv")["variant"].str.contains(r"\[").any()
    # Each text table names its corpus.
    assert "**Corpus**: " in report and "articles.txt (given)." in report
    assert "**Sentiment rows**: " in report and "sentences.txt (given)." in report


@pytest.mark.slow
def test_rerun_trains_and_analyses_nothing(smoke):
    tmp, _, _, _, cmd = smoke
    stamps = {p: p.stat().st_mtime_ns for p in (tmp / "runs").glob("*/*/checkpoint/model.safetensors")}
    report_made = (tmp / "report" / "report.md").stat().st_mtime_ns
    again = subprocess.run(cmd, cwd=tmp, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 to train" in again.stdout
    assert "analyze: 0 computed" in again.stdout
    assert "signal: cached" in again.stdout and "speed: cached" in again.stdout
    assert stamps == {p: p.stat().st_mtime_ns for p in (tmp / "runs").glob("*/*/checkpoint/model.safetensors")}
    # the figures and the report are not made again either: their inputs did not change
    assert "figures: unchanged" in again.stdout and "report: unchanged" in again.stdout
    assert report_made == (tmp / "report" / "report.md").stat().st_mtime_ns


def test_a_failing_figure_leaves_the_others_and_the_report(tmp_path, monkeypatch, capsys):
    # One figure raising (a bug, a malformed file) used to abort the reproduction: no report, reproduce.json
    # left "running", a traceback. Now it is listed with its one-line reason and the command exits 1.
    from mixit_lab import figures
    from mixit_lab.cli.main import main

    (tmp_path / "tiny.yaml").write_text(
        "train: {steps: 4, batch_size: 8, eval_every: 4, eval_samples: 16}\n"
        "studies:\n  algorithmic: {variants: [standard, mixit], tasks: [{addition: {digits: 2}}],"
        " sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]}\n"
        "analysis: {n_seqs: 4, seq_len: 8, eval_samples: 16}\nskip: [signal, speed]\n")

    def broken(runs_dir):
        raise RuntimeError("bad data in the runs folder\nsecond line")

    monkeypatch.setattr(figures.FIGURES["task_accuracy"], "plot", broken)
    args = ["reproduce", "--preset", str(tmp_path / "tiny.yaml"), "--workers", "1", "--quiet",
            "--out", str(tmp_path / "runs"), "--report-dir", str(tmp_path / "report"),
            "--figures-dir", str(tmp_path / "figs")]
    assert main(args) == 1
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["status"] == "finished" and manifest["failed_runs"] == 0
    assert manifest["failed_figures"] == {"task_accuracy": "RuntimeError: bad data in the runs folder"}
    report = (tmp_path / "report" / "report.md").read_text()
    assert "- task_accuracy: **failed** (RuntimeError: bad data in the runs folder)" in report
    assert (tmp_path / "figs" / "depth_accuracy.png").is_file() or "depth_accuracy" not in report
    out = capsys.readouterr()
    assert "figure task_accuracy: FAILED: RuntimeError: bad data in the runs folder" in out.out
    assert "Traceback" not in out.out + out.err


TINY_PRESET = (
    "train: {steps: 4, batch_size: 8, eval_every: 4, eval_samples: 16}\n"
    "studies:\n  algorithmic: {variants: [standard, mixit], tasks: [{addition: {digits: 2}}],"
    " sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]}\n"
    "analysis: {n_seqs: 4, seq_len: 8, eval_samples: 16}\nskip: [signal, speed]\n")


def test_a_rerun_redoes_figures_and_report_only_when_their_inputs_changed(tmp_path, monkeypatch, capsys):
    from mixit_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    args = ["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs",
            "--report-dir", "report", "--figures-dir", "figs"]
    assert main(args) == 0
    first = capsys.readouterr().out
    report = tmp_path / "report" / "report.md"
    figs = sorted((tmp_path / "figs").glob("*.png"))
    stamps = {p: p.stat().st_mtime_ns for p in [report, *figs]}
    assert "unchanged" not in first and figs

    assert main(args) == 0  # nothing changed: nothing is redone
    second = capsys.readouterr().out
    assert "0 to train" in second and "figures: unchanged" in second and "report: unchanged" in second
    assert stamps == {p: p.stat().st_mtime_ns for p in stamps}
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert manifest["findings"] and set(manifest["inputs"]) == {"figures", "report"}

    analysis = next((tmp_path / "runs").glob("algorithmic/*/analysis/analysis.json"))
    os.utime(analysis, ns=(analysis.stat().st_atime_ns, analysis.stat().st_mtime_ns + 10**9))  # an input changed
    assert main(args) == 0
    third = capsys.readouterr().out
    assert "unchanged" not in third and report.stat().st_mtime_ns != stamps[report]



def test_a_rerun_starts_no_analysis_worker_for_runs_whose_analysis_is_current(tmp_path, monkeypatch, capsys):
    # Was: a worker per run, each saying "cached" after parsing every table: 30 s for 2,000 runs.
    import mixit_lab.reproduce.analyses
    from mixit_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET)
    args = ["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs"]
    assert main(args) == 0
    given, real = [], mixit_lab.reproduce.analyses.pool_map

    def recorded(fn, jobs, workers, failed=None):
        given.append([job[0] for job in jobs])
        return real(fn, jobs, workers, failed)

    monkeypatch.setattr(mixit_lab.reproduce.analyses, "pool_map", recorded)
    capsys.readouterr()
    assert main(args) == 0
    assert given == [[]] and "analyze: 0 computed, 2 cached, 0 failed" in capsys.readouterr().out
    heads = next((tmp_path / "runs").glob("algorithmic/*mixit*/analysis/heads.csv"))
    heads.write_text("not,the,columns\n1,2,3\n")  # a damaged table: that run, and only it, is analysed again
    with pytest.warns(UserWarning, match="heads.csv: damaged analysis table"):
        assert main(args) == 0
    assert given[-1] == [f"algorithmic/{heads.parent.parent.name}"] and "1 computed, 1 cached" in capsys.readouterr().out

def test_reproduce_records_where_its_study_is(tmp_path, monkeypatch, capsys):
    """.mixit_cache/last_study.json in the working directory, and the manifest, say where the outputs went."""
    from mixit_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(TINY_PRESET.replace("[standard, mixit]", "[standard]"))
    assert main(["reproduce", "--preset", "tiny.yaml", "--workers", "1", "--quiet", "--out", "runs",
                 "--report-dir", "rep", "--figures-dir", "figs"]) == 0
    last = json.loads((tmp_path / ".mixit_cache" / "last_study.json").read_text())
    assert last == {"runs_dir": str((tmp_path / "runs").resolve()), "report_dir": str((tmp_path / "rep").resolve()),
                    "figures_dir": str((tmp_path / "figs").resolve()), "preset": "tiny"}
    manifest = json.loads((tmp_path / "runs" / "reproduce.json").read_text())
    assert (manifest["report_dir"], manifest["figures_dir"]) == ("rep", "figs")
    assert manifest["report_dir_resolved"] == last["report_dir"]


def test_a_working_directory_that_cannot_take_the_pointer_still_finishes_the_reproduction(tmp_path, monkeypatch,
                                                                                             capsys):
    """Every output folder named elsewhere, and .mixit_cache unwritable in the working directory (a file there: as
    a read-only directory would, for root too): the pointer for `mixit app` is left out with a note, written last,
    and reproduce.json says finished."""
    from mixit_lab.cli.main import main

    cwd, outputs = tmp_path / "cwd", tmp_path / "outputs"
    cwd.mkdir()
    outputs.mkdir()
    (cwd / ".mixit_cache").write_text("not a folder")
    (outputs / "tiny.yaml").write_text(TINY_PRESET.replace("[standard, mixit]", "[standard]"))
    monkeypatch.chdir(cwd)
    code = main(["reproduce", "--preset", str(outputs / "tiny.yaml"), "--workers", "1", "--quiet", "--out",
                 str(outputs / "runs"), "--report-dir", str(outputs / "rep"), "--figures-dir", str(outputs / "figs")])
    assert code == 0 and sorted(p.name for p in cwd.iterdir()) == [".mixit_cache"]
    assert "will not find this study" in capsys.readouterr().out
    assert json.loads((outputs / "runs" / "reproduce.json").read_text())["status"] == "finished"


def test_an_authors_metric_that_is_not_ours_is_shown_but_not_compared(tmp_path):
    # Their addition accuracy scores the token after each answer token: a number, but not our metric.
    from mixit_lab.analysis.runs import load_runs
    from mixit_lab.reproduce.reference import end_to_end

    _fake_run(tmp_path, "depth", "r", "random", "addition", {"digits": 2}, 0.7, steps=3000, n_heads=16)
    record = {"study": "depth-random", "task": "addition", "task_params": {"digits": 2}, "variant": "random",
              "d_model": 64, "n_layers": 2, "n_heads": 16, "steps": 3000, "batch_size": 128, "lr": 0.003,
              "warmup_steps": 150, "weight_decay": 0.01, "seed": 0, "metric": "accuracy", "value": 86.7}
    row = end_to_end(load_runs(tmp_path), [record]).iloc[0]
    assert row["theirs"] == "86.7" and row["ours"] == "70.0"
    assert row["difference"] is None and row["beyond_spread"] is None and "first sum digit" in row["note"]


def test_the_reference_is_read_at_each_variants_chosen_learning_rate(tmp_path):
    # A tuned study trains every rate once; the verdict's "authors' code, same settings" must be at the rate chosen
    # for each variant, not at a rate of the grid that lost (their mixit at 3e-3 when ours was chosen at 1e-2).
    from mixit_lab.reproduce.tables import reference_tables
    from mixit_lab.analysis.runs import load_runs

    dyck = {"max_pairs": 8}
    _fake_run(tmp_path, "algorithmic", "std", "standard", "dyck", dyck, 0.9)
    _fake_run(tmp_path, "algorithmic-mixit", "mix3", "mixit", "dyck", dyck, 0.6, n_heads=16)
    _fake_run(tmp_path, "algorithmic-mixit", "mix10", "mixit", "dyck", dyck, 0.65, n_heads=16, lr=0.01)
    runs = load_runs(tmp_path)
    runs["selected"] = ~runs["run"].str.endswith("mix3")
    rec = {"study": "algorithmic-mixit", "task": "dyck", "task_params": dyck, "variant": "mixit", "d_model": 64,
           "n_layers": 2, "n_heads": 16, "steps": 1000, "batch_size": 128, "lr": 0.003, "warmup_steps": 50,
           "weight_decay": 0.01, "seed": 0, "metric": "accuracy", "value": 30.0}
    assert len(reference_tables(tmp_path, [rec], runs=runs)["table3_tasks"]) == 0
    t3 = reference_tables(tmp_path, [{**rec, "lr": 0.01}], runs=runs)["table3_tasks"]
    assert list(t3["variant"]) == ["mixit"] and t3["median"].iloc[0] == pytest.approx(30.0)


def test_the_reference_never_borrows_another_studys_runs(tmp_path):
    # Our Table 3 memorize item (width 64, group algorithmic) has no reference; the authors' memorization-study
    # records (width 16, group memorize) must not stand in for it, as our own tables' fallback would do.
    from mixit_lab.reproduce.tables import reference_tables

    _fake_run(tmp_path, "algorithmic", "m", "standard", "memorize", {"n": 48, "d": 2}, 1.0)
    _fake_run(tmp_path, "memorize", "m16", "standard", "memorize", {"n": 128, "d": 2}, 0.2, d_model=16)
    record = {"study": "memorize", "task": "memorize", "task_params": {"n": 128, "d": 2}, "variant": "standard",
              "d_model": 16, "n_layers": 2, "n_heads": 4, "steps": 1000, "batch_size": 128, "lr": 0.003,
              "warmup_steps": 50, "weight_decay": 0.01, "seed": 0, "metric": "accuracy", "value": 19.5}
    assert len(reference_tables(tmp_path, [record])["table3_tasks"]) == 0
    assert len(build_tables(tmp_path)["table3_tasks"]) == 1  # ours: the algorithmic study's own run


# --------------------------------------------------------------------------- Table 7 on the authors' model
SIGNAL_BLOCK = {"depths": [1, 2], "widths": [16], "seeds": [0, 1], "n_seqs": 2, "n_ctx": 8, "d_vocab": 32, "n_heads": 2,
                "controls": {"mixit, no sink": {"variant": "mixit", "sink_head": False}}}
SIGNAL_LABELS = {"random": ("random", {}), "mixit": ("mixit", {}), "mixit, no sink": ("mixit", {"sink_head": False})}


def _signal_records(growth, seeds=(0, 1), **change):
    """Signal records of the authors' model at init (benchmarks/authors_signal.py) at SIGNAL_BLOCK's settings: per
    label, the last-layer covariance at depth 2 is growth[label] times depth 1's (seed s scales both by 1 + s/10)."""
    return [{"preset": "t", "study": "signal", "task": "signal", "task_params": {"n_ctx": 8, "d_vocab": 32, "n_seqs": 2},
             "variant": label, "base_variant": variant, "model_overrides": fields, "d_model": 16, "n_layers": depth,
             "n_heads": 2, "seed": seed, "covariance": 0.01 * (growth[label] if depth == 2 else 1.0) * (1 + seed / 10),
             "cosine": 0.1 * depth, **change}
            for label, (variant, fields) in SIGNAL_LABELS.items() for depth in (1, 2) for seed in seeds]


@pytest.fixture(scope="module")
def signal_dir(tmp_path_factory):
    """A runs folder whose signal stage ran at SIGNAL_BLOCK (signal/signal.csv and its cache key)."""
    from mixit_lab.reproduce.pipeline import signal_stage
    from mixit_lab.reproduce.stage_options import SignalOptions

    out = tmp_path_factory.mktemp("runs")
    signal_stage(SignalOptions.from_dict(SIGNAL_BLOCK), out, lambda _: None)
    return out


@pytest.mark.parametrize("block", [{}, SIGNAL_BLOCK])
def test_the_reference_reads_the_signal_stage_settings_back_from_its_cache_key(tmp_path, monkeypatch, block):
    """What the stage ran at, its defaults included, is what the reference reads beside signal.csv."""
    import mixit_lab.analysis.signal
    from mixit_lab.reproduce.pipeline import signal_stage
    from mixit_lab.reproduce.stage_options import SignalOptions

    options = SignalOptions.from_dict(block)
    monkeypatch.setattr(mixit_lab.analysis.signal, "signal_propagation", lambda **kw: pd.DataFrame({"variant": []}))
    signal_stage(options, tmp_path, lambda _: None)
    key = json.loads((tmp_path / "signal" / "signal.json").read_text())
    assert SignalOptions.from_dict(key) == options and key == options.cache_key()


def test_table7_reference_from_the_authors_model_at_our_signal_settings(signal_dir, tmp_path):
    from mixit_lab.analysis.runs import load_runs
    from mixit_lab.reproduce.reference import reference_runs, reference_signal
    from mixit_lab.reproduce.tables import reference_tables

    path = signal_dir / "signal" / "signal.csv"
    records = _signal_records({"random": 100.0, "mixit": 8.0, "mixit, no sink": 1.0})
    t7 = reference_signal(records, path)
    assert sorted(zip(t7["variant"], t7["depth"])) == sorted((v, d) for v in SIGNAL_LABELS for d in (1, 2))
    row = t7[(t7["variant"] == "random") & (t7["depth"] == 2)].iloc[0]
    assert row["covariance"] == pytest.approx(0.01 * 100 * 1.05) and row["cosine"] == pytest.approx(0.2)  # seed mean
    # A control is matched by what it sets, not by its label; the row carries our label.
    renamed = [dict(r, variant="no sink") if r["variant"] == "mixit, no sink" else r for r in records]
    assert set(reference_signal(renamed, path)["variant"]) == set(SIGNAL_LABELS)
    # Only at our settings and with every seed of ours: otherwise that row has no reference.
    missing_seed = [r for r in records if not (r["variant"] == "random" and r["seed"] == 1)]
    assert "random" not in set(reference_signal(missing_seed, path)["variant"])
    assert reference_signal(_signal_records({k: 1.0 for k in SIGNAL_LABELS}, n_heads=4), path).empty
    other_inputs = [dict(r, task_params={**r["task_params"], "n_seqs": 4}) for r in records]
    assert reference_signal(other_inputs, path).empty
    assert set(reference_signal(_signal_records({"random": 1.0, "mixit": 1.0, "mixit, no sink": 1.0}, seeds=(0, 1, 2)),
                                path)["variant"]) == set(SIGNAL_LABELS)  # extra seeds are not ours: left out
    # Without our stage's settings there is nothing to compare with.
    assert reference_signal(records, tmp_path / "signal" / "signal.csv").empty
    # Signal records are never training runs; the reference tables give Table 7 from them.
    assert reference_runs(records, load_runs(signal_dir)).empty
    ref = reference_tables(signal_dir, records)
    assert len(ref["table7_signal"]) == 6 and set(ref["table7_signal"]["variant"]) == set(SIGNAL_LABELS)


def test_finding_5_reads_the_covariance_reference_part_by_part(signal_dir):
    from mixit_lab.reproduce.tables import reference_tables

    def t6(random_deep):
        return pd.DataFrame([{"variant": v, "n_layers": n, "accuracy": a, "values": _seeds(a)} for v, n, a in
                             (("random", 2, 80.0), ("random", 6, random_deep), ("mixit", 2, 100.0), ("mixit", 6, 99.0))])

    # Ours: random loses too little, and mixit's covariance grows 6x (the quick preset's picture).
    ours_t7 = pd.DataFrame([{"variant": v, "d_model": 16, "depth": d, "covariance": c, "cosine": 0.5} for v, g in
                            (("random", 120.0), ("mixit", 6.0)) for d, c in ((1, 0.01), (2, 0.01 * g))])
    ours = _tables(table6_depth=t6(70.0), table7_signal=ours_t7)

    def theirs(growth):
        ref = reference_tables(signal_dir, _signal_records(growth) if growth else [])
        return {**ref, "table6_depth": t6(75.0)}

    # Their model's mixit grows 8x too: the authors' code agrees on both parts.
    found = check_findings(ours, theirs({"random": 110.0, "mixit": 8.0, "mixit, no sink": 1.0}))[4]
    cov = found["parts"][1]
    assert found["verdict"] == "agrees" and "the covariance at init" in found["verdict_text"]
    assert "no reference" not in found["verdict_text"]
    assert cov["key"] == "covariance at init" and cov["reference_holds"] is False and cov["agrees"] is True
    assert "random x110.0" in cov["reference"] and "mixit (with sink heads, as the authors' model) x8.0" in cov["reference"]
    assert "(mixit, no sink: covariance 0.011 -> 0.011)" in cov["reference"]  # seed means
    # Their mixit holds (1.5x) where ours grows 6x: a reproduction failure on that part alone.
    found = check_findings(ours, theirs({"random": 110.0, "mixit": 1.5, "mixit, no sink": 1.0}))[4]
    assert found["verdict"] == "reproduction_failure"
    assert found["parts"][1]["reference_holds"] is True and found["parts"][0]["reference_holds"] is False
    # Without their signal records the covariance part has no reference, and the verdict says so.
    found = check_findings(ours, theirs(None))[4]
    assert found["verdict"] == "no_reference" and found["parts"][1]["reference"] is None
    assert "no reference" in found["verdict_text"] and "depth accuracy" in found["verdict_text"]


def test_images_drawn_inside_the_figures_package_do_not_change_the_inputs_fingerprint(tmp_path):
    """A figures folder given inside the figures package (once the default, figures/out/): what a study draws there
    is not code, so a fresh study's first rerun finds its figures and report unchanged instead of redrawing them."""
    import pandas as pd

    from mixit_lab.reproduce.pipeline import PROJECT_ROOT, inputs_fingerprint

    runs = pd.DataFrame({"path": [], "variant": []})
    before = inputs_fingerprint(runs, tmp_path, {"preset": "x"})
    probe = PROJECT_ROOT / "figures" / "out" / "_fingerprint_probe" / "figure.png"
    probe.parent.mkdir(parents=True, exist_ok=True)
    try:
        probe.write_bytes(b"\x89PNG not code")
        assert inputs_fingerprint(runs, tmp_path, {"preset": "x"}) == before
    finally:
        probe.unlink()
        probe.parent.rmdir()
    assert inputs_fingerprint(runs, tmp_path, {"preset": "y"}) != before  # the options still count


def test_the_authors_schedule_table_reads_a_tuning_only_studys_runs_from_the_record():
    from mixit_lab.analysis.runs import COLUMNS
    from mixit_lab.reproduce.report import schedules_table

    def row(run, group, schedule, lr, seed, acc):
        return {**{c: None for c in COLUMNS}, "run": run, "group": group, "study": group, "status": "finished",
                "task": "sentiment", "task_label": "sentiment(seq_len=64)", "variant": "mixit", "d_model": 64,
                "n_layers": 2, "n_heads": 4, "steps": 300, "schedule": schedule, "lr": lr, "seed": seed,
                "eval_acc": acc, "selected": True}

    ours = pd.DataFrame([row(f"sentiment/s{s}", "sentiment", "ours", 3e-4, s, 0.5 + s / 100) for s in range(3)])
    record = pd.DataFrame([row("schedule-sentiment/a", "schedule", "authors", 1e-3, 0, 0.6),
                           {**row("schedule-sentiment/b", "schedule", "authors", 3e-3, 0, 0.9), "selected": False}])
    table = schedules_table(ours, record).set_index("schedule")
    assert table.loc["authors", "values"] == [60.0] and table.loc["authors", "lr"] == "0.001"  # the chosen rate only
    assert table.loc["ours", "values"] == pytest.approx([50.0, 51.0, 52.0]) and table.loc["ours", "seeds"] == 3
    assert schedules_table(ours).empty  # no runs at the authors' schedule: no table
