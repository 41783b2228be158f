"""The training step as a CUDA graph (mixit_lab.training.graph_step), everything a CPU can check: the fixed-shape loss is
the trainer's, the graph-ready step trains the run the eager step trains, a recorded step replays it, a failed
capture goes on eagerly, and where no graph applies the run is the eager run to the digit."""

from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
import torch

from mixit_lab.models import load_model
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.graph_step import GraphedStep, fixed_shape_loss, graph_refusal
from mixit_lab.training.loss import task_loss
from mixit_lab.training.resolve import resolve

RUN = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=2, n_heads=2, batch_size=16, lr=3e-3,
           steps=12, log_every=2, eval_every=6, eval_samples=64, device="cpu")


def losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(run_dir) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in load_model(run_dir).parameters()])


@pytest.mark.parametrize("task, params", [("addition", {"digits": 2}), ("retrieval", {"pairs": 2, "num_values": 8})])
def test_the_fixed_shape_loss_is_the_trainers_loss(task, params):
    run = resolve(TrainConfig(task=task, task_params=params, d_model=16, n_layers=2, n_heads=2, variant="mixit"),
                  device=False)
    from mixit_lab.models import build_model

    model = build_model(run.model)
    batch = run.task.sample(32, torch.Generator().manual_seed(0))
    torch.testing.assert_close(fixed_shape_loss(model, run.task, batch), task_loss(model, run.task, batch))


def test_no_graph_on_the_cpu_is_the_eager_run_to_the_digit(tmp_path, one_thread):
    assert graph_refusal(TrainConfig(**RUN), torch.device("cpu"), False) == "CUDA graphs need a CUDA device, not cpu"
    train(TrainConfig(**RUN), tmp_path / "eager", progress=False)
    with pytest.warns(UserWarning, match="cuda_graph: CUDA graphs need a CUDA device, not cpu; this run takes eager"):
        summary = train(TrainConfig(**RUN, cuda_graph=True), tmp_path / "asked", progress=False)
    assert summary["cuda_graph"] is False
    assert losses(tmp_path / "asked") == losses(tmp_path / "eager")


@pytest.mark.parametrize("cfg, reason", [
    (dict(micro_batch_size=8), "micro-batches"), (dict(compile=True), "torch.compile")])
def test_where_a_graph_cannot_apply_it_says_why(cfg, reason):
    assert reason in graph_refusal(TrainConfig(**{**RUN, **cfg}), torch.device("cuda"), False)
    assert "several processes" in graph_refusal(TrainConfig(**RUN), torch.device("cuda"), True)
    assert graph_refusal(TrainConfig(**RUN), torch.device("cuda"), False) is None


class Replayed:
    """A recorded step's stand-in on the CPU: replaying runs the step's kernels again into the same gradients."""

    def __init__(self, step: GraphedStep):
        self.step, self.replays = step, 0

    def replay(self) -> None:
        self.step.optimizer.zero_grad(set_to_none=True)  # a graph writes its gradients, it does not add to them
        self.step._body()
        self.replays += 1


def on_the_cpu(record):
    """GraphedStep as on CUDA (warm-up, then capture), with the CUDA parts replaced by `record(step)`."""
    class Step(GraphedStep):
        made: list[GraphedStep] = []

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.capturing = True
            Step.made.append(self)

        def _side_stream(self):
            return nullcontext()

        def _record(self):
            return record(self)
    return Step


def test_the_graph_ready_step_trains_the_eager_run(tmp_path, monkeypatch, one_thread):
    train(TrainConfig(**RUN), tmp_path / "eager", progress=False)
    monkeypatch.setattr("mixit_lab.training.trainer.graph_refusal", lambda *a: None)
    step = on_the_cpu(Replayed)
    monkeypatch.setattr("mixit_lab.training.trainer.GraphedStep", step)
    summary = train(TrainConfig(**RUN, cuda_graph=True), tmp_path / "graph", progress=False)
    assert summary["cuda_graph"] is True and step.made[0].graph.replays == RUN["steps"] - 3  # after 3 warm-up steps
    torch.testing.assert_close(losses(tmp_path / "graph"), losses(tmp_path / "eager"), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights(tmp_path / "graph"), weights(tmp_path / "eager"), rtol=1e-4, atol=1e-5)


def test_a_failed_capture_goes_on_with_eager_steps(tmp_path, monkeypatch, one_thread):
    def refuse(step):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr("mixit_lab.training.trainer.graph_refusal", lambda *a: None)
    monkeypatch.setattr("mixit_lab.training.trainer.GraphedStep", on_the_cpu(Replayed))
    train(TrainConfig(**RUN, cuda_graph=True), tmp_path / "replayed", progress=False)
    monkeypatch.setattr("mixit_lab.training.trainer.GraphedStep", on_the_cpu(refuse))
    with pytest.warns(UserWarning, match=r"CUDA graph capture failed \(RuntimeError: operation not permitted when "
                                         r"stream is capturing\); the run goes on with eager steps"):
        summary = train(TrainConfig(**RUN, cuda_graph=True), tmp_path / "failed", progress=False)
    assert summary["cuda_graph"] is False and summary["step"] == RUN["steps"]
    assert losses(tmp_path / "failed") == losses(tmp_path / "replayed")
