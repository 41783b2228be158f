"""The explorer's heatmaps, written once: layer x head grids side by side on one colour scale (head scores,
activation patching, each head's share of the answer), and attention patterns with their tokens."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots


def cell_text(grid: np.ndarray, fmt: str = "{:.2f}") -> np.ndarray:
    """Each cell's value as text, for printing inside the heatmap."""
    return np.vectorize(fmt.format)(grid) if grid.size else grid.astype(str)


def layer_head_trace(grid: np.ndarray, run: str, what: str, coloraxis: str = "coloraxis",
                     fmt: str = "{:.2f}") -> go.Heatmap:
    """One run's [layer, head] grid as a heatmap trace, its values printed in the cells and named on hover."""
    return go.Heatmap(
        z=grid, coloraxis=coloraxis, x=list(range(grid.shape[1])), y=list(range(grid.shape[0])),
        text=cell_text(grid, fmt), texttemplate="%{text}",
        hovertemplate=f"{run}<br>layer %{{y}} head %{{x}}<br>{what} %{{z:.4f}}<extra></extra>")


def layer_head_grids(grids: dict[str, np.ndarray], titles: list[str], what: str, title: str, colorscale: str,
                     cmin: float, cmax: float) -> go.Figure:
    """Several runs' [layer, head] grids side by side, one colour scale for all (so that runs compare by colour)."""
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=titles, horizontal_spacing=0.06)
    for i, (run, grid) in enumerate(grids.items()):
        fig.add_trace(layer_head_trace(grid, run, what), row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_xaxes(title_text="head", dtick=1)
    fig.update_layout(title=title, coloraxis=dict(colorscale=colorscale, cmin=cmin, cmax=cmax),
                      height=150 + 60 * max(g.shape[0] for g in grids.values()), margin=dict(t=120, l=10, r=10, b=10))
    fig.update_annotations(font_size=11)
    return fig


def score_range(score: str, grids: dict[str, np.ndarray]) -> tuple[str, float, float]:
    """(colour scale, low, high) for a head score: copying in [-1, 1] diverging around 0; attention mass 0..1,
    widened to the values (the signed patterns of mixit and shaped attention may pass either end a little)."""
    if score == "copying":
        return "RdBu_r", -1.0, 1.0
    values = np.concatenate([g.ravel() for g in grids.values()])
    values = values[np.isfinite(values)]
    if not len(values):
        return "Viridis", 0.0, 1.0
    return "Viridis", min(0.0, float(values.min())), max(1.0, float(values.max()))


def pattern_colors(values: np.ndarray) -> dict:
    """Heatmap colour settings: sequential 0..max for softmax patterns; diverging around 0 if signed."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    if lo < -1e-6:
        m = max(abs(lo), abs(hi))
        return {"colorscale": "RdBu_r", "zmin": -m, "zmax": m}
    return {"colorscale": "Viridis", "zmin": 0.0, "zmax": max(hi, 1e-6)}


def tick_labels(labels: list[str]) -> list[str]:
    """Token labels numbered by position: 0:a, 1:b, ..."""
    return [f"{i}:{t}" for i, t in enumerate(labels)]


def token_pairs(labels: list[str]) -> np.ndarray:
    """[query, key] token labels of every cell of a pattern, for hover text."""
    ticks = tick_labels(labels)
    n = len(labels)
    return np.array([[[ticks[i], ticks[j]] for j in range(n)] for i in range(n)], dtype=object)


def pattern_figure(pattern: np.ndarray, labels: list[str], title: str, colors: dict | None = None,
                   size: int = 560) -> go.Figure:
    """One head's pattern, large, with the tokens on both axes."""
    ticks = tick_labels(labels)
    n = len(labels)
    fig = go.Figure(go.Heatmap(
        z=pattern, x=list(range(n)), y=list(range(n)), **(colors or pattern_colors(pattern)),
        customdata=token_pairs(labels),
        hovertemplate="query %{customdata[0]}<br>key %{customdata[1]}<br>weight %{z:.4f}<extra></extra>",
    ))
    step = max(1, n // 40)
    axis = dict(tickmode="array", tickvals=list(range(0, n, step)), ticktext=ticks[::step], tickfont=dict(size=10))
    fig.update_xaxes(title="key", tickangle=-60, **axis)
    fig.update_yaxes(title="query", autorange="reversed", scaleanchor="x", **axis)
    fig.update_layout(title=dict(text=title, font_size=14), height=size, margin=dict(l=10, r=10, t=70, b=10))
    return fig


def pattern_grid(patterns: np.ndarray, labels: list[str], kinds: list[list[str]]) -> go.Figure:
    """Every layer x head pattern [layer, head, query, key] in one grid of small heatmaps, one colour scale."""
    n_layers, n_heads = patterns.shape[:2]
    titles = [f"L{l} H{h}: {kinds[l][h]}" for l in range(n_layers) for h in range(n_heads)]
    grid = make_subplots(rows=n_layers, cols=n_heads, subplot_titles=titles, horizontal_spacing=0.04,
                         vertical_spacing=0.08 if n_layers > 1 else 0.0)
    colors = pattern_colors(patterns)
    custom = token_pairs(labels)
    for l in range(n_layers):
        for h in range(n_heads):
            grid.add_trace(go.Heatmap(
                z=patterns[l, h], customdata=custom, coloraxis="coloraxis",
                hovertemplate=f"L{l} H{h}<br>query %{{customdata[0]}}<br>key %{{customdata[1]}}<br>"
                              "weight %{z:.4f}<extra></extra>"), row=l + 1, col=h + 1)
    grid.update_yaxes(autorange="reversed", showticklabels=False)
    grid.update_xaxes(showticklabels=False)
    grid.update_annotations(font_size=11)
    grid.update_layout(coloraxis=dict(colorscale=colors["colorscale"], cmin=colors["zmin"], cmax=colors["zmax"]),
                       height=max(260, 230 * n_layers), margin=dict(l=10, r=10, t=40, b=10))
    return grid
