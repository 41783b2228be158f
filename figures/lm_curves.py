"""Language modeling: validation loss (log perplexity, nats per token) against training step, per variant.

Runs: group lm (else every finished lm run). The curve is metrics.jsonl's eval_loss; per variant,
the configuration with the lowest final eval_loss, averaged over its seeds (shaded: min..max).
The right axis reads the same curve as perplexity.

    python -m mixit_lab.figures.lm_curves RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mixit_lab.analysis.runs import read_metrics, records

from mixit_lab.analysis.runs import RunSet

from .common import (NoData, as_runs, best_config, config_text, finished_runs, legend_above, select_runs,
                     variants_in)
from .style import COLUMN_WIDTH, new_figure, paper_style, variant_style

NAME = "lm_curves"
GROUPS = ("lm",)  # the study groups it draws (mixit_lab.training.rundir.group_of)


def eval_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table: variant, run, step, eval_loss (eval lines of each run's metrics.jsonl)."""
    frames = []
    for run, record in zip(runs.itertuples(), records(runs)):
        m = read_metrics(record)
        if "eval_loss" in m:
            m = m[m["eval_loss"].notna()]
            frames.append(pd.DataFrame({"variant": run.variant, "run": run.run, "step": m["step"],
                                        "eval_loss": m["eval_loss"]}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["variant", "run", "step", "eval_loss"])


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = select_runs(runs, GROUPS, fallback=lambda r: r["task"] == "lm", what="language-modeling runs")
    runs = best_config(runs[runs["task"] == "lm"], ["variant"], "eval_loss", higher_is_better=False)
    curves = eval_curves(runs)
    if curves.empty:
        raise NoData("the lm runs have no eval_loss in metrics.jsonl")
    stats = curves.groupby(["variant", "step"])["eval_loss"].agg(["mean", "min", "max", "count"]).reset_index()

    with paper_style():
        fig = new_figure(COLUMN_WIDTH, 2.3)
        ax = fig.add_subplot()
        for v in variants_in(stats):
            s = variant_style(v)
            d = stats[stats["variant"] == v].sort_values("step")
            ax.plot(d["step"], d["mean"], color=s.color, label=s.label)
            if (d["count"] > 1).any():
                ax.fill_between(d["step"], d["min"], d["max"], color=s.color, alpha=0.2, linewidth=0)
        ax.set_xlabel("training step")
        ax.set_ylabel("validation loss (nats/token)")
        ax.set_xlim(left=0)
        lo, hi = float(stats["min"].min()), float(stats["max"].max())
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        ppl = ax.secondary_yaxis("right", functions=(np.exp, lambda p: np.log(np.maximum(p, 1e-300))))
        ppl.set_ylabel("perplexity")
        ax.spines["right"].set_visible(False)
        legend_above(fig, ncol=min(4, stats["variant"].nunique()))
        first = runs.iloc[0]
        note = config_text(first)
        if curves.groupby("variant")["run"].nunique().max() > 1:
            note += "; shaded: min–max over seeds"
        ax.set_title(note, loc="right", fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
