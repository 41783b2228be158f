"""mixit_lab.reproduce.emergence and the scale figures: tables equal the runs' metrics, the sentences follow the gaps,
the figures draw what they are given, and the scale preset loads with every study in group `scale`."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from mixit_lab.figures import FIGURE_NAMES, FIGURES, figures_for_group, make_all
from mixit_lab.figures.common import NoData
from mixit_lab.reproduce.emergence import (FINDINGS, PAPER_MEMORIZE_BITS, PAPER_SENTIMENT, TABLE_NAMES, emergence_section,
                                 emergence_tables, gap_sentence, trend_word)
from mixit_lab.reproduce.corpora import TextChoice
from mixit_lab.reproduce.pipeline import preset_runs
from mixit_lab.reproduce.preset import load_preset
from mixit_lab.training.rundir import group_of

SCALE_FIGURES = ("scale_dyck", "scale_sentiment", "scale_memorize", "scale_depth")
FROZEN = "mixit [freeze v,o,mlp,norms]"


def _run(root, study, variant, task, params, acc, seed=0, memory=None, extra=None, status="finished", **sizes):
    """A fake run directory: run.json + summary.json, and analysis/analysis.json with summary.memory if given."""
    train = {"variant": variant, "task": task, "task_params": params, "seed": seed, "d_model": 64, "n_layers": 2,
             "n_heads": 4, "lr": 0.003, "steps": 1000, "batch_size": 128, **sizes}
    if extra:
        train["model_extra"] = extra
    name = f"{task}_{'_'.join(f'{k}{v}' for k, v in params.items())}_{variant}_{'-'.join(extra or {})}" \
           f"_d{train['d_model']}_l{train['n_layers']}_st{train['steps']}_s{seed}"
    path = root / study / name
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({"train": train}))
    (path / "summary.json").write_text(json.dumps({"status": status, "eval_acc": acc}))
    if memory is not None:
        (path / "analysis").mkdir()
        (path / "analysis" / "analysis.json").write_text(json.dumps({"summary": {"memory": memory}}))
    return path


def _dyck(root, accs, steps=1000):
    """accs: {(variant, max_pairs): [acc per seed]}; MixiT with 16 heads, as the preset."""
    for (variant, pairs), values in accs.items():
        study = "scale-dyck" + ("-mixit" if variant == "mixit" else "") + ("-long" if steps != 1000 else "")
        for seed, acc in enumerate(values):
            _run(root, study, variant, "dyck", {"max_pairs": pairs}, acc, seed=seed, steps=steps,
                 n_heads=16 if variant == "mixit" else 4)


def _memory(bits_per_param, accuracy=1.0, params=1000):
    return {"accuracy": accuracy, "bits": bits_per_param * params, "params_trainable": params,
            "bits_per_trainable_param": bits_per_param}


@pytest.fixture()
def scale_dir(tmp_path):
    """Every finding's runs, two seeds each, with numbers whose means are easy to check."""
    root = tmp_path / "runs"
    # Dyck: standard - MixiT is 20 points at max_pairs 8 and 5 at 16 (1,000 steps), 1 at 16 with 4,000 steps.
    _dyck(root, {("standard", 8): [0.90, 0.80], ("mixit", 8): [0.60, 0.70],
                 ("standard", 16): [0.96, 0.96], ("mixit", 16): [0.90, 0.92]})
    _dyck(root, {("standard", 16): [0.99, 0.99], ("mixit", 16): [0.98, 0.98]}, steps=4000)
    # Sentiment: the gap grows from 20 to 30 points from (64, 2) to (128, 4).
    sent = {"seq_len": 64, "vocab_size": 1024}
    for (w, layers), (s, m) in {(64, 2): (0.78, 0.58), (128, 4): (0.85, 0.55)}.items():
        for seed in (0, 1):
            _run(root, f"scale-sentiment-w{w}", "standard", "sentiment", sent, s, seed=seed, d_model=w, n_layers=layers)
            _run(root, f"scale-sentiment-w{w}", "mixit", "sentiment", sent, m, seed=seed, d_model=w, n_layers=layers)
    # Memorization at n = 48: bits per trainable parameter per width and variant (seed 1 = seed 0 + 0.1).
    bits = {16: {"standard": 0.9, "frozen_qk": 1.0, "frozen_mlp": 1.6, "mixit": 1.1},
            32: {"standard": 0.3, "frozen_qk": 0.35, "frozen_mlp": 0.8, "mixit": 0.4}}
    for w, per_variant in bits.items():
        for variant, b in per_variant.items():
            for seed in (0, 1):
                _run(root, f"scale-memorize-w{w}", variant, "memorize", {"n": 48, "d": 2}, 1.0, seed=seed,
                     d_model=w, steps=4000, batch_size=512, memory=_memory(b + 0.1 * seed))
    # Depth: random loses 2 points from 2 to 8 layers at width 64 and 40 at width 256; MixiT (frozen) holds.
    acc = {(64, 2, "random"): 0.80, (64, 8, "random"): 0.78, (256, 2, "random"): 0.90, (256, 8, "random"): 0.50,
           (64, 2, FROZEN): 1.0, (64, 8, FROZEN): 1.0, (256, 2, FROZEN): 1.0, (256, 8, FROZEN): 0.99}
    for (w, layers, variant), a in acc.items():
        extra = {"freeze": ["v", "o", "mlp", "norms"]} if variant == FROZEN else None
        for seed in (0, 1):
            _run(root, "scale-depth" + ("-wide" if w == 256 else ""), variant.split(" ")[0], "addition",
                 {"digits": 2}, a, seed=seed, extra=extra, d_model=w, n_layers=layers, n_heads=16, steps=3000)
    # Not counted: a run of another group, and an unfinished scale run.
    _run(root, "algorithmic", "standard", "dyck", {"max_pairs": 8}, 0.10)
    _run(root, "scale-dyck", "standard", "dyck", {"max_pairs": 8}, 0.10, seed=7, status="running")
    return root


def _row(df, **where):
    rows = df
    for k, v in where.items():
        rows = rows[rows[k] == v]
    assert len(rows) == 1, (where, rows)
    return rows.iloc[0]


# --------------------------------------------------------------------------- tables
def test_the_tables_hold_the_runs_metrics(scale_dir):
    t = emergence_tables(scale_dir)
    assert list(t) == list(TABLE_NAMES)

    dyck = t["scale_dyck"]
    assert {"variant", "max_pairs", "steps", "n_heads", "mean", "std", "median", "seeds", "paper"} <= set(dyck)
    r = _row(dyck, variant="standard", max_pairs=8, steps=1000)
    assert (r["mean"], r["std"], r["median"], r["seeds"]) == (pytest.approx(85.0), pytest.approx(5.0),
                                                             pytest.approx(85.0), 2)  # the other group's 10% and
    assert math.isnan(r["paper"])                                                    # the running seed are out
    assert _row(dyck, variant="mixit", max_pairs=16, steps=4000)["mean"] == pytest.approx(98.0)
    assert _row(dyck, variant="mixit", max_pairs=8, steps=1000)["n_heads"] == 16
    assert len(dyck) == 6

    sent = t["scale_sentiment"]
    r = _row(sent, variant="mixit", d_model=128, n_layers=4)
    assert r["mean"] == pytest.approx(55.0) and r["seeds"] == 2 and r["paper"] == PAPER_SENTIMENT["mixit"]

    mem = t["scale_memorize"]
    r = _row(mem, variant="frozen_mlp", d_model=16)
    assert r["mean"] == pytest.approx(1.65) and r["median"] == pytest.approx(1.65) and r["std"] == pytest.approx(0.05)
    assert r["accuracy"] == pytest.approx(100.0) and r["n"] == 48 and r["d"] == 2
    assert r["paper"] == PAPER_MEMORIZE_BITS["frozen_mlp"]
    assert list(mem["variant"].unique()) == ["standard", "frozen_qk", "frozen_mlp", "mixit"]  # registry order

    depth = t["scale_depth"]
    assert set(depth["variant"]) == {"random", FROZEN}
    assert _row(depth, variant="random", d_model=256, n_layers=8)["mean"] == pytest.approx(50.0)
    assert _row(depth, variant=FROZEN, d_model=256, n_layers=8)["mean"] == pytest.approx(99.0)


def test_a_task_parameter_a_run_did_not_give_is_the_tasks_default(tmp_path):
    from mixit_lab.analysis.runs import load_runs
    from mixit_lab.training.tasks import TASKS, resolved_task_params

    default = TASKS["dyck"]().max_pairs  # what the task builds when not given one
    assert resolved_task_params("dyck", {}) == {"max_pairs": default}
    assert resolved_task_params("memorize", {"n": 48, "d": None})["d"] == TASKS["memorize"](n=48).d  # None: default
    assert resolved_task_params("my_pkg.tasks:Mine", {"x": 1}) == {"x": 1}  # not registered: as given
    _run(tmp_path, "scale-dyck", "standard", "dyck", {}, 0.9)
    _run(tmp_path, "scale-dyck", "standard", "dyck", {"max_pairs": 8}, 0.8)
    table = emergence_tables(tmp_path)["scale_dyck"]
    assert sorted(table["max_pairs"]) == [8, default]
    # A runs table given is read instead of the folder (the report reads the runs once).
    given = emergence_tables(tmp_path / "elsewhere", runs=load_runs(tmp_path))["scale_dyck"]
    assert given.equals(table)


def test_the_paper_numbers_are_the_reports():
    from mixit_lab.analysis.paper import PAPER

    assert PAPER_SENTIMENT == PAPER["sentiment"]
    assert PAPER_MEMORIZE_BITS == PAPER["memorize_bits"]


def test_memorize_runs_without_analysis_are_left_out(tmp_path):
    _run(tmp_path, "scale-memorize", "standard", "memorize", {"n": 48, "d": 2}, 1.0, memory=_memory(0.5))
    _run(tmp_path, "scale-memorize", "standard", "memorize", {"n": 48, "d": 2}, 1.0, seed=1)  # not analysed
    r = _row(emergence_tables(tmp_path)["scale_memorize"], variant="standard")
    assert r["seeds"] == 1 and r["mean"] == pytest.approx(0.5)


def test_no_scale_runs_give_empty_tables_and_no_section(tmp_path):
    _run(tmp_path, "algorithmic", "standard", "dyck", {"max_pairs": 8}, 0.9)
    tables = emergence_tables(tmp_path)
    assert all(df.empty for df in tables.values())
    assert "mean" in tables["scale_dyck"] and "max_pairs" in tables["scale_dyck"]
    assert emergence_section(tables) == []


# --------------------------------------------------------------------------- sentences
def test_trend_word():
    assert trend_word(20, 5, 2) == "shrinks" and trend_word(5, 20, 2) == "grows" and trend_word(5, 6, 2) == "stays"
    assert trend_word(-20, 5, 2, magnitude=True) == "shrinks" and trend_word(-1, 5, 2) == "grows"


def test_the_sentences_say_whether_each_gap_shrinks_or_grows(scale_dir):
    t = emergence_tables(scale_dir)
    dyck = gap_sentence("scale_dyck", t["scale_dyck"])
    # max_pairs 8 -> 16 at 1,000 steps: 20 -> 5 points; steps 1,000 -> 4,000 at max_pairs 16: 5 -> 1 point.
    assert "max_pairs goes from 8 to 16" in dyck and "+20.0 → +5.0" in dyck
    assert "steps goes from 1,000 to 4,000" in dyck and "+5.0 → +1.0" in dyck
    # ... and both together, from the quick preset's corner to the far one: 20 -> 1 point.
    assert dyck.startswith("From max_pairs 8, 1,000 steps to max_pairs 16, 4,000 steps, standard − MixiT shrinks "
                           "(+20.0 → +1.0 points; the change -19.0 [")  # with its 95% interval over the seeds
    assert dyck.count("shrinks") == 3 and "grows" not in dyck

    sent = gap_sentence("scale_sentiment", t["scale_sentiment"])
    assert sent.startswith("From width 64, 2 layers to width 128, 4 layers (at 4 heads), standard − MixiT grows "
                           "(+20.0 → +30.0")
    assert sent.endswith("(the paper: MixiT about as good as standard, +2.0 points on Yelp).")

    mem = gap_sentence("scale_memorize", t["scale_memorize"])
    # standard - MixiT: 0.9 - 1.1 = -0.2 bits at width 16, 0.3 - 0.4 = -0.1 at width 32: grows (toward the paper's +0.80).
    assert "grows (-0.20 → -0.10 bits per trainable parameter, toward the paper's +0.80; the change +0.10 [" in mem
    assert "width 16: frozen_mlp > MixiT > frozen_qk > standard" in mem and "stores every key" in mem

    depth = gap_sentence("scale_depth", t["scale_depth"])
    assert depth.startswith("As width goes from 64 to 256, random's loss from 2 to 8 layers grows (+2.0 → +40.0")
    assert "MixiT [freeze v,o,mlp,norms]'s loss from 2 to 8 layers stays (+0.0 → +1.0" in depth


def test_a_shrinking_depth_loss_and_a_growing_dyck_gap(tmp_path):
    _dyck(tmp_path, {("standard", 8): [0.9], ("mixit", 8): [0.85], ("standard", 16): [0.9], ("mixit", 16): [0.8],
                     ("standard", 32): [0.95], ("mixit", 32): [0.6]})
    for w, (shallow, deep) in {64: (0.9, 0.5), 256: (0.9, 0.88)}.items():
        _run(tmp_path, "scale-depth", "random", "addition", {"digits": 2}, shallow, d_model=w, n_layers=2)
        _run(tmp_path, "scale-depth", "random", "addition", {"digits": 2}, deep, d_model=w, n_layers=8)
    t = emergence_tables(tmp_path)
    dyck = gap_sentence("scale_dyck", t["scale_dyck"])
    assert "max_pairs goes from 8 to 32 (at 1,000 steps), standard − MixiT grows (+5.0 → +10.0 → +35.0 points)" \
        in dyck and "shrinks" not in dyck  # every point along the axis, the verdict from its ends
    depth = gap_sentence("scale_depth", t["scale_depth"])
    assert "shrinks (+40.0 → +2.0" in depth


def test_sentiment_heads_are_an_axis_of_their_own(tmp_path):
    """MixiT's heads (4 -> 16, the authors' README) move at each width; the sentence follows each move and the
    figure draws each size apart."""
    sent = {"seq_len": 64, "vocab_size": 1024}
    accs = {(64, 2, 4): (0.78, 0.55), (64, 2, 16): (0.76, 0.50), (128, 4, 4): (0.80, 0.52), (128, 4, 16): (0.80, 0.70)}
    for (w, layers, heads), (s, m) in accs.items():
        for variant, acc in (("standard", s), ("mixit", m)):
            _run(tmp_path, f"scale-sentiment-w{w}-h{heads}", variant, "sentiment", sent, acc, d_model=w,
                 n_layers=layers, n_heads=heads)
    t = emergence_tables(tmp_path)["scale_sentiment"]
    assert set(t["n_heads"]) == {4, 16} and len(t) == 8
    sentence = gap_sentence("scale_sentiment", t)
    assert sentence.startswith("From width 64, 2 layers, 4 heads to width 128, 4 layers, 16 heads, standard − MixiT "
                               "shrinks (+23.0 → +10.0 points)")
    assert "as heads goes from 4 to 16 (at width 64, 2 layers), standard − MixiT grows (+23.0 → +26.0" in sentence
    assert "as heads goes from 4 to 16 (at width 128, 4 layers), standard − MixiT shrinks (+28.0 → +10.0" in sentence
    lines = _data_lines(FIGURES["scale_sentiment"].plot(tmp_path))
    x, y = lines[(0, "mixit|")]
    assert list(x) == [0, 1, 2, 3] and y == pytest.approx([55.0, 50.0, 52.0, 70.0])  # by width, depth, heads


def test_the_section_has_each_table_and_its_sentence(scale_dir):
    t = emergence_tables(scale_dir)
    lines = emergence_section(t)
    text = "\n".join(lines)
    assert lines[0] == "## Where the findings emerge"
    for f in FINDINGS:
        assert f"### {f.title}" in text
        assert gap_sentence(f.table, t[f.table]) in text
    assert "| variant | max_pairs | steps | n_heads | mean | std | median | seeds | paper |" in text
    assert "| standard | 8 | 1000 | 4 | 85.00 | 5.00 | 85.00 | 2 | — |" in text
    # A finding without runs keeps its heading, with a line saying so.
    t["scale_sentiment"] = t["scale_sentiment"].iloc[0:0]
    assert "_No runs of the scale preset for this finding._" in "\n".join(emergence_section(t))


# --------------------------------------------------------------------------- figures
def _data_lines(fig):
    """{gid: (x, y)} of every line with a gid (the scale figures' data and paper lines), over all axes."""
    out = {}
    for i, ax in enumerate(fig.axes):
        for line in ax.lines:
            if line.get_gid():
                out[(i, line.get_gid())] = (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
    return out


def test_the_scale_figures_are_registered():
    assert set(SCALE_FIGURES) <= set(FIGURE_NAMES)
    assert set(SCALE_FIGURES) <= set(figures_for_group("scale"))
    assert not set(SCALE_FIGURES) & set(figures_for_group("depth"))


def test_scale_dyck_draws_its_runs(scale_dir):
    lines = _data_lines(FIGURES["scale_dyck"].plot(scale_dir))
    x, y = lines[(0, "standard|1,000 steps")]  # panel 0: against max_pairs, at 1,000 steps
    assert list(x) == [8, 16] and y == pytest.approx([85.0, 96.0])
    x, y = lines[(1, "mixit|max_pairs 16")]  # panel 1: against steps, at max_pairs 16
    assert list(x) == [1000, 4000] and y == pytest.approx([91.0, 98.0])


def test_scale_sentiment_draws_its_runs_and_the_paper(scale_dir):
    lines = _data_lines(FIGURES["scale_sentiment"].plot(scale_dir))
    x, y = lines[(0, "standard|")]
    assert list(x) == [0, 1] and y == pytest.approx([78.0, 85.0])
    assert lines[(0, "mixit|")][1] == pytest.approx([58.0, 55.0])
    assert lines[(0, "paper|standard")][1] == pytest.approx([PAPER_SENTIMENT["standard"]] * 2)


def test_scale_memorize_draws_bits_and_keys_stored(scale_dir):
    lines = _data_lines(FIGURES["scale_memorize"].plot(scale_dir))
    x, y = lines[(0, "frozen_mlp|n 48, d 2")]
    assert list(x) == [16, 32] and y == pytest.approx([1.65, 0.85])
    assert lines[(0, "paper|mixit")][1] == pytest.approx([PAPER_MEMORIZE_BITS["mixit"]] * 2)
    assert lines[(1, "standard|n 48, d 2")][1] == pytest.approx([100.0, 100.0])


def test_scale_depth_draws_one_panel_per_width(scale_dir):
    fig = FIGURES["scale_depth"].plot(scale_dir)
    lines = _data_lines(fig)
    assert lines[(0, "random|")][1] == pytest.approx([80.0, 78.0])
    x, y = lines[(1, "random|")]
    assert list(x) == [2, 8] and y == pytest.approx([90.0, 50.0])
    assert lines[(1, f"{FROZEN}|")][1] == pytest.approx([100.0, 99.0])
    assert "width 256" in fig.axes[1].get_title()


def test_only_the_scale_figures_draw_scale_runs(scale_dir, tmp_path):
    # The paper's figures would otherwise fall back to them (e.g. depth_accuracy to any addition runs of several
    # depths, mixing the widths), as the report's tables would without excluding the group.
    shutil.rmtree(scale_dir / "algorithmic")  # the one run outside the scale group
    results = make_all(scale_dir, tmp_path / "out")
    assert {name for name, result in results.items() if isinstance(result, list)} == set(SCALE_FIGURES)


@pytest.mark.parametrize("name", SCALE_FIGURES)
def test_the_scale_figures_need_scale_runs(tmp_path, name):
    # Runs of every kind, but in the paper's groups: nothing for the scale figures.
    _run(tmp_path, "algorithmic", "standard", "dyck", {"max_pairs": 8}, 0.9)
    _run(tmp_path, "sentiment", "standard", "sentiment", {"seq_len": 64}, 0.8)
    _run(tmp_path, "memorize", "standard", "memorize", {"n": 48, "d": 2}, 1.0, memory=_memory(1.0))
    _run(tmp_path, "depth", "random", "addition", {"digits": 2}, 0.7)
    _run(tmp_path, "depth", "random", "addition", {"digits": 2}, 0.6, n_layers=6)
    with pytest.raises(NoData, match="scale"):
        FIGURES[name].plot(tmp_path)


def test_scale_memorize_needs_analysed_runs(tmp_path):
    _run(tmp_path, "scale-memorize", "standard", "memorize", {"n": 48, "d": 2}, 1.0)
    with pytest.raises(NoData, match="analysed"):
        FIGURES["scale_memorize"].plot(tmp_path)


# --------------------------------------------------------------------------- the preset
def test_the_scale_preset_loads_and_expands_in_group_scale():
    preset = load_preset("scale")
    assert preset.studies and all(name.startswith("scale-") and group_of(name) == "scale" for name in preset.studies)
    assert set(preset.skip) == {"signal", "speed"}
    no_text = {"lm": TextChoice(skipped=True), "sentiment": TextChoice(skipped=True), "sst2": TextChoice(skipped=True)}
    runs = preset_runs(preset, no_text)
    assert runs and len({run for run, _ in runs}) == len(runs)
    assert all(group_of(run.split("/")[0]) == "scale" for run, _ in runs)
    assert not any(cfg.task == "sentiment" for _, cfg in runs)  # no corpus: the sentiment studies drop out
    assert {cfg.task for _, cfg in runs} == {"dyck", "memorize", "addition"}
    assert {cfg.seed for _, cfg in runs} == {0, 1}
    assert preset.text_kinds() == {"sentiment", "sst2"}

    # Equal steps across widths and depths in the depth studies, and MixiT as the authors' depth script trains it.
    depth = [cfg for _, cfg in runs if cfg.task == "addition"]
    assert {cfg.steps for cfg in depth} == {3000} and {cfg.d_model for cfg in depth} == {64, 256}
    assert any(cfg.variant == "mixit" and cfg.model_extra.get("freeze") for cfg in depth)
    # One dataset for every width of the memorization studies.
    memorize = [cfg for _, cfg in runs if cfg.task == "memorize"]
    assert {tuple(sorted(cfg.task_params.items())) for cfg in memorize} == {(("d", 2), ("label_tokens", "keys"), ("n", 48))}
    assert {cfg.d_model for cfg in memorize} == {16, 32}


def test_the_scale_preset_with_a_corpus_has_sentiment_runs(tmp_path):
    from corpora import labelled_sentences

    corpus = tmp_path / "labelled.txt"
    corpus.write_text(labelled_sentences(), encoding="utf-8")
    text = {"lm": TextChoice(skipped=True), "sentiment": TextChoice({"text_file": [str(corpus)]}),
            "sst2": TextChoice({"text_file": [str(corpus)], "test_file": [str(corpus)]})}  # any file: not read here
    runs = preset_runs(load_preset("scale"), text, tmp_path / "out")
    # SST-2: standard, frozen_qk and MixiT over a 4-rate grid at the quick preset's classifier size, 2,000 steps
    sst2 = [cfg for name, cfg in runs if name.startswith("scale-sst2/")]
    assert {cfg.variant for cfg in sst2} == {"standard", "frozen_qk", "mixit"}
    assert {cfg.lr for cfg in sst2} == {0.0003, 0.001, 0.003, 0.01} and {cfg.steps for cfg in sst2} == {2000}
    assert all(cfg.task_params["test_file"] == [str(corpus)] for cfg in sst2)
    sentiment = [cfg for name, cfg in runs if cfg.task == "sentiment" and not name.startswith("scale-sst2/")]
    assert {(cfg.d_model, cfg.n_layers) for cfg in sentiment} == {(64, 2), (128, 4), (256, 4)}
    assert {cfg.variant for cfg in sentiment} == {"standard", "mixit"}
    # base_width (the width scaling) acts on mixit only: standard's runs do not record it
    assert all(cfg.model_extra.get("base_width") == (1 if cfg.variant == "mixit" else None) for cfg in sentiment)


def test_sst2_runs_are_a_table_of_their_own(scale_dir):
    """Runs of the scale-sst2 studies (SST-2) at the size of a scale-sentiment point count only in scale_sst2, whose
    sentence gives standard minus each other variant with its interval; the sentiment figure leaves them out."""
    sst2 = {"seq_len": 64, "vocab_size": 4096, "tune_fraction": 0.02}
    for variant, accs in {"standard": (0.80, 0.82, 0.81), "frozen_qk": (0.78, 0.79, 0.80),
                          "mixit": (0.60, 0.65, 0.62)}.items():
        for seed, acc in enumerate(accs):
            _run(scale_dir, "scale-sst2", variant, "sentiment", sst2, acc, seed=seed, steps=2000)
    t = emergence_tables(scale_dir)
    assert _row(t["scale_sentiment"], variant="standard", d_model=64, n_layers=2)["mean"] == pytest.approx(78.0)
    sst = t["scale_sst2"]
    assert list(sst["variant"]) == ["standard", "frozen_qk", "mixit"] and set(sst["steps"]) == {2000}
    assert _row(sst, variant="mixit")["mean"] == pytest.approx(62.333, abs=1e-3)
    sentence = gap_sentence("scale_sst2", sst)
    assert sentence.startswith("At width 64, 2 layers, 2,000 steps, standard − frozen_qk +2.0 [")
    assert "standard − MixiT +18.7 [" in sentence
    x, y = _data_lines(FIGURES["scale_sentiment"].plot(scale_dir))[(0, "mixit|")]
    assert y == pytest.approx([58.0, 55.0])  # the labelled sentences' two sizes, not SST-2's 62.3
