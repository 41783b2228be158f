"""Study: what `mixit reproduce` found, on one page. Every finding with its verdict, its criterion, our numbers
beside the authors' code's at the same settings, and buttons that open its runs in the other pages; then the
figures, who does the work, and where the findings emerge (the scale preset). The report and figures folders
are found through the runs folder's reproduce.json (mixit_lab.explorer.report.locate); what is missing is said in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.explorer import report, ui

VERDICT_COLORS = {"success": "green", "error": "red", "warning": "orange", "info": "gray"}
OPEN_IN = ("Runs", "Heads", "Compare")  # the pages a finding's runs open in


def shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it lies below it."""
    return str(report.as_typed(Path(path), Path.cwd()))


def not_shown(study: report.Study, findings: list | None, figures: list[Path]) -> str | None:
    """One line naming what this runs folder's study cannot show, and where it looked."""
    missing = []
    if study.report_dir is None:
        tried = ", ".join(shown(p) for p in study.looked.get("report_dir", []))
        missing.append(f"findings and tables (no report folder: looked at {tried})")
    elif findings is None:
        missing.append(f"findings (no findings.json in {shown(study.report_dir)})")
    if study.figures_dir is None:
        tried = ", ".join(shown(p) for p in study.looked.get("figures_dir", []))
        missing.append(f"figures (no figures folder: looked at {tried})")
    elif not figures:
        missing.append(f"figures (no PNG files in {shown(study.figures_dir)})")
    if not missing:
        return None
    return "Not shown: " + "; ".join(missing) + ". `mixit reproduce` writes them beside its runs."


def bullets(text: Any) -> str:
    """A report cell ("a; b; c") as a bulleted list."""
    parts = [p.strip() for p in str(text or "").split("; ") if p.strip()]
    return "\n".join(f"- {p}" for p in parts) if parts else "-"


def finding_runs_buttons(finding: dict[str, Any], runs: pd.DataFrame) -> None:
    """Buttons that select the finding's runs and open them in another page; or why there are none."""
    if "runs" not in finding:
        return
    present, absent = report.finding_runs(finding, set(runs["run"]))
    if not present:
        st.caption("Its runs are not in this runs folder." if absent else "No run measures it.")
        return
    cols = st.columns(len(OPEN_IN) + 1)
    cols[0].caption(f"Its {len(present)} run{'s' * (len(present) != 1)}"
                    + (f" ({len(absent)} more not in this folder)" if absent else "") + ":")
    for col, page in zip(cols[1:], OPEN_IN):
        col.button(f"Open in {page}", key=f"finding_{finding.get('id')}_{page.lower()}", on_click=ui.open_page,
                   args=(page, present), help=", ".join(present))


def finding_card(finding: dict[str, Any], runs: pd.DataFrame) -> None:
    """One finding: verdict, criterion, ours beside the authors' code, its parts, its runs."""
    color = VERDICT_COLORS[report.verdict_kind(finding)]
    with st.container(border=True):
        st.markdown(f"**{finding.get('id', '?')}. {finding.get('finding', '')}**  \n"
                    f":{color}[**{finding.get('verdict_text') or finding.get('verdict') or 'no verdict'}**]")
        st.caption(f"Criterion: {finding.get('criterion', '-')}")
        if finding.get("learning_rates"):
            st.caption(f"Learning rates (each variant's chosen): {finding['learning_rates']}")
        if finding.get("across_grid"):
            st.caption(f"Across the learning-rate grid: {finding['across_grid']}")
        ours, theirs = st.columns(2)
        ours.markdown("*Ours*\n\n" + bullets(finding.get("ours")))
        theirs.markdown("*The authors' code, same settings*\n\n" + bullets(finding.get("reference")))
        parts = finding.get("parts")
        if parts:
            st.dataframe(pd.DataFrame(parts), hide_index=True, key=f"finding_{finding.get('id')}_parts",
                         column_config={"agrees": st.column_config.CheckboxColumn("agrees")})
        finding_runs_buttons(finding, runs)


def figures_section(figures: list[Path], failed: dict[str, str]) -> None:
    """The figures folder's PNG files, two a row; figures that failed, with why."""
    if not figures and not failed:
        return
    st.subheader("Figures")
    cols = st.columns(2)
    for i, path in enumerate(figures):
        cols[i % 2].image(str(path), caption=path.stem)
    for name, why in sorted(failed.items()):
        st.caption(f"{name}: failed ({why})")


def tables_section(report_dir: Path | None) -> None:
    """Who does the work (components.csv), the learning rates chosen and the authors' schedule's runs, and where the
    findings emerge (the scale preset's tables)."""
    from mixit_lab.reproduce.emergence import FINDINGS
    from mixit_lab.reproduce.report import TITLES

    for name in (report.COMPONENTS_TABLE, *report.LEARNING_RATE_TABLES):
        table = report.read_table(report_dir, name)
        if table is not None:
            title, caption = TITLES[name]
            st.subheader(title)
            st.caption(caption)
            st.dataframe(table, hide_index=True, key=f"study_{name}")
    emerging = [(f, table) for f in FINDINGS if (table := report.read_table(report_dir, f.table)) is not None]
    if emerging:
        st.subheader("Where the findings emerge")
    for finding, table in emerging:
        st.markdown(f"**{finding.title}**")
        st.caption(finding.about)
        st.dataframe(table, hide_index=True, key=f"study_{finding.table}")


def main() -> None:
    """The Study page."""
    found = ui.frame()
    st.header("Study")
    study = report.locate(found.root)
    findings = report.read_findings(study.report_dir)
    figures = report.figure_files(study.figures_dir)
    where = [f"runs `{found.runs_dir}`"] + [f"{what} `{shown(p)}`" for what, p in
                                             (("report", study.report_dir), ("figures", study.figures_dir)) if p]
    st.caption(f"Preset `{study.preset}`: " + ", ".join(where) + ".")
    missing = not_shown(study, findings, figures)
    if missing:
        st.info(missing)
    manifest = ex.reproduce_manifest(found.root) or {}
    if manifest.get("status") in ("running", "interrupted", "failed"):
        st.warning(ui.plain(f"This reproduction is {manifest['status']}"
                            + ("" if manifest["status"] == "running" else f" (in {manifest.get('stopped_in')})")
                            + ": what is shown may be an earlier one's or incomplete; rerun mixit reproduce to finish"))
    if findings:
        st.subheader("Findings")
        st.caption("Each verdict reads our numbers, each variant at the learning rate chosen for it, against the "
                   "criterion on 95% intervals over seeds; where they fail it, the same criterion is applied to the "
                   "authors' own training code run at the same settings.")
        for finding in findings:
            finding_card(finding, found.runs)
    failed = manifest.get("failed_figures") or {}
    figures_section(figures, failed if isinstance(failed, dict) else {})
    tables_section(study.report_dir)


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
