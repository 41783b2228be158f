"""Each finding across the learning-rate grid, and the learning rate each variant of a verdict was measured at.

    from mixit_lab.reproduce.grid import across_the_grid, measured_at
    grid = across_the_grid(tuning_runs("runs/quick"), "runs/quick")   # finding id -> {lr: verdict}
    grid_text(grid[3])    # "holds at none of 0.0003, 0.001, 0.003, 0.01 (fails at every one)"

A verdict is read at each variant's chosen learning rate (mixit_lab.reproduce.tuning). Whether it is a statement about the
architecture or about that choice shows on the grid: the same finding judged with every variant at one shared
learning rate, for each rate the grid tried, on the tuning seeds' runs of the record (mixit_lab.analysis.runs.tuning_runs;
one seed each, so each comparison is a point, said so). The signal and speed tables do not depend on a learning
rate and are the runs folder's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from .tables import tables_with_sources
from .verdicts import check_findings

SHORT = {"holds": "holds", "agrees": "fails", "reproduction_failure": "fails", "no_reference": "fails",
         "inconclusive": "undecided", "not_measured": "not measured"}


def _lr(x: float) -> str:
    return f"{x:g}"


def across_the_grid(grid_runs: pd.DataFrame, runs_dir: str | Path | None) -> dict[int, dict[float, str]]:
    """Per finding id, per learning rate of the grid: "holds", "fails", "undecided" or "not measured", judged on the
    record's runs with every variant at that rate ({} without a record)."""
    if grid_runs.empty:
        return {}
    done = grid_runs[grid_runs["status"] == "finished"]
    out: dict[int, dict[float, str]] = {}
    for lr in sorted({round(float(x), 12) for x in done["lr"]}):
        at = done[(done["lr"] - lr).abs() <= 1e-9 * lr].assign(selected=True)
        tables, _ = tables_with_sources(at, runs_dir, fallback=False)  # a study that tried no such rate: not read
        for finding in check_findings(tables):
            out.setdefault(finding["id"], {})[lr] = SHORT[finding["verdict"]]
    return out


def grid_text(verdicts: dict[float, str]) -> str:
    """One finding across the grid in words: where it holds and where not, at the tuning seed."""
    measured = {lr: v for lr, v in verdicts.items() if v != "not measured"}
    if not measured:
        return "not measured on the learning-rate grid"
    holds = [lr for lr, v in measured.items() if v == "holds"]
    others = {v: [lr for lr, w in measured.items() if w == v] for v in ("fails", "undecided")}
    listed = ", ".join(_lr(lr) for lr in measured)
    if len(holds) == len(measured):
        return f"holds at every learning rate of the grid ({listed})"
    if not holds:
        what = "fails at every one" if len(others["fails"]) == len(measured) else \
            "; ".join(f"{v} at {', '.join(map(_lr, lrs))}" for v, lrs in others.items() if lrs)
        return f"holds at none of the grid's learning rates ({listed}: {what})"
    rest = "; ".join(f"{v} at {', '.join(map(_lr, lrs))}" for v, lrs in others.items() if lrs)
    return f"holds at {', '.join(map(_lr, holds))} of the grid ({rest})"


def measured_at(finding: dict[str, Any], runs: pd.DataFrame) -> str:
    """The learning rate (and schedule, where not ours) of each variant whose runs the finding read, per task:
    'retrieval(pairs=8): standard 0.003, mixit 0.01; k-hop: ...' ('' when it read no runs)."""
    read = runs[runs["run"].isin(finding.get("runs") or [])]
    if read.empty:
        return ""
    parts = []
    for task, rows in read.groupby("task_label", sort=False):
        per_variant = []
        for variant, group in rows.groupby("variant", sort=False):
            lrs = sorted({_lr(float(x)) for x in group["lr"]})
            schedule = {s for s in group.get("schedule", pd.Series(dtype=str)).dropna() if s != "ours"}
            per_variant.append(f"{variant} {'/'.join(lrs)}" + (f" ({', '.join(sorted(schedule))} schedule)"
                                                              if schedule else ""))
        parts.append(f"{task}: {', '.join(per_variant)}")
    return "; ".join(parts)
