"""Markdown tables of the reports, one format for the report (mixit_lab.reproduce.report) and its scale section
(mixit_lab.reproduce.emergence)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def fmt(x: Any) -> str:
    """A cell: '—' for missing, floats to 2 decimals (4 significant digits below 0.01), lists (per-seed values) joined
    with ' / '."""
    if isinstance(x, (list, tuple)):  # per-seed values
        return " / ".join(fmt(v) for v in x) if x else "—"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float):
        return f"{x:.4g}" if 0 < abs(x) < 0.01 else f"{x:.2f}"
    return str(x)


def markdown_table(df: pd.DataFrame, empty: str = "_No runs for this table in this preset._") -> str:
    """`df` as a Markdown table, or the `empty` line when it has no rows."""
    if df.empty:
        return empty + "\n"
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"
