"""MixiT Lab explorer: browse a directory of runs in the browser.

    mixit app runs/smoke                          # after `mixit reproduce --preset smoke`
    streamlit run app.py -- --runs runs/smoke     # the same, by hand (default directory: checkpoints/)

Six views, picked in the sidebar: Runs (the table of runs; select rows to open them elsewhere), Run
(config, curves, parameters, analysis, figures), Attention (every head's pattern on an input),
Heads (head scores side by side, activation patching, and who does the work: attention and MLP ablated,
each head's share of the answer), Compare (variants on one task, memorization, signal, speed) and
Predict (top-k next tokens). This file is only the user interface: the data come from
`analysis.explore`, which reads nothing outside the runs directory and never trains or writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st
import torch
from plotly.subplots import make_subplots

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # `streamlit run app.py` from a source checkout
    sys.path.insert(0, str(HERE))

from analysis import explore as ex  # noqa: E402
from figures import figures_for_group  # noqa: E402
from figures.style import VARIANT_ORDER, VARIANT_STYLES, order_variants, variant_label  # noqa: E402

VIEWS = ("Runs", "Run", "Attention", "Heads", "Compare", "Predict")
DEFAULT_RUNS = "checkpoints"
COLORS = {v: s.color for v, s in VARIANT_STYLES.items()}
SHOWN_EVAL_SAMPLES = 64


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="MixiT Lab explorer (streamlit run app.py -- --runs DIR)",
                                     allow_abbrev=False)
    parser.add_argument("--runs", default=DEFAULT_RUNS, help=f"runs directory (default: {DEFAULT_RUNS})")
    args, _ = parser.parse_known_args(argv)
    return args


# --------------------------------------------------------------------------- cached data
@st.cache_data(ttl=10, show_spinner=False)
def runs_table(root: str) -> pd.DataFrame:
    return ex.list_runs(root)


@st.cache_resource(max_entries=8, show_spinner="Loading the model...")
def cached_model(root: str, run_dir: str, stamp: tuple, step: int | None = None):
    return ex.load_run_model(Path(root), run_dir, step)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_patterns(root: str, run_dir: str, stamp: tuple, tokens: tuple[int, ...]) -> np.ndarray:
    return ex.attention_patterns(cached_model(root, run_dir, stamp), torch.tensor(tokens, dtype=torch.int64))


@st.cache_data(max_entries=64, show_spinner=False)
def computed_head_table(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, dict]:
    return ex.compute_head_table(cached_model(root, run_dir, stamp, step))


@st.cache_data(max_entries=64, show_spinner=False)
def computed_patching(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, str]:
    model = None if step is None else cached_model(root, run_dir, stamp, step)
    return ex.patching_table(Path(root), run_dir, model)


def head_table(root: Path, row: pd.Series, step: int | None = None) -> tuple[pd.DataFrame, dict, str, int | None]:
    """(heads table, chance, where it came from, number of repeated sequences): analysis/heads.csv if stored
    (final checkpoint only), else computed now on the final or the kept checkpoint of `step`."""
    if step is None:
        stored = ex.stored_head_table(root, row["path"])
        if stored is not None:
            n_seqs = ((ex.read_run_analysis(root, row["path"]) or {}).get("options") or {}).get("n_seqs")
            return stored[0], stored[1], f"stored by mixit analyze (analysis/heads.csv, {n_seqs} repeated sequences)", n_seqs
    df, chance = computed_head_table(str(root), row["path"], ex.checkpoint_stamp(root, row["path"], step), step)
    where = "the final checkpoint" if step is None else f"the checkpoint kept at step {step}"
    return df, chance, f"computed now on {ex.SHOWN_HEAD_SEQS} repeated random sequences, {where}", ex.SHOWN_HEAD_SEQS


def step_choice(root: Path, rows: list[pd.Series], key: str) -> int | None:
    """A 'Training step' slider over the kept checkpoints of these runs; None means the final checkpoint."""
    steps = sorted({s for row in rows for s in ex.kept_steps(root, row["path"])})
    if not steps:
        return None
    chosen = st.select_slider("Training step (kept checkpoints)", options=[*steps, "final"], value="final", key=key)
    return None if chosen == "final" else int(chosen)


# --------------------------------------------------------------------------- helpers
def variant_name(variant: str | None) -> str:
    return variant_label(variant or "?")


def run_caption(row: pd.Series) -> str:
    if row["status"] == "corrupt":
        return f"{row['run']} (unreadable)"
    return f"{row['run']}  [{variant_name(row['variant'])}, {row['task_label']}, {row['size']}, seed {row['seed']}]"


def selected_ids(runs: pd.DataFrame) -> list[str]:
    return [r for r in st.session_state.get("selected", []) if r in set(runs["run"])]


def pick_run(runs: pd.DataFrame, key: str, label: str = "Run", need_checkpoint: bool = False) -> pd.Series | None:
    """A run chosen among all runs; the runs selected in the Runs view come first."""
    pool = runs
    if need_checkpoint:  # unreadable runs stay listed, so that choosing one shows why
        pool = runs[runs["has_checkpoint"].fillna(False).astype(bool) | (runs["status"] == "corrupt")]
    if pool.empty:
        st.info("No run has a checkpoint yet.")
        return None
    first = [r for r in selected_ids(runs) if r in set(pool["run"])]
    readable = [r for r, status in zip(pool["run"], pool["status"]) if status != "corrupt" and r not in first]
    options = first + readable + [r for r in pool["run"] if r not in first and r not in readable]
    current = st.session_state.get("current_run")
    index = options.index(current) if current in options else 0
    captions = {row["run"]: run_caption(row) for _, row in runs.iterrows()}
    choice = st.selectbox(label, options, index=index, key=key, format_func=captions.get)
    st.session_state["current_run"] = choice
    row = runs[runs["run"] == choice].iloc[0]
    if row["status"] == "corrupt":
        st.error(f"This run cannot be read: {row['error']}")
        return None
    return row


def load_model_or_error(root: Path, row: pd.Series):
    """The run's model, or None after showing why it cannot be loaded (this run only)."""
    try:
        return cached_model(str(root), row["path"], ex.checkpoint_stamp(root, row["path"]))
    except Exception as e:  # a half-written or corrupt checkpoint must not take the app down
        st.error(f"Cannot load the model of {row['run']}: {e}")
        return None


def task_or_none(root: Path, row: pd.Series):
    """The run's algorithmic task (for eval samples and token names), or None (text runs, or not rebuildable)."""
    try:
        return ex.run_task(root, row["path"])
    except (ValueError, OSError) as e:
        st.warning(f"The task of {row['run']} cannot be rebuilt ({e}); type token ids instead.")
        return None


def pattern_colors(values: np.ndarray) -> dict:
    """Heatmap colour settings: sequential 0..max for softmax patterns; diverging around 0 if signed."""
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    if lo < -1e-6:
        m = max(abs(lo), abs(hi))
        return {"colorscale": "RdBu_r", "zmin": -m, "zmax": m}
    return {"colorscale": "Viridis", "zmin": 0.0, "zmax": max(hi, 1e-6)}


def tick_labels(labels: list[str]) -> list[str]:
    return [f"{i}:{t}" for i, t in enumerate(labels)]


def pattern_figure(pattern: np.ndarray, labels: list[str], title: str, colors: dict | None = None,
                   size: int = 560) -> go.Figure:
    """One head's pattern, large, with the tokens on both axes."""
    ticks = tick_labels(labels)
    n = len(labels)
    fig = go.Figure(go.Heatmap(
        z=pattern, x=list(range(n)), y=list(range(n)), **(colors or pattern_colors(pattern)),
        customdata=np.array([[[ticks[i], ticks[j]] for j in range(n)] for i in range(n)], dtype=object),
        hovertemplate="query %{customdata[0]}<br>key %{customdata[1]}<br>weight %{z:.4f}<extra></extra>",
    ))
    step = max(1, n // 40)
    axis = dict(tickmode="array", tickvals=list(range(0, n, step)), ticktext=ticks[::step], tickfont=dict(size=10))
    fig.update_xaxes(title="key", tickangle=-60, **axis)
    fig.update_yaxes(title="query", autorange="reversed", scaleanchor="x", **axis)
    fig.update_layout(title=dict(text=title, font_size=14), height=size, margin=dict(l=10, r=10, t=70, b=10))
    return fig


def example_picker(model, task, key: str) -> ex.Example | None:
    """An input: a sample of the task's eval set, typed token ids, or text (models trained on text)."""
    has_text = ex.takes_text(model)  # not a task's vocabulary (algorithmic checkpoints carry one too)
    sources = (["Text"] if has_text else []) + (["Eval sample"] if task is not None else []) + ["Token ids"]
    source = st.radio("Input", sources, horizontal=True, key=f"{key}_source")
    try:
        if source == "Eval sample":
            index = st.number_input(f"Eval sample (0-{SHOWN_EVAL_SAMPLES - 1})", 0, SHOWN_EVAL_SAMPLES - 1, 0,
                                    key=f"{key}_sample")
            return ex.eval_example(task, int(index), SHOWN_EVAL_SAMPLES)
        if source == "Token ids":
            n = min(model.cfg.n_ctx, 8)
            default = " ".join(str(i % model.cfg.d_vocab) for i in range(1, n + 1))
            text = st.text_input(f"Token ids (0-{model.cfg.d_vocab - 1}, at most {model.cfg.n_ctx})", default,
                                 key=f"{key}_ids")
            return ex.ids_example(text, model, task)
        text = st.text_area("Text", "The quick brown fox jumps over the lazy dog.", key=f"{key}_text", height=80)
        return ex.text_example(model, text)
    except ValueError as e:
        st.error(str(e))
        return None


def show_tokens(example: ex.Example) -> None:
    """The input's tokens in one line; the answer tokens the task scores in brackets."""
    scored = example.answer is not None and any(example.answer)
    shown = [f"[{t}]" if scored and example.answer[i] else t for i, t in enumerate(example.labels)]
    st.caption(f"{example.source}, {len(shown)} tokens" + (" (the scored answer in brackets)" if scored else ""))
    st.code(" ".join(shown), language=None, wrap_lines=True)


# --------------------------------------------------------------------------- views
def view_runs(root: Path, runs: pd.DataFrame) -> None:
    st.header("Runs")
    counts = runs["status"].value_counts()
    cols = st.columns(5)
    cols[0].metric("runs", len(runs))
    cols[1].metric("finished", int(counts.get("finished", 0)))
    cols[2].metric("running / unfinished", int(counts.get("running", 0)))
    cols[3].metric("analysed", int(runs["has_analysis"].fillna(False).astype(bool).sum()))
    cols[4].metric("unreadable", int(counts.get("corrupt", 0)))
    bad = runs[runs["status"].isin(["corrupt", "error", "diverged"])]
    if len(bad):
        st.warning("\n".join(f"- `{r.run}`: {r.status}: {r.error or 'see its summary.json'}" for r in bad.itertuples()))

    f1, f2, f3, f4 = st.columns([2, 1, 1, 1])
    text = f1.text_input("Filter (run name or task contains)", key="filter_text")
    variants = f2.multiselect("Variant", order_variants(runs["variant"].dropna()), key="filter_variant")
    tasks = f3.multiselect("Task", sorted(set(runs["task"].dropna())), key="filter_task")
    statuses = f4.multiselect("Status", sorted(set(runs["status"].dropna())), key="filter_status")
    shown = runs
    if text:
        shown = shown[shown["run"].str.contains(text, case=False, regex=False)
                      | shown["task_label"].fillna("").str.contains(text, case=False, regex=False)]
    if variants:
        shown = shown[shown["variant"].isin(variants)]
    if tasks:
        shown = shown[shown["task"].isin(tasks)]
    if statuses:
        shown = shown[shown["status"].isin(statuses)]
    s1, s2 = st.columns([3, 1])
    sort_options = ["run", "eval_acc", "eval_loss", "params_trainable", "tokens_per_s", "variant", "task_label"]
    sort_by = s1.selectbox("Sort by", sort_options, key="sort_by")
    descending = s2.toggle("Descending", value=False, key="sort_desc")
    shown = shown.sort_values(sort_by, ascending=not descending, na_position="last", kind="stable").reset_index(drop=True)

    columns = ["run", "variant", "task_label", "size", "seed", "status", "eval_acc", "best_eval_acc", "eval_loss",
               "params_trainable", "params_frozen", "step", "steps", "lr", "tokens_per_s", "has_analysis", "error"]
    st.session_state["runs_shown"] = list(shown["run"])
    st.dataframe(
        shown[columns], key="runs_table", on_select=_on_table_select, selection_mode="multi-row",
        hide_index=True, height=min(600, 35 * (len(shown) + 1) + 3),
        column_config={
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
        },
    )
    chosen = selected_ids(runs)
    st.caption(f"{len(shown)} of {len(runs)} runs shown. Select rows (the boxes at the left) to open them in "
               "the other views: " + (", ".join(f"`{r}`" for r in chosen) if chosen else "none selected yet."))
    if chosen and st.button("Clear selection", key="clear_selection"):
        st.session_state["selected"] = []
        st.rerun()


def _on_table_select() -> None:
    """Copy the table's selected rows into session_state["selected"] (kept while other views are open)."""
    rows = st.session_state["runs_table"]["selection"]["rows"]
    shown = st.session_state.get("runs_shown", [])
    st.session_state["selected"] = [shown[i] for i in rows if i < len(shown)]


def view_run(root: Path, runs: pd.DataFrame) -> None:
    st.header("Run")
    row = pick_run(runs, "run_run")
    if row is None:
        return
    cols = st.columns(6)
    cols[0].metric("status", row["status"])
    cols[1].metric(f"step (of {ex.format_count(row['steps'])})", ex.format_count(row["step"]))  # short: no truncation
    cols[2].metric("eval accuracy", "-" if pd.isna(row["eval_acc"]) else f"{row['eval_acc']:.3f}")
    cols[3].metric("eval loss", "-" if pd.isna(row["eval_loss"]) else f"{row['eval_loss']:.4f}")
    cols[4].metric("trainable params", ex.format_count(row["params_trainable"]))
    cols[5].metric("frozen params", ex.format_count(row["params_frozen"]))
    if row["status"] == "error" and row["error"]:
        st.error(f"Training failed: {row['error']}")

    tabs = st.tabs(["Curves", "Config", "Parameters", "Analysis", "Figures"])
    with tabs[0]:
        metrics = ex.read_run_metrics(root, row["path"])
        if metrics.empty:
            st.info("No metrics logged yet.")
        else:
            x_range = [0, max(float(metrics["step"].max()), float(row["steps"] or 0)) * 1.03]
            steps = ex.kept_steps(root, row["path"])
            marked = None
            if steps:
                marked = st.select_slider("Training step (kept checkpoints)", options=steps, value=steps[-1],
                                          key="run_step")
                dynamics = ex.read_run_dynamics(root, row["path"])
                if dynamics is not None and (dynamics["step"] == marked).any():
                    st.dataframe(dynamics[dynamics["step"] == marked], hide_index=True, key="run_dynamics")
                else:
                    st.caption(f"Head scores by step: `mixit analyze {row['path']} --checkpoints`. The Heads view "
                               "shows any kept step.")

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
    with tabs[1]:
        try:
            info = ex.read_run_info(root, row["path"])
        except (ValueError, OSError) as e:
            st.error(str(e))
        else:
            st.subheader("Training")
            st.json(info.get("train", {}), expanded=True)
            st.subheader("Model")
            st.json(info.get("model", {}), expanded=False)
            st.subheader("Task and provenance")
            st.json({k: v for k, v in info.items() if k not in ("train", "model")}, expanded=False)
    with tabs[2]:
        model = load_model_or_error(root, row)
        if model is not None:
            table = ex.parameter_table(model)
            st.dataframe(table, hide_index=True, key="run_params", column_config={
                c: st.column_config.NumberColumn(c, format="localized") for c in ("trainable", "frozen", "total")})
            long = table.melt(id_vars="component", value_vars=["trainable", "frozen"], var_name="kind", value_name="count")
            st.plotly_chart(px.bar(long, x="component", y="count", color="kind", title="parameters per component",
                                   color_discrete_map={"trainable": "#0072B2", "frozen": "#BBBBBB"}), key="run_param_bar")
            fixed = ex.fixed_matrix_values(model)
            if fixed:
                st.caption(f"MixiT's fixed attention matrices add {fixed:,} values: buffers saved with the "
                           "checkpoint, neither trained nor counted as parameters.")
    with tabs[3]:
        analysis = ex.read_run_analysis(root, row["path"])
        if analysis is None:
            st.info(f"Not analysed yet: `mixit analyze {row['path']}` stores head scores, attention statistics, "
                    "signal propagation and ablations (the Heads view computes head scores on demand).")
        else:
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
    with tabs[4]:
        links = ex.figure_links(root, figures_for_group(row["group"] or None))
        if not links:
            st.info("No figures recorded for this run: `mixit figures` (or `mixit reproduce`) draws them from a "
                    "runs directory, and `mixit reproduce` records where in reproduce.json.")
        for link in links:
            if link.readable:
                st.image(str(link.path), caption=link.name)
            else:
                st.markdown(f"- **{link.name}**: `{link.path}`")
        if links and not any(link.readable for link in links):
            st.caption("The figures lie outside the runs directory, which is all the explorer reads; open them "
                       "from these paths.")


def run_model_example(root: Path, runs: pd.DataFrame, key: str):
    """The Attention/Predict preamble: pick a run, load its model, pick and show an input.

    Returns (row, model, task, example), or None when any step stopped (it has said why)."""
    row = pick_run(runs, f"{key}_run", need_checkpoint=True)
    if row is None:
        return None
    model = load_model_or_error(root, row)
    if model is None:
        return None
    task = task_or_none(root, row)
    example = example_picker(model, task, key)
    if example is None:
        return None
    show_tokens(example)
    return row, model, task, example


def view_attention(root: Path, runs: pd.DataFrame) -> None:
    st.header("Attention")
    chosen = run_model_example(root, runs, "attn")
    if chosen is None:
        return
    row, model, task, example = chosen
    stamp = ex.checkpoint_stamp(root, row["path"])
    patterns = cached_patterns(str(root), row["path"], stamp, tuple(example.tokens.tolist()))
    kinds = ex.head_kinds(model)
    n_layers, n_heads, n, _ = patterns.shape
    if ex.is_fixed_attention(model):
        sink = ("; head 0 of each layer is the sink head (half on the token itself, half on the first token)"
                if ex.has_sink_head(model) else "")
        st.info(f"MixiT: every pattern is a fixed random matrix (input-independent), the same for any input{sink}.")
    elif ex.fixed_layers(model):
        fixed = ", ".join(str(layer) for layer in ex.fixed_layers(model))
        st.info(f"Layer(s) {fixed}: fixed random matrices (input-independent), the same for any input; the other "
                "layers' patterns depend on the input.")
    titles = [f"L{l} H{h}: {kinds[l][h]}" for l in range(n_layers) for h in range(n_heads)]
    grid = make_subplots(rows=n_layers, cols=n_heads, subplot_titles=titles, horizontal_spacing=0.04,
                         vertical_spacing=0.08 if n_layers > 1 else 0.0)
    colors = pattern_colors(patterns)
    ticks = tick_labels(example.labels)
    custom = np.array([[[ticks[i], ticks[j]] for j in range(n)] for i in range(n)], dtype=object)
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
    st.caption("Every layer x head (rows = query position, columns = key position); hover for tokens and weights.")
    st.plotly_chart(grid, key="attn_grid")
    heads = [f"L{l} H{h}" for l in range(n_layers) for h in range(n_heads)]
    chosen = st.pills("Click a head to enlarge", heads, default=heads[0], key="attn_head") or heads[0]
    l, h = (int(p[1:]) for p in chosen.split())
    st.plotly_chart(pattern_figure(patterns[l, h], example.labels, f"{row['run']}<br>layer {l}, head {h}: {kinds[l][h]}",
                                   colors), key="attn_big")


def default_head_runs(runs: pd.DataFrame, pool: pd.DataFrame, options: list[str]) -> list[str]:
    """The runs ticked in Runs; else the run last opened and its study's other variants on the same task."""
    ticked = selected_ids(runs)
    if ticked:
        return ticked
    current = st.session_state.get("current_run")
    if current in set(pool["run"]):
        row = pool[pool["run"] == current].iloc[0]
        peers = pool[(pool["group"] == row["group"]) & (pool["task_label"] == row["task_label"])
                     & (pool["run"] != current)]
        return [current] + list(peers["run"])[:3]
    return options[:3]


def view_heads(root: Path, runs: pd.DataFrame) -> None:
    st.header("Heads")
    pool = runs[runs["has_checkpoint"].fillna(False).astype(bool) & (runs["status"] != "corrupt")]
    if pool.empty:
        st.info("No run has a checkpoint yet.")
        return
    options = list(pool["run"]) + [r for r in selected_ids(runs) if r not in set(pool["run"])]
    chosen = st.multiselect("Runs, side by side", options, default=default_head_runs(runs, pool, options),
                            key="heads_runs")
    scores = st.multiselect("Scores", list(ex.HEAD_SCORES),
                            default=["induction", "previous_token", "first_token", "copying"],
                            format_func=ex.HEAD_SCORES.get, key="heads_scores")
    rows = {run: runs[runs["run"] == run].iloc[0] for run in chosen}
    step = step_choice(root, [r for r in rows.values() if r["status"] != "corrupt"], "heads_step")
    tables: dict[str, tuple[pd.DataFrame, dict, str, int | None]] = {}
    steps: dict[str, int | None] = {}  # the checkpoint each run is shown at (None: its final one)
    for run, row in rows.items():
        if row["status"] == "corrupt":
            st.error(f"{run} cannot be read: {row['error']}")
            continue
        steps[run] = step if step is not None and step in ex.kept_steps(root, row["path"]) else None
        if step is not None and steps[run] is None:
            st.caption(f"`{run}` kept no checkpoint at step {step}: its final checkpoint is shown.")
        try:
            with st.spinner(f"Head scores of {run}..."):
                tables[run] = head_table(root, row, steps[run])
        except ex.NoHeadScores as e:  # a context too short for repeated sequences: nothing is wrong
            st.info(f"No head scores for {run}: {e}")
        except Exception as e:  # a broken checkpoint: an error on this run only
            st.error(f"No head scores for {run}: {e}")
    if not tables:
        return
    for run, (_, chance, source, _) in tables.items():
        chance_text = ", ".join(f"{ex.HEAD_SCORES.get(k, k)} {v:.3f}" for k, v in chance.items() if k in scores)
        st.caption(f"`{run}`: {source}" + (f"; chance: {chance_text}" if chance_text else ""))
    if len({n_seqs for *_, n_seqs in tables.values()}) > 1:
        st.caption("The runs' scores come from different numbers of sequences (above) and share one colour scale: "
                   "a difference of a few hundredths between them may be sampling, not the heads.")
    for score in scores:
        grids = {run: ex.score_grid(df, score) for run, (df, *_) in tables.items() if score in df}
        if not grids:
            continue
        values = np.concatenate([g.ravel() for g in grids.values()])
        values = values[np.isfinite(values)]
        if score == "copying":  # in [-1, 1]: diverging around 0
            scale, lo, hi = "RdBu_r", -1.0, 1.0
        else:  # attention mass, 0..1 (signed patterns of mixit/shaped may go a little past either end)
            scale = "Viridis"
            lo = min(0.0, float(values.min())) if len(values) else 0.0
            hi = max(1.0, float(values.max())) if len(values) else 1.0
        fig = make_subplots(rows=1, cols=len(grids), subplot_titles=[_short(runs, r) for r in grids],
                            horizontal_spacing=0.06)
        for i, (run, grid) in enumerate(grids.items()):
            fig.add_trace(go.Heatmap(
                z=grid, coloraxis="coloraxis", x=list(range(grid.shape[1])), y=list(range(grid.shape[0])),
                text=np.vectorize(lambda v: f"{v:.2f}")(grid), texttemplate="%{text}",
                hovertemplate=f"{run}<br>layer %{{y}} head %{{x}}<br>{score} %{{z:.4f}}<extra></extra>"),
                row=1, col=i + 1)
        fig.update_yaxes(autorange="reversed", dtick=1)
        fig.update_yaxes(title_text="layer", row=1, col=1)
        fig.update_xaxes(title_text="head", dtick=1)
        fig.update_layout(title=f"{ex.HEAD_SCORES[score]} score (one colour scale for all runs)",
                          coloraxis=dict(colorscale=scale, cmin=lo, cmax=hi),
                          height=150 + 60 * max(g.shape[0] for g in grids.values()), margin=dict(t=120, l=10, r=10, b=10))
        fig.update_annotations(font_size=11)
        st.plotly_chart(fig, key=f"heads_{score}")

    patching_heatmaps(root, runs, {run: steps[run] for run in tables})
    components_heatmaps(root, runs, {run: steps[run] for run in tables})

    st.subheader("A head on repeated random tokens")
    run = st.selectbox("Run", list(tables), key="heads_rep_run")
    row = runs[runs["run"] == run].iloc[0]
    model = load_model_or_error(root, row)
    if model is None:
        return
    if model.cfg.n_ctx < 4:
        st.info(f"n_ctx={model.cfg.n_ctx} is too short for a repeated sequence.")
        return
    c1, c2, c3 = st.columns(3)
    layer = c1.selectbox("Layer", list(range(model.cfg.n_layers)), key="heads_rep_layer")
    head = c2.selectbox("Head", list(range(model.cfg.n_heads)), key="heads_rep_head")
    max_len = model.cfg.n_ctx // 2
    seq_len = c3.slider("Length of r", 2, max_len, min(16, max_len), key="heads_rep_len") if max_len > 2 else 2
    tokens, pattern = ex.repeated_pattern(model, layer, head, seq_len)
    kind = ex.head_kinds(model)[layer][head]
    st.caption("The sequence is r then r again: an induction head attends to the token after the earlier "
               "copy of the current token (the stripe one step right of the offset diagonal); a previous-token "
               "head to the diagonal just below the main one; a sink head to column 0.")
    st.plotly_chart(pattern_figure(pattern, [str(t) for t in tokens.tolist()],
                                   f"{run}<br>layer {layer}, head {head}: {kind}"), key="heads_rep")


def per_run_tables(root: Path, runs: pd.DataFrame, chosen: dict[str, int | None], compute, what: str
                   ) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """{run: table} from `compute(root, run_dir, stamp, step) -> (table, where)` for each chosen run at its step,
    and one caption per run saying where its table came from (or why it has none: a ValueError's message)."""
    tables, notes = {}, []
    for run, step in chosen.items():
        row = runs[runs["run"] == run].iloc[0]
        try:
            with st.spinner(f"{what.capitalize()} of {run}..."):
                tables[run], where = compute(str(root), row["path"], ex.checkpoint_stamp(root, row["path"], step), step)
        except ValueError as e:  # a task it does not apply to, or a task that cannot be rebuilt
            notes.append(f"`{run}`: no {what} ({e})")
            continue
        notes.append(f"`{run}`: {where}" + ("" if step is None else f", step {step}"))
    return tables, notes


def patching_heatmaps(root: Path, runs: pd.DataFrame, chosen: dict[str, int | None]) -> None:
    """Head-level activation patching (analysis.patching) of the chosen retrieval / 1-hop k-hop runs and runs of
    tasks with their own patching_pairs: how much of the answer each head's clean output restores in a corrupted
    run, as a layer x head heatmap."""
    patchable = {run: step for run, step in chosen.items()
                 if ex.can_patch_run(root, runs[runs["run"] == run].iloc[0]["path"])}
    tables, notes = per_run_tables(root, runs, patchable, computed_patching, "patching")
    grids = {run: ex.patching_grid(table) for run, table in tables.items()}
    if not grids:
        return
    st.subheader("Activation patching: which heads carry the answer")
    st.caption("Each head's output is copied from a clean input into a corrupted one that differs only in the answer "
               "(retrieval: the queried value; k-hop: the letter after the previous occurrence; your own task: its "
               "patching_pairs), with "
               "TransformerLens's patching. 1 = the clean logit difference restored, 0 = none.")
    for note in notes:
        st.caption(note)
    reach = max(1.0, max(float(np.nanmax(np.abs(g))) for g in grids.values()))
    fig = make_subplots(rows=1, cols=len(grids), subplot_titles=[_short(runs, r) for r in grids], horizontal_spacing=0.06)
    for i, (run, grid) in enumerate(grids.items()):
        fig.add_trace(go.Heatmap(
            z=grid, coloraxis="coloraxis", x=list(range(grid.shape[1])), y=list(range(grid.shape[0])),
            text=np.vectorize(lambda v: f"{v:.2f}")(grid), texttemplate="%{text}",
            hovertemplate=f"{run}<br>layer %{{y}} head %{{x}}<br>restored %{{z:.3f}}<extra></extra>"), row=1, col=i + 1)
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_xaxes(title_text="head", dtick=1)
    fig.update_layout(title="fraction of the logit difference restored by patching one head",
                      coloraxis=dict(colorscale="RdBu_r", cmin=-reach, cmax=reach),
                      height=150 + 60 * max(g.shape[0] for g in grids.values()), margin=dict(t=120, l=10, r=10, b=10))
    st.plotly_chart(fig, key="heads_patching")


@st.cache_data(max_entries=64, show_spinner=False)
def computed_components(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, str]:
    model = None if step is None else cached_model(root, run_dir, stamp, step)
    return ex.components_table(Path(root), run_dir, model)


def components_heatmaps(root: Path, runs: pd.DataFrame, chosen: dict[str, int | None]) -> None:
    """Who does the work in each chosen run (analysis.components): per layer, the accuracy lost when its attention
    or MLP is mean-ablated, and each head's share of the answer's logit difference."""
    tables, notes = per_run_tables(root, runs, chosen, computed_components, "component analysis")
    if not tables:
        return
    st.subheader("Who does the work: attention and MLP")
    st.caption("Left of each pair: accuracy lost (points) when one layer's attention or MLP output is replaced by its "
               "mean over the eval inputs. Right: each head's share of the answer's logit difference (answer minus "
               "the strongest other token) that it writes directly. Stored tables come from mixit analyze's eval "
               "rows, computed ones from fewer; the captions say which.")
    for note in notes:
        st.caption(note)
    titles = [title for run in tables for title in (f"{_short(runs, run)}<br>ablation", "head share")]
    fig = make_subplots(rows=1, cols=2 * len(tables), subplot_titles=titles, horizontal_spacing=0.05)
    for i, (run, table) in enumerate(tables.items()):
        drop = -100 * ex.component_grid(table, "mean_delta_accuracy")
        share = ex.head_share_grid(table)
        fig.add_trace(go.Heatmap(
            z=drop, x=[f"L{layer}" for layer in range(drop.shape[1])], y=["attention", "MLP"], coloraxis="coloraxis",
            text=np.vectorize(lambda v: f"{v:.0f}")(drop), texttemplate="%{text}",
            hovertemplate=f"{run}<br>%{{y}} %{{x}}<br>accuracy lost %{{z:.1f}} points<extra></extra>"),
            row=1, col=2 * i + 1)
        fig.add_trace(go.Heatmap(
            z=share, coloraxis="coloraxis2", x=list(range(share.shape[1])), y=list(range(share.shape[0])),
            text=np.vectorize(lambda v: f"{v:.2f}")(share), texttemplate="%{text}",
            hovertemplate=f"{run}<br>layer %{{y}} head %{{x}}<br>share %{{z:.3f}}<extra></extra>"), row=1, col=2 * i + 2)
        fig.update_yaxes(autorange="reversed", dtick=1, row=1, col=2 * i + 2)
    fig.update_layout(title="who does the work: accuracy lost by mean ablation, and each head's direct share",
                      coloraxis=dict(colorscale="Viridis", cmin=0, cmax=100, colorbar=dict(x=1.0, len=0.45, y=0.75,
                                                                                           title="points")),
                      coloraxis2=dict(colorscale="RdBu_r", cmin=-1, cmax=1, colorbar=dict(x=1.0, len=0.45, y=0.2,
                                                                                           title="share")),
                      height=160 + 50 * max(ex.head_share_grid(t).shape[0] for t in tables.values()),
                      margin=dict(t=130, l=10, r=10, b=10))
    fig.update_annotations(font_size=10)
    st.plotly_chart(fig, key="heads_components")


def _short(runs: pd.DataFrame, run: str) -> str:
    """A subplot title in three short lines (variant and seed, task, size), so that four side by side stay apart."""
    row = runs[runs["run"] == run].iloc[0]
    task = str(row["task_label"]).replace(", ", ",<br>", 1) if len(str(row["task_label"])) > 28 else row["task_label"]
    return f"{variant_name(row['variant'])} · s{row['seed']}<br>{task}<br>{row['size']}"


def by_variant(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The frame with a `variant_name` column, and the plotly express arguments that colour by it."""
    frame = frame.assign(variant_name=frame["variant"].map(variant_name))
    return frame, dict(color="variant_name", color_discrete_map={variant_name(v): c for v, c in COLORS.items()},
                       category_orders={"variant_name": [variant_name(v) for v in VARIANT_ORDER]},
                       labels={"variant_name": "variant"})


def view_compare(root: Path, runs: pd.DataFrame) -> None:
    st.header("Compare")
    ok = runs[runs["status"] != "corrupt"]
    labels = sorted(set(ok["task_label"].dropna()))
    if labels:
        sel = [r for r in selected_ids(runs) if r in set(ok["run"])]
        first = ok[ok["run"] == sel[0]]["task_label"].iloc[0] if sel else labels[0]
        label = st.selectbox("Task", labels, index=labels.index(first), key="cmp_task")
        same = ok[ok["task_label"] == label]
        st.dataframe(same[["run", "variant", "size", "seed", "lr", "status", "eval_acc", "eval_loss",
                           "params_trainable", "params_frozen", "tokens_per_s"]], hide_index=True, key="cmp_table")
        curves = ex.compare_curves(root, same)
        if curves.empty:
            st.info("These runs have no metrics yet.")
        else:
            curves, style = by_variant(curves)
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
            speed_runs, style = by_variant(speed_runs)
            fig = px.bar(speed_runs, x="run", y="tokens_per_s", hover_name="run",
                         title="training tokens/s of these runs (as measured during training)", **style)
            fig.update_xaxes(showticklabels=False, title=None, categoryorder="trace")
            fig.update_yaxes(title="tokens/s")
            st.plotly_chart(fig, key="cmp_run_speed")

    st.subheader("Memorization")
    memory = ex.memorization_table(root, ok)
    if memory.empty:
        st.info("No analysed `memorize` runs (`mixit analyze` writes memory.csv).")
    else:
        memory = memory.sort_values(["keys", "run"])
        st.dataframe(memory[["run", "variant", "size", "keys", "accuracy", "bits", "max_bits", "params_trainable",
                             "bits_per_trainable_param"]], hide_index=True, key="cmp_memory")
        memory, style = by_variant(memory)
        memory["keys"] = memory["keys"].astype(str)
        fig = px.bar(memory, x="keys", y="bits_per_trainable_param", barmode="group", hover_name="run",
                     title="memorized bits per trainable parameter vs number of keys n^d", **style)
        fig.update_xaxes(type="category", title="keys (n^d)")
        fig.update_yaxes(title="bits per trainable parameter")
        st.plotly_chart(fig, key="cmp_memory_bar")

    st.subheader("Signal propagation at initialization")
    signal = ex.signal_table(root)
    if signal is None:
        st.info("No signal/signal.csv in this directory (`mixit reproduce` writes it).")
    else:
        signal, style = by_variant(signal[signal["d_model"] == signal["d_model"].max()])
        c1, c2 = st.columns(2)
        c1.plotly_chart(px.line(signal, x="depth", y="cosine", markers=True, title="token cosine after the last layer",
                                **style), key="cmp_signal_cos")
        positive = bool((signal["covariance"] > 0).all())
        fig = px.line(signal, x="depth", y="covariance", markers=True, log_y=positive,
                      title="token covariance after the last layer" + (" (log scale)" if positive else ""), **style)
        if positive:
            fig.update_yaxes(dtick=1, exponentformat="power")
        c2.plotly_chart(fig, key="cmp_signal_cov")
        st.caption(f"From signal/signal.csv: at initialization, d_model {int(signal['d_model'].max())}; "
                   "standard, frozen_qk, frozen_mlp and random are the same network at initialization.")

    st.subheader("Training speed")
    speed = ex.speed_table(root)
    if speed is None:
        st.info("No speed/speed.csv in this directory (`mixit reproduce` writes it).")
    else:
        shown, style = by_variant(speed)
        fig = px.bar(shown, x="variant_name", y="tokens_per_s", title="tokens/s of a training step (the same size "
                     "for every variant)", **style)
        fig.update_layout(showlegend=False, xaxis_title=None, yaxis_title="tokens/s")
        st.plotly_chart(fig, key="cmp_speed")
        st.dataframe(speed, hide_index=True, key="cmp_speed_table")


def view_predict(root: Path, runs: pd.DataFrame) -> None:
    st.header("Predict")
    chosen = run_model_example(root, runs, "pred")
    if chosen is None:
        return
    row, model, task, example = chosen
    if model.config.n_classes is not None:
        probs = ex.class_probabilities(model, example.tokens, ex.run_classes(root, row["path"]))
        st.dataframe(probs, hide_index=True, key="pred_classes")
        fig = px.bar(probs, x="class", y="probability", range_y=[0, 1], title="class probabilities")
        fig.update_xaxes(type="category")
        st.plotly_chart(fig, key="pred_class_bar")
        return
    n = int(example.tokens.shape[0])
    c1, c2 = st.columns(2)
    position = c1.slider("Predict the token after position", 0, n - 1, ex.default_position(example), key="pred_pos") \
        if n > 1 else 0
    k = c2.slider("k", 1, min(20, model.cfg.d_vocab), min(5, model.cfg.d_vocab), key="pred_k")
    top = ex.top_k_next(model, example.tokens, position, k, task)
    st.caption(f"After `{position}:{example.labels[position]}`, the model's next-token probabilities:")
    if position + 1 < n:
        actual = int(example.tokens[position + 1])
        p, rank = ex.next_token_probability(model, example.tokens, position, actual)
        st.markdown(f"Actual next token: **`{example.labels[position + 1]}`** (id {actual}), "
                    f"probability {p:.4f}, rank {rank} of {model.cfg.d_vocab}.")
    st.dataframe(top, hide_index=True, key="pred_top",
                 column_config={"probability": st.column_config.ProgressColumn("probability", min_value=0.0,
                                                                               max_value=1.0, format="%.4f")})
    fig = px.bar(top, x="probability", y=[f"{t} ({i})" for t, i in zip(top["token"], top["token_id"])],
                 orientation="h", range_x=[0, 1], title=f"top {k} next tokens")
    fig.update_yaxes(autorange="reversed", title="token")
    st.plotly_chart(fig, key="pred_bar")


# --------------------------------------------------------------------------- main
def main() -> None:
    st.set_page_config(page_title="MixiT Lab explorer", layout="wide")
    args = parse_args(sys.argv[1:])
    if "view" not in st.session_state:  # a link may open a view and a run: ?view=Attention&run=STUDY/RUN
        if st.query_params.get("view") in VIEWS:
            st.session_state["view"] = st.query_params["view"]
        if st.query_params.get("run"):
            st.session_state["current_run"] = st.query_params["run"]
    st.sidebar.title("MixiT Lab")
    view = st.sidebar.radio("View", VIEWS, key="view")
    st.sidebar.caption(f"Runs directory: `{args.runs}`")
    create = f"mixit reproduce --preset smoke --out {args.runs}"
    try:
        root = ex.open_root(args.runs)
    except FileNotFoundError as e:
        st.error(f"{e}.")
        st.markdown("Create some runs there (about two minutes on a laptop), then reload this page:")
        st.code(create, language="bash")
        return
    if st.sidebar.button("Reload runs", key="reload"):
        runs_table.clear()
    runs = runs_table(str(root))
    if runs.empty:
        st.warning(f"No runs under `{args.runs}` yet (a run is a directory with a run.json).")
        st.markdown("Create some (about two minutes on a laptop), then press *Reload runs*:")
        st.code(create, language="bash")
        return
    chosen = selected_ids(runs)
    if chosen:
        st.sidebar.markdown("**Selected runs**\n" + "\n".join(f"- `{r}`" for r in chosen))
    {"Runs": view_runs, "Run": view_run, "Attention": view_attention, "Heads": view_heads,
     "Compare": view_compare, "Predict": view_predict}[view](root, runs)


main()
