"""The training loop: AdamW, warmup + cosine, clipping, periodic eval and checkpoints, exact resume.

It writes a run directory (layout in training.rundir): run.json first; then metrics.jsonl, one
record per logged step (loss, eval_loss, eval_acc, lr, tokens_per_s, elapsed_s; text LM runs add
eval_log_perplexity and eval_perplexity); checkpoint/ (the model, loadable by models.load_model,
plus trainer_state.safetensors/.json, the optimizer, data stream and step, for --resume); and
summary.json last, which marks the run finished (status "finished" or "diverged").

Text tasks cache their tokenizer and token arrays in `.token_cache/` next to the run directory, so
the runs of a sweep tokenize a corpus once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tqdm.auto import tqdm

from models import ModelConfig, build_model
from models.checkpoint import write_model_files
from models.files import recover_directory, remove_leftovers, write_safetensors
from models.freeze import hold_frozen_slices
from models.tokenizer import TOKENIZER_FILE, tokenizer_to_json
from models.transformer import Transformer, derive_seed

from .rundir import (
    CHECKPOINT_DIR, DATA_CACHE_DIR, METRICS_FILE, RUN_FILE, STATE_JSON, STATE_TENSORS, SUMMARY_FILE, append_metrics,
    atomic_directory, is_empty_run_dir, is_finished, is_run_dir, kept_checkpoint_dir, read_json, read_run_info,
    read_summary, run_lock, truncate_metrics, write_json, write_text,
)
from .parallel import Ranks, ddp_options, local_device
from .tasks import Task, TrainStream, attach_tokenizer, get_task, task_import_path
from .trackers import open_tracker


PRECISIONS = ("auto", "fp32", "bf16", "fast")
# "fast" picks bf16 autocast on a CPU only where this machine's bf16 matmuls beat fp32 by this factor
# (cpu_bf16_speedup): on an AMD EPYC with avx512_bf16 they ran 2-5x fp32, on an Intel Xeon without AMX
# slower than fp32. The margin keeps a machine near parity on fp32, the reference arithmetic.
BF16_MIN_SPEEDUP = 1.25


class TrainingDiverged(RuntimeError):
    """The loss or gradient became non-finite; the last good checkpoint is kept."""


@dataclass
class TrainConfig:
    """Everything that defines a training run. Model fields not listed go in `model_extra`."""

    task: str = "addition"
    task_params: dict[str, Any] = field(default_factory=dict)
    variant: str = "standard"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    model_extra: dict[str, Any] = field(default_factory=dict)  # other ModelConfig fields, e.g. base_width
    seed: int = 0
    steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    warmup_steps: int | None = None  # default: 5% of steps
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    eval_every: int = 200
    eval_samples: int | None = None  # default: the task's held-out set size
    eval_batch_size: int = 1024
    checkpoint_every: int | None = None  # default: every eval
    log_every: int = 10
    device: str = "auto"
    compile: bool = False
    keep_checkpoints: int = 0  # keep the model at 0 and at this many log-spaced steps up to the last (training dynamics)
    precision: str = "auto"  # auto (bf16 autocast on CUDA, fp32 elsewhere), fp32, bf16 (autocast, CPU too), or
    # fast (auto, but bf16 on a CPU whose bf16 matmuls measure >= BF16_MIN_SPEEDUP x fp32's)

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)  # JSON round trip gives a list
        for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip", "d_model", "n_layers", "n_heads", "seed",
                     "warmup_steps"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"{name}={value!r} must be a number")
        if len(self.betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in self.betas):
            raise ValueError(f"betas={self.betas!r} must be two numbers")
        for name in ("steps", "batch_size", "eval_every", "log_every", "eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        for name in ("checkpoint_every", "eval_samples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be a positive integer or None")
        if self.warmup_steps is not None and not (0 <= self.warmup_steps <= self.steps):
            raise ValueError(f"warmup_steps={self.warmup_steps!r} must lie in [0, steps={self.steps}]")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr={self.lr!r} must be a positive number")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio={self.min_lr_ratio!r} must lie in [0, 1]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(f"weight_decay={self.weight_decay!r} and grad_clip={self.grad_clip!r} must be >= 0")
        if isinstance(self.keep_checkpoints, bool) or not isinstance(self.keep_checkpoints, int) or self.keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints={self.keep_checkpoints!r} must be an integer >= 0")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r} is not one of: {', '.join(PRECISIONS)}")
        if self.device not in ("auto", "cpu", "cuda", "mps") and not self.device.startswith("cuda:"):
            raise ValueError(f"device={self.device!r} is not one of: auto, cpu, cuda, cuda:N, mps")

    def build_task(self, cache_dir: str | Path | None = None) -> Task:
        """The run's task; a text task caches its tokens in `cache_dir` (training.rundir.DATA_CACHE_DIR of the runs folder).

        `task` is a name known to this process (built in, or added by `register_task`) or an import path
        (`package.module:Class`). To rebuild the task of a saved run use `training.run_task(run_dir)`,
        which also imports a task registered only in the process that trained it."""
        return get_task(self.task, cache_dir=cache_dir, **self.task_params)

    def model_config(self, task: Task | None = None, cache_dir: str | Path | None = None) -> ModelConfig:
        """The model for this run; fields the task requires (`task.model_overrides`) must not be contradicted,
        and `eval_samples` must not pass the task's cap (`task.max_eval_size`).

        Without `task`, the task is built (with its token cache in `cache_dir`)."""
        task = task or self.build_task(cache_dir)
        if self.eval_samples is not None and self.eval_samples > task.max_eval_size:
            raise ValueError(f"eval_samples={self.eval_samples} is more than task {task.name!r} holds out "
                             f"(at most {task.max_eval_size}); allowed: 1..{task.max_eval_size}")
        required = task.model_overrides
        if self.model_extra.get("n_classes") is not None and "n_classes" not in required:
            raise ValueError(f"n_classes={self.model_extra['n_classes']!r}: task {task.name!r} predicts tokens; "
                             "n_classes is set by a classification task (sentiment) from its labels")
        for key, value in self.model_extra.items():
            if key in required and required[key] != value:
                flag = " (drop --bidirectional)" if key == "causal" else ""
                raise ValueError(f"task {task.name!r} requires {key}={required[key]!r}, not {key}={value!r}{flag}")
        return ModelConfig(
            variant=self.variant,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_ctx=task.seq_len,
            d_vocab=task.d_vocab,
            seed=self.seed,
            **{**self.model_extra, **required},
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown train config keys {unknown}; allowed: {sorted(known)}")
        return cls(**data)

    @property
    def warmup(self) -> int:
        return resolved_warmup(self.steps, self.warmup_steps)

    def kept_steps(self) -> list[int]:
        """The steps --keep-checkpoints keeps: the initialization (0) and `keep_checkpoints` log-spaced
        steps from 1 to `steps` (fewer when short runs make some coincide)."""
        n = self.keep_checkpoints
        if n == 0:
            return []
        if n == 1:
            return [0, self.steps]
        ratio = self.steps ** (1 / (n - 1))
        return sorted({0, *(min(self.steps, round(ratio**i)) for i in range(n))})

    def lr_at(self, step: int) -> float:
        """Learning rate for optimizer step `step` (0-based): linear warmup, then cosine decay."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        progress = (step - self.warmup) / max(1, self.steps - self.warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return self.lr * (self.min_lr_ratio + (1 - self.min_lr_ratio) * cosine)


# --------------------------------------------------------------------------- helpers
def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} requested but CUDA is not available")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={name!r} requested but MPS is not available")
    return device


def resolved_warmup(steps: int, warmup_steps: int | None) -> int:
    """The warmup a run uses: warmup_steps if set, else 5% of its steps (at least 1)."""
    return warmup_steps if warmup_steps is not None else max(1, steps // 20)


def resolve_precision(precision: str, device: torch.device) -> str:
    """"fp32" or "bf16" for a TrainConfig.precision on `device` ("auto": bf16 on CUDA, fp32 elsewhere;
    "fast": as auto, but bf16 on a CPU where it pays, see cpu_bf16_speedup)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of: {', '.join(PRECISIONS)}")
    if precision == "fast" and device.type == "cpu":
        return "bf16" if cpu_bf16_speedup() >= BF16_MIN_SPEEDUP else "fp32"  # 0.0 without native bf16
    if precision in ("auto", "fast"):
        return "bf16" if device.type == "cuda" else "fp32"
    if precision == "bf16" and device.type not in ("cpu", "cuda"):
        raise ValueError(f"precision='bf16' is supported on cpu and cuda, not {device.type}; use fp32")
    return precision


def cpu_has_bf16() -> bool:
    """Whether this CPU runs bf16 matmuls natively (avx512_bf16 / AMX, through oneDNN); without it bf16 is emulated."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def _cpu_name() -> str:  # read once: autocast_for asks cpu_bf16_speedup at every step
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _measure_bf16_speedup(rounds: int = 7) -> float:
    """fp32 time / bf16 time of matmuls of a width-64 to 256 model's training shapes, median over rounds
    that alternate the two, on one thread (a property of the core, and what each preset worker uses)."""
    shapes = ((2048, 64, 256), (2048, 256, 64), (512, 256, 1024))
    pairs = {dt: [(torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt)) for m, k, n in shapes]
             for dt in (torch.float32, torch.bfloat16)}

    def seconds(dtype: torch.dtype) -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            for a, b in pairs[dtype]:
                a @ b
        return time.perf_counter() - t0

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seconds(torch.float32), seconds(torch.bfloat16)  # warm-up
        ratios = sorted(seconds(torch.float32) / seconds(torch.bfloat16) for _ in range(rounds))
    finally:
        torch.set_num_threads(threads)
    return ratios[len(ratios) // 2]


_BF16_SPEEDUP: dict[str, float] = {}


def cpu_bf16_speedup() -> float:
    """How many times faster this CPU's bf16 matmuls run than its fp32 ones (0.0 without native bf16).

    Measured once per machine and torch version, and kept in
    $XDG_CACHE_HOME/mixit-lab/bf16_speedup.json (default ~/.cache): every run on one machine then
    decides alike, even where a measurement would land near BF16_MIN_SPEEDUP."""
    key = f"{_cpu_name()} | torch {torch.__version__}"
    if key in _BF16_SPEEDUP:
        return _BF16_SPEEDUP[key]
    path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mixit-lab" / "bf16_speedup.json"
    try:
        known = read_json(path) if path.is_file() else {}
    except (OSError, ValueError):
        known = {}
    if not isinstance(known.get(key), (int, float)):
        known[key] = _measure_bf16_speedup() if cpu_has_bf16() else 0.0
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, known)
        except OSError:
            pass  # a read-only home: measured again by the next process
    _BF16_SPEEDUP[key] = float(known[key])
    return _BF16_SPEEDUP[key]


# glibc malloc settings of keep_freed_memory(), by tunable name (also usable as GLIBC_TUNABLES=glibc.malloc.NAME=...).
KEPT_MALLOC_SETTINGS = {"mmap_threshold": 32 << 20, "trim_threshold": 1 << 30, "top_pad": 64 << 20}


def keep_freed_memory(keep: bool = True) -> bool:
    """Let glibc's malloc keep freed blocks (up to 32 MB each) for reuse instead of giving them back.

    A training step frees and reallocates the same activation buffers every step. With glibc's
    defaults many go back to the OS and return as fresh pages, about 1,700 page faults per step for a
    k-hop model of the quick preset; kept, about 20, and the step is 5-10% faster on a 2-core VM
    (benchmarks/bench_kernels.py). `keep=False` restores glibc's default thresholds. Returns whether
    the setting applied (glibc on Linux only; elsewhere nothing changes).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    option = {"mmap_threshold": -3, "trim_threshold": -1, "top_pad": -2}  # M_MMAP_THRESHOLD, ... in malloc.h
    values = KEPT_MALLOC_SETTINGS if keep else dict.fromkeys(KEPT_MALLOC_SETTINGS, 128 << 10)
    return all(mallopt(option[name], value) for name, value in values.items())


def build_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                    device: torch.device) -> torch.optim.AdamW:
    """The trainer's AdamW: weight decay on trainable matrices only; the fused kernel on CPU (one call per
    parameter tensor instead of about ten: a tiny model's step 4.5 -> 4.0 ms at width 16, 2 CPU cores),
    multi-tensor ops on CUDA."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=betas, foreach=device.type == "cuda", fused=device.type == "cpu",
    )


def autocast_for(device: torch.device, precision: str = "auto"):
    """Mixed precision for forward passes: bf16 autocast (matmuls in bf16, softmax, norms and losses in fp32)
    when `precision` resolves to bf16, else full precision. Weights and optimizer state stay fp32."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def masked_logits(model, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the positions that predict scored tokens, and those targets.

    Position t-1 predicts token t; only rows of the residual stream that predict a scored
    token go through the unembedding, which is most of the cost saved on small tasks. A
    `Transformer` runs on the positions up to the last that predicts a scored token (in a causal
    model later ones never reach it), and its last block from the first such position on
    (`from_pos`): memorization's 3-token rows, scored at the end, need 2 positions and the last
    block at 1. With hooks attached (ablations, patching) it runs on every position, as they expect.
    """
    predict = mask[:, 1:]
    span = _scored_span(model, predict)
    if span is None:
        resid = model(tokens, return_type=None)[:, :-1]
        return model.unembed(resid[predict]).float(), tokens[:, 1:][predict]
    first, last = span
    end = last + 1 if model.config.causal else tokens.shape[1]
    resid = model(tokens[:, :end], return_type=None, from_pos=first)[:, : last + 1 - first]
    predict = predict[:, first : last + 1]
    logits = model.unembed(resid[predict]).float()
    return logits, tokens[:, first + 1 : last + 2][predict]


def _scored_span(model, predict: torch.Tensor) -> tuple[int, int] | None:
    """First and last position that predicts a scored token, if `model` is a `Transformer`
    (possibly compiled) with no TransformerLens hook attached, forward or backward, and some token is
    scored; else None (run every position)."""
    if not isinstance(getattr(model, "_orig_mod", model), Transformer):
        return None
    if any(point.has_hooks() for point in model.hook_dict.values()):
        return None
    scored = predict.any(0).nonzero()
    return (int(scored[0]), int(scored[-1])) if len(scored) else None


def masked_loss(model, tokens: torch.Tensor, mask: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    logits, targets = masked_logits(model, tokens, mask)
    return F.cross_entropy(logits, targets, reduction=reduction)


def task_loss(model, task: Task, batch: tuple[torch.Tensor, ...], reduction: str = "mean") -> torch.Tensor:
    """The training loss of one batch: masked next-token cross-entropy, or class cross-entropy.

    reduction "mean" averages over the scored tokens (rows for a classifier), "sum" adds them up."""
    if task.objective == "classification":
        tokens, mask, labels = batch
        return F.cross_entropy(model.classify(tokens, mask).float(), labels, reduction=reduction)
    tokens, mask = batch
    return masked_loss(model, tokens, mask, reduction)


def scored_count(task: Task, batch: tuple[torch.Tensor, ...]) -> int:
    """How many terms task_loss averages over in `batch`: scored tokens, or rows for a classifier."""
    if task.objective == "classification":
        return batch[0].shape[0]
    return int(batch[1][:, 1:].sum())


class SummedLoss(torch.nn.Module):
    """task_loss(reduction="sum") as a module, so that DistributedDataParallel sees every parameter the
    loss uses (the unembedding is called outside the model's forward)."""

    def __init__(self, model: torch.nn.Module, task: Task):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return task_loss(self.model, self.task, batch, reduction="sum")


@torch.no_grad()
def evaluate(
    model, tokens: torch.Tensor, mask: torch.Tensor, metric: str, batch_size: int = 1024,
    labels: torch.Tensor | None = None, precision: str = "auto",
) -> dict[str, float]:
    """Mean loss over scored tokens and accuracy ("sequence": every scored token right; "token": per token).

    With `labels` (classification tasks; `mask` marks real tokens) the loss and accuracy are per row.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_sum, n_tokens, n_correct_tokens, n_correct_rows = 0.0, 0, 0, 0
    for start in range(0, tokens.shape[0], batch_size):
        tb = tokens[start : start + batch_size].to(device)
        mb = mask[start : start + batch_size].to(device)
        if labels is not None:
            with autocast_for(device, precision):
                logits = model.classify(tb, mb).float()
            targets = labels[start : start + batch_size].to(device)
            loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
            n_correct_rows += (logits.argmax(-1) == targets).sum().item()
            n_tokens += targets.numel()
            continue
        with autocast_for(device, precision):
            logits, targets = masked_logits(model, tb, mb)
        loss_sum += F.cross_entropy(logits.float(), targets, reduction="sum").item()
        right = logits.argmax(-1) == targets
        n_tokens += targets.numel()
        n_correct_tokens += right.sum().item()
        # Scatter per-token correctness back to rows: a row is right if none of its scored tokens is wrong.
        wrong_per_row = torch.zeros(tb.shape[0], dtype=torch.long, device=device)
        rows = mb[:, 1:].nonzero()[:, 0]
        wrong_per_row.index_add_(0, rows, (~right).long())
        n_correct_rows += (wrong_per_row == 0).sum().item()
    model.train(was_training)
    per_row = labels is not None or metric == "sequence"
    acc = n_correct_rows / tokens.shape[0] if per_row else n_correct_tokens / max(1, n_tokens)
    return {"eval_loss": loss_sum / max(1, n_tokens), "eval_acc": acc}


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line, git commit, library versions and torch's CPU thread count, recorded in every run directory.

    The thread count is there because it changes how CPU kernels split their sums: the same config and
    seed give the same numbers on the same machine at the same thread count, float-rounding-different
    ones at another."""
    import numpy
    import transformer_lens

    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip() or None
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()
        ) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    try:
        from importlib.metadata import version

        ours = version("mixit-lab")
    except Exception:
        ours = None
    argv = list(sys.argv if argv is None else argv)
    return {
        "command": shlex.join(argv),
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": {
            "mixit-lab": ours,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformer_lens": getattr(transformer_lens, "__version__", None),
            "numpy": numpy.__version__,
        },
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }


# --------------------------------------------------------------------------- trainer state
def _save_trainer_state(directory: Path, step: int, optimizer, stream: TrainStream, extra: dict) -> None:
    opt = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for idx, state in opt["state"].items():
        for key, value in state.items():
            tensors[f"optim.{idx}.{key}"] = value.detach().cpu().contiguous()
    stream_state = stream.state_dict()
    stream_json = {}
    for key, value in stream_state.items():
        if isinstance(value, torch.Tensor):
            tensors[f"stream.{key}"] = value.cpu().contiguous()
        else:
            stream_json[key] = value
    write_safetensors(tensors, directory / STATE_TENSORS)
    write_json(
        directory / STATE_JSON,
        {"step": step, "param_groups": opt["param_groups"], "stream": stream_json, **extra},
    )


def _load_trainer_state(directory: Path, optimizer, stream: TrainStream) -> dict:
    meta = read_json(directory / STATE_JSON)
    tensors = load_file(str(directory / STATE_TENSORS))
    state: dict[int, dict[str, torch.Tensor]] = {}
    stream_state: dict[str, Any] = dict(meta["stream"])
    for name, value in tensors.items():
        kind, rest = name.split(".", 1)
        if kind == "optim":
            idx, key = rest.split(".", 1)
            state.setdefault(int(idx), {})[key] = value
        else:
            stream_state[rest] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    stream.load_state_dict(stream_state)
    return meta


# --------------------------------------------------------------------------- the loop
def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    progress: bool = True,
    argv: list[str] | None = None,
    tracker: str | None = None,
) -> dict[str, Any]:
    """Train one model as described by `cfg`, writing the run directory `out_dir`. Returns the summary
    (summary.json's contents) plus "run_dir": `training.load_run(summary["run_dir"]).model` is the trained
    model, with its task, configs and metrics beside it.

    `tracker` ("tensorboard", "wandb"; see training.trackers) also sends the metrics to that tool.

    With resume=True an unfinished run continues from its last checkpoint and ends with the same
    weights as an uninterrupted run; a finished run is returned as is. Either way the run's settings
    must be cfg's (SettingsChanged lists the differences). RunLocked if another process is writing
    out_dir; FileExistsError if resume=False and out_dir already holds something.
    Under torchrun (training.parallel) every process calls this; they train one run data-parallel and
    rank 0 writes the run directory and returns the summary.
    On a CPU under glibc this changes the whole process's malloc thresholds (`keep_freed_memory`), and
    leaves them so.
    """
    out = Path(out_dir)
    device = pick_device(local_device(cfg.device, Ranks.from_env()))
    if device.type == "cpu":
        # Process-wide: glibc's malloc keeps freed blocks for reuse from here on (the step reallocates the same
        # buffers; see keep_freed_memory). It stays so after train() returns; keep_freed_memory(False) undoes it.
        keep_freed_memory()
    ranks = Ranks.start(device)
    try:
        if not resume and not is_empty_run_dir(out):
            raise FileExistsError(f"{out} already holds a run; pass --resume to continue it or choose another --out")
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


class SettingsChanged(ValueError):
    """A run directory holds a run trained with other settings than those asked for."""


IGNORED_SETTINGS = ("device", "compile", "keep_checkpoints")  # how a run executes or what it keeps, not what it computes


def settings_differences(run_dir: str | Path, cfg: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(setting, value in the run, value in cfg) for each setting in which cfg differs from the run in
    run_dir; none if it holds no run. Device and torch.compile may differ (resuming elsewhere is fine)."""
    if not is_run_dir(run_dir):
        return []
    saved = TrainConfig.from_dict(read_run_info(run_dir)["train"]).to_dict()
    wanted = cfg.to_dict()
    return [(k, saved[k], wanted[k]) for k in wanted if k not in IGNORED_SETTINGS and saved[k] != wanted[k]]


def check_same_settings(run_dir: str | Path, cfg: TrainConfig) -> None:
    """SettingsChanged, listing every difference, if run_dir holds a run trained with other settings."""
    diff = settings_differences(run_dir, cfg)
    if diff:
        listed = "; ".join(f"{k}={old!r} in the run, {k}={new!r} now" for k, old, new in diff)
        raise SettingsChanged(
            f"{Path(run_dir) / RUN_FILE}: cannot resume with a different config (differs in "
            f"{', '.join(k for k, _, _ in diff)}: {listed}); choose another --out or move the run away"
        )


def _start_or_resume(cfg: TrainConfig, out: Path, resume: bool, task, model, model_cfg, optimizer, stream,
                     argv: list[str] | None, ranks: Ranks) -> tuple[int, float, float | None, tuple[float, int]]:
    """Load the last checkpoint's weights, optimizer, data stream and counters (resume), or write a new run's
    run.json (and tokenizer). Returns (step, elapsed seconds so far, best eval accuracy so far, the training
    loss window since the last log: its sum and its number of steps)."""
    ckpt = out / CHECKPOINT_DIR
    if resume and (ckpt / STATE_JSON).is_file():
        from models import load_model

        model.load_state_dict(load_model(ckpt).state_dict())
        meta = _load_trainer_state(ckpt, optimizer, stream)
        if ranks.main:
            truncate_metrics(out, meta["step"])
        return (meta["step"], meta.get("elapsed_s", 0.0), meta.get("best_eval_acc"),
                (meta.get("window_loss", 0.0), meta.get("window_n", 0)))
    if ranks.main:
        out.mkdir(parents=True, exist_ok=True)
        (out / METRICS_FILE).unlink(missing_ok=True)
        # the class's import path lets a new process rebuild a task of the researcher's own (training.run_task)
        task_info = {"name": task.name, "import_path": task_import_path(type(task)), **task.params}
        if task.data_fingerprint is not None:
            task_info["data_fingerprint"] = task.data_fingerprint
        write_json(out / RUN_FILE, {"train": cfg.to_dict(), "model": model_cfg.to_dict(), "task": task_info,
                                    **provenance(argv)})
        if task.text_tokenizer is not None:
            write_text(out / TOKENIZER_FILE, tokenizer_to_json(task.text_tokenizer))
    return 0, 0.0, None, (0.0, 0)


def _train_step(cfg: TrainConfig, task, batch: tuple[torch.Tensor, ...], step: int, optimizer, forward,
                device: torch.device, ranks: Ranks, summed=None) -> tuple[float, torch.Tensor]:
    """One optimizer step at `step` on one training batch: the learning rate of the schedule, the loss, its
    gradient, clipping and AdamW. Returns (the loss, the gradient norm before clipping); TrainingDiverged when
    either is not finite. With several processes `summed` (the DDP-wrapped summed loss) takes this rank's rows."""
    for group in optimizer.param_groups:
        group["lr"] = cfg.lr_at(step)
    if summed is None:
        batch = tuple(t.to(device, non_blocking=True) for t in batch)
        with autocast_for(device, cfg.precision):
            loss = task_loss(forward, task, batch)
        loss_value = loss.item()
    else:  # this rank's rows; DDP averages the gradients, so scale to the gradient of the global mean
        rows = ranks.rows(cfg.batch_size)
        scale = ranks.size / scored_count(task, batch)
        with autocast_for(device, cfg.precision):
            loss = summed(*(t[rows].to(device, non_blocking=True) for t in batch)) * scale
        loss_value = ranks.sum(loss.detach() / ranks.size).item()
    if not math.isfinite(loss_value):
        raise TrainingDiverged(f"non-finite loss ({loss_value}) at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(
        [p for g in optimizer.param_groups for p in g["params"]], cfg.grad_clip or float("inf")
    )
    if not torch.isfinite(grad_norm):
        raise TrainingDiverged(f"non-finite gradient norm at step {step}")
    optimizer.step()
    return loss_value, grad_norm


def _eval_metrics(model, task, eval_batch: tuple[torch.Tensor, ...], cfg: TrainConfig) -> dict[str, float]:
    """What an evaluation step logs: held-out loss and accuracy, and the task's extras (perplexity for lm)."""
    labels = eval_batch[2] if task.objective == "classification" else None
    metrics = evaluate(model, eval_batch[0], eval_batch[1], task.metric, cfg.eval_batch_size, labels, cfg.precision)
    metrics.update(task.extra_eval_metrics(metrics["eval_loss"]))
    return metrics


def _progress_line(cfg: TrainConfig, record: dict[str, Any]) -> str:
    """The line printed above the progress bar at an evaluation step."""
    ppl = f" eval_ppl {record['eval_perplexity']:.2f}" if "eval_perplexity" in record else ""
    return (f"[{cfg.variant}/{cfg.task}] step {record['step']}/{cfg.steps} loss {record['loss']:.4f} "
            f"eval_loss {record['eval_loss']:.4f}{ppl} eval_acc {record['eval_acc']:.3f} "
            f"{record['tokens_per_s']:,.0f} tok/s")


def _train(cfg: TrainConfig, out: Path, resume: bool, progress: bool, argv: list[str] | None,
           tracker: str | None, device: torch.device, ranks: Ranks) -> dict[str, Any]:
    """The body of `train`, run while holding the run directory's lock (rank 0)."""
    ckpt = out / CHECKPOINT_DIR
    if ranks.main:
        if resume:
            recover_directory(ckpt)  # a kill in the middle of swapping a checkpoint in left it beside its place
        remove_leftovers(ckpt)  # temporary copies of killed saves
        if resolve_precision(cfg.precision, device) == "bf16" and device.type == "cpu" and not cpu_has_bf16():
            warnings.warn("precision='bf16' on a CPU without native bf16 (avx512_bf16 or AMX): emulated, "
                          "likely slower than fp32", stacklevel=2)
        task = cfg.build_task(out.parent / DATA_CACHE_DIR)
    ranks.barrier()  # the checkpoint is in place and a text task's token cache is written
    if not ranks.main:
        task = cfg.build_task(out.parent / DATA_CACHE_DIR)
    model_cfg = cfg.model_config(task)
    if resume and (out / RUN_FILE).is_file():
        saved = read_json(out / RUN_FILE)["task"].get("data_fingerprint")
        if saved is not None and saved != task.data_fingerprint:
            raise ValueError(f"{out / RUN_FILE}: cannot resume: the task's data (corpus or tokenizer) changed since the run began")
    model = build_model(model_cfg).to(device)
    attach_tokenizer(model, task)  # saved with every checkpoint: to_str_tokens & co. speak the task's vocabulary
    optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, cfg.betas, device)
    stream = TrainStream(task, cfg.batch_size, seed=derive_seed(cfg.seed, "data"), eval_n=cfg.eval_samples)
    eval_batch = task.eval_set(cfg.eval_samples)

    step, elapsed_before, best_acc, window = _start_or_resume(cfg, out, resume, task, model, model_cfg, optimizer,
                                                              stream, argv, ranks)
    hold_frozen_slices(model, optimizer)  # frozen heads ("v@0.h1") keep the values just loaded through every step
    forward = torch.compile(model) if cfg.compile else model
    if ranks.size > 1:
        from torch.nn.parallel import DistributedDataParallel

        summed = DistributedDataParallel(SummedLoss(forward, task), **ddp_options(device))
    checkpoint_every = cfg.checkpoint_every or cfg.eval_every
    tokens_per_step = cfg.batch_size * task.seq_len
    counts = model.parameter_counts()

    kept = set(cfg.kept_steps())

    def keep_model(at_step: int) -> None:
        if ranks.main and at_step in kept:
            with atomic_directory(kept_checkpoint_dir(out, at_step)) as tmp:
                write_model_files(model, tmp)

    if step == 0:
        keep_model(0)

    def save_checkpoint(at_step: int, elapsed: float) -> None:
        with atomic_directory(ckpt) as tmp:
            write_model_files(model, tmp)
            # The training-loss window since the last log goes along, so that a resumed run logs the same loss.
            _save_trainer_state(tmp, at_step, optimizer, stream, {"elapsed_s": elapsed, "best_eval_acc": best_acc,
                                                                  "window_loss": window_loss, "window_n": window_n})
        if track is not None:  # what was logged up to this checkpoint survives a kill after it
            track.flush()

    track = open_tracker(tracker, out, cfg.to_dict(), step) if ranks.main else None

    def log(record: dict[str, Any]) -> None:
        if not ranks.main:
            return
        append_metrics(out, record)
        if track is not None:
            track.log(record)

    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc=f"{cfg.variant}/{cfg.task}",
               dynamic_ncols=True, leave=False, mininterval=0.5 if sys.stderr.isatty() else 30.0)
    model.train()
    t_start = time.perf_counter()
    train_time, train_tokens, last, last_acc = 0.0, 0, {}, float("nan")
    window_loss, window_n = window  # the training loss summed over the steps since the last log
    try:
        while step < cfg.steps:
            t0 = time.perf_counter()
            loss_value, grad_norm = _train_step(cfg, task, stream.next(), step, optimizer, forward, device, ranks,
                                                summed if ranks.size > 1 else None)
            step += 1
            if device.type == "cuda" and step % cfg.log_every == 0:
                torch.cuda.synchronize()
            train_time += time.perf_counter() - t0
            train_tokens += tokens_per_step
            window_loss += loss_value
            window_n += 1

            is_eval = (step % cfg.eval_every == 0 or step == cfg.steps) and ranks.main
            if ranks.main and (step % cfg.log_every == 0 or is_eval):
                elapsed = elapsed_before + time.perf_counter() - t_start
                record = {
                    "step": step,
                    "loss": window_loss / window_n,
                    "lr": cfg.lr_at(step - 1),
                    "grad_norm": float(grad_norm),
                    "tokens_per_s": train_tokens / max(train_time, 1e-9),
                    "elapsed_s": elapsed,
                }
                window_loss, window_n = 0.0, 0
                if is_eval:
                    record.update(_eval_metrics(model, task, eval_batch, cfg))
                    best_acc = max(best_acc or 0.0, record["eval_acc"])
                    last_acc = record["eval_acc"]
                    if progress:
                        bar.write(_progress_line(cfg, record))
                log(record)
                last = record
                bar.set_postfix(loss=f"{record['loss']:.3f}", eval_acc=f"{last_acc:.3f}")
            keep_model(step)
            if ranks.main and (step % checkpoint_every == 0 or step == cfg.steps):
                save_checkpoint(step, elapsed_before + time.perf_counter() - t_start)
            bar.update(1)
    except TrainingDiverged as e:
        bar.close()
        if track is not None:
            track.close()
        kept = "no checkpoint was written yet"
        if (ckpt / STATE_JSON).is_file():
            kept = f"last good checkpoint (step {read_json(ckpt / STATE_JSON)['step']}) kept in {ckpt}"
        summary = {"status": "diverged", "message": f"{e}; {kept}", "step": step, **_summary_base(cfg, counts)}
        if ranks.main:
            write_json(out / SUMMARY_FILE, summary)
        raise TrainingDiverged(f"{out}: {e}; {kept}") from None
    bar.close()
    summary = {
        "status": "finished",
        "step": step,
        **_summary_base(cfg, counts),
        "loss": last.get("loss"),
        "eval_loss": last.get("eval_loss"),
        "eval_acc": last.get("eval_acc"),
        **{k: v for k, v in last.items() if k.startswith("eval_") and k not in ("eval_loss", "eval_acc")},
        "best_eval_acc": best_acc,
        "tokens_per_s": train_tokens / max(train_time, 1e-9) if train_tokens else None,
        "elapsed_s": elapsed_before + time.perf_counter() - t_start,
        "device": str(device),
        "precision": resolve_precision(cfg.precision, device),
        "processes": ranks.size,
    }
    if ranks.main:
        write_json(out / SUMMARY_FILE, summary)
    if track is not None:
        track.close()
    return summary


def _summary_base(cfg: TrainConfig, counts: dict[str, int]) -> dict[str, Any]:
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
