"""How heads form during training: head scores of every checkpoint a run kept (`mixit train --keep-checkpoints N`).

For each kept step: the strongest induction and previous-token heads on repeated random sequences
[r, r] (mixit_lab.analysis.heads.head_scores), the in-context loss drop, the strongest task-aligned induction
head on the task's own inputs when the task defines answer sources (k-hop), the training loss
logged nearest to that step (within one logging interval) and the eval loss if it was evaluated there. `mixit analyze RUN --checkpoints` writes the table to
RUN/analysis_dynamics.csv; the `dynamics` figure plots it next to the loss curve.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from mixit_lab.models import load_model
from mixit_lab.training import TrainConfig, run_task
from mixit_lab.training.rundir import kept_checkpoints, read_metric_records, read_run_info

from .heads import head_scores, task_induction_scores

COLUMNS = ["step", "top_induction", "top_induction_head", "top_previous_token", "top_previous_token_head",
           "in_context_drop", "task_induction", "task_induction_head", "loss", "eval_loss"]


def _top(table: pd.DataFrame, column: str) -> tuple[float, str]:
    row = table.loc[table[column].idxmax()]
    return float(row[column]), f"L{int(row['layer'])}H{int(row['head'])}"


def checkpoint_dynamics(run_dir: str | Path, n_seqs: int = 32, seq_len: int = 32, seed: int = 0,
                        device: str = "cpu") -> pd.DataFrame:
    """One row per kept checkpoint of the run (columns COLUMNS, by step); empty if it kept none.

    seq_len is capped at half the model's context, as in `mixit analyze`.
    """
    run_dir = Path(run_dir)
    kept = kept_checkpoints(run_dir)
    if not kept:
        return pd.DataFrame(columns=COLUMNS)
    info = read_run_info(run_dir)
    cfg = TrainConfig.from_dict(info["train"])
    task = run_task(run_dir, info)
    aligned_inputs = task.eval_set(min(n_seqs, task.default_eval_size))[0] if hasattr(task, "answer_sources") else None
    rows = []
    for step, path in kept:
        model = load_model(path, device=device)
        length = min(seq_len, model.cfg.n_ctx // 2)
        with torch.no_grad():
            heads = head_scores(model, n_seqs=n_seqs, seq_len=length, seed=seed)
        row = {"step": step, "in_context_drop": heads.in_context_drop}
        row["top_induction"], row["top_induction_head"] = _top(heads.table, "induction")
        row["top_previous_token"], row["top_previous_token_head"] = _top(heads.table, "previous_token")
        if aligned_inputs is not None:
            aligned = task_induction_scores(model, task, aligned_inputs)
            row["task_induction"], row["task_induction_head"] = _top(aligned.table, "score")
        rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    metrics = pd.DataFrame(read_metric_records(run_dir))
    # the training loss logged nearest to each kept step (within one logging interval); eval loss where evaluated
    for column, within in (("loss", cfg.log_every), ("eval_loss", 0)):
        if column in metrics:
            logged = metrics.dropna(subset=[column])[["step", column]].sort_values("step")
            if len(logged):
                near = pd.merge_asof(table[["step"]].astype("int64"), logged.astype({"step": "int64"}),
                                     on="step", direction="nearest", tolerance=within)
                table[column] = near[column].to_numpy()
    return table
