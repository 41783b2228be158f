"""Heads: head scores of several runs side by side, activation patching, who does the work (attention and MLP
ablated, each head's share of the answer), a training-step slider, and one head on repeated random tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.analysis.heads import HEAD_SCORES
from mixit_lab.explorer import ui
from mixit_lab.explorer.heatmaps import cell_text, layer_head_grids, layer_head_trace, pattern_figure, score_range

Tables = dict[str, tuple[pd.DataFrame, dict, str, int | None]]  # run: (heads, chance, where from, sequences)


@st.cache_data(max_entries=64, show_spinner=False)
def computed_head_table(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Head scores computed now on repeated random sequences."""
    return em.compute_head_table(ui.cached_model(root, run_dir, stamp, step))


@st.cache_data(max_entries=64, show_spinner=False)
def computed_patching(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, str]:
    """Head-level activation patching: stored (final checkpoint) or computed now."""
    model = None if step is None else ui.cached_model(root, run_dir, stamp, step)
    return ex.patching_table(Path(root), run_dir, model, final_model=lambda: ui.cached_model(root, run_dir, stamp))


@st.cache_data(max_entries=64, show_spinner=False)
def computed_components(root: str, run_dir: str, stamp: tuple, step: int | None = None) -> tuple[pd.DataFrame, str]:
    """Who does the work (mixit_lab.analysis.components): stored (final checkpoint) or computed now."""
    model = None if step is None else ui.cached_model(root, run_dir, stamp, step)
    return ex.components_table(Path(root), run_dir, model, final_model=lambda: ui.cached_model(root, run_dir, stamp))


def head_table(root: Path, row: pd.Series, step: int | None = None) -> tuple[pd.DataFrame, dict, str, int | None]:
    """(heads table, chance, where it came from, number of repeated sequences): analysis/heads.csv if stored
    (final checkpoint only), else computed now on the final or the kept checkpoint of `step`."""
    if step is None:
        stored = ex.stored_head_table(root, row["path"])
        if stored is not None:
            n_seqs = ((ex.read_run_analysis(root, row["path"]) or {}).get("options") or {}).get("n_seqs")
            where = f"stored by mixit analyze (analysis/heads.csv, {n_seqs} repeated sequences)"
            return stored[0], stored[1], where, n_seqs
    df, chance = computed_head_table(str(root), row["path"], ex.checkpoint_stamp(root, row["path"], step), step)
    where = "the final checkpoint" if step is None else f"the checkpoint kept at step {step}"
    return df, chance, f"computed now on {em.SHOWN_HEAD_SEQS} repeated random sequences, {where}", em.SHOWN_HEAD_SEQS


def step_choice(root: Path, rows: list[pd.Series], key: str) -> int | None:
    """A 'Training step' slider over the kept checkpoints of these runs; None means the final checkpoint."""
    steps = sorted({s for row in rows for s in ex.kept_steps(root, row["path"])})
    if not steps:
        return None
    chosen = st.select_slider("Training step (kept checkpoints)", options=[*steps, "final"], value="final", key=key)
    return None if chosen == "final" else int(chosen)


def default_head_runs(runs: pd.DataFrame, pool: pd.DataFrame, options: list[str]) -> list[str]:
    """The selected runs; else the run last opened and its study's other variants on the same task."""
    ticked = ui.selected_ids(runs)
    if ticked:
        return ticked
    current = st.session_state.get("current_run")
    if current in set(pool["run"]):
        row = pool[pool["run"] == current].iloc[0]
        peers = pool[(pool["group"] == row["group"]) & (pool["task_label"] == row["task_label"])
                     & (pool["run"] != current)]
        return [current] + list(peers["run"])[:3]
    return options[:3]


def score_tables(root: Path, rows: dict[str, pd.Series], step: int | None) -> tuple[Tables, dict[str, int | None]]:
    """Each chosen run's head scores at `step` (its final checkpoint if it kept none there), and that step."""
    tables: Tables = {}
    steps: dict[str, int | None] = {}
    for run, row in rows.items():
        if row["status"] == "corrupt":
            st.error(f"{ui.plain(run)} cannot be read: {ui.plain(row['error'])}")
            continue
        steps[run] = step if step is not None and step in ex.kept_steps(root, row["path"]) else None
        if step is not None and steps[run] is None:
            st.caption(f"`{run}` kept no checkpoint at step {step}: its final checkpoint is shown.")
        try:
            with st.spinner(f"Head scores of {run}..."):
                tables[run] = head_table(root, row, steps[run])
        except em.NoHeadScores as e:  # a context too short for repeated sequences: nothing is wrong
            st.info(f"No head scores for {ui.plain(run)}: {ui.plain(e)}")
        except Exception as e:  # a broken checkpoint: an error on this run only
            st.error(f"No head scores for {ui.plain(run)}: {ui.plain(e)}")
    return tables, {run: steps[run] for run in tables}


def score_heatmaps(runs: pd.DataFrame, tables: Tables, scores: list[str]) -> None:
    """One figure per score: the runs' layer x head grids side by side on one colour scale."""
    for run, (_, chance, source, _) in tables.items():
        chance_text = ", ".join(f"{HEAD_SCORES.get(k, k)} {v:.3f}" for k, v in chance.items() if k in scores)
        st.caption(f"`{run}`: {source}" + (f"; chance: {chance_text}" if chance_text else ""))
    if len({n_seqs for *_, n_seqs in tables.values()}) > 1:
        st.caption("The runs' scores come from different numbers of sequences (above) and share one colour scale: "
                   "a difference of a few hundredths between them may be sampling, not the heads.")
    for score in scores:
        grids = {run: em.score_grid(df, score) for run, (df, *_) in tables.items() if score in df}
        if grids:
            scale, lo, hi = score_range(score, grids)
            st.plotly_chart(layer_head_grids(grids, [ui.short_title(runs, r) for r in grids], score,
                                             f"{HEAD_SCORES[score]} score (one colour scale for all runs)",
                                             scale, lo, hi), key=f"heads_{score}")


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
    """How much of the answer each head's clean output restores in a corrupted run (retrieval, 1-hop k-hop, and
    tasks with their own patching_pairs), as layer x head grids."""
    patchable = {run: step for run, step in chosen.items()
                 if ex.can_patch_run(root, runs[runs["run"] == run].iloc[0]["path"])}
    tables, notes = per_run_tables(root, runs, patchable, computed_patching, "patching")
    grids = {run: em.patching_grid(table) for run, table in tables.items()}
    if not grids:
        return
    st.subheader("Activation patching: which heads carry the answer")
    st.caption("Each head's output is copied from a clean input into a corrupted one that differs only in the answer "
               "(retrieval: the queried value; k-hop: the letter after the previous occurrence; your own task: its "
               "patching_pairs), with TransformerLens's patching. 1 = the clean logit difference restored, 0 = none.")
    for note in notes:
        st.caption(note)
    reach = max(1.0, max(float(np.nanmax(np.abs(g))) for g in grids.values()))
    st.plotly_chart(layer_head_grids(grids, [ui.short_title(runs, r) for r in grids], "restored",
                                     "fraction of the logit difference restored by patching one head", "RdBu_r",
                                     -reach, reach), key="heads_patching")


def components_figure(runs: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> go.Figure:
    """Per run, a pair: accuracy lost by ablating each layer's attention or MLP, and each head's share."""
    titles = [title for run in tables for title in (f"{ui.short_title(runs, run)}<br>ablation", "head share")]
    fig = make_subplots(rows=1, cols=2 * len(tables), subplot_titles=titles, horizontal_spacing=0.05)
    for i, (run, table) in enumerate(tables.items()):
        drop = -100 * em.component_grid(table, "mean_delta_accuracy")
        fig.add_trace(go.Heatmap(
            z=drop, x=[f"L{layer}" for layer in range(drop.shape[1])], y=["attention", "MLP"], coloraxis="coloraxis",
            text=cell_text(drop, "{:.0f}"), texttemplate="%{text}",
            hovertemplate=f"{run}<br>%{{y}} %{{x}}<br>accuracy lost %{{z:.1f}} points<extra></extra>"),
            row=1, col=2 * i + 1)
        fig.add_trace(layer_head_trace(em.head_share_grid(table), run, "share", "coloraxis2"), row=1, col=2 * i + 2)
        fig.update_yaxes(autorange="reversed", dtick=1, row=1, col=2 * i + 2)
    fig.update_layout(title="who does the work: accuracy lost by mean ablation, and each head's direct share",
                      coloraxis=dict(colorscale="Viridis", cmin=0, cmax=100,
                                     colorbar=dict(x=1.0, len=0.45, y=0.75, title="points")),
                      coloraxis2=dict(colorscale="RdBu_r", cmin=-1, cmax=1,
                                      colorbar=dict(x=1.0, len=0.45, y=0.2, title="share")),
                      height=160 + 50 * max(em.head_share_grid(t).shape[0] for t in tables.values()),
                      margin=dict(t=130, l=10, r=10, b=10))
    fig.update_annotations(font_size=10)
    return fig


def components_heatmaps(root: Path, runs: pd.DataFrame, chosen: dict[str, int | None]) -> None:
    """Who does the work in each chosen run (mixit_lab.analysis.components)."""
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
    st.plotly_chart(components_figure(runs, tables), key="heads_components")


def repeated_tokens(root: Path, runs: pd.DataFrame, tables: Tables) -> None:
    """One head's pattern on a random sequence repeated twice (where induction shows)."""
    st.subheader("A head on repeated random tokens")
    run = st.selectbox("Run", list(tables), key="heads_rep_run")
    model = ui.load_model_or_error(root, runs[runs["run"] == run].iloc[0])
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
    tokens, pattern = em.repeated_pattern(model, layer, head, seq_len)
    kind = em.head_kinds(model)[layer][head]
    st.caption("The sequence is r then r again: an induction head attends to the token after the earlier copy of the "
               "current token (the stripe one step right of the offset diagonal); a previous-token head to the "
               "diagonal just below the main one; a sink head to column 0.")
    st.plotly_chart(pattern_figure(pattern, [str(t) for t in tokens.tolist()],
                                   f"{run}<br>layer {layer}, head {head}: {kind}"), key="heads_rep")


def main() -> None:
    """The Heads page."""
    found = ui.frame()
    root, runs = found.root, found.runs
    st.header("Heads")
    pool = runs[runs["has_checkpoint"].fillna(False).astype(bool) & (runs["status"] != "corrupt")]
    if pool.empty:
        st.info("No run has a checkpoint yet.")
        return
    options = list(pool["run"]) + [r for r in ui.selected_ids(runs) if r not in set(pool["run"])]
    chosen = st.multiselect("Runs, side by side", options, default=default_head_runs(runs, pool, options),
                            key="heads_runs")
    scores = st.multiselect("Scores", list(HEAD_SCORES), default=["induction", "previous_token", "first_token",
                                                                     "copying"],
                            format_func=HEAD_SCORES.get, key="heads_scores")
    rows = {run: runs[runs["run"] == run].iloc[0] for run in chosen}
    step = step_choice(root, [r for r in rows.values() if r["status"] != "corrupt"], "heads_step")
    tables, steps = score_tables(root, rows, step)
    if not tables:
        return
    score_heatmaps(runs, tables, scores)
    patching_heatmaps(root, runs, steps)
    components_heatmaps(root, runs, steps)
    repeated_tokens(root, runs, tables)


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
