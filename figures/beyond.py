"""Beyond the paper: grid models (per-layer attention, frozen components) against the named variants.

Runs: the "beyond" group (reproduce/presets/beyond.yaml). One panel per task: a horizontal bar per model
(the mean over seeds of its final eval accuracy, or of its validation log-perplexity for language
modeling), with each seed as a dot. Named variants keep their colours; grid models are drawn in grey
shades with their full label, e.g. "mixit [attention mixing,softmax]".

    python -m mixit_lab.figures.beyond RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.figure import Figure

from mixit_lab.analysis.runs import by_loss
from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, finished_runs
from .style import COLUMN_WIDTH, new_figure, order_variants, paper_style, variant_style

NAME = "beyond"
GROUPS = ("beyond",)
GRID_GREYS = ("#4d4d4d", "#7f7f7f", "#a6a6a6", "#5f6f7f", "#8f7f6f", "#6f8f6f")


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = runs[runs["group"] == "beyond"]
    if runs.empty:
        raise NoData("no finished run in the 'beyond' group (mixit reproduce --preset beyond)")
    tasks = list(dict.fromkeys(runs["task_label"]))
    models = order_variants(runs["variant"])
    grid_models = [m for m in models if "[" in m]
    with paper_style():
        fig = new_figure(COLUMN_WIDTH * 2, 0.5 + 0.22 * len(models) * max(1, (len(tasks) + 1) // 2))
        axes = fig.subplots(max(1, (len(tasks) + 1) // 2), min(2, len(tasks)), squeeze=False).ravel()
        for ax in axes[len(tasks):]:
            ax.set_visible(False)
        for ax, task in zip(axes, tasks):
            mine = runs[runs["task_label"] == task]
            lm = bool(by_loss(mine).all())  # language modeling: its loss
            metric = "eval_loss" if lm else "eval_acc"
            present = [m for m in models if m in set(mine["variant"])]
            for y, model in enumerate(present):
                values = mine.loc[mine["variant"] == model, metric].astype(float) * (1 if lm else 100)
                if model in grid_models:
                    color = GRID_GREYS[grid_models.index(model) % len(GRID_GREYS)]
                else:
                    color = variant_style(model).color
                ax.barh(y, values.mean(), color=color, height=0.7)
                ax.plot(values, [y] * len(values), "o", color="black", markersize=2)
            ax.set_yticks(range(len(present)), [m if m in grid_models else variant_style(m).label for m in present])
            ax.invert_yaxis()
            ax.set_xlabel("validation log-perplexity (nats)" if lm else "eval accuracy (%)")
            if not lm:
                ax.set_xlim(0, 100)
            ax.set_title(task, loc="left")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
