"""One run directory, opened: `Run` reads each of its files on first use and once (run.json, summary.json,
metrics.jsonl, analysis/analysis.json, the checkpoint); `load_run` opens one with its model and task loaded now.

    from mixit_lab.training import load_run
    run = load_run("checkpoints/khop1-standard")
    run.model, run.task, run.train_config, run.summary["eval_acc"], run.metrics[-1]
    tokens, mask = run.task.eval_set(8)
    run.model.to_str_tokens(tokens[0])      # the task's token strings

    from mixit_lab.training.run import Run
    run = Run("runs/quick/algorithmic/addition__standard__d64_l2_h4__lr0.001__s0")   # nothing read yet
    run.status, run.scores["eval_acc"], run.analysis_summary("memory")           # each file read once

Opening a run imports no torch and no task: the task is rebuilt (mixit_lab.training.rebuild.run_task) and the model
loaded only when asked for. `RecordedRun` is a run known only by its record (a tuning record's entry, the authors'
code's result): it answers the same questions from what was recorded, so a table reads both alike.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from mixit_lab.models.checkpoint import WEIGHTS_FILE
from mixit_lab.models.config import ModelConfig
from mixit_lab.models.files import read_json

from .config import TrainConfig
from .rundir import (
    ANALYSIS_DIR, ANALYSIS_FILE, CHECKPOINT_DIR, SUMMARY_FILE, find_checkpoint, read_metric_records, read_run_info,
    unfinished_status,
)
from .runinfo import Provenance, RunInfo, TaskInfo

if TYPE_CHECKING:
    from mixit_lab.models.transformer import Transformer

    from .tasks import Task

__all__ = ["RecordedRun", "Run", "SUMMARY_METRICS", "analysis_summary", "judged_by_loss", "load_run", "read_analysis"]

# summary.json's numbers about how training went (the rest describe the run, as run.json does)
SUMMARY_METRICS = ("step", "eval_acc", "best_eval_acc", "eval_loss", "tune_acc", "tune_loss", "loss", "tokens_per_s",
                   "elapsed_s", "params_trainable", "params_frozen", "params_total", "precision")


class Run:
    """One run directory. Every attribute reads its file on first use and keeps what it read: a table, a figure
    and the report that share a Run read each file once. Two Runs of one directory are equal."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._memo: dict[Any, Any] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and self.path == other.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_memo": {}}  # what was read stays in this process (RunInfo holds mappingproxies)

    # ------------------------------------------------------------------ run.json
    @functools.cached_property
    def info(self) -> RunInfo:
        """run.json, typed (mixit_lab.training.rundir.read_run_info): ValueError naming the file if it is damaged."""
        return read_run_info(self.path)

    @property
    def train_config(self) -> TrainConfig:
        return self.info.train

    @property
    def task_info(self) -> TaskInfo:
        """run.json's task section: name, every parameter resolved, import path, fingerprints."""
        return self.info.task

    @property
    def provenance(self) -> Provenance:
        return self.info.provenance

    @functools.cached_property
    def model_config(self) -> ModelConfig | None:
        """The model's config as run.json records it (the checkpoint's own once the model is loaded)."""
        return self.info.model

    # ------------------------------------------------------------------ summary.json and metrics.jsonl
    @functools.cached_property
    def summary(self) -> dict[str, Any] | None:
        """summary.json; None while the run trains (or after a kill). ValueError naming the file if it is damaged."""
        path = self.path / SUMMARY_FILE
        try:
            return read_json(path) if path.is_file() else None
        except (OSError, ValueError) as e:
            reason = str(e).removeprefix(f"{path}: ")
            raise ValueError(f"{path}: cannot read run summary ({type(e).__name__}: {reason})") from None

    @property
    def status(self) -> str:
        """finished | diverged | error | ... as summary.json says; without a summary "running" while a process holds
        the run's lock, else "interrupted" (killed, or stopped by a signal: `--resume` continues it)."""
        return unfinished_status(self.path) if self.summary is None else str(self.summary.get("status", "finished"))

    @property
    def message(self) -> str | None:
        """Why a run did not finish (summary.json's message: a diverged run's step and kept checkpoint, an error)."""
        return None if self.summary is None else self.summary.get("message")

    @property
    def scores(self) -> dict[str, Any]:
        """summary.json's numbers (SUMMARY_METRICS; None where absent): empty while the run trains."""
        return {} if self.summary is None else {k: self.summary.get(k) for k in SUMMARY_METRICS}

    @property
    def headline(self) -> str | None:
        """The summary value the finished run is judged by ("eval_acc" or "eval_loss"), as summary.json records it;
        None before it finished, and in summaries written before it was recorded (judged_by_loss then asks the task)."""
        return None if self.summary is None else self.summary.get("headline")

    @functools.cached_property
    def metrics(self) -> list[dict[str, Any]]:
        """metrics.jsonl: one record per logged step (a line cut off by a kill is skipped)."""
        return read_metric_records(self.path)

    # ------------------------------------------------------------------ analysis/
    @property
    def has_checkpoint(self) -> bool:
        return (self.path / CHECKPOINT_DIR / WEIGHTS_FILE).is_file()

    @property
    def has_analysis(self) -> bool:
        return (self.path / ANALYSIS_DIR / ANALYSIS_FILE).is_file()

    def analysis(self) -> dict[str, Any] | None:
        """analysis/analysis.json (`mixit analyze`), read on the first call; None if absent or unreadable."""
        return self.memo(ANALYSIS_FILE, lambda: read_analysis(self.path))

    def analysis_summary(self, name: str) -> dict[str, Any] | None:
        """One analysis's summary in analysis.json (e.g. "memory": the memorization result), or None."""
        return analysis_summary(self.analysis(), name)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """What `compute` gives from this run's files, computed on the first call with `key` and kept: how a reader
        above this layer (an analysis table, a metrics frame) reads a file of the run once."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    # ------------------------------------------------------------------ the task and the model
    @functools.cached_property
    def task(self) -> Task:
        """The task, rebuilt from run.json and checked against it (mixit_lab.training.rebuild.run_task)."""
        from .rebuild import run_task

        return run_task(self.path, self.info)

    def held_out_items(self) -> int | None:
        """How many held-out items the run was scored on: its eval_samples, capped by its task's held-out set; None
        for a task built from a corpus (not rebuilt for this) or one that cannot be rebuilt here."""
        def count() -> int | None:
            from .rebuild import run_task, run_task_class

            try:
                if run_task_class(self.info).needs_corpus:
                    return None
                default = run_task(self.path, self.info, check=False).default_eval_size
            except (OSError, ValueError, TypeError):
                return None
            asked = self.train_config.eval_samples
            return default if asked is None else min(int(asked), default)

        return self.memo("held_out_items", count)

    @functools.cached_property
    def model(self) -> Transformer:
        """The latest checkpoint on the CPU, in eval mode, carrying its task's tokenizer (load_run for a device)."""
        return self._load_model("cpu")

    def _load_model(self, device: str | None) -> Transformer:
        from mixit_lab.models.transformer import load_model

        from .tasks import attach_tokenizer

        model = load_model(find_checkpoint(self.path).checkpoint, device=device)
        if model.tokenizer is None or self.task.text_tokenizer is None:
            attach_tokenizer(model, self.task)  # a checkpoint without one, or a task vocabulary: no BOS
        self.model_config = model.config
        return model


def load_run(path: str | Path, device: str | None = "cpu", task: bool = True) -> Run:
    """Open a run directory (from `mixit train` or `mixit_lab.training.train`) with its model loaded now.

    Args:
        path: the run directory (or its checkpoint/ folder).
        device: where the model goes ("cpu" by default; None keeps it where loading put it).
        task: rebuild the task now (False leaves it for `run.task`, e.g. for a text run whose corpus is elsewhere).

    The model carries its task's tokenizer (`model.to_str_tokens(tokens)` gives the task's token strings);
    a checkpoint written before checkpoints saved one gets it from the rebuilt task.

    Raises:
        FileNotFoundError: no run directory, or no checkpoint yet.
        ValueError: an unreadable run.json, a task that cannot be rebuilt (naming the run and the module).
    """
    ref = find_checkpoint(path)
    if ref.run_dir is None:
        raise ValueError(f"{path} is a bare checkpoint (no run.json): load it with mixit_lab.models.load_model")
    run = Run(ref.run_dir)
    run.info, run.summary  # noqa: B018  (read now: a damaged file is this call's error)
    if task:
        run.task  # noqa: B018
        run.model = run._load_model(device)
    else:
        from mixit_lab.models.transformer import load_model

        run.model = load_model(ref.checkpoint, device=device)
        run.model_config = run.model.config
    return run


@dataclass(frozen=True)
class RecordedRun:
    """A run known only by its record: a tuning record's entry (its directory may be gone) or the authors' code's
    result. It has no directory (`path` is None); what it recorded of its analyses answers as a Run's would."""

    name: str
    summaries: Mapping[str, Any] = field(default_factory=dict)  # analysis summaries by name ("memory", "heads")
    eval_items: int | None = None  # held-out items it was scored on, when recorded
    path: None = None

    def analysis(self) -> dict[str, Any] | None:
        return {"summary": dict(self.summaries)} if self.summaries else None

    def analysis_summary(self, name: str) -> dict[str, Any] | None:
        return analysis_summary(self.analysis(), name)

    def held_out_items(self) -> int | None:
        return self.eval_items


def read_analysis(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's analysis/analysis.json (from `mixit analyze`), or None if absent or unreadable."""
    try:
        return read_json(Path(run_dir) / ANALYSIS_DIR / ANALYSIS_FILE)
    except (OSError, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def analysis_summary(analysis: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """One analysis's summary (e.g. "memory") in an analysis.json's content, or None: the one place it is looked up."""
    found = ((analysis or {}).get("summary") or {}).get(name)
    return found if isinstance(found, dict) else None


def judged_by_loss(task: str, headline: str | None = None) -> bool:
    """Whether a run is judged by its validation loss rather than accuracy (its task's `headline` is "eval_loss":
    a language model). `headline` as the run's summary records it; where it records none (runs finished before
    it was recorded), the class of a built-in or registered task name says, which imports torch. A task named by
    its import path is never imported here: without a recorded headline it is judged by accuracy."""
    if headline is not None:
        return headline == "eval_loss"
    if not isinstance(task, str) or ":" in task:
        return False
    from .tasks import TASKS  # the task registry imports torch: only for runs that recorded no headline

    return getattr(TASKS.get(task), "headline", "eval_acc") == "eval_loss"
