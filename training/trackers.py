"""Experiment trackers: the records of metrics.jsonl also sent to TensorBoard or Weights & Biases.

    train(cfg, "checkpoints/run", tracker="tensorboard")   # event files in checkpoints/run/tensorboard/
    train(cfg, "checkpoints/run", tracker="wandb")         # offline unless WANDB_MODE=online

metrics.jsonl stays the source of truth (the explorer, figures and report read it); a tracker is a
copy for the tools researchers already watch. Every numeric field of a record is logged at its
`step`. A resumed run continues the same TensorBoard log (events after the resumed step are
dropped) and the same W&B run (its id is derived from the run directory).
"""

from __future__ import annotations

import hashlib
import os
import math
from pathlib import Path
from typing import Any, Protocol

from .rundir import TENSORBOARD_DIR

TRACKERS = ("none", "tensorboard", "wandb")


class Tracker(Protocol):
    def log(self, record: dict[str, Any]) -> None: ...

    def flush(self) -> None:
        """Put what was logged on disk: called with each checkpoint, so that a run killed after it and
        resumed from it loses no logged step (the resumed run logs only the steps after it)."""

    def close(self) -> None: ...


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class TensorBoardTracker:
    def __init__(self, run_dir: Path, first_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ValueError("tracker='tensorboard' needs the tensorboard package: "
                             "pip install 'mixit-lab[tracking]' (or pip install tensorboard)") from None
        # purge_step: on resume from the checkpoint of step `first_step`, events logged after it are discarded, as
        # metrics.jsonl drops them; those of that step itself were logged before the checkpoint and are kept.
        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR), purge_step=first_step + 1 if first_step else None)

    def log(self, record: dict[str, Any]) -> None:
        for key, value in _scalars(record).items():
            self.writer.add_scalar(key, value, record["step"])

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        try:
            import wandb
        except ImportError:
            raise ValueError("tracker='wandb' needs the wandb package: "
                             "pip install 'mixit-lab[tracking]' (or pip install wandb)") from None
        run_id = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:16]
        mode = wandb_mode()
        # dir=run_dir: W&B keeps its files (offline runs included) in RUN/wandb/.
        self.run = wandb.init(project="mixit-lab", name=run_dir.name, id=run_id, resume="allow", dir=str(run_dir),
                              config=config, mode=mode, reinit="finish_previous")

    def log(self, record: dict[str, Any]) -> None:
        self.run.log(_scalars(record), step=record["step"])

    def flush(self) -> None:
        pass  # W&B writes each record to its run files as it is logged

    def close(self) -> None:
        self.run.finish()


def wandb_mode() -> str:
    """W&B's mode for a run: "offline" (files in RUN/wandb/, `wandb sync` uploads them later) unless the user
    asked for another with WANDB_MODE (online, disabled, ...). Stored credentials alone never send anything:
    a run goes online only when asked."""
    return os.environ.get("WANDB_MODE", "").strip().lower() or "offline"


def check_tracker(kind: str | None) -> None:
    """ValueError (one line, naming what to install) unless tracker `kind` can be used here."""
    if kind in (None, "none"):
        return
    if kind not in TRACKERS:
        raise ValueError(f"tracker={kind!r} is not one of: {', '.join(TRACKERS)}")
    module = "torch.utils.tensorboard" if kind == "tensorboard" else "wandb"
    try:
        __import__(module)
    except ImportError:
        package = "tensorboard" if kind == "tensorboard" else "wandb"
        raise ValueError(f"tracker={kind!r} needs the {package} package: "
                         f"pip install 'mixit-lab[tracking]' (or pip install {package})") from None


def open_tracker(kind: str | None, run_dir: Path, config: dict[str, Any], first_step: int = 0) -> Tracker | None:
    """The tracker `kind` names for a run ("none" or None: no tracker); ValueError for an unknown kind or a
    missing package, naming what to install."""
    check_tracker(kind)
    if kind in (None, "none"):
        return None
    if kind == "tensorboard":
        return TensorBoardTracker(Path(run_dir), first_step)
    if kind == "wandb":
        return WandbTracker(Path(run_dir), config)
    raise ValueError(f"tracker={kind!r} is not one of: {', '.join(TRACKERS)}")
