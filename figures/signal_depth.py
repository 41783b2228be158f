"""Signal propagation at initialization: token covariance and cosine after the last layer against depth.

Data: RUNS_DIR/signal/signal.csv (mixit_lab.analysis.signal.signal_propagation: one row per variant, width,
depth and layer). For each variant, the row of the last layer (layer == depth) at each depth, at
the largest width in the file; shaded: ± one standard deviation over seeds. Covariance is on a log
axis (symmetric-log if some value is not positive, e.g. shaped attention's near-zero covariance: linear
up to the power of ten above the largest negative value, so that noise around zero does not get decades of
its own).
Variants that are the same network at initialization (standard, frozen_qk, frozen_mlp, random
share their weights) give identical curves; they are drawn once, named together.

    python -m mixit_lab.figures.signal_depth RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator

from mixit_lab.training import rundir

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, legend_above, value_ticks
from .style import DOUBLE_WIDTH, new_figure, order_variants, paper_style, variant_label, variant_style

NAME = "signal_depth"
GROUPS = ()  # draws RUNS_DIR/signal/signal.csv, not runs
SIGNAL_FILE = Path(rundir.SIGNAL_FILE)
REQUIRED = {"variant", "d_model", "depth", "layer", "cosine", "covariance"}
MAX_DECADE_TICKS = 5  # labelled powers of ten on a symmetric-log covariance axis


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


def symlog_threshold(values: np.ndarray) -> float:
    """The power of ten at or above every negative value's size, so that values indistinguishable from zero
    (e.g. MixiT without its sink head, ±1e-5) share the linear band around 0; without negatives, the power of
    ten at or below the smallest positive value."""
    negative = -values[values < 0]
    if negative.size:
        return float(10.0 ** np.ceil(np.log10(negative.max())))
    positive = values[values > 0]
    return float(10.0 ** np.floor(np.log10(positive.min()))) if positive.size else 1.0


def covariance_scale(ax: Axes, values: np.ndarray) -> None:
    """Log axis for positive covariances; else symmetric-log, linear within symlog_threshold, ticked at 0 and
    at most MAX_DECADE_TICKS powers of ten above it (none below: the threshold covers every negative value)."""
    values = values[np.isfinite(values)]
    if values.size and (values > 0).all():
        ax.set_yscale("log")
    else:
        threshold = symlog_threshold(values)
        ax.set_yscale("symlog", linthresh=threshold, linscale=0.5)
        top = int(np.ceil(np.log10(max(float(values.max(initial=0.0)), threshold))))
        decades = np.arange(int(round(np.log10(threshold))), top + 1)
        decades = decades[:: int(np.ceil(len(decades) / MAX_DECADE_TICKS))]
        ax.yaxis.set_major_locator(FixedLocator([0.0, *(10.0 ** decades)]))
    ax.margins(y=0.08)


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of the runs folder's signal.csv (`runs`, or that folder)."""
    df = read_signal(as_runs(runs).root)
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
            if column == "covariance":  # the shaded band's lower edge counts too: it can dip below zero
                low = df[column] - df.get(f"{column}_std", 0.0)
                covariance_scale(ax, np.concatenate([df[column].to_numpy(float), low.to_numpy(float)]))
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
