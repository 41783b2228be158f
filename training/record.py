"""A run directory's record, without its model: run.json (typed), summary.json (status, metrics, message) and,
when asked for, analysis/analysis.json. What tables, figures and the report read; mixit_lab.training.run loads the model
and rebuilds the task. It imports neither torch nor a task.

    from mixit_lab.training.record import read_run_record
    record = read_run_record("checkpoints/khop1-standard")
    record.train.steps, record.task.params, record.status, record.metrics["eval_acc"], record.message
    record.analysis()                        # analysis/analysis.json, read when asked for (None if absent)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixit_lab.models.config import ModelConfig
from mixit_lab.models.files import read_json

from .config import TrainConfig
from .rundir import ANALYSIS_DIR, ANALYSIS_FILE, SUMMARY_FILE, read_run_info, unfinished_status
from .runinfo import Provenance, RunInfo, TaskInfo

__all__ = ["RunRecord", "SUMMARY_METRICS", "analysis_summary", "judged_by_loss", "read_analysis", "read_run_record"]

# summary.json's numbers about how training went (the rest describe the run, as run.json does)
SUMMARY_METRICS = ("step", "eval_acc", "best_eval_acc", "eval_loss", "tune_acc", "tune_loss", "loss", "tokens_per_s",
                   "elapsed_s", "params_trainable", "params_frozen", "params_total", "precision")


@dataclass(frozen=True, eq=False)
class RunRecord:
    """One run directory without its model: run.json (`info`, typed) and summary.json (`summary`; None while the
    run trains or after a kill), with the train config typed; its analysis is read only when asked for."""

    path: Path  # the run directory
    info: RunInfo
    train: TrainConfig
    summary: dict[str, Any] | None

    @property
    def task(self) -> TaskInfo:
        return self.info.task

    @property
    def model_config(self) -> ModelConfig | None:
        return self.info.model

    @property
    def provenance(self) -> Provenance:
        return self.info.provenance

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
    def metrics(self) -> dict[str, Any]:
        """summary.json's numbers (SUMMARY_METRICS; None where absent): empty while the run trains."""
        return {} if self.summary is None else {k: self.summary.get(k) for k in SUMMARY_METRICS}

    @property
    def headline(self) -> str | None:
        """The summary value the finished run is judged by ("eval_acc" or "eval_loss"), as summary.json records it;
        None before it finished, and in summaries written before it was recorded (judged_by_loss then asks the task)."""
        return None if self.summary is None else self.summary.get("headline")

    @functools.cached_property
    def _analysis(self) -> dict[str, Any] | None:
        return read_analysis(self.path)

    def analysis(self) -> dict[str, Any] | None:
        """analysis/analysis.json (`mixit analyze`), read on the first call; None if absent or unreadable."""
        return self._analysis

    def analysis_summary(self, name: str) -> dict[str, Any] | None:
        """One analysis's summary in analysis.json (e.g. "memory": the memorization result), or None."""
        return analysis_summary(self.analysis(), name)


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


def read_run_record(run_dir: str | Path) -> RunRecord:
    """The run directory's run.json and summary.json as a RunRecord; ValueError naming the file that is damaged
    (a train section TrainConfig refuses is named as run.json's)."""
    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    try:
        train = TrainConfig.from_dict(dict(info.train))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{info.path}: train: {e}") from None
    summary_path = run_dir / SUMMARY_FILE
    try:
        summary = read_json(summary_path) if summary_path.is_file() else None
    except (OSError, ValueError) as e:
        reason = str(e).removeprefix(f"{summary_path}: ")
        raise ValueError(f"{summary_path}: cannot read run summary ({type(e).__name__}: {reason})") from None
    return RunRecord(path=run_dir, info=info, train=train, summary=summary)


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
