"""Compare: the variants on one task (curves, speed), memorization, signal propagation and training speed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.explorer import ui


CURVES_AT_ONCE = 24  # a task with more runs draws the curves of those selected: reading and drawing thousands is slow


def curve_runs(same: pd.DataFrame, selected: list[str]) -> list[str]:
    """The runs of one task whose curves are drawn at first: all of them up to CURVES_AT_ONCE; of more, those
    selected, else each variant's run of the lowest seed."""
    if len(same) <= CURVES_AT_ONCE:
        return list(same["run"])
    chosen = [r for r in selected if r in set(same["run"])]
    return chosen or list(same.sort_values(["seed", "run"]).drop_duplicates("variant")["run"])


def same_task(root: Path, runs: pd.DataFrame, ok: pd.DataFrame) -> None:
    """The runs of one task: their table, curves overlaid by variant, and their training speed."""
    labels = sorted(set(ok["task_label"].dropna()))
    if not labels:
        return
    sel = [r for r in ui.selected_ids(runs) if r in set(ok["run"])]
    first = ok[ok["run"] == sel[0]]["task_label"].iloc[0] if sel else labels[0]
    label = st.selectbox("Task", labels, index=labels.index(first), key="cmp_task")
    same = ok[ok["task_label"] == label]
    st.dataframe(same[["run", "variant", "size", "seed", "lr", "status", "eval_acc", "eval_loss", "params_trainable",
                       "params_frozen", "tokens_per_s"]], hide_index=True, key="cmp_table")
    shown = st.multiselect("Curves of", list(same["run"]), default=curve_runs(same, sel), key=f"cmp_curves_{label}",
                           help=f"the runs of this task whose curves are drawn (by default all of them; of more than "
                                f"{CURVES_AT_ONCE}, the runs selected, else each variant's first)")
    curves = ex.compare_curves(root, same[same["run"].isin(shown)])
    if curves.empty:
        st.info("These runs have no metrics yet." if shown else "Choose the runs whose curves to draw.")
    else:
        curves, style = ui.by_variant(curves)
        c1, c2 = st.columns(2)
        for col, metric, title in ((c1, "eval_acc", "eval accuracy"), (c2, "eval_loss", "eval loss"),
                                   (c1, "loss", "training loss"), (c2, "eval_perplexity", "eval perplexity")):
            part = curves[curves["metric"] == metric]
            if part.empty:
                continue
            fig = px.line(part, x="step", y="value", line_group="run", markers=True, hover_name="run",
                          line_dash="size" if part["size"].nunique() > 1 else None, title=title, **style)
            if metric == "eval_acc":
                fig.update_yaxes(range=[-0.02, 1.02])
            fig.update_xaxes(range=[0, part["step"].max() * 1.03])
            fig.update_layout(legend=dict(orientation="h", y=-0.25, title=None), height=420, yaxis_title=metric)
            col.plotly_chart(fig, key=f"cmp_{metric}")
    speed_runs = same.dropna(subset=["tokens_per_s"])
    if len(speed_runs):
        speed_runs, style = ui.by_variant(speed_runs)
        fig = px.bar(speed_runs, x="run", y="tokens_per_s", hover_name="run",
                     title="training tokens/s of these runs (as measured during training)", **style)
        fig.update_xaxes(showticklabels=False, title=None, categoryorder="trace")
        fig.update_yaxes(title="tokens/s")
        st.plotly_chart(fig, key="cmp_run_speed")


def memorization(root: Path, ok: pd.DataFrame) -> None:
    """Bits stored per trainable parameter of the analysed `memorize` runs."""
    st.subheader("Memorization")
    memory = ex.memorization_table(root, ok)
    if memory.empty:
        st.info("No analysed `memorize` runs (`mixit analyze` writes memory.csv).")
        return
    memory = memory.sort_values(["keys", "run"])
    st.dataframe(memory[["run", "variant", "size", "keys", "accuracy", "bits", "max_bits", "params_trainable",
                         "bits_per_trainable_param"]], hide_index=True, key="cmp_memory")
    memory, style = ui.by_variant(memory)
    memory["keys"] = memory["keys"].astype(str)
    fig = px.bar(memory, x="keys", y="bits_per_trainable_param", barmode="group", hover_name="run",
                 title="memorized bits per trainable parameter vs number of keys n^d", **style)
    fig.update_xaxes(type="category", title="keys (n^d)")
    fig.update_yaxes(title="bits per trainable parameter")
    st.plotly_chart(fig, key="cmp_memory_bar")


def signal(root: Path) -> None:
    """Token cosine and covariance after the last layer at initialization, against depth."""
    st.subheader("Signal propagation at initialization")
    table = ex.signal_table(root)
    if table is None:
        st.info("No signal/signal.csv in this folder (`mixit reproduce` writes it).")
        return
    table, style = ui.by_variant(table[table["d_model"] == table["d_model"].max()])
    c1, c2 = st.columns(2)
    c1.plotly_chart(px.line(table, x="depth", y="cosine", markers=True, title="token cosine after the last layer",
                            **style), key="cmp_signal_cos")
    positive = bool((table["covariance"] > 0).all())
    fig = px.line(table, x="depth", y="covariance", markers=True, log_y=positive,
                  title="token covariance after the last layer" + (" (log scale)" if positive else ""), **style)
    if positive:
        fig.update_yaxes(dtick=1, exponentformat="power")
    c2.plotly_chart(fig, key="cmp_signal_cov")
    st.caption(f"From signal/signal.csv: at initialization, d_model {int(table['d_model'].max())}; standard, "
               "frozen_qk, frozen_mlp and random are the same network at initialization.")


def speed(root: Path) -> None:
    """Tokens/s of a training step per variant (speed/speed.csv)."""
    st.subheader("Training speed")
    table = ex.speed_table(root)
    if table is None:
        st.info("No speed/speed.csv in this folder (`mixit reproduce` writes it).")
        return
    shown, style = ui.by_variant(table)
    fig = px.bar(shown, x="variant_name", y="tokens_per_s", title="tokens/s of a training step (the same size for "
                 "every variant)", **style)
    fig.update_layout(showlegend=False, xaxis_title=None, yaxis_title="tokens/s")
    st.plotly_chart(fig, key="cmp_speed")
    st.dataframe(table, hide_index=True, key="cmp_speed_table")


def main() -> None:
    """The Compare page."""
    found = ui.frame()
    st.header("Compare")
    ok = found.runs[found.runs["status"] != "corrupt"]
    same_task(found.root, found.runs, ok)
    memorization(found.root, ok)
    signal(found.root)
    speed(found.root)


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
