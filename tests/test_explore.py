"""mixit_lab.analysis.explore, the explorer's data layer: listing (fast, cached, robust), path safety, models, inputs,
attention patterns, head scores, predictions and comparison tables, on the session's tiny runs directory."""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.figures import FIGURE_NAMES, figures_for_group
from mixit_lab.analysis.heads import head_scores
from mixit_lab.models import load_model
from mixit_lab.models.checkpoint import CheckpointError
from mixit_lab.training.rundir import run_lock


@pytest.fixture(scope="module")
def root(explorer_runs) -> Path:
    return ex.open_root(explorer_runs["root"])


@pytest.fixture(scope="module")
def runs(root) -> pd.DataFrame:
    return ex.list_runs(root)


def _row(runs: pd.DataFrame, run_dir: Path) -> pd.Series:
    return runs[runs["path"] == str(run_dir)].iloc[0]


# --------------------------------------------------------------------------- listing
def test_list_runs_reads_every_run_and_marks_the_broken_one(explorer_runs, runs):
    assert set(runs["run"]) == {"retrieval/retrieval-standard", "retrieval/retrieval-frozen_qk",
                                "retrieval/retrieval-mixit", "memorize/memorize-standard", "lm/lm-standard",
                                "sentiment/sentiment-mixit", "unreadable/bad-json", "unreadable/truncated"}
    bad = _row(runs, explorer_runs["bad_json"])
    assert bad["status"] == "corrupt" and "run.json" in bad["error"]
    std = _row(runs, explorer_runs["standard"])
    summary = json.loads((explorer_runs["standard"] / "summary.json").read_text())
    assert std["status"] == "finished" and std["size"] == "d16 L2 H2" and std["variant"] == "standard"
    assert std["eval_acc"] == summary["eval_acc"] and std["params_trainable"] == summary["params_trainable"]
    assert std["has_analysis"] and not _row(runs, explorer_runs["mixit"])["has_analysis"]


def test_open_root_names_a_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.*does not exist"):
        ex.open_root(tmp_path / "nowhere")
    assert ex.list_runs(tmp_path).empty


def _copy_run(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for name in ("run.json", "summary.json", "metrics.jsonl"):
        shutil.copy(src / name, dst / name)


def test_listing_is_cached_by_modification_time(explorer_runs, tmp_path, monkeypatch):
    for i in range(3):
        _copy_run(explorer_runs["standard"], tmp_path / "study" / f"run{i}")
    calls = []
    real = ex.run_row
    monkeypatch.setattr(ex, "run_row", lambda run, root: calls.append(run.path.name) or real(run, root))
    first = ex.list_runs(tmp_path)
    assert sorted(calls) == ["run0", "run1", "run2"]
    calls.clear()
    pd.testing.assert_frame_equal(ex.list_runs(tmp_path), first)
    assert calls == []  # nothing re-read
    summary = tmp_path / "study" / "run1" / "summary.json"
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "eval_acc": 0.123}))
    os.utime(summary, ns=(time.time_ns(), time.time_ns() + 10**9))
    again = ex.list_runs(tmp_path)
    assert calls == ["run1"]
    assert again.set_index("run").loc["study/run1", "eval_acc"] == 0.123


def test_two_hundred_runs_are_listed_from_two_files_each_and_again_from_none(explorer_runs, tmp_path, monkeypatch):
    for i in range(200):
        _copy_run(explorer_runs["standard"], tmp_path / f"study{i % 4}" / f"run{i:03d}")
    opened: list[str] = []
    real_open = io.open

    def counted(file, *args, **kwargs):
        opened.append(Path(file).name)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counted)
    monkeypatch.setattr(builtins, "open", counted)
    runs = ex.list_runs(tmp_path)
    assert len(runs) == 200 and (runs["status"] == "finished").all()
    assert sorted(set(opened)) == ["run.json", "summary.json"] and len(opened) == 400, sorted(set(opened))
    opened.clear()
    ex.list_runs(tmp_path)
    assert opened == []  # listed again from the cache: a stat per file, no read


def test_unfinished_run_reports_progress_from_the_end_of_its_metrics(explorer_runs, tmp_path):
    run = tmp_path / "study" / "half"
    run.mkdir(parents=True)
    shutil.copy(explorer_runs["standard"] / "run.json", run / "run.json")
    lines = (explorer_runs["standard"] / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:15])  # a line cut by a kill
    row = ex.list_runs(tmp_path).iloc[0]
    last = json.loads(lines[1])
    assert row["status"] == "interrupted" and row["step"] == last["step"] and row["loss"] == last["loss"]
    with run_lock(run):  # a process writes it now: the same (cached) row says so
        assert ex.list_runs(tmp_path).iloc[0]["status"] == "running"
    assert ex.list_runs(tmp_path).iloc[0]["status"] == "interrupted"
    evals = [json.loads(x) for x in lines[:2] if "eval_acc" in json.loads(x)]
    assert row["eval_acc"] == (evals[-1]["eval_acc"] if evals else None)
    with pytest.raises(FileNotFoundError, match="no checkpoint yet"):
        ex.load_run_model(tmp_path, run)


# --------------------------------------------------------------------------- path safety
def test_paths_outside_the_root_are_refused(root, tmp_path):
    with pytest.raises(ex.OutsideRoot, match="outside the runs directory"):
        ex.inside(root, "../elsewhere")
    with pytest.raises(ex.OutsideRoot):
        ex.inside(root, tmp_path)
    assert ex.inside(root, "retrieval") == root / "retrieval"


def test_a_run_file_linked_to_outside_is_not_read(explorer_runs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(explorer_runs["standard"] / "run.json", outside / "run.json")  # a valid run.json
    runs_dir = tmp_path / "runs" / "study" / "linked"
    runs_dir.mkdir(parents=True)
    (runs_dir / "run.json").symlink_to(outside / "run.json")
    row = ex.list_runs(tmp_path / "runs").iloc[0]
    assert row["status"] == "corrupt" and "outside the runs directory" in row["error"] and row["variant"] is None
    with pytest.raises(ex.OutsideRoot):
        ex.open_run(ex.open_root(tmp_path / "runs"), runs_dir)


def test_each_figure_declares_the_groups_it_draws():
    assert figures_for_group("retrieval") == ["task_accuracy", "retrieval_pairs", "attention_maps", "dynamics",
                                              "components", "lr_retrieval"]
    assert figures_for_group("khop") == ["task_accuracy", "induction_heads", "dynamics", "components", "lr_retrieval"]
    assert figures_for_group("lm") == ["lm_curves", "lr_lm"] and figures_for_group("nope") == []
    assert set(figures_for_group(None)) == set(FIGURE_NAMES)
    assert not any(figures_for_group(g) for g in ("signal", "speed"))  # drawn from the folder, not from runs


def test_figures_outside_the_root_are_listed_not_opened(root, tmp_path):
    links = {link.name: link for link in ex.figure_links(root, figures_for_group("retrieval"))}
    assert links["retrieval_pairs"].readable  # inside the runs directory, present
    assert not links["task_accuracy"].readable  # inside, but not drawn
    (tmp_path / "reproduce.json").write_text(json.dumps({"figures_dir_resolved": str(root / "figures")}))
    (tmp_path / "run").mkdir()
    outside = ex.figure_links(ex.open_root(tmp_path), figures_for_group("retrieval"))
    assert [link.name for link in outside] == figures_for_group("retrieval")
    assert not any(link.readable for link in outside)


# --------------------------------------------------------------------------- models, inputs, attention
def test_model_and_eval_example(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["standard"])
    task = ex.task_of(root, explorer_runs["standard"])
    assert task.name == "retrieval" and task.params["pairs"] == 3
    tokens, mask = task.eval_set(64)
    example = em.eval_example(task, 5)
    assert torch.equal(example.tokens, tokens[5]) and example.answer == mask[5].tolist()
    assert example.labels == [task.vocab[i] for i in tokens[5].tolist()]
    assert em.default_position(example) == mask[5].tolist().index(True) - 1
    with pytest.raises(ValueError, match="index=64"):
        em.eval_example(task, 64)
    assert model.cfg.n_ctx == task.seq_len


def test_truncated_checkpoint_fails_with_the_file_named(root, explorer_runs):
    with pytest.raises(CheckpointError, match="model.safetensors"):
        ex.load_run_model(root, explorer_runs["truncated"])


@pytest.mark.parametrize("text, message", [("", "no token ids"), ("1 x 2", "'x' is not an integer"),
                                           ("1 99", "99 is outside the vocabulary"), (" ".join(["1"] * 40), "n_ctx")])
def test_parse_token_ids_rejects_bad_input(text, message):
    with pytest.raises(ValueError, match=message):
        em.parse_token_ids(text, d_vocab=20, n_ctx=16)


def test_parse_token_ids():
    assert em.parse_token_ids(" 3, 1 4,1 ", d_vocab=5, n_ctx=8).tolist() == [3, 1, 4, 1]


def test_attention_patterns_are_the_hooked_patterns(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["standard"])
    tokens = em.eval_example(ex.task_of(root, explorer_runs["standard"]), 0).tokens
    patterns = em.attention_patterns(model, tokens)
    _, cache = model.run_with_cache(tokens[None])
    assert patterns.shape == (2, 2, len(tokens), len(tokens))
    for layer in range(2):
        np.testing.assert_allclose(patterns[layer], cache["pattern", layer][0].numpy(), atol=1e-6)
    np.testing.assert_allclose(patterns.sum(-1), 1.0, atol=1e-5)
    assert em.head_kinds(model) == [["softmax", "softmax"]] * 2
    frozen = ex.load_run_model(root, explorer_runs["frozen_qk"])
    assert em.head_kinds(frozen)[0][0] == "softmax, frozen Q/K"


def test_head_kinds_name_what_a_grid_freezes_per_head():
    from mixit_lab.models import ModelConfig, build_model

    model = build_model(ModelConfig(d_model=16, n_layers=2, n_heads=2, n_ctx=8, d_vocab=9, freeze=["q@0", "qk@1.h1"]))
    assert em.head_kinds(model) == [["softmax, frozen Q", "softmax, frozen Q"], ["softmax", "softmax, frozen Q/K"]]


def test_mixit_patterns_are_its_fixed_matrices(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["mixit"])
    a = em.attention_patterns(model, torch.tensor([1, 2, 3, 4, 5]))
    b = em.attention_patterns(model, torch.tensor([7, 7, 0, 2, 6]))
    np.testing.assert_array_equal(a, b)  # input-independent
    np.testing.assert_allclose(a[1], model.blocks[1].attn.mixing[:, :5, :5].numpy())
    assert em.is_fixed_attention(model)
    assert em.head_kinds(model)[0] == ["fixed sink (input-independent)", "fixed (input-independent)"]
    assert em.fixed_matrix_values(model) == 2 * 2 * model.cfg.n_ctx**2


def test_mixit_without_sink_heads_has_no_sink_label(tiny_cfg):
    from mixit_lab.models import build_model

    assert em.head_kinds(build_model(tiny_cfg("mixit")))[1][0] == "fixed sink (input-independent)"
    plain = build_model(tiny_cfg("mixit", sink_head=False))
    assert not em.has_sink_head(plain)
    assert em.head_kinds(plain) == [["fixed (input-independent)"] * 4] * 2


def test_text_run_takes_typed_text_and_never_needs_its_corpus(root, explorer_runs, tmp_path):
    corpus = explorer_runs["corpus"] / "text.txt"
    moved = tmp_path / "text.txt"
    shutil.move(corpus, moved)  # the corpus is outside the runs directory: the explorer must not need it
    try:
        assert ex.task_of(root, explorer_runs["lm"]) is None
        model = ex.load_run_model(root, explorer_runs["lm"])
        example = em.text_example(model, "the fox\n")
        assert example.labels[0] == "<|endoftext|>" and example.labels[-1] == "\\n" and "␣" in example.labels
        assert example.tokens.tolist() == model.to_tokens("the fox\n")[0].tolist()
        assert em.attention_patterns(model, example.tokens).shape[-1] == len(example.labels)
    finally:
        shutil.move(moved, corpus)
    algorithmic = ex.load_run_model(root, explorer_runs["standard"])
    with pytest.raises(ValueError, match="no tokenizer"):
        em.text_example(algorithmic, "hello")


# --------------------------------------------------------------------------- heads
def test_head_tables_stored_or_computed(root, explorer_runs):
    stored, chance = ex.stored_head_table(root, explorer_runs["standard"])
    pd.testing.assert_frame_equal(stored, pd.read_csv(explorer_runs["standard"] / "analysis" / "heads.csv"))
    assert chance["induction"] > 0
    assert ex.stored_head_table(root, explorer_runs["mixit"]) is None
    model = ex.load_run_model(root, explorer_runs["mixit"])
    computed, _ = em.compute_head_table(model, n_seqs=4, seq_len=4)
    pd.testing.assert_frame_equal(computed, head_scores(model, n_seqs=4, seq_len=4).frame())
    grid = em.score_grid(computed, "first_token")
    assert grid.shape == (2, 2)
    assert grid[1, 0] == computed.query("layer == 1 and head == 0")["first_token"].item()
    with pytest.raises(em.NoHeadScores, match="n_ctx=3"):
        em.compute_head_table(ex.load_run_model(root, explorer_runs["memorize"]))
    assert not list((explorer_runs["mixit"]).glob("analysis*"))  # computing wrote nothing


def test_component_tables_stored_or_computed(root, explorer_runs):
    stored, where = ex.components_table(root, explorer_runs["standard"])
    assert "stored" in where
    pd.testing.assert_frame_equal(stored, pd.read_csv(explorer_runs["standard"] / "analysis" / "components.csv"))
    computed, where = ex.components_table(root, explorer_runs["mixit"])
    assert where == "computed now on 64 eval rows"
    grid = em.component_grid(computed, "mean_delta_accuracy")
    assert grid.shape == (2, 2)  # attention and MLP x 2 layers
    mlp1 = computed[(computed["component"] == "mlp") & (computed["layer"] == 1)]["mean_delta_accuracy"].item()
    assert grid[1, 1] == mlp1
    shares = em.head_share_grid(computed)
    assert shares.shape == (2, 2) and shares[0, 1] == computed.query("component == 'head' and layer == 0 and head == 1")["share"].item()
    with pytest.raises(ValueError, match="text tasks"):
        ex.components_table(root, explorer_runs["lm"])
    assert not list((explorer_runs["mixit"]).glob("analysis*"))  # computing wrote nothing


def test_repeated_pattern(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["standard"])
    tokens, pattern = em.repeated_pattern(model, 1, 0, seq_len=4)
    assert tokens[:4].tolist() == tokens[4:].tolist()
    np.testing.assert_allclose(pattern, em.attention_patterns(model, tokens)[1, 0])
    with pytest.raises(ValueError, match="L2H0"):
        em.repeated_pattern(model, 2, 0, seq_len=4)


# --------------------------------------------------------------------------- predictions, parameters, comparisons
def test_top_k_next_matches_the_logits(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["standard"])
    task = ex.task_of(root, explorer_runs["standard"])
    tokens = em.eval_example(task, 0).tokens
    top = em.top_k_next(model, tokens, 3, k=4, task=task)
    probs = model(tokens[None])[0, 3].softmax(-1)
    assert top["token_id"].tolist() == probs.topk(4).indices.tolist()
    np.testing.assert_allclose(top["probability"], probs.topk(4).values.detach().numpy(), rtol=1e-5)
    assert top["token"].tolist() == [task.vocab[i] for i in top["token_id"]]
    assert len(em.top_k_next(model, tokens, 3, k=10_000)) == model.cfg.d_vocab
    p, rank = em.next_token_probability(model, tokens, 3, top["token_id"][1])
    assert rank == 2 and p == pytest.approx(top["probability"][1], rel=1e-5)


def test_class_probabilities(root, explorer_runs):
    model = ex.load_run_model(root, explorer_runs["sentiment"])
    tokens = em.text_example(model, "great food").tokens
    probs = em.class_probabilities(model, tokens, ex.run_classes(root, explorer_runs["sentiment"]))
    assert probs["class"].tolist() == ["0", "1"] and probs["probability"].sum() == pytest.approx(1.0)


def test_parameter_table_adds_up(root, explorer_runs):
    model = load_model(explorer_runs["frozen_qk"])
    table = em.parameter_table(model)
    counts = model.parameter_counts()
    assert table["trainable"].sum() == counts["trainable"] and table["frozen"].sum() == counts["frozen"]
    assert table.set_index("component").loc["qk", "trainable"] == 0


def test_comparison_tables(root, runs, explorer_runs):
    retrieval = runs[runs["task"] == "retrieval"]
    curves = ex.compare_curves(root, retrieval)
    metrics = [json.loads(x) for x in (explorer_runs["mixit"] / "metrics.jsonl").read_text().splitlines()]
    mine = curves[(curves["run"] == "retrieval/retrieval-mixit") & (curves["metric"] == "eval_acc")]
    assert mine["value"].tolist() == [m["eval_acc"] for m in metrics if "eval_acc" in m]
    assert set(curves["variant"]) == {"standard", "frozen_qk", "mixit"}  # the truncated copy is a standard run too

    memory = ex.memorization_table(root, runs)
    stored = pd.read_csv(explorer_runs["memorize"] / "analysis" / "memory.csv").iloc[0]
    assert memory["keys"].tolist() == [9] and memory["bits"].tolist() == [stored["bits"]]

    signal = ex.signal_table(root)
    assert (signal["layer"] == signal["depth"]).all() and set(signal["depth"]) == {1, 2}
    assert set(ex.speed_table(root)["variant"]) == {"standard", "mixit"}
    assert ex.reproduce_manifest(root)["preset"] == "tiny"


def test_missing_comparison_files_give_none(tmp_path):
    root = ex.open_root(tmp_path)
    assert ex.signal_table(root) is None and ex.speed_table(root) is None and ex.reproduce_manifest(root) is None
    (tmp_path / "speed").mkdir()
    (tmp_path / "speed" / "speed.csv").write_text("not,a\nspeed,table\n")
    assert ex.speed_table(root) is None
    with pytest.raises(ValueError, match="allowed"):
        ex.read_run_table(root, tmp_path, "../x")
