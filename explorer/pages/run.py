"""Run: one run's numbers, curves, config, parameters, `mixit analyze` tables and figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.explorer import ui
from mixit_lab.figures import figures_for_group


def metrics_row(row: pd.Series) -> None:
    """Status, step, final eval numbers and parameter counts; why it stopped, if it did."""
    cols = st.columns(6)
    cols[0].metric("status", row["status"])
    cols[1].metric(f"step (of {ex.format_count(row['steps'])})", ex.format_count(row["step"]))  # short: no truncation
    cols[2].metric("eval accuracy", "-" if pd.isna(row["eval_acc"]) else f"{row['eval_acc']:.3f}")
    cols[3].metric("eval loss", "-" if pd.isna(row["eval_loss"]) else f"{row['eval_loss']:.4f}")
    cols[4].metric("trainable params", ex.format_count(row["params_trainable"]))
    cols[5].metric("frozen params", ex.format_count(row["params_frozen"]))
    ui.show_stop_message(row)


def marked_step(root: Path, row: pd.Series) -> int | None:
    """A slider over the kept checkpoints (marked on the curves), with the head scores stored for that step."""
    steps = ex.kept_steps(root, row["path"])
    if not steps:
        return None
    marked = st.select_slider("Training step (kept checkpoints)", options=steps, value=steps[-1], key="run_step")
    dynamics = ex.read_run_dynamics(root, row["path"])
    if dynamics is not None and (dynamics["step"] == marked).any():
        st.dataframe(dynamics[dynamics["step"] == marked], hide_index=True, key="run_dynamics")
    else:
        st.caption(f"Head scores by step: `mixit analyze {row['path']} --checkpoints`. The Heads page shows any kept "
                   "step.")
    return marked


def curves_tab(root: Path, row: pd.Series) -> None:
    """Loss, accuracy, perplexity and speed against the step."""
    metrics = ex.read_run_metrics(root, row["path"])
    if metrics.empty:
        st.info("No metrics logged yet.")
        return
    x_range = [0, max(float(metrics["step"].max()), float(row["steps"] or 0)) * 1.03]
    marked = marked_step(root, row)

    def curve(columns: list[str], title: str, key: str, y_range: list[float] | None = None) -> None:
        present = [c for c in columns if c in metrics]
        if not present:
            return
        long = metrics.melt(id_vars="step", value_vars=present, var_name="metric").dropna()
        fig = px.line(long, x="step", y="value", color="metric", markers=True, title=title)
        fig.update_xaxes(range=x_range)
        if y_range:
            fig.update_yaxes(range=y_range)
        if marked is not None:
            fig.add_vline(x=marked, line_dash="dot", line_color="#555555")
        fig.update_layout(legend=dict(orientation="h", y=-0.25, title=None), height=380)
        st.plotly_chart(fig, key=key)

    c1, c2 = st.columns(2)
    with c1:
        curve(["loss", "eval_loss"], "loss (nats per token)", "run_loss")
        curve(["tokens_per_s"], "training tokens/s", "run_tps")
    with c2:
        curve(["eval_acc"], "eval accuracy", "run_acc", [-0.02, 1.02])
        curve(["eval_perplexity"], "eval perplexity", "run_ppl")


def config_tab(root: Path, row: pd.Series) -> None:
    """run.json: training, model, task and provenance."""
    try:
        info = ex.open_run(root, row["path"]).info
    except (ValueError, OSError) as e:
        st.error(ui.plain(e))
        return
    st.subheader("Training")
    st.json(info.get("train", {}), expanded=True)
    st.subheader("Model")
    st.json(info.get("model", {}), expanded=False)
    st.subheader("Task and provenance")
    st.json({k: v for k, v in info.items() if k not in ("train", "model")}, expanded=False)


def parameters_tab(root: Path, row: pd.Series) -> None:
    """Trainable and frozen parameters per component."""
    model = ui.load_model_or_error(root, row)
    if model is None:
        return
    table = em.parameter_table(model)
    st.dataframe(table, hide_index=True, key="run_params", column_config={
        c: st.column_config.NumberColumn(c, format="localized") for c in ("trainable", "frozen", "total")})
    long = table.melt(id_vars="component", value_vars=["trainable", "frozen"], var_name="kind", value_name="count")
    st.plotly_chart(px.bar(long, x="component", y="count", color="kind", title="parameters per component",
                           color_discrete_map={"trainable": "#0072B2", "frozen": "#BBBBBB"}), key="run_param_bar")
    fixed = em.fixed_matrix_values(model)
    if fixed:
        st.caption(f"MixiT's fixed attention matrices add {fixed:,} values: buffers saved with the checkpoint, "
                   "neither trained nor counted as parameters.")


def analysis_tab(root: Path, row: pd.Series) -> None:
    """The tables and summary `mixit analyze` stored."""
    analysis = ex.read_run_analysis(root, row["path"])
    if analysis is None:
        st.info(f"Not analysed yet: `mixit analyze {row['path']}` stores head scores, attention statistics, "
                "signal propagation and ablations (the Heads page computes head scores on demand).")
        return
    options = ", ".join(f"{k}={v}" for k, v in (analysis.get("options") or {}).items())
    st.caption(f"From `mixit analyze` ({options}).")
    for name, why in (analysis.get("skipped") or {}).items():
        st.caption(f"{name}: skipped ({why})")
    for name in analysis.get("tables", {}):
        table = ex.read_run_table(root, row["path"], name)
        if table is not None:
            with st.expander(f"{name}.csv ({len(table)} rows)"):
                st.dataframe(table, hide_index=True)
    with st.expander("analysis.json summary"):
        st.json(analysis.get("summary", {}))


def figures_tab(root: Path, row: pd.Series) -> None:
    """The figures drawn from this run's study group (shown when they lie in the runs folder, else named)."""
    links = ex.figure_links(root, figures_for_group(row["group"] or None))
    if not links:
        st.info("No figures recorded for this run: `mixit figures` (or `mixit reproduce`) draws them from a runs "
                "folder, and `mixit reproduce` records where in reproduce.json. The Study page shows them all.")
    for link in links:
        if link.readable:
            st.image(str(link.path), caption=link.name)
        else:
            st.markdown(f"- **{link.name}**: `{link.path}`")
    if links and not any(link.readable for link in links):
        st.caption("The figures lie outside the runs folder; the Study page shows the figures folder's files.")


def main() -> None:
    """The Run page."""
    found = ui.frame()
    st.header("Run")
    row = ui.pick_run(found.runs, "run_run")
    if row is None:
        return
    metrics_row(row)
    tabs = st.tabs(["Curves", "Config", "Parameters", "Analysis", "Figures"])
    for tab, show in zip(tabs, (curves_tab, config_tab, parameters_tab, analysis_tab, figures_tab)):
        with tab:
            show(found.root, row)


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
