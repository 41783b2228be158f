"""Training dynamics: how the strongest heads form over training, next to the training loss.

Runs: every finished run with RUN/analysis_dynamics.csv (`mixit train --keep-checkpoints N`, then
`mixit analyze RUN --checkpoints`). Left: per run, the top task-aligned induction score (k-hop runs;
else the top induction score on repeated sequences) and, dashed, the top previous-token score against
training step. Right: the training loss of the same runs. One line per run, coloured by variant; the
step axis is logarithmic past step 1, as the checkpoints are.

    python -m mixit_lab.figures.dynamics RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import read_metrics, records
from mixit_lab.training.run import RecordedRun, Run
from mixit_lab.training.rundir import DYNAMICS_FILE

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, finished_runs, legend_above, plain_log_ticks
from .style import COLUMN_WIDTH, new_figure, order_variants, paper_style, variant_style

NAME = "dynamics"
GROUPS = ("khop", "retrieval")  # where heads form; it draws any run that kept checkpoints


def dynamics_tables(runs: pd.DataFrame) -> list[tuple[pd.Series, pd.DataFrame]]:
    """(run row, its analysis_dynamics.csv) for every run that has one."""
    found = []
    for run, record in zip(runs.itertuples(index=False), records(runs)):
        table = _dynamics(record)
        if table is not None:
            found.append((pd.Series(run._asdict()), table))
    return found


def _dynamics(record: Run | RecordedRun) -> pd.DataFrame | None:
    """The run's analysis_dynamics.csv, read once (None for a run without one, or a record without a directory)."""
    if not isinstance(record, Run):
        return None
    path = record.path / DYNAMICS_FILE
    return record.memo(DYNAMICS_FILE, lambda: pd.read_csv(path) if path.is_file() else None)


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    tables = dynamics_tables(finished_runs(as_runs(runs)))
    if not tables:
        raise NoData(f"no run has {DYNAMICS_FILE} (train with --keep-checkpoints N, then mixit analyze RUN --checkpoints)")
    aligned = any(t["task_induction"].notna().any() for _, t in tables)
    score = "task_induction" if aligned else "top_induction"
    with paper_style():
        fig = new_figure(COLUMN_WIDTH * 2, 2.3)
        heads, losses = fig.subplots(1, 2)
        seen = set()
        order = order_variants(run["variant"] for run, _ in tables)
        for run, table in sorted(tables, key=lambda rt: order.index(rt[0]["variant"])):
            style = variant_style(run["variant"])
            label = style.label if run["variant"] not in seen else None
            seen.add(run["variant"])
            steps = table["step"].clip(lower=0.5)  # step 0 (the initialization) sits left of step 1
            heads.plot(steps, table[score], color=style.color, marker="o", markersize=2, label=label)
            heads.plot(steps, table["top_previous_token"], color=style.color, linestyle="--", linewidth=0.8)
            metrics = read_metrics(run["record"])
            if "loss" in metrics:
                losses.plot(metrics["step"], metrics["loss"], color=style.color, linewidth=0.8)
        heads.set_xscale("log")
        plain_log_ticks(heads)
        heads.set_xlabel("training step (0 drawn at 0.5)")
        heads.set_ylabel("top head score")
        heads.set_ylim(0, 1)
        what = "task-aligned induction" if aligned else "induction on [r, r]"
        heads.set_title(f"solid: {what}; dashed: previous token", loc="right", fontsize=6, color="#555555")
        losses.set_xscale("log")
        plain_log_ticks(losses)
        losses.set_xlabel("training step")
        losses.set_ylabel("training loss (nats)")
        legend_above(fig, ncol=min(4, len(seen)))
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
