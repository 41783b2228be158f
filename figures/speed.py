"""Training speed per variant: tokens/s of a training step (bars), labelled with the time per sample
relative to standard.

Data: RUNS_DIR/speed/speed.csv (mixit_lab.training.benchmark.measure_throughput). When the file holds several
settings (device, size), each gets its own panel.

    python -m mixit_lab.figures.speed RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from mixit_lab.training import rundir

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs
from .style import COLUMN_WIDTH, DOUBLE_WIDTH, new_figure, order_variants, paper_style, variant_label, variant_style

NAME = "speed"
GROUPS = ()  # draws RUNS_DIR/speed/speed.csv, not runs
SPEED_FILE = Path(rundir.SPEED_FILE)
SETTING = ["device", "d_model", "n_layers", "n_heads", "seq_len", "batch_size"]
REQUIRED = {"variant", "tokens_per_s", "relative_to_standard"}
MAX_PANELS = 3


def read_speed(runs_dir: Path) -> pd.DataFrame:
    """RUNS_DIR/speed/speed.csv; NoData if missing, malformed or empty."""
    path = Path(runs_dir) / SPEED_FILE
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise NoData(f"no {SPEED_FILE.as_posix()} in {runs_dir}") from None
    except (OSError, ValueError) as e:
        raise NoData(f"{path} is unreadable ({e})") from None
    missing = REQUIRED - set(df.columns)
    if missing:
        raise NoData(f"{path} lacks the columns {sorted(missing)}")
    if df.empty:
        raise NoData(f"{path} has no rows")
    return df


def relative_text(rel: float) -> str:
    """'−17%' for 17% less time per sample than standard; '' for standard itself or no standard."""
    if rel is None or not math.isfinite(rel) or abs(rel) < 5e-4:
        return ""
    return f"{rel * 100:+.0f}%".replace("-", "−")


def throughput_unit(largest: float) -> tuple[str, float]:
    """Axis unit and divisor for tokens/s values up to `largest`."""
    if largest >= 1e6:
        return "10⁶ tokens/s", 1e6
    if largest >= 1e4:
        return "10³ tokens/s", 1e3
    return "tokens/s", 1.0


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of the runs folder's speed.csv (`runs`, or that folder)."""
    df = read_speed(as_runs(runs).root)
    setting = [c for c in SETTING if c in df]
    settings = list(df.groupby(setting, sort=False)) if setting else [((), df)]
    settings = settings[:MAX_PANELS]

    with paper_style():
        fig = new_figure(COLUMN_WIDTH if len(settings) == 1 else DOUBLE_WIDTH, 2.3)
        axes = np.atleast_1d(fig.subplots(1, len(settings), squeeze=False)[0])
        for ax, (key, d) in zip(axes, settings):
            variants = order_variants(d["variant"])
            d = d.set_index("variant").loc[variants]
            x = np.arange(len(variants))
            unit, factor = throughput_unit(float(df["tokens_per_s"].max()))
            heights = d["tokens_per_s"] / factor
            ax.bar(x, heights, 0.7, color=[variant_style(v).color for v in variants])
            for xi, (top, rel) in enumerate(zip(heights, d["relative_to_standard"])):
                ax.annotate(relative_text(rel), (xi, top), xytext=(0, 1.5), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6)
            ax.set_xticks(x, [variant_label(v) for v in variants], rotation=30, ha="right", rotation_mode="anchor")
            ax.tick_params(axis="x", length=0)
            ax.grid(axis="x", visible=False)
            ax.set_ylabel(f"training throughput ({unit})")
            ax.set_ylim(0, float(heights.max()) * 1.15)
            title = ["numbers: time per sample vs Standard (− = faster)"]
            if setting:
                s = dict(zip(setting, key if isinstance(key, tuple) else (key,)))
                parts = [str(s.get("device", "")),
                         f"d_model {s['d_model']}" if "d_model" in s else "",
                         f"{s['n_layers']} layers" if "n_layers" in s else "",
                         f"seq {s['seq_len']} × batch {s['batch_size']}" if {"seq_len", "batch_size"} <= set(s) else ""]
                title.insert(0, ", ".join(p for p in parts if p))
            ax.set_title("\n".join(title), fontsize=6, color="#555555")
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
