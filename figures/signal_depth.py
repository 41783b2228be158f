"""Signal propagation at initialization: token covariance and cosine after the last layer against depth.

Data: RUNS_DIR/signal/signal.csv (analysis.signal.signal_propagation: one row per variant, width,
depth and layer). For each variant, the row of the last layer (layer == depth) at each depth, at
the largest width in the file; shaded: ± one standard deviation over seeds. Covariance is on a log
axis (symmetric-log if some value is not positive, e.g. shaped attention's near-zero covariance).
Variants that are the same network at initialization (standard, frozen_qk, frozen_mlp, random
share their weights) give identical curves; they are drawn once, named together.

    python -m figures.signal_depth RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from training import rundir

from .common import NoData, legend_above, value_ticks
from .style import DOUBLE_WIDTH, new_figure, order_variants, paper_style, variant_label, variant_style

NAME = "signal_depth"
GROUPS = ()  # draws RUNS_DIR/signal/signal.csv, not runs
SIGNAL_FILE = Path(rundir.SIGNAL_FILE)
REQUIRED = {"variant", "d_model", "depth", "layer", "cosine", "covariance"}


def read_signal(runs_dir: Path) -> pd.DataFrame:
    """Last-layer rows of RUNS_DIR/signal/signal.csv at the largest width; NoData if missing or malformed."""
    path = Path(runs_dir) / SIGNAL_FILE
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise NoData(f"no {SIGNAL_FILE.as_posix()} in {runs_dir}") from None
    except (OSError, ValueError) as e:
        raise NoData(f"{path} is unreadable ({e})") from None
    missing = REQUIRED - set(df.columns)
    if missing:
        raise NoData(f"{path} lacks the columns {sorted(missing)}")
    df = df[(df["layer"] == df["depth"]) & (df["d_model"] == df["d_model"].max())]
    if df.empty:
        raise NoData(f"{path} has no last-layer rows")
    return df


def merge_identical(df: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """(variant drawn, all variants with the same curve), in VARIANT_ORDER."""
    groups: list[tuple[str, list[str], np.ndarray]] = []
    for v in order_variants(df["variant"]):
        curve = df[df["variant"] == v].sort_values("depth")[["depth", "cosine", "covariance"]].to_numpy(float)
        for _, members, ref in groups:
            if ref.shape == curve.shape and np.allclose(ref, curve, rtol=1e-9, atol=0):
                members.append(v)
                break
        else:
            groups.append((v, [v], curve))
    return [(v, members) for v, members, _ in groups]


def plot(runs_dir: Path) -> Figure:
    df = read_signal(runs_dir)
    width = int(df["d_model"].iloc[0])
    depths = sorted(df["depth"].unique())
    panels = [("covariance", "token covariance"), ("cosine", "token cosine similarity")]

    with paper_style():
        fig = new_figure(DOUBLE_WIDTH, 2.2)
        axes = fig.subplots(1, 2)
        for ax, (column, ylabel) in zip(axes, panels):
            for v, members in merge_identical(df):
                s = variant_style(v)
                d = df[df["variant"] == v].sort_values("depth")
                label = " = ".join(variant_label(m) for m in members)
                ax.plot(d["depth"], d[column], color=s.color, marker=s.marker, label=label,
                        markeredgecolor="white", markeredgewidth=0.4)
                std = f"{column}_std"
                if std in d and (d.get("n_seeds", pd.Series([1])) > 1).any():
                    ax.fill_between(d["depth"], d[column] - d[std], d[column] + d[std], color=s.color, alpha=0.2,
                                    linewidth=0)
            value_ticks(ax, depths, log=len(depths) > 2 and depths[-1] / depths[0] >= 8)
            ax.set_xlabel("depth (layers)")
            ax.set_ylabel(ylabel)
            if column == "covariance":
                values = df[column].to_numpy(float)
                if (values > 0).all():
                    ax.set_yscale("log")
                else:
                    positive = np.abs(values[values != 0])
                    ax.set_yscale("symlog", linthresh=float(positive.min()) if positive.size else 1e-6)
                ax.margins(y=0.08)
        legend_above(fig)
        n_seeds = int(df["n_seeds"].max()) if "n_seeds" in df else 1
        note = f"after the last layer, at initialization, d_model {width}"
        if n_seeds > 1:
            note += f"; shaded: ±1 s.d. over {n_seeds} seeds"
        axes[1].set_title(note, loc="right", fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
