"""figures: every figure draws from a tiny runs directory, skips cleanly without data, and the CLI works."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from mixit_lab import figures
from mixit_lab.analysis.runs import RunSet, by_loss, load_runs
from mixit_lab.figures import FIGURE_NAMES, FigureError, make_all
from mixit_lab.figures.common import NoData, best_config, default_out_dir, param
from mixit_lab.figures.style import VARIANT_ORDER, VARIANT_STYLES, order_variants, paper_style, save, variant_style
from mixit_lab.models import VARIANTS
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.run import judged_by_loss
from mixit_lab.training.benchmark import COLUMNS as SPEED_COLUMNS
from conftest import count_run_file_opens, read_more_than_once
from mixit_lab.training.benchmark import measure_throughput
from mixit_lab.cli.main import main
from conftest import ROOT

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
    from mixit_lab.analysis.analyze import analyze_checkpoint

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
        from mixit_lab.analysis.dynamics import checkpoint_dynamics
        from mixit_lab.training.rundir import DYNAMICS_FILE

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
        from mixit_lab.analysis.signal import signal_propagation

        (root / "signal").mkdir()
        signal_propagation(variants=("standard", "random", "mixit"), depths=(1, 2), widths=(16,), n_heads=2,
                           n_ctx=8, d_vocab=16, n_seqs=2, seeds=(0,)).to_csv(root / "signal" / "signal.csv", index=False)
        _tuning_record(root, sentences, text)
        (root / "speed").mkdir()
        measure_throughput(["standard", "mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=4,
                           vocab=16, steps=1, repeats=1, warmup=0, device="cpu").to_csv(root / "speed" / "speed.csv",
                                                                                          index=False)
    finally:
        torch.set_num_threads(before)
    return root


# The tuning record of the runs folder (mixit_lab.training.tuning): each (study, task, params, variant, size) at three learning
# rates, the final metric falling off away from 3e-3 (lines of the lr_* figures); only 3e-3 is trained above.
GRID_LRS = (1e-3, 3e-3, 1e-2)


def _tuning_record(root: Path, sentences: Path, text: Path) -> None:
    from mixit_lab.training.rundir import TUNING_FILE
    from mixit_lab.training.tuning import Tuning

    settings = [("retrieval", "retrieval", {"pairs": 3, "num_values": 4}, v, 2) for v in ("frozen_qk", "mixit")]
    settings += [("khop", "khop", {"hops": 1, "length": 8, "alphabet": 4}, v, 2) for v in ("standard", "mixit")]
    settings += [("algorithmic", "addition", {"digits": 1}, v, 1) for v in ("standard", "mixit")]
    settings += [("memorize", "memorize", {"n": n, "d": 2}, "standard", 1) for n in (2, 3)]
    settings += [("depth", "addition", {"digits": 1}, "standard", n) for n in (1, 2)]
    settings += [("lm", "lm", {"text_file": [str(text)], "tokenizer": "byte", "seq_len": 16}, v, 1)
                 for v in ("standard", "mixit")]
    runs = []
    for study, task, params, variant, layers in settings:
        for lr in GRID_LRS:
            cfg = TrainConfig(task=task, task_params=params, variant=variant, d_model=16, n_layers=layers, n_heads=2,
                              seed=0, steps=8, batch_size=16, lr=lr, eval_every=4, eval_samples=32)
            off = abs(np.log10(lr / 3e-3))
            summary = {"status": "finished", "eval_acc": 0.9 - 0.3 * off, "eval_loss": 2.0 + off, "tune_acc": 0.9 - 0.3 * off,
                       "tune_loss": 2.0 + off}
            analysis = {"summary": {"memory": {"bits_per_trainable_param": 1.5 - 0.2 * off, "accuracy": 0.5}}}
            runs.append(Tuning.entry(study, f"{study}/{task}-{variant}-{layers}-{lr:g}", cfg, summary,
                                     analysis if task == "memorize" else None))
    Tuning(runs=runs).write(root / TUNING_FILE)


@pytest.fixture(scope="module")
def runs(runs_dir) -> RunSet:
    """The runs folder as every figure draws from it (its table read once, as make_all shares it)."""
    return RunSet(runs_dir)


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(path: Path) -> bool:
    return path.read_bytes()[:5] == b"%PDF-"


@pytest.mark.parametrize("name", FIGURE_NAMES)
def test_each_figure_writes_png_and_pdf(runs, tmp_path, name):
    fig = figures.FIGURES[name].plot(runs)
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


def _count_loads(monkeypatch) -> list:
    """Count every reading of a runs folder (mixit_lab.analysis.runs.load_runs, wherever a figure module imported it)."""
    import sys

    import mixit_lab.analysis.runs
    calls: list = []
    original = mixit_lab.analysis.runs.load_runs

    def counted(root, *args):
        calls.append(root)
        return original(root, *args)

    for module in [mixit_lab.analysis.runs, *(m for n, m in list(sys.modules.items()) if n.startswith("mixit_lab.figures"))]:
        if getattr(module, "load_runs", None) is original:
            monkeypatch.setattr(module, "load_runs", counted)
    return calls


def test_make_all_reads_the_runs_folder_once_for_every_figure(runs_dir, tmp_path, monkeypatch):
    from mixit_lab.analysis.runs import load_runs

    before = load_runs(runs_dir)
    loads = _count_loads(monkeypatch)
    results = make_all(runs_dir, tmp_path / "out")
    assert all(isinstance(r, list) for r in results.values()), results  # every figure drawn, from one reading
    assert len(loads) == 1
    pd.testing.assert_frame_equal(RunSet(runs_dir).frame(), before)  # no figure changed the table it shared
    make_all(runs_dir, tmp_path / "again", only=["retrieval_pairs", "beyond"], runs=before)
    make_all(runs_dir, tmp_path / "files", only=["speed", "signal_depth"])
    assert len(loads) == 2  # a table passed in is not read again; figures of the folder's own files read none


def test_the_figures_and_the_report_read_each_run_file_once(runs_dir, tmp_path, monkeypatch):
    """What `mixit reproduce` does after training: one RunSet whose Runs the figures and the report share, so that
    every file of every run (run.json, summary.json, metrics.jsonl, analysis.json, each analysis table, the
    dynamics table) is opened once at most, however many figures and tables read it."""
    from mixit_lab.reproduce.report import write_report

    opened = count_run_file_opens(runs_dir, monkeypatch)
    runs = RunSet(runs_dir).frame()
    results = make_all(runs_dir, tmp_path / "figures", runs=runs, workers=1)
    write_report(runs_dir, tmp_path / "report", {"preset": "tiny"}, tmp_path / "figures", runs=runs)
    assert sum(isinstance(r, list) for r in results.values()) >= 10 and (tmp_path / "report" / "report.md").is_file()
    names = {p.name for p in opened}
    assert {"run.json", "summary.json", "metrics.jsonl", "analysis.json", "heads.csv", "memory.csv"} <= names, names
    assert read_more_than_once(opened, runs_dir) == {}


def test_figures_draw_the_table_they_are_given(runs):
    retrieval = runs.frame()[runs.frame()["group"] == "retrieval"]
    fig = figures.FIGURES["task_accuracy"].plot(RunSet(runs.root, retrieval))
    assert all("retrieval" in t.get_text() for t in fig.axes[0].get_xticklabels())
    with pytest.raises(NoData, match="language-modeling"):
        figures.FIGURES["lm_curves"].plot(RunSet(runs.root, retrieval))
    with pytest.raises(NoData, match="not a directory"):
        figures.FIGURES["retrieval_pairs"].plot(runs.root / "missing")  # a folder is read into a RunSet


def test_figures_drawn_by_two_processes_are_the_files_one_process_draws(runs_dir, tmp_path):
    """make_all forks only where torch is not imported (as in `mixit figures`), so a fresh interpreter draws: with
    two processes first, then with one (attention_maps has imported torch by then)."""
    import subprocess

    script = f"""
import json
from mixit_lab.figures import make_all
from mixit_lab.training.pool import fork_workers
assert fork_workers(2, 21) == 2, "this process cannot fork"
two = make_all({str(runs_dir)!r}, {str(tmp_path / "two")!r}, workers=2)
one = make_all({str(runs_dir)!r}, {str(tmp_path / "one")!r}, workers=1)
print(json.dumps([{{k: v if isinstance(v, str) else [p.name for p in v] for k, v in r.items()}} for r in (two, one)]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    two, one = json.loads(done.stdout.splitlines()[-1])
    assert two == one and sum(isinstance(v, list) for v in one.values()) >= 3
    assert "attention_maps" in {k for k, v in one.items() if isinstance(v, list)}  # torch, imported in a child
    for files in (v for v in one.values() if isinstance(v, list)):
        assert [(tmp_path / "two" / f).read_bytes() for f in files] == [(tmp_path / "one" / f).read_bytes()
                                                                         for f in files], files


def test_a_large_folder_read_by_two_processes_is_the_table_one_process_reads(runs_dir, monkeypatch):
    import mixit_lab.analysis.runs
    one = load_runs(runs_dir, workers=1)
    monkeypatch.setattr(mixit_lab.analysis.runs, "PARALLEL_FROM", 1)
    pd.testing.assert_frame_equal(load_runs(runs_dir, workers=2), one)


def test_runs_are_judged_by_the_headline_their_summary_records_else_by_their_task_class(runs_dir):
    table = load_runs(runs_dir)
    done = table[table["status"] == "finished"]
    assert done["headline"].tolist() == ["eval_loss" if t == "lm" else "eval_acc" for t in done["task"]]  # recorded
    assert by_loss(done).tolist() == (done["task"] == "lm").tolist() and by_loss(done).any()
    frame = pd.DataFrame({"task": ["lm", "lm", "retrieval", "retrieval", "pkg.mod:Task", "not_a_task"],
                          "headline": ["eval_acc", None, "eval_loss", None, None, None]})
    assert by_loss(frame).tolist() == [False, True, True, False, False, False]  # recorded, else the class says
    assert by_loss(frame.drop(columns="headline")).tolist() == [True, True, False, False, False, False]
    assert judged_by_loss("lm") and not judged_by_loss("sentiment") and judged_by_loss("retrieval", "eval_loss")


def test_a_bug_in_one_figure_is_raised_with_its_name_after_the_others(runs_dir, tmp_path, monkeypatch):
    def broken(runs):
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
    # --only that draws nothing is not a success (exit 1, one line saying why): tests/test_write_failures.py
    assert main(["figures", str(tmp_path / "empty"), "--out", str(tmp_path / "o"), "--only", "speed"]) == 1
    captured = capsys.readouterr()
    assert "skipped: no speed/speed.csv" in captured.out and captured.err.count("\n") == 1
    assert main(["figures", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err and "not a directory" in err
    assert main(["figures", str(tmp_path), "--only", "not_a_figure"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not_a_figure" in err


def test_default_out_dir_is_named_by_the_preset(runs_dir, tmp_path):
    assert default_out_dir(runs_dir) == Path("reports/tiny/figures")
    (tmp_path / "myruns").mkdir()
    assert default_out_dir(tmp_path / "myruns") == Path("reports/myruns/figures")


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


def test_error_bars_of_equal_seeds_are_zero_not_a_negative_rounding():
    from mixit_lab.figures.common import seed_errors, seed_stats

    # Was: 84 seeds at 0.1 give a mean 2.8e-17 below them, and matplotlib refused the bar ("yerr" negative).
    stats = seed_stats(pd.DataFrame({"variant": "a", "eval_acc": [0.1] * 84}), ["variant"], "eval_acc")
    assert stats["mean"].iloc[0] < stats["min"].iloc[0]  # the rounding the bars must survive
    errors = seed_errors(stats, 100)
    assert errors.shape == (2, 1) and (errors >= 0).all() and errors.max() < 1e-12

def test_task_parameters_fall_back_to_the_task_defaults():
    runs = pd.DataFrame({"task": ["retrieval", "memorize", "lm"], "task_params": [{}, {"n": 4}, {"seq_len": 8}]})
    pairs = param(runs, "pairs")
    assert pairs[0] == 30 and pairs[1:].isna().all()  # retrieval's default; the others have no pairs
    assert param(runs, "n")[1] == 4 and param(runs, "d")[1] == 2  # d not given: memorize's default


def test_figures_show_the_runs_they_are_about(runs):
    fig = figures.FIGURES["task_accuracy"].plot(runs)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert any("addition" in t for t in ticks) and any("retrieval" in t for t in ticks)
    assert not any(t.startswith("lm") for t in ticks)
    fig = figures.FIGURES["retrieval_pairs"].plot(runs)
    assert [float(t) for t in fig.axes[0].get_xticks()] == [2.0, 3.0]
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"Frozen QK", "MixiT"}
    fig = figures.FIGURES["induction_heads"].plot(runs)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["Standard", "MixiT"]
    fig = figures.FIGURES["signal_depth"].plot(runs)  # standard and random coincide at init: one line
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"Standard = Random", "MixiT"}


def test_retrieval_positions_point_at_the_queried_value():
    from mixit_lab.figures.attention_maps import _retrieval_positions
    from mixit_lab.training import get_task

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
        "relative_to_standard", "relative_spread", "relative_per_block", "d_model", "n_layers", "n_heads", "seq_len",
        "batch_size", "device"]
    assert list(df["variant"]) == ["standard", "mixit"] and (df["tokens_per_s"] > 0).all()
    assert df.loc[0, "relative_to_standard"] == 0.0 and df.loc[0, "relative_spread"] == 0.0
    assert np.isclose(df.loc[1, "relative_to_standard"], df.loc[1, "ms_per_sample"] / df.loc[0, "ms_per_sample"] - 1)
    assert df.loc[1, "relative_spread"] == 0.0  # one turn: nothing to spread over
    assert float(df.loc[1, "relative_per_block"]) == pytest.approx(df.loc[1, "relative_to_standard"], abs=1e-6)
    assert math.isnan(measure_throughput(["mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=2,
                                         vocab=8, steps=1, repeats=1, warmup=0, device="cpu")["relative_to_standard"][0])
    with pytest.raises(ValueError, match="variants"):
        measure_throughput(["nope"])


def test_measure_throughput_compares_each_turn_with_standards(monkeypatch):
    # Block times scripted per variant and turn: a machine slowing down during the stage slows both variants
    # of a turn alike, so the per-turn ratio (and its spread) stays what the models differ by.
    import mixit_lab.training.benchmark as bench

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


def test_beyond_figure_labels_grid_models(runs):
    fig = figures.FIGURES["beyond"].plot(runs)
    labels = [t.get_text() for ax in fig.axes if ax.get_visible() for t in ax.get_yticklabels()]
    assert labels == ["MixiT", "mixit [attention mixing,softmax]"]


# --------------------------------------------------------------------------- legibility: no text drawn over text
OVERLAP_PX = 2.0  # text boxes (at the figure's 100 dpi) may touch by this much, as glyph boxes include blank space


def drawn_texts(fig) -> list:
    """The text artists a draw of `fig` actually renders (with paper_style, as save() draws), in drawing order:
    tick labels of ticks in view, axis labels, titles, annotations, legend texts; empty ones left out."""
    from matplotlib.text import Text

    drawn, original = [], Text.draw

    def record(self, renderer):
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)
        return original(self, renderer)

    Text.draw = record
    try:
        with paper_style():
            fig.canvas.draw()
    finally:
        Text.draw = original
    return list(dict.fromkeys(drawn))


def text_overlaps(fig) -> list[str]:
    """'"a" over "b"' for each pair of drawn texts whose boxes overlap by more than OVERLAP_PX both ways."""
    texts = drawn_texts(fig)
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    found = []
    for i, (a, box_a) in enumerate(zip(texts, boxes)):
        for b, box_b in zip(texts[i + 1:], boxes[i + 1:]):
            wide = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            high = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if wide > OVERLAP_PX and high > OVERLAP_PX:
                found.append(f"{a.get_text()!r} over {b.get_text()!r}")
    return found


@pytest.mark.parametrize("name", FIGURE_NAMES)
def test_no_figure_draws_text_over_text(runs, name):
    fig = figures.FIGURES[name].plot(runs)
    assert text_overlaps(fig) == []


def test_the_overlap_check_sees_text_drawn_over_text():
    from mixit_lab.figures.style import new_figure

    with paper_style():
        fig = new_figure()
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "first label")
        ax.text(0.52, 0.5, "second label")
        ax.text(0.1, 0.1, "apart")
    assert text_overlaps(fig) == ["'first label' over 'second label'"]


# --------------------------------------------------------------------------- each figure draws the data it names
def _runs(runs: RunSet, group: str) -> pd.DataFrame:
    """The runs of one study group, from the table the figures draw from."""
    table = runs.frame()
    return table[table["group"] == group].reset_index(drop=True)


def _data_lines(ax) -> list:
    """The data line of each errorbar series in ax (plot_variant_lines draws one per variant)."""
    from matplotlib.container import ErrorbarContainer

    return [c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_memorization_draws_each_runs_memory_analysis(runs):
    from mixit_lab.analysis.runs import read_analysis_table

    mine = _runs(runs, "memorize")
    memory = {p["n"] ** p["d"]: read_analysis_table(path, "memory").iloc[0]
              for p, path in zip(mine["task_params"], mine["path"])}
    keys = sorted(memory)
    fig = figures.FIGURES["memorization"].plot(runs)
    for ax, column, scale in zip(fig.axes, ("accuracy", "bits", "bits_per_trainable_param"), (100, 1, 1)):
        (line,) = _data_lines(ax)
        assert list(line.get_xdata()) == keys
        assert np.allclose(line.get_ydata(), [memory[k][column] * scale for k in keys]), column


def test_lm_curves_draw_each_variants_eval_loss_against_step(runs):
    from mixit_lab.analysis.runs import read_metrics

    fig = figures.FIGURES["lm_curves"].plot(runs)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    mine = _runs(runs, "lm")
    assert set(lines) == {variant_style(v).label for v in mine["variant"]}
    for variant, path in zip(mine["variant"], mine["path"]):
        metrics = read_metrics(path)
        metrics = metrics[metrics["eval_loss"].notna()]
        line = lines[variant_style(variant).label]
        assert list(line.get_xdata()) == list(metrics["step"])
        assert np.allclose(line.get_ydata(), metrics["eval_loss"])


def test_speed_bars_are_each_variants_throughput(runs):
    speed = pd.read_csv(runs.root / "speed" / "speed.csv")
    fig = figures.FIGURES["speed"].plot(runs)
    ax = fig.axes[0]
    heights = np.array([bar.get_height() for bar in ax.patches])
    assert [t.get_text() for t in ax.get_xticklabels()] == [variant_style(v).label for v in speed["variant"]]
    assert np.allclose(heights / heights[0], speed["tokens_per_s"] / speed["tokens_per_s"][0])
    change = round(speed["relative_to_standard"][1] * 100)
    assert [t.get_text() for t in ax.texts] == ["", f"{change:+d}%".replace("-", "−")]


def test_depth_accuracy_draws_accuracy_at_each_depth(runs):
    mine = _runs(runs, "depth").sort_values("n_layers")
    fig = figures.FIGURES["depth_accuracy"].plot(runs)
    (line,) = _data_lines(fig.axes[0])
    assert list(line.get_xdata()) == list(mine["n_layers"])
    assert np.allclose(line.get_ydata(), mine["eval_acc"] * 100)


def test_dynamics_draws_each_runs_head_scores_and_loss(runs):
    from mixit_lab.training.rundir import DYNAMICS_FILE

    fig = figures.FIGURES["dynamics"].plot(runs)
    heads, losses = fig.axes[:2]
    drawn = [tuple(np.round(line.get_ydata(), 6)) for line in heads.get_lines()]
    mine = _runs(runs, "khop")
    for path in mine["path"]:
        table = pd.read_csv(Path(path) / DYNAMICS_FILE)
        for score in ("task_induction", "top_previous_token"):
            assert tuple(np.round(table[score], 6)) in drawn, score
    assert len(heads.get_lines()) == 2 * len(mine) and len(losses.get_lines()) == len(mine)
    assert list(heads.get_lines()[0].get_xdata())[:2] == [0.5, 1]  # step 0 drawn at 0.5 on the log axis


def test_attention_maps_draw_attention_rows_of_one_example(runs):
    fig = figures.FIGURES["attention_maps"].plot(runs)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 4
    n = images[0].get_array().shape[0]
    assert all(im.get_array().shape == (n, n) for im in images)
    for trained in images[:2]:  # the frozen_qk model's softmax rows, masked above the diagonal
        pattern = trained.get_array()
        assert np.allclose(pattern.sum(axis=1), 1, atol=1e-4) and pattern.mask[np.triu_indices(n, 1)].all()
    assert len(fig.axes[2].get_xticklabels()) == n  # one token label per position (on the bottom row)


def _panels(fig) -> dict:
    return {ax.get_gid(): ax for ax in fig.axes if ax.get_gid()}


def test_components_cells_are_the_analysis_medians(runs):
    from mixit_lab.analysis.component_map import who_does_the_work

    work = who_does_the_work(runs.frame(), per_layer=True)
    panels = _panels(figures.FIGURES["components"].plot(runs))
    tasks = {"khop (2L)": "khop(alphabet=4, hops=1, length=8)",  # row label: only the parameters that differ
             "memorize n=2 (1L)": "memorize(d=2, n=2)", "memorize n=3 (1L)": "memorize(d=2, n=3)"}
    assert set(panels) == {f"{value}|{label}" for value in ("mean_drop", "share") for label in tasks}
    for gid, ax in panels.items():
        value, label = gid.split("|")
        mine = work[(work["task"] == tasks[label]) & (work["layer"] >= 0)]
        rows = [variant_style(v).label for v in order_variants(mine["variant"])]
        rows = rows if value == "mean_drop" else []  # the share panel has the same rows, unlabelled
        assert [t.get_text() for t in ax.get_yticklabels()] == rows
        _assert_cells(ax, mine, value)


def _assert_cells(ax, rows: pd.DataFrame, value: str) -> np.ndarray:
    """ax's heatmap is `value` of rows (one task setting of a who_does_the_work table): a row per variant, in the
    figures' order, a column per layer and component (L0 attention, L0 MLP, L1 attention, ...), no other column."""
    variants = order_variants(rows["variant"])
    cells = ax.images[0].get_array().filled(np.nan)
    assert cells.shape == (len(variants), 2 * int(rows["n_layers"].iloc[0]))
    for row in rows.itertuples():
        column = 2 * row.layer + (row.component == "MLP")
        assert np.allclose(cells[variants.index(row.variant), column], getattr(row, value), equal_nan=True)
    return cells


QUICK_SETTINGS = [  # the quick preset's analysed task settings: (task, layers, width, variants)
    ("addition", 2, 64, ["standard", "mixit", "random"]), ("addition", 6, 64, ["mixit", "random"]),
    ("khop", 3, 64, ["standard", "frozen_qk", "mixit"]),
    ("memorize", 2, 16, ["standard", "frozen_qk", "frozen_mlp", "mixit"]),
    ("memorize", 2, 64, ["standard", "mixit"]), ("retrieval", 2, 64, ["standard", "frozen_qk", "frozen_mlp", "mixit"])]


def _work_table(settings) -> pd.DataFrame:
    """A who_does_the_work(per_layer=True) table with the widest numbers a cell shows (100, −0.5, 3.2)."""
    drops, shares = (100.0, -2.5, 3.2, 0.04, 97.3), (-0.46, 1.23, 0.3, -0.04, 0.0)
    rows = []
    for task, layers, width, variants in settings:
        for v in variants:
            for layer in range(layers):
                for k, component in enumerate(("attention", "MLP")):
                    i = len(rows)
                    rows.append({"task": task, "variant": v, "d_model": width, "n_layers": layers, "layer": layer,
                                 "component": component, "mean_drop": drops[i % 5], "share": shares[i % 5 - k]})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("settings", [QUICK_SETTINGS, QUICK_SETTINGS[-1:], QUICK_SETTINGS[1:2]],
                         ids=["quick", "2 layers", "6 layers"])
def test_components_fit_each_setting_and_write_every_number_legibly(settings):
    from mixit_lab.figures.components import cell_text, draw

    work = _work_table(settings)
    fig = draw(work)
    assert text_overlaps(fig) == []
    assert fig.get_figwidth() <= 6.9 + 1e-9
    panels = _panels(fig)
    assert len(panels) == 2 * len(settings)
    renderer = fig.canvas.get_renderer()
    for task, layers, width, variants in settings:
        several = sum(s[0] == task and s[1] == layers for s in settings) > 1
        label = f"{task} ({layers}L, d{width})" if several else f"{task} ({layers}L)"
        mine = work[(work["task"] == task) & (work["n_layers"] == layers) & (work["d_model"] == width)]
        for value in ("mean_drop", "share"):
            ax = panels[f"{value}|{label}"]
            cells = _assert_cells(ax, mine, value)  # no empty column slots
            assert ax.get_window_extent(renderer).width / cells.shape[1] >= 0.19 * fig.dpi  # cells >= 0.19 in
            written = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
            assert len(written) == cells.size  # every number fits its cell
            for (r, c), text in written.items():
                assert text == cell_text(cells[r, c])


def test_cell_numbers_are_short():
    from mixit_lab.figures.components import cell_text

    assert [cell_text(v) for v in (97.3, 100.0, 3.24, 0.34, 0.04, -0.04, -0.46, 12.5, 3.0)] == [
        "97", "100", "3.2", "0.3", "0", "0", "−0.5", "12", "3"]


def test_signal_depth_keeps_near_zero_covariance_in_a_linear_band(tmp_path):
    rows = [(v, depth, cov) for depth in (2, 4, 8, 16, 32)
            for v, cov in (("random", 5.5e-4 * depth ** 1.5), ("mixit", 1.6e-3 * depth ** 0.5),
                           ("mixit, no sink", (-1) ** depth * 2e-5 - 1.6e-5 * (depth == 32)))]
    df = pd.DataFrame(rows, columns=["variant", "depth", "covariance"]).assign(
        d_model=128, layer=lambda d: d["depth"], cosine=0.5, covariance_std=3e-5, cosine_std=0.01, n_seeds=3)
    (tmp_path / "signal").mkdir()
    df.to_csv(tmp_path / "signal" / "signal.csv", index=False)
    fig = figures.FIGURES["signal_depth"].plot(tmp_path)
    assert text_overlaps(fig) == []
    ax = fig.axes[0]
    assert ax.get_yscale() == "symlog" and ax.yaxis.get_transform().linthresh == 1e-4  # above -1.6e-5 - 3e-5
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    assert ticks == [0, 1e-4, 1e-3, 1e-2, 1e-1]


def test_learning_rate_figures_draw_the_records_grid_and_the_chosen_rates_seeds(runs):
    """Each lr_* figure: a line per variant through the tuning record's runs (one per learning rate) and the seeds
    trained at its chosen rate as points there."""
    fig = figures.FIGURES["lr_retrieval"].plot(runs)
    lines = {line.get_gid(): line for ax in fig.axes for line in ax.get_lines() if line.get_gid()}
    mixit = lines["mixit|retrieval(num_values=4, pairs=3)"]
    assert list(mixit.get_xdata()) == pytest.approx(GRID_LRS)
    assert list(mixit.get_ydata()) == pytest.approx([100 * (0.9 - 0.3 * abs(np.log10(lr / 3e-3))) for lr in GRID_LRS])
    points = {c.get_gid(): c for ax in fig.axes for c in ax.collections if c.get_gid()}
    seeds = points["seeds|mixit|retrieval(num_values=4, pairs=3)"].get_offsets()
    trained = runs.frame().query("group == 'retrieval' and variant == 'mixit' and task_label.str.contains('pairs=3')")
    assert seeds[:, 0].tolist() == [3e-3] and seeds[:, 1].tolist() == pytest.approx(list(100 * trained["eval_acc"]))
    bits = figures.FIGURES["lr_memorize"].plot(runs)
    memorize = [line for ax in bits.axes for line in ax.get_lines() if (line.get_gid() or "").startswith("standard|")]
    assert len(memorize) == 2 and list(memorize[0].get_ydata()) == pytest.approx([1.5 - 0.2 * abs(np.log10(lr / 3e-3))
                                                                                 for lr in GRID_LRS])
    with pytest.raises(NoData, match="no tuning record"):
        figures.FIGURES["lr_lm"].plot(RunSet(runs.root / "lm"))
