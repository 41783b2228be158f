"""The one place for how figures look: variant order, names, colours, the paper style and saving.

    from mixit_lab.figures.style import paper_style, new_figure, variant_style, order_variants, save, COLUMN_WIDTH
    with paper_style():
        fig = new_figure(COLUMN_WIDTH, 2.2)
        ax = fig.add_subplot()
        for v in order_variants(df["variant"]):
            s = variant_style(v)
            ax.plot(x, y, color=s.color, marker=s.marker, label=s.label)
    save(fig, "out", "example")      # -> [example.png, example.pdf]

Colours are the Okabe-Ito palette (distinguishable with the common colour-vision deficiencies); each
variant also has its own marker, so lines stay apart in greyscale. Figures are built on the Agg
canvas directly (no pyplot, no global backend switch), and the style is applied in a context
manager, so importing this module changes nothing in the caller's matplotlib settings. The
explorer app imports the names and colours from here too.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from mixit_lab.models.files import atomic_file

COLUMN_WIDTH = 3.3  # inches: one column of a two-column paper
DOUBLE_WIDTH = 6.9  # inches: the full text width
DPI = 250  # raster resolution of the PNG files
FORMATS = ("png", "pdf")


@dataclass(frozen=True)
class VariantStyle:
    """How one variant is drawn, in every figure."""

    label: str
    color: str
    marker: str


# The order in which variants appear in legends, bar groups and panels.
VARIANT_ORDER: tuple[str, ...] = ("standard", "frozen_qk", "frozen_mlp", "mixit", "random", "shaped")

VARIANT_STYLES: dict[str, VariantStyle] = {
    "standard": VariantStyle("Standard", "#0072B2", "o"),  # blue
    "frozen_qk": VariantStyle("Frozen QK", "#E69F00", "s"),  # orange
    "frozen_mlp": VariantStyle("Frozen MLP", "#009E73", "^"),  # bluish green
    "mixit": VariantStyle("MixiT", "#D55E00", "D"),  # vermillion
    "random": VariantStyle("Random", "#7F7F7F", "v"),  # grey
    "shaped": VariantStyle("Shaped", "#CC79A7", "P"),  # reddish purple
}
UNKNOWN_COLOR = "#000000"

# Sequential and diverging colour maps (perceptually uniform / colour-blind safe).
SEQUENTIAL_CMAP = "viridis"
DIVERGING_CMAP = "RdBu_r"

PAPER_RC: dict[str, object] = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 9,
    "axes.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.axisbelow": True,
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.5,
    "grid.linestyle": "-",
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "xtick.minor.size": 1.5,
    "ytick.minor.size": 1.5,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "errorbar.capsize": 1.5,
    "legend.frameon": False,
    "legend.handlelength": 1.6,
    "legend.columnspacing": 1.0,
    "figure.dpi": 100,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "pdf.fonttype": 42,  # embed TrueType fonts: text stays text in the PDF
    "ps.fonttype": 42,
    "image.cmap": SEQUENTIAL_CMAP,
}


def variant_style(variant: str) -> VariantStyle:
    """The style of `variant`; an unknown variant gets its own name, in black, with a plain marker."""
    return VARIANT_STYLES.get(variant, VariantStyle(variant, UNKNOWN_COLOR, "x"))


def variant_label(variant: str) -> str:
    """Display name, e.g. 'Frozen QK' for 'frozen_qk'."""
    return variant_style(variant).label


def order_variants(variants: Iterable[str]) -> list[str]:
    """The distinct variants in `variants`, in VARIANT_ORDER (unknown ones after, alphabetically)."""
    present = {str(v) for v in variants}
    known = [v for v in VARIANT_ORDER if v in present]
    return known + sorted(present - set(known))


@contextmanager
def paper_style() -> Iterator[None]:
    """Apply the paper look (PAPER_RC) inside the block only; build and save figures inside it."""
    with matplotlib.rc_context(PAPER_RC):
        yield


def new_figure(width: float = COLUMN_WIDTH, height: float = 2.2, **kwargs) -> Figure:
    """A Figure on the non-interactive Agg canvas with constrained layout (call inside paper_style())."""
    fig = Figure(figsize=(width, height), layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, out_dir: str | Path, name: str, dpi: int = DPI) -> list[Path]:
    """Write `fig` as out_dir/name.png and out_dir/name.pdf; returns the paths.

    Each file is written to a temporary file in out_dir and renamed over the target, so a reader
    (or an interrupted run) never sees a half-written figure.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with paper_style(), _layout_done_once(fig) as bbox:
        for fmt in FORMATS:
            target = out_dir / f"{name}.{fmt}"
            with atomic_file(target, "wb") as fh:
                fig.savefig(fh, format=fmt, dpi=dpi, bbox_inches=bbox, metadata=_metadata(fmt))
            written.append(target)
    return written


@contextmanager
def _layout_done_once(fig: Figure) -> Iterator[Bbox]:
    """Lay `fig` out once and give its tight bounding box (padded as savefig.pad_inches): inside the block its
    layout engine is off, so each format is drawn once instead of three times (a "tight" save draws to measure,
    and a constrained layout runs again on every draw). The engine is back afterwards."""
    fig.draw_without_rendering()
    bbox = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    engine = fig.get_layout_engine()
    fig.set_layout_engine("none")
    try:
        yield bbox
    finally:
        fig.set_layout_engine(engine)


def _metadata(fmt: str) -> dict[str, str | None]:
    """Leave out the creation date, so an unchanged figure gives an identical PDF."""
    return {"CreationDate": None} if fmt == "pdf" else {}
