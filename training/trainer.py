"""A training run: `train`, the loop that runs a run's settings (`TrainConfig`, mixit_lab.training.config).

The loop: AdamW, warmup + cosine, clipping, periodic eval and checkpoints, exact resume. It writes a run
directory (layout in mixit_lab.training.rundir): run.json first; then metrics.jsonl, one record per logged step
(loss, eval_loss, eval_acc, lr, tokens_per_s, elapsed_s; text LM runs add eval_log_perplexity and
eval_perplexity); checkpoint/ (the model, loadable by mixit_lab.models.load_model, plus trainer_state.safetensors/.json,
the optimizer, data stream and step, for --resume); and summary.json last, which marks the run finished
(status "finished" or "diverged").

Text tasks cache their tokenizer and token arrays in `.token_cache/` next to the run directory, so the runs of
a sweep tokenize a corpus once; precision "fast" keeps its CPU measurement there too (mixit_lab.training.precision).

The other jobs live in their own modules, and their names are re-exported here: mixit_lab.training.resolve (what the
settings come to: the task, the model, the eval size, the device), mixit_lab.training.precision (fp32 or bf16),
mixit_lab.training.machine (device, malloc), mixit_lab.training.optim (AdamW, schedule), mixit_lab.training.loss (the
loss of a batch, evaluation), mixit_lab.training.state (the trainer state of a checkpoint),
mixit_lab.training.provenance.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import torch
from tqdm.auto import tqdm

from mixit_lab.models import build_model
from mixit_lab.models.checkpoint import write_model_files
from mixit_lab.models.files import atomic_directory, recover_directory, remove_leftovers, write_json, write_text
from mixit_lab.models.freeze import hold_frozen_slices, warn_if_frozen_attention_is_uniform
from mixit_lab.models.tokenizer import TOKENIZER_FILE, tokenizer_to_json
from mixit_lab.models.seeds import derive_seed
from mixit_lab.training.resolve import ResolvedRun, resolve, resolve_device

from .config import TrainConfig
from .graph_step import GraphedStep, graph_refusal
from .loss import SummedLoss, evaluate, scored_count, task_loss
from .machine import keep_freed_memory
from .optim import build_optimizer, first_step_options
from .parallel import Ranks, ddp_options
from .precision import autocast_for, resolve_precision, warn_if_emulated
from .provenance import provenance
from .rundir import (
    CHECKPOINT_DIR, DATA_CACHE_DIR, METRICS_FILE, RUN_FILE, STATE_JSON, SUMMARY_FILE, append_metrics,
    is_empty_run_dir, is_finished, kept_checkpoint_dir, read_run_info, read_summary, run_lock, truncate_metrics,
    what_it_holds,
)
from .settings import SettingsChanged, check_same_settings
from .state import has_trainer_state, load_trainer_state, save_trainer_state, saved_step
from .tasks import Task, TrainStream, attach_tokenizer, task_record
from .trackers import open_tracker

__all__ = ["RunLoop", "TrainingDiverged", "open_loop", "train"]

class TrainingDiverged(RuntimeError):
    """The loss or gradient became non-finite; the last good checkpoint is kept."""


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    tracker: str | None = None,
) -> dict[str, Any]:
    """Train one model as described by `cfg`, writing the run directory `out_dir`. Returns the summary
    (summary.json's contents) plus "run_dir": `mixit_lab.training.load_run(summary["run_dir"]).model` is the trained
    model, with its task, configs and metrics beside it.

    `tracker` ("tensorboard", "wandb"; see mixit_lab.training.trackers) also sends the metrics to that tool.

    With resume=True an unfinished run continues from its last checkpoint and ends with the same
    weights as an uninterrupted run; a finished run is returned as is. Either way the run's settings
    must be cfg's (SettingsChanged lists the differences). RunLocked if another process is writing
    out_dir; FileExistsError if resume=False and out_dir already holds something.
    Under torchrun (mixit_lab.training.parallel) every process calls this; they train one run data-parallel and
    rank 0 writes the run directory and returns the summary.
    On a CPU under glibc this changes the whole process's malloc thresholds (`keep_freed_memory`), and
    leaves them so.
    """
    out = Path(out_dir)
    device = resolve_device(cfg.device)  # before the processes meet: each needs its own (this rank's GPU)
    if device.type == "cpu":
        # Process-wide: glibc's malloc keeps freed blocks for reuse from here on (the step reallocates the same
        # buffers; see keep_freed_memory). It stays so after train() returns; keep_freed_memory(False) undoes it.
        keep_freed_memory()
    ranks = Ranks.start(device)
    try:
        if not resume and not is_empty_run_dir(out):
            raise FileExistsError(what_it_holds(out))
        if resume:
            check_same_settings(out, cfg)
            if is_finished(out):
                return {**read_summary(out), "run_dir": str(out)}
        ranks.rows(cfg.batch_size)  # the global batch splits evenly over the processes
        ranks.barrier()  # every rank has read the directory before rank 0 writes to it
        with run_lock(out) if ranks.main else nullcontext():  # one writer per run directory; RunLocked names the other
            if not resume and ranks.main:  # a start that failed before its first checkpoint: begin afresh
                for name in (RUN_FILE, METRICS_FILE):
                    (out / name).unlink(missing_ok=True)
            summary = _train(cfg, out, resume, progress and ranks.main, argv, tracker, device, ranks)
        # the ranks leave together: no rank tears its side of the group down while rank 0 still evaluates and
        # writes the last checkpoint
        ranks.barrier()
        return {**summary, "run_dir": str(out)}
    finally:
        ranks.stop()


def _start_or_resume(cfg: TrainConfig, out: Path, resume: bool, run: ResolvedRun, model, optimizer, stream,
                     argv: list[str] | None, ranks: Ranks) -> tuple[int, float, float | None, tuple[float, int]]:
    """Load the last checkpoint's weights, optimizer, data stream and counters (resume), or write a new run's
    run.json (and tokenizer). Returns (step, elapsed seconds so far, best eval accuracy so far, the training
    loss window since the last log: its sum and its number of steps)."""
    ckpt = out / CHECKPOINT_DIR
    if resume and (ckpt / STATE_JSON).is_file():
        from mixit_lab.models import load_model

        model.load_state_dict(load_model(ckpt).state_dict())
        meta = load_trainer_state(ckpt, optimizer, stream)
        if ranks.main:
            truncate_metrics(out, meta["step"])
        return (meta["step"], meta.get("elapsed_s", 0.0), meta.get("best_eval_acc"),
                (meta.get("window_loss", 0.0), meta.get("window_n", 0)))
    if ranks.main:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).unlink(missing_ok=True)
        write_json(out / RUN_FILE, {"train": cfg.to_dict(), "model": run.model.to_dict(),
                                    "task": task_record(run.task, run.eval_size, out), **provenance(argv)})
        if run.task.text_tokenizer is not None:
            write_text(out / TOKENIZER_FILE, tokenizer_to_json(run.task.text_tokenizer))
    return 0, 0.0, None, (0.0, 0)


def _train(cfg: TrainConfig, out: Path, resume: bool, progress: bool, argv: list[str] | None,
           tracker: str | None, device: torch.device, ranks: Ranks) -> dict[str, Any]:
    """The body of `train`, run while holding the run directory's lock (rank 0)."""
    return open_loop(cfg, out, resume, argv, device, ranks).run(progress, tracker)


def open_loop(cfg: TrainConfig, out: Path, resume: bool, argv: list[str] | None, device: torch.device,
              ranks: Ranks, stacked: bool = False) -> RunLoop:
    """A run's loop, ready for its next step: the run resolved, its weights, optimizer and data stream built, and
    loaded from the last checkpoint (resume) or written as a new run's run.json. The caller holds the lock.
    `stacked`: a stack takes its steps (mixit_lab.training.stack), so the loop makes no step of its own (no graph)."""
    run, precision = _prepare(cfg, out, resume, device, ranks)
    warn_if_frozen_attention_is_uniform(run.model)
    if resume and (out / RUN_FILE).is_file():
        try:  # the run's corpus, tokenizer and held-out rows are still the ones it began with
            read_run_info(out).check_data(run.task)
        except ValueError as e:
            files = ", ".join(map(str, cfg.task_params.get("text_file") or [])) or "the task's code or data"
            raise SettingsChanged(f"{e} ({files}); restore them, or start a new run with another --out") from None
    loop = RunLoop(cfg, out, run, ranks, precision)
    loop.step, loop.elapsed_before, loop.best_acc, (loop.window_loss, loop.window_n) = _start_or_resume(
        cfg, out, resume, run, loop.model, loop.optimizer, loop.stream, argv, ranks)
    loop.prepare(own_step=not stacked)
    return loop


def _prepare(cfg: TrainConfig, out: Path, resume: bool, device: torch.device, ranks: Ranks) -> tuple[ResolvedRun, str]:
    """Put the checkpoint folder right, resolve the precision and the run (mixit_lab.training.resolve: the task, the
    model, the eval size): rank 0 first, so that it alone writes the runs folder's cache (token arrays, the bf16
    measurement), then the others, which read it. Returns the resolved run and the precision ("fp32" or "bf16")."""
    ckpt, cache = out / CHECKPOINT_DIR, out.parent / DATA_CACHE_DIR
    if ranks.main:
        if resume:
            recover_directory(ckpt)  # a kill in the middle of swapping a checkpoint in left it beside its place
        remove_leftovers(ckpt)  # temporary copies of killed saves
        precision = resolve_precision(cfg.precision, device, cache)
        warn_if_emulated(precision, device)
        run = resolve(cfg, cache, device=device)
    ranks.barrier()  # the checkpoint is in place and the cache is written
    if not ranks.main:
        precision = resolve_precision(cfg.precision, device, cache)
        run = resolve(cfg, cache, device=device)
    return run, precision


class RunLoop:
    """One run's training loop and its counters, as named steps: prepare, begin, step (train, then what falls due:
    log, keep, checkpoint), finish.

    Every rank runs it; rank 0 alone logs, evaluates and writes the run directory. A stack of runs
    (mixit_lab.training.stack) drives several loops, taking their train steps as one and the rest loop by loop."""

    def __init__(self, cfg: TrainConfig, out: Path, run: ResolvedRun, ranks: Ranks, precision: str):
        task, device = run.task, run.device
        assert device is not None, "a run trains on a resolved device"
        self.cfg, self.out, self.task, self.device, self.ranks = cfg, out, task, device, ranks
        self.precision = precision  # resolved: "fp32" or "bf16"
        self.ckpt = out / CHECKPOINT_DIR
        self.model = build_model(run.model).to(device)
        attach_tokenizer(self.model, task)  # saved with every checkpoint: to_str_tokens & co. speak its vocabulary
        self.optimizer = build_optimizer(self.model, cfg.lr, cfg.weight_decay, cfg.betas, device)
        self.stream = TrainStream(task, cfg.batch_size, seed=derive_seed(cfg.seed, "data"), eval_n=run.eval_size,
                                  sampling=cfg.sampling, tune_n=cfg.tune_samples)
        self.eval_batch = task.eval_set(run.eval_size)
        self.tune_batch = task.tuning_set(cfg.tune_samples, run.eval_size) if cfg.tune_samples else None
        # what a checkpoint carries (set by _start_or_resume): the step, the seconds and best eval accuracy so far,
        # and the training loss summed over the steps since the last log
        self.step, self.elapsed_before, self.best_acc = 0, 0.0, None
        self.moved = False  # a logged step had a nonzero gradient (else the finished run is flagged: nothing trained)
        self.window_loss, self.window_n = 0.0, 0
        # each step's loss and gradient norm, held on the device until the next read (settle): no host sync a step
        self.pending = torch.zeros(max(1, cfg.log_every), 2, device=device)
        self.n_pending, self.grad_norm = 0, float("nan")
        # this session's counters
        self.train_time, self.train_tokens, self.t_start = 0.0, 0, 0.0
        self.last: dict[str, Any] = {}
        self.last_acc = float("nan")
        self.summed: torch.nn.Module | None = None  # the DDP-wrapped summed loss, with several processes
        self.forward: torch.nn.Module = self.model  # compiled by prepare() with cfg.compile
        self.graphed: GraphedStep | None = None  # the step as a CUDA graph, set by prepare() with cfg.cuda_graph
        self.kept: set[int] = set()
        self.counts: dict[str, int] = {}
        self.stacked = 1  # the runs whose steps this process takes as one (mixit_lab.training.stack sets it)
        self.replayed = False  # its stack's step replayed as a CUDA graph (set by the stack)
        self.track = None  # the tracker (rank 0), the progress bar and whether to print eval lines: set by run()
        self.bar: tqdm
        self.progress = False

    def prepare(self, own_step: bool = True) -> None:
        """After the start or resume: hold frozen heads, compile, wrap for several processes, make the step a CUDA
        graph (`own_step`: this loop takes its own steps), keep the init."""
        hold_frozen_slices(self.model, self.optimizer)  # frozen heads ("v@0.h1") keep the values just loaded
        self.forward = torch.compile(self.model) if self.cfg.compile else self.model
        if self.ranks.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.summed = DistributedDataParallel(SummedLoss(self.forward, self.task), **ddp_options(self.device))
        if self.cfg.cuda_graph and own_step:
            refusal = graph_refusal(self.cfg, self.device, self.ranks.distributed)
            if refusal is None:
                self.graphed = GraphedStep(self.model, self.task, self.optimizer, self.cfg.grad_clip,
                                           self.precision == "bf16")
            else:
                warnings.warn(f"cuda_graph: {refusal}; this run takes eager steps (the same numbers)", stacklevel=2)
        self.kept = set(self.cfg.kept_steps())
        self.counts = self.model.parameter_counts()
        if self.step == 0:
            self._keep_model(0)

    def run(self, progress: bool, tracker: str | None) -> dict[str, Any]:
        """Train from the current step to cfg.steps; returns the summary (written as summary.json by rank 0)."""
        self.begin(progress, tracker)
        try:
            with self.model.trusted_inputs():  # the task's own batches: no per-step read of token values
                while self.step < self.cfg.steps:
                    self._one_step()
        except TrainingDiverged as e:
            self.diverged(e)
        return self.finish()

    def begin(self, progress: bool, tracker: str | None) -> None:
        """Open the tracker (rank 0) and the progress bar, start the clock: the loop is about to step."""
        cfg = self.cfg
        self.track = open_tracker(tracker, self.out, cfg.to_dict(), self.step) if self.ranks.main else None
        self.progress = progress
        self.bar = tqdm(total=cfg.steps, initial=self.step, disable=not progress, desc=f"{cfg.variant}/{cfg.task}",
                        dynamic_ncols=True, leave=False, mininterval=0.5 if sys.stderr.isatty() else 30.0)
        self.model.train()
        self.t_start = time.perf_counter()

    def _elapsed(self) -> float:
        """Seconds of training so far, earlier sessions of a resumed run included."""
        return self.elapsed_before + time.perf_counter() - self.t_start

    def _one_step(self) -> None:
        """One optimizer step, then what falls due at the new step: a log (and evaluation), a kept model, a checkpoint.

        Nothing here reads a device value except at those steps (settle), so on a GPU the host queues the next
        step's kernels while this one runs."""
        t0 = time.perf_counter()
        self._train_step(self.stream.next())
        self.after_step(t0)

    def due(self, step: int) -> tuple[bool, bool, bool]:
        """What falls due once `step` is done: (a log, an evaluation, a checkpoint); a kept model is `step in
        self.kept`."""
        cfg = self.cfg
        is_eval = step % cfg.eval_every == 0 or step == cfg.steps
        is_checkpoint = step % (cfg.checkpoint_every or cfg.eval_every) == 0 or step == cfg.steps
        return step % cfg.log_every == 0 or is_eval, is_eval, is_checkpoint

    def after_step(self, t0: float) -> None:
        """Count the step that began at time.perf_counter() `t0`, then do what falls due (due): read the pending
        values, log and evaluate, keep the model, write the checkpoint."""
        cfg, ranks = self.cfg, self.ranks
        self.step += 1
        step = self.step
        if self.device.type == "cuda" and step % cfg.log_every == 0:
            torch.cuda.synchronize()
        self.train_time += time.perf_counter() - t0
        self.train_tokens += cfg.batch_size * self.task.seq_len
        is_log, is_eval, is_checkpoint = self.due(step)
        if is_log or is_checkpoint or step in self.kept:
            self.settle()  # every rank at the same steps: a diverged run stops on all of them together
        if ranks.main and is_log:
            self._log(is_eval)
        self._keep_model(step)
        if ranks.main and is_checkpoint:
            self._save_checkpoint(self._elapsed())
        self.bar.update(1)

    def _train_step(self, batch: tuple[torch.Tensor, ...]) -> None:
        """One optimizer step at self.step on one training batch: the learning rate of the schedule, the loss, its
        gradient, clipping and AdamW. The loss and the gradient norm before clipping stay on the device, in
        self.pending, until settle reads them. With several processes, or micro-batches, the loss is accumulated
        (_accumulate)."""
        cfg, step, device = self.cfg, self.step, self.device
        if self.graphed is not None:
            self._pend(*self.graphed.step(batch, cfg.lr_at(step)))
            return
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr_at(step)
        self.optimizer.zero_grad(set_to_none=True)
        if self.summed is None and (cfg.micro_batch_size or cfg.batch_size) >= cfg.batch_size:
            host_mask = batch[1] if self.task.objective != "classification" else None
            on_device = tuple(t.to(device, non_blocking=True) for t in batch)
            with autocast_for(device, self.precision):
                loss = task_loss(self.forward, self.task, on_device, host_mask=host_mask)
            loss.backward()
        else:
            loss = self._accumulate(batch)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for g in self.optimizer.param_groups for p in g["params"]], cfg.grad_clip or float("inf")
        )
        self._pend(loss.detach(), grad_norm)
        self.optimizer.step()  # a non-finite step still runs: settle finds it before any weights are written

    def _pend(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Keep a step's loss and gradient norm on the device, for settle (which runs first if the buffer is full:
        never in the loop, which settles at least every log_every steps; a caller stepping on its own, such as a
        benchmark, reads once a buffer)."""
        if self.n_pending == len(self.pending):
            self.settle()
        self.pending[self.n_pending, 0].copy_(loss)
        self.pending[self.n_pending, 1].copy_(grad_norm)
        self.n_pending += 1

    def settle(self) -> None:
        """Read the losses and gradient norms of the steps since the last read (the loop's one host sync): add the
        losses to the log window and keep the last norm; TrainingDiverged at the first non-finite value, with its
        step (self.step becomes that step: the run diverged there). The read comes before every log, kept model
        and checkpoint, so no weights that saw a non-finite step are written."""
        values, first = self.pending[: self.n_pending].tolist(), self.step - self.n_pending
        self.n_pending = 0
        for i, (loss, norm) in enumerate(values):
            for name, value in (("loss", loss), ("gradient norm", norm)):
                if not math.isfinite(value):
                    found, self.step = self.step, first + i
                    raise TrainingDiverged(f"non-finite {name} ({value}) at step {first + i}, found at step {found}")
            self.window_loss += loss
            self.window_n += 1
        if values:
            self.grad_norm = values[-1][1]

    def _accumulate(self, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Backward the batch's mean loss slice by slice (micro-batches of this rank's rows; DDP averages over the
        ranks, synchronizing on the last slice only), each slice's summed loss scaled to the global mean's share.
        Returns the global batch's mean loss, on the device."""
        cfg, device, ranks = self.cfg, self.device, self.ranks
        mine = tuple(t[ranks.rows(cfg.batch_size)] for t in batch)
        n_rows, scale = mine[0].shape[0], ranks.size / scored_count(self.task, batch)
        micro = min(cfg.micro_batch_size or n_rows, n_rows)
        summed = self.summed or SummedLoss(self.forward, self.task)
        total = torch.zeros((), device=device)
        for start in range(0, n_rows, micro):
            last = start + micro >= n_rows
            with nullcontext() if last or self.summed is None else self.summed.no_sync():
                with autocast_for(device, self.precision):
                    loss = summed(*(t[start:start + micro].to(device, non_blocking=True) for t in mine)) * scale
                loss.backward()
            total += loss.detach().float()
        return ranks.sum(total / ranks.size)

    def _log(self, is_eval: bool) -> None:
        """Log the step (rank 0; after settle): the mean training loss since the last log, and at an eval step the
        held-out scores."""
        record = {
            "step": self.step,
            "loss": self.window_loss / self.window_n,
            "lr": self.cfg.lr_at(self.step - 1),
            "grad_norm": self.grad_norm,
            "tokens_per_s": self.train_tokens / max(self.train_time, 1e-9),
            "elapsed_s": self._elapsed(),
        }
        self.window_loss, self.window_n, self.moved = 0.0, 0, self.moved or record["grad_norm"] > 0
        if is_eval:
            record.update(_eval_metrics(self.model, self.task, self.eval_batch, self.cfg, self.precision))
            if self.tune_batch is not None:  # the tuning set's loss and accuracy, as tune_loss and tune_acc
                tuned = evaluate(self.model, *self.tune_batch[:2], self.task.metric, self.cfg.eval_batch_size,
                                 self.tune_batch[2] if len(self.tune_batch) > 2 else None, self.precision)
                record.update({f"tune_{k.removeprefix('eval_')}": v for k, v in tuned.items()})
            self.best_acc = max(self.best_acc or 0.0, record["eval_acc"])
            self.last_acc = record["eval_acc"]
            if self.progress:
                self.bar.write(_progress_line(self.cfg, record))
        append_metrics(self.out, record)
        if self.track is not None:
            self.track.log(record)
        self.last = record
        self.bar.set_postfix(loss=f"{record['loss']:.3f}", eval_acc=f"{self.last_acc:.3f}")

    def _keep_model(self, at_step: int) -> None:
        """Keep the model at `at_step` if it is one of cfg.kept_steps() (rank 0; training dynamics)."""
        if self.ranks.main and at_step in self.kept:
            with atomic_directory(kept_checkpoint_dir(self.out, at_step)) as tmp:
                write_model_files(self.model, tmp)

    def _save_checkpoint(self, elapsed: float) -> None:
        """Swap in checkpoint/: the model and the trainer state at this step (rank 0)."""
        with atomic_directory(self.ckpt) as tmp, self.graphed.saved_as_eager() if self.graphed else nullcontext():
            write_model_files(self.model, tmp)
            # The training-loss window since the last log goes along, so that a resumed run logs the same loss.
            save_trainer_state(tmp, self.step, self.optimizer, self.stream,
                               {"elapsed_s": elapsed, "best_eval_acc": self.best_acc,
                                "window_loss": self.window_loss, "window_n": self.window_n})
        if self.track is not None:  # what was logged up to this checkpoint survives a kill after it
            self.track.flush()

    def diverged(self, error: TrainingDiverged) -> NoReturn:
        """Close up after a non-finite loss or gradient: summary.json says "diverged"; the last checkpoint stays."""
        self.bar.close()
        if self.track is not None:
            self.track.close()
        kept = "no checkpoint was written yet"
        if has_trainer_state(self.ckpt):
            kept = f"last good checkpoint (step {saved_step(self.ckpt)}) kept in {self.ckpt}"
        elif self.step == 0:  # nothing trained yet: the options that set the first step are at fault
            kept += f"; check {first_step_options(self.cfg.lr, self.cfg.model_extra)}"
        summary = {"status": "diverged", "message": f"{error}; {kept}", "step": self.step,
                   **_summary_base(self.cfg, self.counts)}
        if self.ranks.main:
            write_json(self.out / SUMMARY_FILE, summary)
        raise TrainingDiverged(f"{self.out}: {error}; {kept}") from None

    def finish(self) -> dict[str, Any]:
        """The finished run's summary, written as summary.json (rank 0), which marks the run finished."""
        self.bar.close()
        last = self.last
        summary = {
            "status": "finished",
            "step": self.step,
            **_summary_base(self.cfg, self.counts),
            "headline": self.task.headline,  # the value the run is judged by: readers need not import the task
            "loss": last.get("loss"),
            "eval_loss": last.get("eval_loss"),
            "eval_acc": last.get("eval_acc"),
            **{k: v for k, v in last.items() if k.startswith(("eval_", "tune_")) and k not in ("eval_loss", "eval_acc")},
            "best_eval_acc": self.best_acc,
            "tokens_per_s": self.train_tokens / max(self.train_time, 1e-9) if self.train_tokens else None,
            "elapsed_s": self._elapsed(),
            "device": str(self.device),
            "precision": self.precision,
            "processes": self.ranks.size,
            "backend": self.ranks.backend,
            "cuda_graph": self.replayed or (self.graphed is not None and self.graphed.graph is not None),  # the step
            # replayed as a graph (its own, or its stack's)
            "stacked": self.stacked,  # runs trained in one step with this one (itself included)
        }
        if not self.moved:  # finished, yet nothing trained: said in summary.json and as a warning
            summary["message"] = ("the gradient was 0 at every logged step: nothing trained; check "
                                  + first_step_options(self.cfg.lr, self.cfg.model_extra))
            warnings.warn(f"{self.out}: {summary['message']}", stacklevel=2)
        if self.ranks.main:
            write_json(self.out / SUMMARY_FILE, summary)
        if self.track is not None:
            self.track.close()
        return summary


def _eval_metrics(model: torch.nn.Module, task: Task, eval_batch: tuple[torch.Tensor, ...], cfg: TrainConfig,
                  precision: str) -> dict[str, float]:
    """What an evaluation step logs: held-out loss and accuracy, and the task's extras (perplexity for lm)."""
    labels = eval_batch[2] if task.objective == "classification" else None
    metrics = evaluate(model, eval_batch[0], eval_batch[1], task.metric, cfg.eval_batch_size, labels, precision)
    metrics.update(task.extra_eval_metrics(metrics["eval_loss"]))
    return metrics


def _progress_line(cfg: TrainConfig, record: dict[str, Any]) -> str:
    """The line printed above the progress bar at an evaluation step."""
    ppl = f" eval_ppl {record['eval_perplexity']:.2f}" if "eval_perplexity" in record else ""
    return (f"[{cfg.variant}/{cfg.task}] step {record['step']}/{cfg.steps} loss {record['loss']:.4f} "
            f"eval_loss {record['eval_loss']:.4f}{ppl} eval_acc {record['eval_acc']:.3f} "
            f"{record['tokens_per_s']:,.0f} tok/s")


def _summary_base(cfg: TrainConfig, counts: dict[str, int]) -> dict[str, Any]:
    """What both summaries (finished, diverged) say of the run's settings and size."""
    return {
        "variant": cfg.variant,
        "task": cfg.task,
        "task_params": cfg.task_params,
        "d_model": cfg.d_model,
        "n_layers": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "seed": cfg.seed,
        "lr": cfg.lr,
        "steps": cfg.steps,
        "params_trainable": counts["trainable"],
        "params_frozen": counts["frozen"],
        "params_total": counts["total"],
    }
