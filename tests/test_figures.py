"""figures: every figure draws from a tiny runs directory, skips cleanly without data, and the CLI works."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

import figures
from figures import FIGURE_NAMES, FigureError, make_all
from figures.common import best_config, default_out_dir, param
from figures.style import VARIANT_ORDER, VARIANT_STYLES, order_variants, paper_style, save, variant_style
from models import VARIANTS
from training import TrainConfig, train
from training.benchmark import COLUMNS as SPEED_COLUMNS
from training.benchmark import measure_throughput
from cli.main import main

# Tiny runs see a lot of their eval set in the first batch; the trainer's warning about it is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:TrainStream:UserWarning")

TEXT = "\n".join(
    f"Line {i}: the quick brown fox jumps over the lazy dog, and the cat sat on mat number {i}." for i in range(60)
)


def _train(root: Path, group: str, task: str, params: dict, variant: str, n_layers: int = 1, seed: int = 0,
           steps: int = 8, lr: float = 3e-3, keep: int = 0, extra: dict | None = None) -> Path:
    cfg = TrainConfig(task=task, task_params=params, variant=variant, d_model=16, n_layers=n_layers, n_heads=2,
                      seed=seed, steps=steps, batch_size=16, lr=lr, eval_every=4, eval_samples=32, device="cpu",
                      keep_checkpoints=keep, model_extra=extra or {})
    grid = "_".join(f"{k}{'-'.join(v)}" for k, v in (extra or {}).items())
    name = (f"{task}_{'_'.join(f'{k}{v}' for k, v in params.items() if k != 'text_file')}_{variant}{grid}"
            f"_l{n_layers}_s{seed}")
    out = root / group / name
    train(cfg, out, progress=False)
    return out


def _analyze(run: Path) -> None:
    from analysis.analyze import analyze_checkpoint

    options = {"n_seqs": 4, "seq_len": 4, "eval_samples": 8, "ablation": "none", "seed": 0}
    analyze_checkpoint(run, run / "analysis", options, device="cpu")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """One small runs directory with every group, built once for this module."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    try:
        (root / "reproduce.json").write_text(json.dumps({"preset": "tiny"}))
        for variant in ("frozen_qk", "mixit"):
            for pairs in (2, 3):
                _train(root, "retrieval", "retrieval", {"pairs": pairs, "num_values": 4}, variant, n_layers=2)
        for seed in (0, 1):
            _train(root, "algorithmic", "addition", {"digits": 1}, "standard", seed=seed)
        _train(root, "algorithmic", "addition", {"digits": 1}, "mixit")
        from analysis.dynamics import checkpoint_dynamics
        from training.rundir import DYNAMICS_FILE

        for variant in ("standard", "mixit"):
            khop = _train(root, "khop", "khop", {"hops": 1, "length": 8, "alphabet": 4}, variant, n_layers=2, keep=3)
            _analyze(khop)
            checkpoint_dynamics(khop, n_seqs=2, seq_len=4).to_csv(khop / DYNAMICS_FILE, index=False)
        for n in (2, 3):
            _analyze(_train(root, "memorize", "memorize", {"n": n, "d": 2}, "standard"))
        for seed in (0, 1):  # the beyond-the-paper group: a named variant and a grid model
            _train(root, "beyond-retrieval", "retrieval", {"pairs": 2, "num_values": 4}, "mixit", n_layers=2, seed=seed)
            _train(root, "beyond-retrieval", "retrieval", {"pairs": 2, "num_values": 4}, "mixit", n_layers=2, seed=seed,
                   extra={"attention": ["mixing", "softmax"]})
        for n_layers in (1, 2):
            _train(root, "depth", "addition", {"digits": 1}, "standard", n_layers=n_layers)
        from corpora import labelled_sentences

        sentences = root / "sentences.txt"
        sentences.write_text(labelled_sentences(20), encoding="utf-8")
        for variant in ("standard", "mixit"):  # the scale group (reproduce/presets/scale.yaml), one run per figure
            for pairs in (2, 3):
                _train(root, "scale-dyck", "dyck", {"max_pairs": pairs}, variant)
            _train(root, "scale-sentiment", "sentiment",
                   {"text_file": [str(sentences)], "tokenizer": "byte", "seq_len": 96}, variant)
        _analyze(_train(root, "scale-memorize", "memorize", {"n": 3, "d": 2}, "standard"))
        for n_layers in (1, 2):
            _train(root, "scale-depth", "addition", {"digits": 1}, "random", n_layers=n_layers)
        text = root / "text.txt"
        text.write_text(TEXT)
        for variant in ("standard", "mixit"):
            _train(root, "lm", "lm", {"text_file": [str(text)], "tokenizer": "byte", "seq_len": 16}, variant)
        from analysis.signal import signal_propagation

        (root / "signal").mkdir()
        signal_propagation(variants=("standard", "random", "mixit"), depths=(1, 2), widths=(16,), n_heads=2,
                           n_ctx=8, d_vocab=16, n_seqs=2, seeds=(0,)).to_csv(root / "signal" / "signal.csv", index=False)
        (root / "speed").mkdir()
        measure_throughput(["standard", "mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=4,
                           vocab=16, steps=1, repeats=1, warmup=0, device="cpu").to_csv(root / "speed" / "speed.csv",
                                                                                          index=False)
    finally:
        torch.set_num_threads(before)
    return root


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(path: Path) -> bool:
    return path.read_bytes()[:5] == b"%PDF-"


@pytest.mark.parametrize("name", FIGURE_NAMES)
def test_each_figure_writes_png_and_pdf(runs_dir, tmp_path, name):
    fig = figures.FIGURES[name].plot(runs_dir)
    paths = save(fig, tmp_path, name)
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.pdf"]
    assert _is_png(paths[0]) and _is_pdf(paths[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temp files left


def test_every_figure_says_why_it_has_nothing_to_draw(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    results = make_all(empty, tmp_path / "out")
    assert list(results) == list(FIGURE_NAMES)
    for name, reason in results.items():
        assert isinstance(reason, str) and reason and "\n" not in reason, name
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_make_all_draws_what_has_data_and_skips_the_rest(runs_dir, tmp_path):
    partial = tmp_path / "partial"
    (partial / "speed").mkdir(parents=True)
    (partial / "speed" / "speed.csv").write_text((runs_dir / "speed" / "speed.csv").read_text())
    results = make_all(partial, tmp_path / "out", only=["speed", "lm_curves"])
    assert [p.name for p in results["speed"]] == ["speed.png", "speed.pdf"]
    assert isinstance(results["lm_curves"], str) and "lm" in results["lm_curves"]


def test_a_bug_in_one_figure_is_raised_with_its_name_after_the_others(runs_dir, tmp_path, monkeypatch):
    def broken(runs_dir):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(figures.FIGURES["lm_curves"], "plot", broken)
    with pytest.raises(FigureError, match="lm_curves: ZeroDivisionError: planted") as info:
        make_all(runs_dir, tmp_path, only=["lm_curves", "speed"])
    assert isinstance(info.value.results["speed"], list)  # the other figure was still drawn
    with pytest.raises(ValueError, match="unknown figure"):
        make_all(runs_dir, tmp_path, only=["nope"])


def test_cli_writes_to_out_and_prints_one_line_per_figure(runs_dir, tmp_path, capsys):
    assert main(["figures", str(runs_dir), "--out", str(tmp_path / "figs"), "--only", "speed", "signal_depth"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("signal_depth") and lines[1].startswith("speed") and len(lines) == 3
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == [
        "signal_depth.pdf", "signal_depth.png", "speed.pdf", "speed.png"]


def test_cli_reports_skips_and_a_missing_directory_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["figures", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--only", "speed"]) == 0
    assert "skipped: no speed/speed.csv" in capsys.readouterr().out
    assert main(["figures", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err and "not a directory" in err
    assert main(["figures", str(tmp_path), "--only", "not_a_figure"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not_a_figure" in err


def test_default_out_dir_is_named_by_the_preset(runs_dir, tmp_path):
    assert default_out_dir(runs_dir) == Path("figures/out/tiny")
    (tmp_path / "myruns").mkdir()
    assert default_out_dir(tmp_path / "myruns") == Path("figures/out/myruns")


def test_every_variant_has_one_distinct_style():
    assert set(VARIANT_STYLES) == set(VARIANTS) == set(VARIANT_ORDER)
    styles = [VARIANT_STYLES[v] for v in VARIANT_ORDER]
    for attr in ("label", "color", "marker"):
        assert len({getattr(s, attr) for s in styles}) == len(styles), attr
    assert order_variants(["mixit", "zzz", "standard", "mixit"]) == ["standard", "mixit", "zzz"]
    assert variant_style("zzz").label == "zzz"


def test_paper_style_does_not_leak_into_global_settings():
    before = matplotlib.rcParams["font.size"], matplotlib.rcParams["axes.spines.top"]
    with paper_style():
        assert matplotlib.rcParams["font.size"] == 8 and not matplotlib.rcParams["axes.spines.top"]
    assert (matplotlib.rcParams["font.size"], matplotlib.rcParams["axes.spines.top"]) == before


def test_best_config_keeps_all_seeds_of_the_best_learning_rate():
    runs = pd.DataFrame({
        "variant": ["a"] * 4 + ["b"] * 2, "task_label": "t", "lr": [1e-3, 1e-3, 3e-3, 3e-3, 1e-3, 3e-3],
        "seed": [0, 1, 0, 1, 0, 0], "eval_acc": [0.5, 0.7, 0.9, 0.2, 0.1, 0.3],
    })
    best = best_config(runs, ["variant"], "eval_acc")
    assert sorted(best.loc[best["variant"] == "a", "eval_acc"]) == [0.5, 0.7]  # mean 0.6 beats 0.55
    assert list(best.loc[best["variant"] == "b", "lr"]) == [3e-3]
    lowest = best_config(runs, ["variant"], "eval_acc", higher_is_better=False)
    assert list(lowest.loc[lowest["variant"] == "b", "eval_acc"]) == [0.1]


def test_task_parameters_fall_back_to_the_task_defaults():
    runs = pd.DataFrame({"task": ["retrieval", "memorize", "lm"], "task_params": [{}, {"n": 4}, {"seq_len": 8}]})
    pairs = param(runs, "pairs")
    assert pairs[0] == 30 and pairs[1:].isna().all()  # retrieval's default; the others have no pairs
    assert param(runs, "n")[1] == 4 and param(runs, "d")[1] == 2  # d not given: memorize's default


def test_figures_show_the_runs_they_are_about(runs_dir):
    fig = figures.FIGURES["task_accuracy"].plot(runs_dir)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert any("addition" in t for t in ticks) and any("retrieval" in t for t in ticks)
    assert not any(t.startswith("lm") for t in ticks)
    fig = figures.FIGURES["retrieval_pairs"].plot(runs_dir)
    assert [float(t) for t in fig.axes[0].get_xticks()] == [2.0, 3.0]
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"Frozen QK", "MixiT"}
    fig = figures.FIGURES["induction_heads"].plot(runs_dir)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["Standard", "MixiT"]
    fig = figures.FIGURES["signal_depth"].plot(runs_dir)  # standard and random coincide at init: one line
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"Standard = Random", "MixiT"}


def test_retrieval_positions_point_at_the_queried_value():
    from figures.attention_maps import _retrieval_positions
    from training import get_task

    task = get_task("retrieval", pairs=5, num_values=7)
    tokens, mask = task.eval_set(16)
    query, value_pos = _retrieval_positions(task, tokens, mask)
    rows = torch.arange(16)
    assert torch.equal(tokens[rows, value_pos], tokens[rows, query + 1])  # the answer is that value
    assert torch.equal(tokens[rows, value_pos - 1] + task.num_keys, tokens[rows, query])  # after the queried key


def test_measure_throughput_has_the_speed_csv_columns():
    df = measure_throughput(["standard", "mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=2,
                            vocab=8, steps=1, repeats=1, warmup=0, device="cpu")
    assert list(df.columns) == SPEED_COLUMNS == [
        "variant", "params_trainable", "params_frozen", "step_ms", "tokens_per_s", "ms_per_sample",
        "relative_to_standard", "relative_spread", "d_model", "n_layers", "n_heads", "seq_len", "batch_size", "device"]
    assert list(df["variant"]) == ["standard", "mixit"] and (df["tokens_per_s"] > 0).all()
    assert df.loc[0, "relative_to_standard"] == 0.0 and df.loc[0, "relative_spread"] == 0.0
    assert np.isclose(df.loc[1, "relative_to_standard"], df.loc[1, "ms_per_sample"] / df.loc[0, "ms_per_sample"] - 1)
    assert df.loc[1, "relative_spread"] == 0.0  # one turn: nothing to spread over
    assert math.isnan(measure_throughput(["mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=2,
                                         vocab=8, steps=1, repeats=1, warmup=0, device="cpu")["relative_to_standard"][0])
    with pytest.raises(ValueError, match="variants"):
        measure_throughput(["nope"])


def test_measure_throughput_compares_each_turn_with_standards(monkeypatch):
    # Block times scripted per variant and turn: a machine slowing down during the stage slows both variants
    # of a turn alike, so the per-turn ratio (and its spread) stays what the models differ by.
    import training.benchmark as bench

    scripted = {"standard": [1.0, 2.0, 4.0], "mixit": [0.8, 1.7, 3.0]}
    calls = []

    def fake_step(variant, *args, **kwargs):
        return (lambda: None), {"trainable": 1, "frozen": 0, "total": 1, "variant": variant}

    def fake_block(step, steps, device):
        variant = ("standard", "mixit")[len(calls) % 2]
        calls.append(variant)
        return scripted[variant][(len(calls) - 1) // 2]

    monkeypatch.setattr(bench, "training_step", fake_step)
    monkeypatch.setattr(bench, "block_seconds", fake_block)
    df = bench.measure_throughput(["standard", "mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=2,
                                  vocab=8, steps=1, repeats=3, warmup=0, device="cpu").set_index("variant")
    assert calls == ["standard", "mixit"] * 3  # variants take turns block by block
    assert df.loc["mixit", "relative_to_standard"] == pytest.approx(-0.2)  # median of -0.2, -0.15, -0.25
    assert df.loc["mixit", "relative_spread"] == pytest.approx(0.1)
    assert df.loc["mixit", "step_ms"] == pytest.approx(1700.0)


def test_beyond_figure_labels_grid_models(runs_dir):
    fig = figures.FIGURES["beyond"].plot(runs_dir)
    labels = [t.get_text() for ax in fig.axes if ax.get_visible() for t in ax.get_yticklabels()]
    assert labels == ["MixiT", "mixit [attention mixing,softmax]"]
