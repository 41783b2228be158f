"""MixiT Lab explorer: the frame around every page (`streamlit run explorer/app.py -- --runs DIR`).

    mixit app                                     # the runs of the last `mixit reproduce` here
    mixit app runs/smoke                          # any runs folder
    streamlit run app.py -- --runs runs/smoke     # the same, by hand, from a checkout (app.py is a shim)

Streamlit runs this file on every interaction. It draws the sidebar (the runs folder, and the runs selected
in any page, kept in session state across pages), lists the pages with `st.navigation`, and runs the current
one: Study (what `mixit reproduce` found), Runs, Run, Attention, Heads, Compare and Predict, one file each
in explorer/pages/. A page reads the frame's runs through `mixit_lab.explorer.ui.frame()` and opens another page
through `mixit_lab.explorer.ui.open_page` (session state "view"). The data come from `mixit_lab.analysis.explore` (the runs) and
`mixit_lab.explorer.report` (the study's report and figures folders); nothing here trains or writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.explorer import ui
from mixit_lab.explorer.report import default_runs_dir

PAGES_DIR = Path(__file__).resolve().parent / "pages"
PAGES = ("Study", "Runs", "Run", "Attention", "Heads", "Compare", "Predict")
ICONS = {"Study": ":material/summarize:", "Runs": ":material/table_rows:", "Run": ":material/monitoring:",
         "Attention": ":material/grid_on:", "Heads": ":material/view_module:", "Compare": ":material/compare:",
         "Predict": ":material/psychology:"}
FALLBACK_RUNS = "checkpoints"


def parse_args(argv: list[str]) -> argparse.Namespace:
    """--runs DIR (default: the runs of the last `mixit reproduce` in the working directory, else checkpoints/)."""
    parser = argparse.ArgumentParser(prog="app.py", allow_abbrev=False,
                                     description="MixiT Lab explorer (streamlit run app.py -- --runs DIR)")
    parser.add_argument("--runs", default=None, help="runs folder (default: the last `mixit reproduce`'s runs)")
    args, _ = parser.parse_known_args(argv)
    if args.runs is None:
        args.runs = str(default_runs_dir() or FALLBACK_RUNS)
    return args


def page_objects() -> dict[str, st.Page]:
    """The pages, by title; Study first and the default."""
    return {title: st.Page(PAGES_DIR / f"{title.lower()}.py", title=title, icon=ICONS[title], default=title == "Study")
            for title in PAGES}


def open_links(pages: dict[str, st.Page]) -> None:
    """Once per session: a link may name a run and, as older links did, a page (?view=Heads&run=STUDY/RUN)."""
    if st.session_state.get("_linked"):
        return
    st.session_state["_linked"] = True
    if st.query_params.get("run"):
        st.session_state.setdefault("current_run", st.query_params["run"])
    if st.query_params.get("view") in pages:
        st.session_state.setdefault("view", st.query_params["view"])


def sidebar(default_runs: str) -> ui.Frame | None:
    """The runs folder and the selection; the frame (None when there is nothing to show, after saying why)."""
    st.session_state.setdefault("runs_dir", default_runs)
    runs_dir = st.sidebar.text_input("Runs folder", key="runs_dir", help="any folder of runs: a preset's, a sweep's")
    create = f"mixit reproduce --preset smoke --out {runs_dir}"
    try:
        root = ex.open_root(runs_dir)
    except FileNotFoundError as e:
        st.error(f"{e}.")
        st.markdown("Create some runs there (about two minutes on a laptop), then reload this page:")
        st.code(create, language="bash")
        return None
    if st.sidebar.button("Reload runs", key="reload"):
        ui.runs_table.clear()
    runs = ui.runs_table(str(root))
    if runs.empty:
        st.warning(f"No runs under `{runs_dir}` yet (a run is a directory with a run.json).")
        st.markdown("Create some (about two minutes on a laptop), then press *Reload runs*:")
        st.code(create, language="bash")
        return None
    known = list(runs["run"])
    st.session_state["selected"] = [r for r in st.session_state.get("selected", []) if r in set(known)]
    st.sidebar.multiselect("Selected runs", known, key="selected",
                           help="tick rows in Runs, or open a finding's runs from Study; every page starts from them")
    return ui.Frame(runs_dir, root, runs)


def main() -> None:
    """One script run: the sidebar, the navigation, then the current page."""
    st.set_page_config(page_title="MixiT Lab explorer", layout="wide")
    args = parse_args(sys.argv[1:])
    pages = page_objects()
    open_links(pages)
    page = st.navigation(list(pages.values()))
    st.sidebar.title("MixiT Lab")
    wanted = st.session_state.pop("view", None)
    if wanted in pages and wanted != page.title:
        st.switch_page(pages[wanted])
    found = sidebar(args.runs)
    if found is None:
        return
    st.session_state[ui.FRAME_KEY] = found
    page.run()


if __name__ == "__main__":  # `streamlit run explorer/app.py` (a checkout's app.py calls main() itself)
    main()
