"""What a finding is made of: its parts, each judged as a Claim, and the base class the seven findings share.

    from mixit_lab.reproduce.claims import Claim, Finding, Part
    claims = finding.check(tables)      # one Claim per part: its numbers and whether it holds (None: missing)
    finding.criterion()                 # the criterion's text, generated from the finding's thresholds

A finding (mixit_lab.reproduce.findings) is a frozen dataclass whose fields are its thresholds, each written once:
the check reads them, and the criterion's text is generated from them. Its parts name what a verdict
(mixit_lab.reproduce.verdicts) pairs with the authors' code's, and which runs (table, task, variants) they read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd

from .selection import lookup


@dataclass
class Claim:
    """One part of a finding, judged on its own: `holds` is None when its data is missing, or when it was measured
    but an interval over seeds straddles its threshold (`undecided`)."""

    name: str  # the part's key, the same on our tables and on the reference's, so the two can be paired
    text: str  # the numbers it was judged on
    holds: bool | None
    undecided: bool = False  # measured, and neither held nor failed: an interval straddles a threshold

    def __post_init__(self) -> None:
        if self.holds is not None:
            self.holds = bool(self.holds)  # comparisons of table values give numpy booleans
            self.undecided = False

    @classmethod
    def judged(cls, name: str, text: str, outcome: bool | None) -> Claim:
        """A measured claim from mixit_lab.reproduce.intervals.decide's outcome (None: undecided, said in its text)."""
        if outcome is None:
            return cls(name, text + " (undecided: an interval straddles its threshold)", None, undecided=True)
        return cls(name, text, outcome)


@dataclass(frozen=True)
class Part:
    """One part of a finding's criterion: how verdicts name it and which runs it reads."""

    key: str  # the name of its Claim
    label: str  # how a verdict names it: "Dyck", "modular addition", "the paper's regime"
    criterion: str  # what it asks, e.g. "standard >= frozen_qk - 1 and frozen_qk >= mixit + 10"
    table: str  # the report table it reads (mixit_lab.reproduce.tables)
    task: str | None = None  # the task of that table's runs it reads (None: every task there)
    variants: tuple[str, ...] = ()  # the variants it compares (empty: every variant)


@dataclass(frozen=True)
class Finding:
    """A finding of the paper: subclasses set `title`, hold their thresholds as fields and define `parts`
    and `check`."""

    title: ClassVar[str]
    preamble: ClassVar[str] = ""  # what the criterion says before its parts (e.g. "medians over seeds")

    def parts(self) -> tuple[Part, ...]:
        """The criterion's parts, in the order `check` judges them."""
        raise NotImplementedError

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        """One Claim per part, from the report's tables (ours, or the reference's)."""
        raise NotImplementedError

    def criterion(self) -> str:
        """The criterion as the report states it: the preamble, then each part's (named when there are several)."""
        parts = self.parts()
        if len(parts) == 1:
            text = parts[0].criterion
        else:
            text = "; ".join(f"{p.label}: {p.criterion}" for p in parts)
        return f"{self.preamble}; {text}" if self.preamble else text


# --------------------------------------------------------------------------- reading tables
def seed_values(df: pd.DataFrame, column: str = "values", **where: Any) -> list[float] | None:
    """The per-seed values (a list column) of the first row matching `where`, or None without one."""
    if df.empty or column not in df:
        return None
    rows = df
    for k, v in where.items():
        rows = rows[rows[k] == v]
    if not len(rows):
        return None
    values = rows[column].iloc[0]
    return [float(v) for v in values] if isinstance(values, (list, tuple)) and len(values) else None


def median(df: pd.DataFrame, **where: Any) -> float | None:
    """The median accuracy over seeds of the row matching `where` (tables without a median column: accuracy)."""
    return lookup(df, "median" if "median" in df else "accuracy", **where)


def missing(*names: str) -> str:
    """'not measured (a, b missing)'."""
    return f"not measured ({', '.join(names)} missing)"


def stuck_note(df: pd.DataFrame, variants: tuple[str, ...]) -> str:
    """' (stuck: standard seed 1 at 32.4%)' for the stuck seeds of `variants` in an accuracy table, else ''."""
    if "stuck" not in df:
        return ""
    notes = [f"{v} {s}" for v in variants for s in df.loc[df["variant"] == v, "stuck"].dropna() if s]
    return f" (stuck: {'; '.join(notes)})" if notes else ""


def numbers(values: dict[str, float], digits: int = 1) -> str:
    """'100.0 / 95.0 / 20.0': values in the order given."""
    return " / ".join(f"{v:.{digits}f}" for v in values.values())


def join_and(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def pct(x: float) -> str:
    """A threshold as the criterion writes it: '90', '0.1', '2.5'."""
    return f"{x:g}"
