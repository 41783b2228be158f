"""Where a study's report and figures are, and what they say: the Study page's data (no Streamlit here).

`mixit reproduce` writes three folders: the runs, a report folder (report.md, findings.json, one CSV per table)
and a figures folder (PNG files). The runs folder's reproduce.json names the other two; `mixit reproduce` also
records the last study of a working directory in .mixit_cache/last_study.json, which `mixit app` opens when
given no folder. Without either, the defaults reports/<preset> and reports/<preset>/figures beside the working
directory are tried, the preset being the manifest's or else the runs folder's name (as `mixit figures` does).

    from mixit_lab.explorer import report
    study = report.locate("runs/quick")
    findings = report.read_findings(study.report_dir)   # [{id, finding, criterion, ours, verdict, ...}]
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mixit_lab.figures.common import study_figures_dir
from mixit_lab.models.files import read_json
from mixit_lab.reproduce.report import FINDINGS_FILE, REPORT_TABLE
from mixit_lab.training.rundir import LAST_STUDY_FILE, MANIFEST

LAST_STUDY = Path(LAST_STUDY_FILE)  # {"runs_dir", "report_dir", "figures_dir", "preset"}: absolute paths
COMPONENTS_TABLE = "components"
LEARNING_RATE_TABLES = ("learning_rates", "schedules")  # the report tables of the rates chosen and the authors' schedule


@dataclass
class Study:
    """A runs folder and, where they were found, the report and figures folders of the study behind it."""

    runs_dir: Path
    preset: str | None = None
    report_dir: Path | None = None  # an existing folder, or None
    figures_dir: Path | None = None
    looked: dict[str, list[Path]] = field(default_factory=dict)  # what was tried for each, when not found


def read_object(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or unreadable (a study file is a hint, never required)."""
    try:
        return read_json(path)
    except (OSError, ValueError):
        return None


def last_study(cwd: Path | None = None) -> dict[str, Any] | None:
    """The last `mixit reproduce` of this working directory (.mixit_cache/last_study.json), or None."""
    return read_object((cwd or Path.cwd()) / LAST_STUDY)


def newest_study_runs(cwd: Path | None = None) -> Path | None:
    """The runs folder under runs/ whose reproduce.json is newest, or None."""
    manifests = sorted((cwd or Path.cwd()).glob(f"runs/*/{MANIFEST}"), key=lambda p: p.stat().st_mtime)
    return manifests[-1].parent if manifests else None


def as_typed(path: Path, cwd: Path) -> Path:
    """`path` relative to `cwd` when it lies below it (as a user would type it), else as it is."""
    try:
        return Path(os.path.relpath(path, cwd)) if path.resolve().is_relative_to(cwd.resolve()) else path
    except (OSError, ValueError):
        return path


def default_runs_dir(cwd: Path | None = None) -> Path | None:
    """The last `mixit reproduce`'s runs here: last_study.json's runs_dir, else the newest runs/*/reproduce.json."""
    cwd = cwd or Path.cwd()
    last = last_study(cwd)
    if last and last.get("runs_dir") and (cwd / last["runs_dir"]).is_dir():
        return as_typed(cwd / last["runs_dir"], cwd)
    newest = newest_study_runs(cwd)
    return as_typed(newest, cwd) if newest is not None else None


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _candidates(key: str, default: Path, manifest: dict, last: dict, cwd: Path) -> list[Path]:
    """Where a study's `key` folder may be, most trusted first: the manifest, the last study, the default."""
    found = [Path(p) for p in (manifest.get(f"{key}_resolved"), manifest.get(key)) if p]
    found += [Path(last[key])] if last.get(key) else []
    found.append(default)
    return [p if p.is_absolute() else cwd / p for p in dict.fromkeys(found)]


def locate(runs_dir: str | Path, cwd: Path | None = None) -> Study:
    """The study behind a runs folder: its preset, report folder and figures folder, each None if not found."""
    cwd = cwd or Path.cwd()
    runs_dir = Path(runs_dir)
    manifest = read_object(runs_dir / MANIFEST) or {}
    last = last_study(cwd) or {}
    if not (last.get("runs_dir") and _same(cwd / last["runs_dir"], runs_dir)):
        last = {}  # the last study is another folder's
    preset = manifest.get("preset") or last.get("preset") or runs_dir.resolve().name
    study = Study(runs_dir, preset)
    for key, default in (("report_dir", Path("reports") / preset), ("figures_dir", study_figures_dir(preset))):
        tried = _candidates(key, default, manifest, last, cwd)
        found = next((p for p in tried if p.is_dir()), None)
        setattr(study, key, found)
        if found is None:
            study.looked[key] = tried
    return study


def read_findings(report_dir: Path | None) -> list[dict[str, Any]] | None:
    """findings.json of a report folder (a list of findings), or None when it is missing or unreadable."""
    if report_dir is None:
        return None
    try:
        findings = json.loads((report_dir / FINDINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else None


def figure_files(figures_dir: Path | None) -> list[Path]:
    """The PNG files of a figures folder, by name."""
    return sorted(figures_dir.glob("*.png")) if figures_dir is not None else []


def read_table(report_dir: Path | None, name: str) -> pd.DataFrame | None:
    """The report's table `name` (<report>/<name>.csv), or None when it is missing, unreadable or empty."""
    if report_dir is None:
        return None
    try:
        table = pd.read_csv(report_dir / REPORT_TABLE.format(name))
    except (OSError, ValueError):
        return None
    return None if table.empty else table


def finding_runs(finding: dict[str, Any], known: set[str]) -> tuple[list[str], list[str]]:
    """(the finding's runs in this runs folder, those missing from it), from its "runs" key when present."""
    runs = [str(r) for r in finding.get("runs") or []]
    return [r for r in runs if r in known], [r for r in runs if r not in known]


def verdict_kind(finding: dict[str, Any]) -> str:
    """How to colour a verdict: "success" (holds), "error" (a reproduction failure), "warning" (does not hold,
    the authors' code agrees or has no number), "info" (not measured, or undecided at these seeds)."""
    verdict = finding.get("verdict")
    if verdict == "holds":
        return "success"
    if verdict == "reproduction_failure":
        return "error"
    return "info" if verdict in (None, "not_measured", "inconclusive") else "warning"
