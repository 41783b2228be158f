"""Training dynamics: --keep-checkpoints keeps the model at log-spaced steps, and mixit_lab.analysis.dynamics scores them."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from safetensors.torch import load_file

from mixit_lab.analysis.dynamics import COLUMNS, checkpoint_dynamics
from mixit_lab.cli.main import main
from mixit_lab.models import ModelConfig, build_model
from mixit_lab.training.rundir import DYNAMICS_FILE, kept_checkpoints
from mixit_lab.training.config import TrainConfig
from mixit_lab.training.trainer import train

CFG = dict(task="khop", task_params={"hops": 1, "length": 8, "alphabet": 4}, variant="frozen_qk", d_model=16,
           n_layers=2, n_heads=2, steps=40, batch_size=16, eval_every=20, eval_samples=32)


def test_kept_steps_are_the_init_and_log_spaced_up_to_the_last():
    assert TrainConfig(steps=1000, keep_checkpoints=5).kept_steps() == [0, 1, 6, 32, 178, 1000]
    assert TrainConfig(steps=10, keep_checkpoints=8).kept_steps() == [0, 1, 2, 3, 4, 5, 7, 10]  # short runs: fewer
    assert TrainConfig(steps=100).kept_steps() == []
    with pytest.raises(ValueError, match="keep_checkpoints=-1"):
        TrainConfig(keep_checkpoints=-1)


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("dyn") / "run"
    train(TrainConfig(**CFG, keep_checkpoints=4), run, progress=False)
    return run


def test_kept_checkpoints_hold_the_model_at_those_steps(kept_run):
    kept = kept_checkpoints(kept_run)
    assert [step for step, _ in kept] == TrainConfig(**CFG, keep_checkpoints=4).kept_steps() == [0, 1, 3, 12, 40]
    first = load_file(str(kept[0][1] / "model.safetensors"))
    init = build_model(ModelConfig.from_dict(json.loads((kept_run / "run.json").read_text())["model"])).state_dict()
    assert all(first[k].equal(init[k]) for k in first)  # step 0 is the seeded initialization
    last = load_file(str(kept[-1][1] / "model.safetensors"))
    final = load_file(str(kept_run / "checkpoint" / "model.safetensors"))
    assert all(last[k].equal(final[k]) for k in final)
    assert not all(first[k].equal(last[k]) for k in first)  # it trained in between


def test_dynamics_scores_every_kept_step_and_the_cli_writes_them(kept_run, capsys):
    table = checkpoint_dynamics(kept_run, n_seqs=4, seq_len=4)
    assert list(table.columns) == COLUMNS and list(table["step"]) == [0, 1, 3, 12, 40]
    assert table["top_induction"].between(0, 1).all() and table["task_induction"].between(0, 1).all()
    assert table["eval_loss"].notna().tolist() == [False, False, False, False, True]  # evaluated at 40 only here
    assert main(["analyze", str(kept_run), "--checkpoints", "--n-seqs", "4", "--seq-len", "4"]) == 0
    written = pd.read_csv(kept_run / DYNAMICS_FILE)
    pd.testing.assert_frame_equal(written[["step", "top_induction"]], table[["step", "top_induction"]], check_dtype=False)


@pytest.mark.slow
def test_a_run_that_kept_nothing_says_how_to_keep(tmp_path, capsys):
    run = tmp_path / "plain"
    train(TrainConfig(**{**CFG, "steps": 5}), run, progress=False)
    assert not (run / "checkpoints").exists()
    assert main(["analyze", str(run), "--checkpoints", "--n-seqs", "4", "--seq-len", "4"]) == 0
    assert "--keep-checkpoints N" in capsys.readouterr().out and not (run / DYNAMICS_FILE).exists()


@pytest.mark.slow
def test_a_resumed_run_keeps_the_same_checkpoints(kept_run, tmp_path, monkeypatch):
    import mixit_lab.training.trainer as trainer

    cfg = TrainConfig(**CFG, keep_checkpoints=4, checkpoint_every=10)
    run = tmp_path / "resumed"
    real = trainer.evaluate

    def stop_at_first_eval(*args, **kwargs):
        raise KeyboardInterrupt  # at step 20: the last checkpoint is step 10's, snapshot 12 is already kept

    monkeypatch.setattr(trainer, "evaluate", stop_at_first_eval)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, run, progress=False)
    monkeypatch.setattr(trainer, "evaluate", real)
    train(cfg, run, resume=True, progress=False)
    ours, theirs = kept_checkpoints(run), kept_checkpoints(kept_run)
    assert [s for s, _ in ours] == [s for s, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs):
        wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
        assert all(wa[k].equal(wb[k]) for k in wa)
