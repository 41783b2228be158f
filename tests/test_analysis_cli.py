import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import mixit_lab.analysis.heads
from conftest import count_run_file_opens
from mixit_lab.analysis.common import checkpoint_hash
from mixit_lab.models import ModelConfig, build_model, load_model
from mixit_lab.training import TrainConfig, train
from mixit_lab.cli.main import main

SMALL = ["--n-seqs", "4", "--eval-samples", "32"]


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_run(out, task, task_params, variant="standard", steps=4):
    cfg = TrainConfig(task=task, task_params=task_params, variant=variant, d_model=16, n_layers=2, n_heads=2,
                      steps=steps, batch_size=16, eval_every=steps, eval_samples=64 if task != "modadd" else None)
    train(cfg, out, progress=False)
    return out


def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_analyze_run_writes_the_documented_files(tmp_path, capsys, monkeypatch):
    run = tiny_run(tmp_path / "ret", "retrieval", {"pairs": 6})
    opened = count_run_file_opens(tmp_path, monkeypatch)
    code, out, err = run_cli(["analyze", str(run), *SMALL], capsys)
    assert code == 0, err
    assert [p.name for p in opened].count("run.json") == 1  # read once, however many steps ask for it
    folder = run / "analysis"
    assert f"{run}: computed" in out and str(folder) in out
    meta = json.loads((folder / "analysis.json").read_text())
    assert meta["checkpoint_sha256"] == checkpoint_hash(run / "checkpoint")
    assert meta["computed"] == ["heads", "in_context_loss", "attention", "signal", "ablation", "components", "patching"]
    assert set(meta["skipped"]) == {"memory", "task_induction"} and "retrieval" in meta["skipped"]["memory"]
    assert meta["task"]["name"] == "retrieval" and meta["model"]["variant"] == "standard"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["analysis.json", *meta["tables"].values()])
    heads = pd.read_csv(folder / "heads.csv")
    assert list(heads.columns) == ["layer", "head", "induction", "previous_token", "duplicate_token",
                                   "current_token", "first_token", "copying", "label"] and len(heads) == 4
    assert meta["summary"]["heads"]["seq_len"] == 7  # n_ctx = 14 caps [r, r] at 2 x 7
    signal = pd.read_csv(folder / "signal.csv")
    assert sorted(set(signal["state"])) == ["checkpoint", "init"] and len(signal) == 2 * 3
    ablation = pd.read_csv(folder / "ablation.csv")
    assert sorted(ablation["rank"]) == [1, 2, 3, 4] and meta["summary"]["ablation"]["examples"] == 32
    assert len(pd.read_csv(folder / "attention.csv")) == 4
    assert len(pd.read_csv(folder / "in_context_loss.csv")) == 13
    patching = pd.read_csv(folder / "patching.csv")
    assert list(patching.columns) == ["layer", "head", "restored", "logit_diff"] and len(patching) == 4
    assert [(t["layer"], t["head"]) for t in meta["summary"]["patching"]["top"]] == [
        tuple(r) for r in patching.sort_values("restored", ascending=False)[["layer", "head"]].head(3).values]


def test_analyses_read_only_the_rows_the_run_held_out(tmp_path, capsys):
    """A run that held out 64 eval rows is analysed on those 64 (said in analysis.json), however many are asked for:
    the rows after them were drawn for training."""
    run = tiny_run(tmp_path / "ret", "retrieval", {"pairs": 6})
    code, _, err = run_cli(["analyze", str(run), "--n-seqs", "100", "--eval-samples", "512"], capsys)
    assert code == 0, err
    meta = json.loads((run / "analysis" / "analysis.json").read_text())
    assert meta["eval_rows"] == 64 and meta["summary"]["ablation"]["examples"] == 64
    assert meta["summary"]["attention"]["inputs"].startswith("first 64 rows")


def test_khop_run_gets_the_task_aligned_induction_score_and_its_ablation(tmp_path, capsys):
    from mixit_lab.analysis.ablation import ablate_heads
    from mixit_lab.training.tasks import get_task

    params = {"hops": 1, "length": 8, "alphabet": 4}
    run = tiny_run(tmp_path / "khop", "khop", params, steps=6)
    code, out, err = run_cli(["analyze", str(run), *SMALL], capsys)
    assert code == 0, err
    folder = run / "analysis"
    meta = json.loads((folder / "analysis.json").read_text())
    assert meta["computed"][-4:] == ["ablation", "components", "task_induction", "patching"] and "task_induction" not in meta["skipped"]
    scores = pd.read_csv(folder / "task_induction.csv")
    assert list(scores.columns) == ["layer", "head", "score", "shuffled"] and len(scores) == 4
    aligned = meta["summary"]["task_induction"]
    top = aligned["top"]
    best = scores.loc[scores["score"].idxmax()]
    assert (top["layer"], top["head"]) == (best["layer"], best["head"]) and top["score"] == pytest.approx(best["score"])
    assert top["shuffled"] == pytest.approx(best["shuffled"])
    assert aligned["hops"] == 1 and 0 < aligned["chance"] < aligned["positional"] <= 1 and aligned["rows"] > 0
    # The drop is that head's mean ablation on the same 32 eval rows: intact minus ablated accuracy.
    model, task = load_model(run), get_task("khop", **params)
    tokens, mask = task.eval_set(32)
    ablated = ablate_heads(model, tokens, mask, task.metric, [(top["layer"], top["head"])], method="mean")
    baseline = meta["summary"]["ablation"]["baseline_accuracy"]
    assert aligned["ablation"]["method"] == "mean"
    assert aligned["ablation"]["accuracy"] == pytest.approx(ablated["accuracy"])
    assert aligned["ablation"]["accuracy_drop"] == pytest.approx(baseline - ablated["accuracy"])
    # Without head ablation the score is still computed, with no ablation result.
    code, _, err = run_cli(["analyze", str(run), *SMALL, "--ablation", "none"], capsys)
    assert code == 0, err
    meta = json.loads((folder / "analysis.json").read_text())
    assert meta["summary"]["task_induction"]["ablation"] is None
    assert meta["summary"]["task_induction"]["top"] == top


def test_analysis_is_cached_until_the_checkpoint_changes(tmp_path, capsys, monkeypatch):
    run = tiny_run(tmp_path / "add", "addition", {"digits": 2})
    assert run_cli(["analyze", str(run), *SMALL, "--ablation", "zero"], capsys)[0] == 0
    meta_file = run / "analysis" / "analysis.json"
    stamp, first = meta_file.stat().st_mtime_ns, json.loads(meta_file.read_text())

    calls = []
    real = mixit_lab.analysis.heads.head_scores  # what the heads analysis calls
    monkeypatch.setattr(mixit_lab.analysis.heads, "head_scores", lambda *a, **k: calls.append(1) or real(*a, **k))
    code, out, _ = run_cli(["analyze", str(run), *SMALL, "--ablation", "zero"], capsys)
    assert code == 0 and "cached" in out and calls == [] and meta_file.stat().st_mtime_ns == stamp

    # New weights in the checkpoint: recomputed, with the new hash.
    model = load_model(run)
    with torch.no_grad():
        model.embed.W_E.mul_(2)
    model.save_pretrained(run / "checkpoint")
    code, out, _ = run_cli(["analyze", str(run), *SMALL, "--ablation", "zero"], capsys)
    second = json.loads(meta_file.read_text())
    assert code == 0 and "computed" in out and calls == [1]
    assert second["checkpoint_sha256"] == checkpoint_hash(run / "checkpoint") != first["checkpoint_sha256"]
    # Other options also recompute; --force always does.
    run_cli(["analyze", str(run), *SMALL, "--ablation", "mean"], capsys)
    run_cli(["analyze", str(run), *SMALL, "--ablation", "mean", "--force"], capsys)
    assert calls == [1, 1, 1]


def test_analyze_memorize_run_and_bare_checkpoint_into_out(tmp_path, capsys):
    run = tiny_run(tmp_path / "mem", "memorize", {"n": 3, "d": 2})
    bare = tmp_path / "bare"
    build_model(ModelConfig(variant="mixit", d_model=16, n_layers=2, n_heads=2, n_ctx=10, d_vocab=11)).save_pretrained(bare)
    out = tmp_path / "results"
    code, stdout, err = run_cli(["analyze", str(run), str(bare), "--out", str(out), *SMALL], capsys)
    assert code == 0, err
    mem = json.loads((out / "mem" / "analysis.json").read_text())
    assert "memory" in mem["computed"] and "heads" in mem["skipped"]  # n_ctx = 3 is too short for [r, r]
    memory = pd.read_csv(out / "mem" / "memory.csv")
    assert memory["examples"].item() == 9 and memory["max_bits"].item() == pytest.approx(9 * 1.5849625, rel=1e-6)
    plain = json.loads((out / "bare" / "analysis.json").read_text())
    assert plain["task"] is None and {"memory", "ablation"} <= set(plain["skipped"])
    assert "bare checkpoint" in plain["skipped"]["ablation"]
    assert (pd.read_csv(out / "bare" / "attention.csv")["input_dependence"] == 0).all()
    summary = pd.read_csv(out / "summary.csv")
    assert summary["checkpoint"].tolist() == ["mem", "bare"] and summary["variant"].tolist() == ["standard", "mixit"]
    assert not (run / "analysis").exists() and not (bare / "analysis").exists()


@pytest.mark.parametrize("variant, task, params", [
    ("frozen_qk", "dyck", {"max_pairs": 12}),
    ("frozen_mlp", "khop", {"hops": 2, "length": 8, "alphabet": 3}),
    ("mixit", "retrieval", {"pairs": 3}),
    ("random", "modadd", {"p": 7}),
    ("shaped", "memorize", {"n": 3, "d": 2}),
])
def test_analyze_works_for_every_variant_and_task(variant, task, params, tmp_path, capsys):
    run = tiny_run(tmp_path / "run", task, params, variant=variant, steps=2)
    code, out, err = run_cli(["analyze", str(run), *SMALL], capsys)
    assert code == 0, err
    meta = json.loads((run / "analysis" / "analysis.json").read_text())
    assert {"attention", "signal"} <= set(meta["computed"]) and meta["model"]["variant"] == variant
    assert ("memory" in meta["computed"]) == (task == "memorize")
    assert {"ablation", "components"} <= set(meta["computed"])
    components = pd.read_csv(run / "analysis" / "components.csv")
    assert set(components["component"]) >= {"attn", "mlp", "head", "all_attn", "all_mlp", "embed"}
    assert components["mean_bits"].notna().any() == (task == "memorize")
    assert set(meta["summary"]["components"]) >= {"attn", "mlp", "logit_diff", "baseline_accuracy"}


def test_analyze_bad_input_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    run = tiny_run(tmp_path / "r", "addition", {"digits": 2}, steps=2)
    occupied = tmp_path / "out" / "r"
    occupied.mkdir(parents=True)
    (occupied / "notes.txt").write_text("mine")
    cases = [
        (["analyze", str(tmp_path / "missing")], "no such file"),
        (["analyze", str(tmp_path / "empty")], "neither a run directory"),
        (["analyze", str(run), "--n-seqs", "0"], "--n-seqs=0"),
        (["analyze", str(run), "--out", str(tmp_path / "out")], "refusing to replace"),
        (["analyze", str(run), "--ablation", "half"], "half"),
    ]
    for argv, needle in cases:
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert (occupied / "notes.txt").read_text() == "mine"


def test_analyze_text_runs_language_model_and_classifier(tmp_path, capsys, generated_corpora):
    common = ["--seq-len", "32", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "3",
              "--batch-size", "8", "--eval-every", "3", "--quiet"]
    lm, clf = tmp_path / "lm", tmp_path / "clf"
    assert main(["train", "--task", "lm", "--text-file", str(generated_corpora["lm"]),
                 "--tokenizer", "byte", "--eval-samples", "16", *common, "--out", str(lm)]) == 0
    with pytest.warns(UserWarning, match="may be cut"):  # 300 BPE tokens: about half the sentences exceed 32
        assert main(["train", "--task", "sentiment", "--text-file", str(generated_corpora["sentiment"]),
                     "--vocab-size", "300", "--variant", "mixit", *common, "--out", str(clf)]) == 0
        code, out, err = run_cli(["analyze", str(lm), str(clf), *SMALL], capsys)
    assert code == 0, err
    lm_meta = json.loads((lm / "analysis" / "analysis.json").read_text())
    clf_meta = json.loads((clf / "analysis" / "analysis.json").read_text())
    assert lm_meta["computed"] == ["heads", "in_context_loss", "attention", "signal", "ablation"]
    # The classifier has no unembedding: no in-context loss, no copying score, ablation by class accuracy.
    assert clf_meta["computed"] == ["heads", "attention", "signal", "ablation"]
    assert pd.read_csv(clf / "analysis" / "heads.csv")["copying"].isna().all()
    assert clf_meta["summary"]["ablation"]["examples"] == 32 and 0 <= clf_meta["summary"]["ablation"]["baseline_accuracy"] <= 1


@pytest.mark.slow  # a fresh interpreter per case
def test_python_m_entry_point_reports_analyze_errors_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mixit_lab.cli", "analyze", str(tmp_path / "missing")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2 and done.stderr.strip() == f"mixit analyze: error: {tmp_path / 'missing'}: no such file or directory"
