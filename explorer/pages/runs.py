"""Runs: the table of every run, filtered and sorted; ticked rows become the selection the other pages open."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from mixit_lab.explorer import ui
from mixit_lab.figures.style import order_variants

COLUMNS = ["run", "variant", "task_label", "size", "seed", "status", "eval_acc", "best_eval_acc", "eval_loss",
           "params_trainable", "params_frozen", "step", "steps", "lr", "tokens_per_s", "has_analysis", "message"]
COLUMN_CONFIG = {
    "run": st.column_config.TextColumn("run", width="medium"),
    "task_label": st.column_config.TextColumn("task"),
    "eval_acc": st.column_config.NumberColumn("eval acc", format="%.3f"),
    "best_eval_acc": st.column_config.NumberColumn("best acc", format="%.3f"),
    "eval_loss": st.column_config.NumberColumn("eval loss", format="%.4f"),
    "params_trainable": st.column_config.NumberColumn("trainable", format="localized"),
    "params_frozen": st.column_config.NumberColumn("frozen", format="localized"),
    "tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.0f"),
    "lr": st.column_config.NumberColumn("lr", format="%.0e"),
    "has_analysis": st.column_config.CheckboxColumn("analysed"),
    "message": st.column_config.TextColumn("message", help="why a run stopped: diverged, failed or unreadable"),
}


def counts(runs: pd.DataFrame) -> None:
    """How many runs, finished, unfinished, analysed and damaged; the runs that stopped or are damaged (naming the
    damaged file), with their messages."""
    status = runs["status"].value_counts()
    cols = st.columns(5)
    cols[0].metric("runs", len(runs))
    cols[1].metric("finished", int(status.get("finished", 0)))
    cols[2].metric("running / interrupted", f"{int(status.get('running', 0))} / {int(status.get('interrupted', 0))}",
                   help="running: a process is training it now; interrupted: no summary and no process (--resume it)")
    cols[3].metric("analysed", int(runs["has_analysis"].fillna(False).astype(bool).sum()))
    cols[4].metric("unreadable", int(status.get("corrupt", 0)),
                   help="damaged runs: a run.json or summary.json that cannot be read")
    bad = runs[runs["status"].isin(["corrupt", "error", "diverged"])]
    if len(bad):
        st.warning("\n".join(f"- {ui.plain(row['run'])}: {_shown_status(row['status'])}: "
                             f"{ui.plain(ui.run_message(row) or 'see its summary.json')}" for _, row in bad.iterrows()))


def _shown_status(status: str) -> str:
    """A status as the page says it: a corrupt run is damaged (a run.json or summary.json that cannot be read)."""
    return "damaged (left out of every table until its file is restored)" if status == "corrupt" else status


def filtered(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the filter and sort widgets leave, in their order."""
    f1, f2, f3, f4 = st.columns([2, 1, 1, 1])
    text = f1.text_input("Filter (run name or task contains)", key="filter_text")
    variants = f2.multiselect("Variant", order_variants(runs["variant"].dropna()), key="filter_variant")
    tasks = f3.multiselect("Task", sorted(set(runs["task"].dropna())), key="filter_task")
    statuses = f4.multiselect("Status", sorted(set(runs["status"].dropna())), key="filter_status")
    shown = runs
    if text:
        shown = shown[shown["run"].str.contains(text, case=False, regex=False)
                      | shown["task_label"].fillna("").str.contains(text, case=False, regex=False)]
    for column, chosen in (("variant", variants), ("task", tasks), ("status", statuses)):
        if chosen:
            shown = shown[shown[column].isin(chosen)]
    s1, s2 = st.columns([3, 1])
    sort_by = s1.selectbox("Sort by", ["run", "eval_acc", "eval_loss", "params_trainable", "tokens_per_s", "variant",
                                       "task_label"], key="sort_by")
    descending = s2.toggle("Descending", value=False, key="sort_desc")
    shown = shown.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable")
    return shown.reset_index(drop=True)


def on_table_select() -> None:
    """Copy the table's ticked rows into the selection (session state "selected", shown in the sidebar)."""
    rows = st.session_state["runs_table"]["selection"]["rows"]
    shown = st.session_state.get("runs_shown", [])
    st.session_state["selected"] = [shown[i] for i in rows if i < len(shown)]


def main() -> None:
    """The Runs page."""
    runs = ui.frame().runs
    st.header("Runs")
    counts(runs)
    shown = filtered(runs)
    shown = shown.assign(message=[ui.run_message(row) for _, row in shown.iterrows()])  # message, else error
    st.session_state["runs_shown"] = list(shown["run"])
    st.dataframe(shown[COLUMNS], key="runs_table", on_select=on_table_select, selection_mode="multi-row",
                 hide_index=True, height=min(600, 35 * (len(shown) + 1) + 3), column_config=COLUMN_CONFIG)
    chosen = ui.selected_ids(runs)
    st.caption(f"{len(shown)} of {len(runs)} runs shown. Tick rows (the boxes at the left) to open them in the other "
               "pages: " + (", ".join(f"`{r}`" for r in chosen) if chosen else "none selected yet."))


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
