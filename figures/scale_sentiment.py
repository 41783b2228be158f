"""Finding 3 on sentiment as the scale preset moves the classifier toward the authors': accuracy against size.

Runs: the finished sentiment runs of group scale (reproduce/presets/scale.yaml) on the labelled sentences (the
SST-2 studies, scale-sst2..., are a table of their own: mixit_lab.reproduce.emergence). x: the classifier's size,
width, depth and heads together (the quick preset's width 64 with 2 layers and 4 heads, then toward the
authors' 4 layers of width 1,024 and MixiT's 16 heads), in order of width, then depth, then heads. Per
variant, the mean over seeds; error bars span the seeds' min..max. The paper's accuracies (Yelp reviews,
the authors' size) are dotted lines in the variant's colour.

    python -m mixit_lab.figures.scale_sentiment RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

from matplotlib.figure import Figure

from mixit_lab.analysis.runs import RunSet

from .common import as_runs, legend_above, spread_note
from .scale_common import GROUPS, PAPER_SENTIMENT, draw_against, draw_paper, scale_runs, title, with_accuracy
from .style import COLUMN_WIDTH, new_figure, paper_style

NAME = "scale_sentiment"
GROUPS = GROUPS  # the study groups it draws (mixit_lab.training.rundir.group_of): "scale"
AXES = ("d_model", "n_layers", "n_heads")


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = with_accuracy(scale_runs(as_runs(runs), "sentiment", AXES, "sentiment"))
    sizes = [tuple(int(v) for v in size) for size in zip(runs["d_model"], runs["n_layers"], runs["n_heads"])]
    points = sorted(set(sizes))
    runs = runs.assign(point=[points.index(size) for size in sizes])
    with paper_style():
        fig = new_figure(COLUMN_WIDTH, 2.4)
        ax = fig.add_subplot()
        draw_against(ax, runs, "point")
        draw_paper(ax, PAPER_SENTIMENT, runs["variant"])
        ax.axhline(50, color="#999999", linewidth=0.6, linestyle=":", zorder=0)  # chance: two balanced classes
        ax.set_xticks(range(len(points)), [f"{w:,}\n{n} L\n{h} h" for w, n, h in points], fontsize="small")
        ax.set_xlim(-0.4, len(points) - 0.6)
        ax.set_xlabel("width, layers (L), heads (h); the quick preset at left")
        ax.set_ylabel("eval accuracy (%)")
        ax.set_ylim(min(40.0, float(runs["value"].min()) - 3), 100)
        title(ax, "dotted: the paper (Yelp reviews, 4 layers, width 1,024)",
              spread_note(runs.groupby(["variant", "point"]).size()))
        legend_above(fig)
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
