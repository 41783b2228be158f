"""The training step captured once as a CUDA graph and replayed (`TrainConfig.cuda_graph`, `mixit train --cuda-graph`).

On a GPU the small studies' steps are bound by Python launching kernels one at a time, not by arithmetic; a replayed
graph launches the whole step at once (docs/benchmarks.md measured 2.6-6.6x on an H200 at the paper preset's shapes,
before this step was part of the trainer). A graph needs what this step provides:

- fixed shapes: every batch of a task is [batch_size, seq_len], and the loss is taken at every position, weighted by
  the mask (`fixed_shape_loss`), instead of over the scored span, which moves with the batch;
- no host read: the loss and the gradient norm stay on the device (the trainer reads them at its logs);
- inputs in fixed buffers (each batch is copied in), the learning rate as a device tensor (AdamW with capturable=True),
  and autocast without its weight cache.

`graph_refusal` says where it does not apply (the CPU, several processes, micro-batches, torch.compile): there the
trainer takes its eager step. Where the capture itself fails, the run warns once and goes on with this step, eager.
Either way the numbers are the eager step's up to float rounding.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch
import torch.nn.functional as F

from .config import TrainConfig
from .tasks import Task

WARMUP_STEPS = 3  # eager steps on a side stream before the capture (PyTorch's recipe: lazy state and workspaces settle)


def graph_refusal(cfg: TrainConfig, device: torch.device, distributed: bool) -> str | None:
    """Why a run of `cfg` on `device` takes the eager step instead of a CUDA graph; None when it can replay one."""
    if device.type != "cuda":
        return f"CUDA graphs need a CUDA device, not {device.type}"
    if distributed:
        return "several processes synchronise their gradients outside a graph"
    if cfg.micro_batch_size and cfg.micro_batch_size < cfg.batch_size:
        return "micro-batches are a loop of forward passes"
    if cfg.compile:
        return "torch.compile makes its own graphs (mode='reduce-overhead')"
    return None


def fixed_shape_loss(model: torch.nn.Module, task: Task, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """task_loss's value with shapes that do not depend on the batch: next-token cross-entropy at every position,
    weighted by the mask (every row scores at least one token: training.tasks.check_batch), or class cross-entropy."""
    if task.objective == "classification":
        tokens, mask, labels = batch
        return F.cross_entropy(model.classify(tokens, mask).float(), labels)
    tokens, mask = batch
    logits = model(tokens)[:, :-1].float()  # [batch, pos - 1, d_vocab]
    weight = mask[:, 1:].flatten().float()
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    return (loss * weight).sum() / weight.sum()


class Replayer:
    """A training step's body (`_body`, on fixed buffers, reading nothing back) run as a CUDA graph: WARMUP_STEPS
    eager runs on a side stream, then recorded once and replayed from then on (`run`). Eager throughout where
    `capturing` is False (the CPU), and from a failed capture on, warned once. `_reset` drops the gradients before
    each eager run and before the capture: a graph's backward writes its gradients, it does not add to them.
    GraphedStep (one run) and mixit_lab.training.stack.StackedStep (a stack of runs) are such steps."""

    def __init__(self, device: torch.device, capture: bool = True):
        self.device = device
        self.capturing = capture and device.type == "cuda"  # False on the CPU, and once a capture failed
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager_steps = 0

    def _body(self) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        """The step: replayed, captured (then run), or eager."""
        if self.graph is not None:
            self.graph.replay()
        elif self.capturing and self.eager_steps >= WARMUP_STEPS:
            self._capture()
        else:
            self._eager()

    def _eager(self) -> None:
        """The step without a graph: on a side stream before a capture (PyTorch's warm-up), else as it comes."""
        self._reset()
        with self._side_stream() if self.capturing else nullcontext():
            self._body()
        self.eager_steps += 1

    @contextmanager
    def _side_stream(self) -> Iterator[None]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self) -> None:
        """Record the step as a graph and run it; if recording fails, warn once and step eagerly from here on."""
        self._reset()
        try:
            graph = self._record()
        except Exception as e:  # an operation that cannot be recorded (a host read in a hook, say)
            self.capturing = False
            reason = (str(e).strip().splitlines() or [""])[0]
            warnings.warn(f"CUDA graph capture failed ({type(e).__name__}: {reason}); the run goes on with eager "
                          "steps, the same numbers up to float rounding", stacklevel=2)
            self._eager()  # the step that was not recorded
            return
        self.graph = graph
        graph.replay()  # recording does not run the step

    def _record(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        return graph


class GraphedStep(Replayer):
    """One run's optimizer step with fixed shapes and no host read: `step(batch, lr)` returns its loss and its
    gradient norm before clipping, as device tensors. On CUDA it runs WARMUP_STEPS eager steps, then captures the
    step as a graph and replays it from then on. On the CPU it never captures (the tests run it there)."""

    def __init__(self, model: torch.nn.Module, task: Task, optimizer: torch.optim.Optimizer, grad_clip: float,
                 bf16: bool):
        super().__init__(next(model.parameters()).device)
        self.model, self.task, self.optimizer, self.bf16 = model, task, optimizer, bf16
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.max_norm = grad_clip or float("inf")
        self.lr = torch.zeros((), device=self.device)  # the optimizer's rate on CUDA, set before each step
        self.loss, self.norm = torch.zeros((), device=self.device), torch.zeros((), device=self.device)
        self.inputs: tuple[torch.Tensor, ...] = ()  # the fixed buffers each batch is copied into
        if self.capturing:
            _capturable(optimizer, self.lr)

    def step(self, batch: tuple[torch.Tensor, ...], lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step on `batch` (host tensors) at learning rate `lr`: replayed, captured, or eager."""
        self._load(batch, lr)
        self.run()
        return self.loss, self.norm

    def _load(self, batch: tuple[torch.Tensor, ...], lr: float) -> None:
        """Copy the batch into the fixed buffers (made from the first batch) and set the learning rate."""
        if not self.inputs:
            self.inputs = tuple(t.to(self.device, copy=True) for t in batch)
        else:
            for buffer, t in zip(self.inputs, batch):
                buffer.copy_(t, non_blocking=True)
        if self._lr_on_device():
            self.lr.fill_(lr)  # a kernel, not a host write: the graph reads this tensor
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = lr

    def _lr_on_device(self) -> bool:
        return any(group["lr"] is self.lr for group in self.optimizer.param_groups)

    def _body(self) -> None:
        """The step itself: the loss, its gradient, clipping, AdamW; the loss and norm copied to fixed tensors."""
        autocast = torch.autocast(self.device.type, torch.bfloat16, cache_enabled=False) if self.bf16 else nullcontext()
        with autocast:
            loss = fixed_shape_loss(self.model, self.task, self.inputs)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.loss.copy_(loss.detach())
        self.norm.copy_(norm)
        self.optimizer.step()

    def _reset(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @contextmanager
    def saved_as_eager(self) -> Iterator[None]:
        """The optimizer's groups as an eager run keeps them (lr a number, not capturable) while a checkpoint is
        written, so that the run resumes with or without a graph, on any device."""
        if not self._lr_on_device():
            yield
            return
        groups = [dict(group) for group in self.optimizer.param_groups]
        lr = float(self.lr)  # a host read, at a checkpoint
        for group in self.optimizer.param_groups:
            group.update(lr=lr, capturable=False)
        try:
            yield
        finally:
            for group, before in zip(self.optimizer.param_groups, groups):
                group.update(lr=before["lr"], capturable=before["capturable"])


def _capturable(optimizer: torch.optim.Optimizer, lr: torch.Tensor) -> None:
    """Make the trainer's AdamW one a graph can record: the rate a device tensor, multi-tensor kernels, the step
    counters on the device (a resumed state holds them on the host)."""
    for group in optimizer.param_groups:
        group.update(lr=lr, capturable=True, foreach=True, fused=False)
    for state in optimizer.state.values():
        if "step" in state:
            state["step"] = state["step"].to(device=lr.device, dtype=torch.float32)
