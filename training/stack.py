"""Several runs trained in one process as one: `train_stack`, `mixit sweep --stack N`.

On a GPU the paper's small models leave the card idle: a step is a few hundred small kernels, and Python launching
them sets the pace, not arithmetic. Processes that share a GPU take turns on it (docs/benchmarks.md: at most 2.1x
the steps of one run, whatever their number). A stack of K runs takes one step for all of them: their trainable
weights are the rows of one [K, n_params] tensor, one forward and backward pass maps the model over the rows
(torch.func.vmap, the loss weighted by the mask at every position, as the CUDA graph's step: `fixed_shape_loss`),
and AdamW runs on the stacked tensors. The kernels are as many as one run's, each K times as wide.

What a run keeps from training alone:

- its own directory, written by its own RunLoop (mixit_lab.training.trainer): the same run.json, metrics, evaluations,
  kept models and checkpoints. A run trained in a stack resumes alone with `mixit train --resume`, and the reverse.
- its own seeds (the init, MixiT's mixing, the data stream), learning rate, weight decay, clipping and schedule: its
  numbers are those of the run alone up to float rounding (tests/test_stack.py).
- isolation: each run's loss, gradient norm, clipping and AdamW touch its own row only. A run whose loss or gradient
  turns non-finite diverges alone, found at its next log as alone, and leaves the stack; the others go on.

Runs stack when their settings agree but for STACKED_FIELDS and they stand at the same step (stack_key); stack_refusal
names what a stack does not take (micro-batches, torch.compile, heads frozen within a matrix). Runs may also differ in
which weights train (the variant's frozen set, the grid's `freeze`) where their models are built alike (standard,
frozen_qk, frozen_mlp, random and their grids): the stack's rows then hold every weight any of its runs trains, and
each run's frozen ones are masked out of its gradient, norm, weight decay and update, so they stay at their init to
the bit. With cuda_graph the
stack's step is captured once as a CUDA graph and replayed (mixit_lab.training.graph_step.Replayer), on CUDA.
"""

from __future__ import annotations

import copy
import json
import time
import warnings
from contextlib import ExitStack, nullcontext
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.func import functional_call, vmap
from tqdm.auto import tqdm

from mixit_lab.models.freeze import FrozenSlices
from mixit_lab.models.variants import VARIANTS

from .config import TrainConfig
from .graph_step import Replayer, fixed_shape_loss, graph_refusal
from .loss import CHUNKED_LOSS_MIN_BYTES
from .machine import keep_freed_memory
from .parallel import Ranks
from .resolve import resolve_device
from .rundir import METRICS_FILE, RUN_FILE, is_empty_run_dir, is_finished, read_summary, run_lock, what_it_holds
from .settings import check_same_settings
from .tasks import Task
from .trainer import RunLoop, TrainingDiverged, open_loop

__all__ = ["STACKED_FIELDS", "StackedStep", "stack_key", "stack_refusal", "train_stack"]

# The settings that may differ between the runs of a stack: each run's row has its own.
STACKED_FIELDS = ("seed", "lr", "weight_decay", "grad_clip", "warmup_steps", "min_lr_ratio", "schedule")


def _shared(cfg: TrainConfig) -> dict[str, Any]:
    """The settings the runs of one stack share: every one but STACKED_FIELDS, with the variant as the model it builds
    (attention, positions, shaped blocks) and `freeze` left out: which weights train may differ within a stack."""
    shared = {k: v for k, v in cfg.to_dict().items() if k not in STACKED_FIELDS}
    spec = VARIANTS.get(shared.pop("variant"))
    shared["built as"] = cfg.variant if spec is None else f"{spec.attention}, {spec.positions}, shaped={spec.shaped}"
    shared["model_extra"] = {k: v for k, v in shared["model_extra"].items() if k != "freeze"}
    return shared


def stack_key(cfg: TrainConfig) -> str:
    """What the runs of one stack share (_shared): runs with equal keys can stack."""
    return json.dumps(_shared(cfg), sort_keys=True, default=str)


def stack_refusal(cfg: TrainConfig) -> str | None:
    """Why a run of `cfg` cannot train in a stack; None when it can."""
    if cfg.micro_batch_size and cfg.micro_batch_size < cfg.batch_size:
        return f"micro_batch_size={cfg.micro_batch_size} (a loop of forward passes; a stack takes the batch at once)"
    if cfg.compile:
        return "compile=True (a stack's step is mapped over its runs by torch.func, not compiled)"
    return None


def check_stackable(cfgs: Sequence[TrainConfig]) -> None:
    """ValueError, one line, unless the runs `cfgs` can train as one stack: each allowed (stack_refusal), all with
    the settings of the first but for STACKED_FIELDS."""
    if not cfgs:
        raise ValueError("a stack needs at least one run")
    first = _shared(cfgs[0])
    for i, cfg in enumerate(cfgs):
        refusal = stack_refusal(cfg)
        if refusal is not None:
            raise ValueError(f"run {i} cannot train in a stack: {refusal}")
        differ = sorted(k for k, v in _shared(cfg).items() if v != first[k])
        if differ:
            differ = ["variant" if k == "built as" else k for k in differ]
            raise ValueError(f"run {i} differs from run 0 in {', '.join(differ)}; the runs of a stack may differ "
                             f"only in {', '.join(STACKED_FIELDS)}, and in which weights train where their models "
                             "are built alike (standard, frozen_qk, frozen_mlp, random, freeze)")


class _LossOf(torch.nn.Module):
    """fixed_shape_loss of `model` as a module's forward, so that functional_call can swap in one run's weights."""

    def __init__(self, model: torch.nn.Module, task: Task):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return fixed_shape_loss(self.model, self.task, batch)


class StackedStep(Replayer):
    """The optimizer step of the runs of `loops` as one (their settings checked by check_stackable).

    flat[k] holds run k's weights that any run of the stack trains, end to end in the order of
    model.named_parameters(); exp_avg and exp_avg_sq are AdamW's moments in the same layout, `steps[k]` its step count;
    `fixed` holds the weights no run trains and the buffers, stacked. Where the runs train different weights,
    `trains[k]` is 1 on run k's own and 0 on the ones it keeps frozen (None where every run trains them all). The runs' models and optimizers are brought up to date by write_back (before an
    evaluation, a kept model or a checkpoint), not at each step. Each step's loss and gradient norm go into
    `pending[i, k]`, which each loop reads as its own pending buffer (RunLoop.settle)."""

    def __init__(self, loops: Sequence[RunLoop], graph: bool = False):
        first = loops[0]
        super().__init__(first.device, capture=graph)
        self.loops, self.task = list(loops), first.task
        self.bf16 = first.precision == "bf16"
        _check_logits_fit(loops)
        for loop in loops:
            if FrozenSlices(loop.model).slices:
                raise ValueError(f"{loop.out}: heads frozen within a matrix are restored after each step of their "
                                 "own optimizer; train this run alone")
            if loop.n_pending:
                raise RuntimeError(f"{loop.out}: {loop.n_pending} steps not yet read; a stack starts after a read")
        self.trained = [[n for n, p in loop.model.named_parameters() if p.requires_grad] for loop in loops]
        union = set().union(*self.trained)
        named = [(n, p) for n, p in first.model.named_parameters() if n in union]
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        with torch.no_grad():
            self.flat = torch.stack([self._row(loop) for loop in loops]).requires_grad_()
            fixed = [_fixed(loop.model, union) for loop in loops]
            self.fixed = {f"model.{n}": torch.stack([f[n] for f in fixed]) for n in fixed[0]}
        self.decay = torch.cat([torch.full((size,), float(len(shape) >= 2), device=self.device)
                                for size, shape in zip(self.sizes, self.shapes)])
        self.trains = None if all(len(t) == len(union) for t in self.trained) else self._trains()
        if self.trains is not None:
            self.decay = self.decay * self.trains  # [K, n]: a frozen weight is not decayed either
        group = first.optimizer.param_groups[0]
        (self.beta1, self.beta2), self.eps = group["betas"], group["eps"]
        self.weight_decay = self._per_run([loop.cfg.weight_decay for loop in loops])
        self.max_norm = self._per_run([loop.cfg.grad_clip or float("inf") for loop in loops])
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.steps = torch.zeros(len(loops), device=self.device)
        for k, loop in enumerate(loops):
            self._load_moments(k, loop.optimizer)
        self.loss_of = _LossOf(copy.deepcopy(first.model), first.task).train()  # the code; the weights: the rows
        self.pending = torch.zeros(len(first.pending), len(loops), 2, device=self.device)
        for k, loop in enumerate(loops):
            loop.pending = self.pending[:, k]
        # the fixed buffers the step reads and writes (a graph replays on them): the batches, the rates, and each
        # run's loss and gradient norm
        self.inputs: tuple[torch.Tensor, ...] = ()
        self.lr = torch.zeros(len(loops), 1, device=self.device)
        self.last = torch.zeros(len(loops), 2, device=self.device)

    def _row(self, loop: RunLoop) -> torch.Tensor:
        """A loop's weights that the stack trains (its own trainable ones and those of the others), end to end;
        ValueError if its model is not shaped as the first's."""
        params = dict(loop.model.named_parameters())
        first = dict(self.loops[0].model.named_parameters())
        if params.keys() != first.keys() or any(params[n].shape != first[n].shape for n in params):
            raise ValueError(f"{loop.out}: its weights differ from the first run's; it cannot stack")
        return torch.cat([params[n].detach().flatten() for n in self.names])

    def _trains(self) -> torch.Tensor:
        """[K, n]: 1 where run k trains the weight, 0 where it keeps it frozen."""
        return torch.stack([torch.cat([torch.full((size,), float(n in trained), device=self.device)
                                       for n, size in zip(self.names, self.sizes)]) for trained in self.trained])

    def _per_run(self, values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=self.device)[:, None]  # [K, 1]

    def _split(self, row: torch.Tensor) -> dict[str, torch.Tensor]:
        """One row of flat as the model's named weights (views)."""
        return {f"model.{n}": v.view(s) for n, v, s in zip(self.names, row.split(self.sizes), self.shapes)}

    def _load_moments(self, k: int, optimizer: torch.optim.Optimizer) -> None:
        """Copy a loop's AdamW state (a resumed run's) into row k; a new run's state is empty: zeros, step 0 (and its
        frozen weights' moments stay zero)."""
        names = self.trained[k]
        states = [optimizer.state.get(p, {}) for p in _trainable(optimizer, names, self.loops[k].model)]
        if not any(states):
            return
        with torch.no_grad():
            for name, into in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                views = self._split(into[k])
                for n, state in zip(names, states):
                    views[f"model.{n}"].copy_(state[name])
            self.steps[k] = float(states[0]["step"])

    def _loss(self, row: torch.Tensor, fixed: dict[str, torch.Tensor], *batch: torch.Tensor) -> torch.Tensor:
        return functional_call(self.loss_of, {**self._split(row), **fixed}, batch)

    def step(self, batches: Sequence[tuple[torch.Tensor, ...]], lrs: Sequence[float]) -> None:
        """One optimizer step of every run: run k on batches[k] (host tensors) at learning rate lrs[k]; eager, or
        replayed as a CUDA graph (Replayer). Each loss and gradient norm before clipping goes to its loop's pending
        buffer; nothing is read back."""
        stacked = [torch.stack(parts) for parts in zip(*batches)]
        if not self.inputs:
            self.inputs = tuple(t.to(self.device, copy=True) for t in stacked)
        else:
            for buffer, t in zip(self.inputs, stacked):
                buffer.copy_(t, non_blocking=True)
        self.lr.copy_(torch.tensor(lrs, dtype=torch.float32)[:, None], non_blocking=True)
        self.run()
        n = self.loops[0].n_pending
        if n == len(self.pending):  # never in train_stack, which reads at every log; a caller stepping on its own
            for loop in self.loops:
                loop.settle()
            n = 0
        self.pending[n].copy_(self.last)
        for loop in self.loops:
            loop.n_pending += 1

    def _reset(self) -> None:
        self.flat.grad = None

    def _body(self) -> None:
        """The step on the fixed buffers: every run's loss mapped over the rows, the gradients, each row clipped by
        its own norm, AdamW; the losses and norms into `last`."""
        autocast = torch.autocast(self.device.type, torch.bfloat16, cache_enabled=False) if self.bf16 else nullcontext()
        with autocast, _attention_kernels(self.device), self.loss_of.model.trusted_inputs():
            losses = vmap(self._loss)(self.flat, self.fixed, *self.inputs)  # [K]
        losses.sum().backward()  # the runs share no weight: each row's gradient is its own loss's
        with torch.no_grad():
            grad = self.flat.grad
            if self.trains is not None:
                grad.mul_(self.trains)  # a run's frozen weights: no gradient, so no norm, moment or update
            norms = torch.linalg.vector_norm(grad, dim=1)  # [K], as clip_grad_norm_ takes it over a run's weights
            grad.mul_((self.max_norm / (norms[:, None] + 1e-6)).clamp(max=1.0))
            self._adamw(grad, self.lr)
            self.last.copy_(torch.stack([losses.detach().float(), norms], 1))

    def _adamw(self, grad: torch.Tensor, lr: torch.Tensor) -> None:
        """torch.optim.AdamW's update (decoupled weight decay on the matrices; no amsgrad) on every row at once, with
        each run's rate, decay and step count."""
        self.steps += 1
        self.flat.mul_(1 - lr * self.weight_decay * self.decay)
        self.exp_avg.lerp_(grad, 1 - self.beta1)
        self.exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        correction1 = 1 - torch.pow(self.beta1, self.steps)[:, None]
        correction2 = 1 - torch.pow(self.beta2, self.steps)[:, None]
        denom = (self.exp_avg_sq.sqrt() / correction2.sqrt()).add_(self.eps)
        self.flat.sub_(self.exp_avg / denom * (lr / correction1))

    def write_back(self, with_optimizer: bool) -> None:
        """Copy each run's row into its model (and its AdamW state into its optimizer): what an evaluation, a kept
        model or a checkpoint reads. A host read of the step counts, with the optimizer."""
        steps = self.steps.tolist() if with_optimizer else []
        with torch.no_grad():
            for k, loop in enumerate(self.loops):
                weights = self._split(self.flat[k])
                params = _trainable(loop.optimizer, self.trained[k], loop.model)
                for n, p in zip(self.trained[k], params):  # its frozen weights are as they were: left alone
                    p.copy_(weights[f"model.{n}"])
                if with_optimizer:
                    self._store_moments(k, loop, params, steps[k])

    def _store_moments(self, k: int, loop: RunLoop, params: list[torch.nn.Parameter], step: float) -> None:
        """Row k's AdamW state into its loop's optimizer, as torch.optim.AdamW keeps it, so that the checkpoint
        resumes alone; the groups' rate is the one of the last step."""
        fused = any(g.get("fused") or g.get("capturable") for g in loop.optimizer.param_groups)
        moments = {name: self._split(into[k]) for name, into in (("exp_avg", self.exp_avg),
                                                                   ("exp_avg_sq", self.exp_avg_sq))}
        for p, n in zip(params, self.trained[k]):
            loop.optimizer.state[p] = {
                "step": torch.tensor(step, dtype=torch.float32, device=p.device if fused else "cpu"),
                "exp_avg": moments["exp_avg"][f"model.{n}"].clone(),
                "exp_avg_sq": moments["exp_avg_sq"][f"model.{n}"].clone()}
        for group in loop.optimizer.param_groups:
            group["lr"] = loop.cfg.lr_at(loop.step)


def _check_logits_fit(loops: Sequence[RunLoop]) -> None:
    """ValueError when the stack's fp32 logits, every position of every run's batch, would pass the size at which a run
    alone takes its loss in chunks (CHUNKED_LOSS_MIN_BYTES: the paper preset's language model): a stack has no
    chunked loss, so such runs train alone."""
    first = loops[0]
    if first.task.objective == "classification":
        return
    size = len(loops) * first.cfg.batch_size * first.task.seq_len * first.model.config.d_vocab * 4
    if size > CHUNKED_LOSS_MIN_BYTES:
        raise ValueError(f"{len(loops)} runs' logits would take {size / 2**30:.1f} GiB at once (a stack takes the loss "
                         f"at every position, unchunked; at most {CHUNKED_LOSS_MIN_BYTES / 2**30:.0f} GiB); train "
                         "these runs alone, or fewer to a stack")


def _fixed(model: torch.nn.Module, trained: set[str]) -> dict[str, torch.Tensor]:
    """A model's weights outside `trained` (no run of the stack trains them) and its buffers by name: what a stack
    carries per run but does not train."""
    frozen = {n: p.detach() for n, p in model.named_parameters() if n not in trained}
    return {**frozen, **dict(model.named_buffers())}


def _trainable(optimizer: torch.optim.Optimizer, names: list[str], model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The model's trainable weights in the stack's order (`names`), each one the optimizer holds."""
    by_name = dict(model.named_parameters())
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    params = [by_name[n] for n in names]
    assert all(id(p) in held for p in params), "the optimizer holds every trainable weight"
    return params


def _attention_kernels(device: torch.device):
    """The attention kernels a stack's mapped step may use: on the CPU the math one (the fused CPU kernel has no
    vmap rule, so vmap would run it once per run); on CUDA any (flash and memory-efficient attention have one)."""
    if device.type != "cpu":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def train_stack(cfgs: Sequence[TrainConfig], out_dirs: Sequence[str | Path], resume: bool = False,
                progress: bool = True, argv: list[str] | None = None,
                tracker: str | None = None) -> list[dict[str, Any]]:
    """Train the runs `cfgs` into `out_dirs` as one stack (check_stackable: settings that differ only in
    STACKED_FIELDS) in this process; returns each run's summary, with "run_dir", in order.

    Each run is what `train(cfg, out_dir, resume, ...)` would make of it, up to float rounding: the same directory,
    checked the same way before anything trains (FileExistsError, SettingsChanged, RunLocked), and a finished run
    returned as is. A run that diverges leaves the stack: its summary says "diverged" (it is returned, not raised)
    and the others go on. Resumed runs that stand at different steps train as one stack per step, one after the other.
    """
    cfgs, outs = list(cfgs), [Path(o) for o in out_dirs]
    if len(cfgs) != len(outs):
        raise ValueError(f"{len(cfgs)} settings for {len(outs)} run directories")
    if tracker == "wandb" and len(cfgs) > 1:
        raise ValueError(f"tracker={tracker!r}: W&B keeps one run open a process; a stack of runs takes "
                         "tracker='tensorboard' or none")
    check_stackable(cfgs)
    ranks = Ranks.from_env()
    if ranks.size > 1 or ranks.launched:
        raise ValueError("a stack trains in one process; under torchrun train each run with mixit train")
    device = resolve_device(cfgs[0].device)
    if device.type == "cpu":
        keep_freed_memory()  # as train(): the step reallocates the same buffers
    summaries: dict[int, dict[str, Any]] = {}
    for i, (cfg, out) in enumerate(zip(cfgs, outs)):  # every run is checked before any trains
        if not resume and not is_empty_run_dir(out):
            raise FileExistsError(what_it_holds(out))
        if resume:
            check_same_settings(out, cfg)
            if is_finished(out):
                summaries[i] = {**read_summary(out), "run_dir": str(out)}
    with ExitStack() as locks:
        loops: dict[int, RunLoop] = {}
        for i, (cfg, out) in enumerate(zip(cfgs, outs)):
            if i in summaries:
                continue
            locks.enter_context(run_lock(out))  # one writer per run directory, as train()
            if not resume:
                for name in (RUN_FILE, METRICS_FILE):
                    (out / name).unlink(missing_ok=True)
            loops[i] = open_loop(cfg, out, resume, argv, device, ranks, stacked=True)
        for at in sorted({loop.step for loop in loops.values()}):  # a resumed stack stands at one step, or a few
            group = {i: loop for i, loop in loops.items() if loop.step == at}
            summaries.update(zip(group, _drive(list(group.values()), progress, tracker)))
    return [{**summaries[i], "run_dir": str(out)} for i, out in enumerate(outs)]


def _drive(loops: list[RunLoop], progress: bool, tracker: str | None) -> list[dict[str, Any]]:
    """Step `loops` (at one step, settings that stack) together to their end; returns their summaries in order."""
    cfg = loops[0].cfg
    graph = cfg.cuda_graph and graph_refusal(cfg, loops[0].device, False) is None
    if cfg.cuda_graph and not graph:
        warnings.warn(f"cuda_graph: {graph_refusal(cfg, loops[0].device, False)}; the stack takes eager steps (the "
                      "same numbers)", stacklevel=3)
    stack = StackedStep(loops, graph)  # before any loop begins: a stack refused leaves no tracker open
    for loop in loops:
        loop.stacked = len(loops)
        loop.begin(False, tracker)  # one bar for the stack, below; the runs' logs are in their directories
    bar = tqdm(total=cfg.steps, initial=loops[0].step, disable=not progress, leave=False, dynamic_ncols=True,
               desc=f"stack of {len(loops)}: {'+'.join(dict.fromkeys(l.cfg.variant for l in loops))}/{cfg.task}")
    summaries: dict[int, dict[str, Any]] = {}
    live = list(range(len(loops)))
    while live and loops[live[0]].step < cfg.steps:
        t0 = time.perf_counter()
        stack.step([loops[i].stream.next() for i in live], [loops[i].cfg.lr_at(loops[i].step) for i in live])
        first = loops[live[0]]
        _, is_eval, is_checkpoint = first.due(first.step + 1)
        if is_eval or is_checkpoint or first.step + 1 in first.kept:
            stack.write_back(with_optimizer=is_checkpoint)
        for i in list(live):
            try:
                loops[i].after_step(t0)
            except TrainingDiverged as e:
                summaries[i] = _diverged(loops[i], e)
                live.remove(i)
        if len(live) < len(stack.loops) and live:  # a run left: the others go on in a stack of their own
            stack.write_back(with_optimizer=True)
            stack = StackedStep([loops[i] for i in live], graph)
        bar.update(1)
    bar.close()
    for i in live:
        loops[i].replayed = stack.graph is not None
        summaries[i] = loops[i].finish()
    return [summaries[i] for i in range(len(loops))]


def _diverged(loop: RunLoop, error: TrainingDiverged) -> dict[str, Any]:
    """A run of the stack that diverged: its summary.json written (RunLoop.diverged), and its contents."""
    try:
        loop.diverged(error)
    except TrainingDiverged:
        pass
    return read_summary(loop.out)
