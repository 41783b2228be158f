"""--tracker: the metrics of metrics.jsonl also go to TensorBoard or Weights & Biases (offline here)."""

from __future__ import annotations

import json

import pytest

from mixit_lab.cli.main import main
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.trackers import check_tracker

TINY = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, batch_size=16,
            lr=3e-3, eval_every=10, eval_samples=64, log_every=5)


def _records(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_tensorboard_gets_every_metric_at_its_step(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train(TrainConfig(**TINY, steps=20), run, progress=False, tracker="tensorboard")
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {"loss", "lr", "eval_loss", "eval_acc"} <= set(events.Tags()["scalars"])
    logged = [(e.step, e.value) for e in events.Scalars("loss")]
    expected = [(r["step"], r["loss"]) for r in _records(run) if "loss" in r]
    assert [s for s, _ in logged] == [s for s, _ in expected]
    assert all(v == pytest.approx(w, rel=1e-6) for (_, v), (_, w) in zip(logged, expected))


def test_wandb_logs_offline_into_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    summary = train(TrainConfig(**TINY, steps=10), run, progress=False, tracker="wandb")
    assert summary["status"] == "finished"
    offline = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(offline) == 1 and offline[0].stat().st_size > 0
    assert (run / "metrics.jsonl").is_file()  # still the source of truth


def test_a_missing_tracker_package_is_one_line(monkeypatch, capsys, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ValueError, match=r"needs the wandb package: pip install 'mixit-lab\[tracking\]'"):
        check_tracker("wandb")
    code = main(["train", "--task", "addition", "--steps", "5", "--tracker", "wandb", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "wandb package" in err and err.count("\n") == 1 and not (tmp_path / "r").exists()


def test_wandb_goes_online_only_when_asked(monkeypatch):
    # Stored credentials used to switch runs online by themselves; now only WANDB_MODE does.
    from mixit_lab.training.trackers import wandb_mode

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "online")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def _tensorboard(run) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in run/tensorboard, as TensorBoard reads it: {tag: [(step, value), ...]}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_after_a_resume_holds_each_step_once_as_an_uninterrupted_run(tmp_path, monkeypatch):
    """Stopped without closing anything just after the checkpoint of step 15 (as a kill leaves it), then
    resumed: TensorBoard shows each logged step once, with the values of a run that never stopped."""
    pytest.importorskip("tensorboard")
    import contextlib

    import mixit_lab.training.trainer as trainer

    cfg = TrainConfig(**TINY, steps=30, checkpoint_every=5)
    train(cfg, tmp_path / "whole", progress=False, tracker="tensorboard")
    swap = trainer.atomic_directory

    @contextlib.contextmanager
    def swap_then_stop(path, *args, **kwargs):
        with swap(path, *args, **kwargs) as tmp:
            yield tmp
        if path.name == "checkpoint" and json.loads((path / "trainer_state.json").read_text())["step"] == 15:
            raise KeyboardInterrupt
    monkeypatch.setattr(trainer, "atomic_directory", swap_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", progress=False, tracker="tensorboard")
    monkeypatch.setattr(trainer, "atomic_directory", swap)
    train(cfg, tmp_path / "run", resume=True, progress=False, tracker="tensorboard")
    timing = ("tokens_per_s", "elapsed_s")
    resumed, whole = _tensorboard(tmp_path / "run"), _tensorboard(tmp_path / "whole")
    assert [s for s, _ in resumed["loss"]] == [r["step"] for r in _records(tmp_path / "run")] == [5, 10, 15, 20, 25, 30]
    assert {k: v for k, v in resumed.items() if k not in timing} == {k: v for k, v in whole.items() if k not in timing}


def test_a_sweep_sends_each_runs_metrics_to_its_own_tensorboard(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "sweep"
    code = main(["sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard", "mixit", "--d-model", "16",
                 "--n-layers", "1", "--n-heads", "2", "--steps", "10", "--batch-size", "16", "--eval-every", "10",
                 "--eval-samples", "64", "--tracker", "tensorboard", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    runs = sorted(p.parent for p in out.glob("*/run.json"))
    assert len(runs) == 2
    for run in runs:
        assert [s for s, _ in _tensorboard(run)["loss"]] == [r["step"] for r in _records(run)] == [10]
