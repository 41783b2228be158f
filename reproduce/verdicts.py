"""Each finding's verdict: our numbers against its criterion, and where they fail it, the authors' code's.

    from mixit_lab.reproduce.verdicts import check_findings
    findings = check_findings(tables, reference_tables, sources)   # one dict per finding (findings.json)

Where our numbers fail a criterion, the same criterion is applied to the authors' own code at the same
settings (mixit_lab.reproduce.reference), part by part, and the verdict says which case each failing part is: the
authors' code agrees (the claim does not show at this size), it holds where ours does not (a reproduction
failure), or there is no reference. Each case is said once, naming its parts: "does not hold: the
authors' code agrees on Dyck and modular addition; memorize and sentiment have no reference".
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from .claims import Claim, Finding, Part, join_and
from .findings import FINDINGS

# The verdict of a finding, read against the authors' code at the same settings where our numbers fail; the
# text of a finding of one part (one of several names its parts, verdict_text).
VERDICTS = {
    "holds": "holds",
    "inconclusive": "undecided at these seeds: an interval straddles its threshold",
    "agrees": "does not hold at this size; the authors' code agrees",
    "reproduction_failure": "does not hold while the authors' code does: a reproduction failure",
    "no_reference": "does not hold; no reference at these settings",
    "not_measured": "not measured",
}


def overall(claims: list[Claim]) -> bool | None:
    """False if any part fails; None if a part is undecided (an interval straddles its threshold) or nothing was
    measured; True if a part holds and none fails or is undecided."""
    if any(c.holds is False for c in claims):
        return False
    if any(c.undecided for c in claims):
        return None
    return True if any(c.holds for c in claims) else None


def verdict_of(ours: list[Claim], theirs: list[Claim] | None) -> str:
    """One of VERDICTS' keys: each failing part is paired with the reference's part of the same name."""
    holds = overall(ours)
    if holds is None:
        return "inconclusive" if any(c.undecided for c in ours) else "not_measured"
    if holds:
        return "holds"
    ref = {c.name: c.holds for c in theirs or []}
    failing = [ref.get(c.name) for c in ours if c.holds is False]
    if any(r is True for r in failing):
        return "reproduction_failure"
    return "agrees" if all(r is False for r in failing) else "no_reference"


def verdict_text(ours: list[Claim], theirs: list[Claim] | None, labels: dict[str, str] | None = None) -> str:
    """The verdict in words. With several parts, each case of the failing parts said once with the parts it
    covers (`labels`: a part's key -> its name in prose), e.g. "does not hold: the authors' code agrees on Dyck
    and modular addition; memorize and sentiment have no reference"."""
    verdict = verdict_of(ours, theirs)
    if verdict == "inconclusive" and len(ours) >= 2:
        open_parts = join_and([(labels or {}).get(c.name, c.name) for c in ours if c.undecided])
        return f"{VERDICTS[verdict]} ({open_parts})"
    if verdict in ("holds", "not_measured", "inconclusive") or len(ours) < 2:
        return VERDICTS[verdict]
    ref = {c.name: c.holds for c in theirs or []}
    undecided = {c.name for c in theirs or [] if c.undecided}
    failing = [c.name for c in ours if c.holds is False]

    def named(holds: bool | None, open_: bool = False) -> str:
        keys = [k for k in failing if ref.get(k) is holds and (k in undecided) == open_]
        return join_and([(labels or {}).get(k, k) for k in keys]) if keys else ""

    contradicted, agreed, unreferenced, open_ref = named(True), named(False), named(None), named(None, True)
    clauses = []
    if contradicted:
        clauses.append(f"the authors' code holds on {contradicted} (a reproduction failure)"
                       + (f" and agrees on {agreed}" if agreed else ""))
    elif agreed:
        clauses.append(f"the authors' code agrees on {agreed}")
    if open_ref:
        clauses.append(f"the authors' code is undecided on {open_ref} at its seeds")
    if unreferenced:
        many = sum(ref.get(k) is None and k not in undecided for k in failing) > 1
        clauses.append(f"{unreferenced} {'have' if many else 'has'} no reference")
    head = "does not hold at this size" if verdict == "agrees" else "does not hold"
    return f"{head}: " + "; ".join(clauses)


def part_rows(parts: tuple[Part, ...], ours: list[Claim], theirs: list[Claim] | None) -> list[dict[str, Any]]:
    """Per part: its name, our numbers and whether they hold, the reference's (None where it measured nothing)
    and whether the authors' code reaches the same outcome (None unless both sides are measured)."""
    mine = {c.name: c for c in ours}
    ref = {c.name: c for c in theirs or [] if c.holds is not None or c.undecided}
    rows = []
    for part in parts:
        claim, their = mine.get(part.key), ref.get(part.key)
        holds = None if claim is None else claim.holds
        rows.append({"part": part.label, "key": part.key, "ours": None if claim is None else claim.text,
                     "holds": holds, "undecided": bool(claim is not None and claim.undecided),
                     "reference": None if their is None else their.text,
                     "reference_holds": None if their is None else their.holds,
                     "agrees": None if holds is None or their is None else holds == their.holds})
    return rows


def runs_read(parts: tuple[Part, ...], sources: pd.DataFrame | None) -> list[str]:
    """The run directories (relative to the runs folder) whose numbers the parts read, from the tables' sources
    (mixit_lab.reproduce.tables.tables_with_sources); [] without sources."""
    if sources is None or sources.empty:
        return []
    read: set[str] = set()
    for part in parts:
        rows = sources[sources["table"] == part.table]
        if part.task is not None:
            rows = rows[rows["task"] == part.task]
        if part.variants:
            rows = rows[rows["variant"].isin(part.variants)]
        read.update(rows["run"].astype(str))
    return sorted(read)


def judge(finding: Finding, tables: dict[str, pd.DataFrame], reference: dict[str, pd.DataFrame] | None,
          sources: pd.DataFrame | None = None) -> dict[str, Any]:
    """One finding's row of the report: criterion, our numbers, the reference's, the verdict, its parts and runs."""
    ours = finding.check(tables)
    theirs = finding.check(reference) if reference is not None else None
    measured = [c for c in theirs or [] if c.holds is not None or c.undecided]
    parts = finding.parts()
    labels = {p.key: p.label for p in parts}
    return {"finding": finding.title, "criterion": finding.criterion(), "ours": "; ".join(c.text for c in ours),
            "holds": overall(ours), "verdict": verdict_of(ours, theirs),
            "verdict_text": verdict_text(ours, theirs, labels),
            "reference": "; ".join(c.text for c in measured) if measured else "none at these settings",
            "runs": runs_read(parts, sources), "parts": part_rows(parts, ours, theirs)}


def check_findings(tables: dict[str, pd.DataFrame], reference: dict[str, pd.DataFrame] | None = None,
                   sources: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """Each finding (FINDINGS) judged: its criterion, our numbers, the authors' code's numbers at the same
    settings (from `reference`, tables as mixit_lab.reproduce.tables.reference_tables gives them), the verdict (VERDICTS)
    and its text, per part the two sides ("parts"), and the runs it read ("runs", from `sources`)."""
    return [{"id": i, **judge(finding, tables, reference, sources)} for i, finding in enumerate(FINDINGS, 1)]
