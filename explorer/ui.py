"""What the explorer's pages share: the frame's state (runs folder, runs, selection), cached data, and the
widgets that pick a run, load its model and choose an input.

Session state keys that outlive a page: "runs_dir" (the sidebar's runs folder), "selected" (the runs ticked
in the Runs table or opened from a finding, shown in the sidebar), "current_run" (the run last opened) and
"view" (a page to open on the next run: the frame switches to it, then forgets it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import torch

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.figures.style import VARIANT_ORDER, VARIANT_STYLES, variant_label

COLORS = {v: s.color for v, s in VARIANT_STYLES.items()}
SHOWN_EVAL_SAMPLES = 64
FRAME_KEY = "_frame"


@dataclass
class Frame:
    """What the frame found for this script run: the runs folder as typed, resolved, and its runs."""

    runs_dir: str
    root: Path
    runs: pd.DataFrame


def frame() -> Frame:
    """The frame of this script run (explorer/app.py sets it before it runs the page)."""
    return st.session_state[FRAME_KEY]


def open_page(view: str, runs: list[str] | None = None) -> None:
    """Ask the frame to open page `view` on the next run, with `runs` selected (a button's on_click)."""
    if runs is not None:
        st.session_state["selected"] = list(runs)
        if runs:
            st.session_state["current_run"] = runs[0]
    st.session_state["view"] = view


# --------------------------------------------------------------------------- cached data
@st.cache_data(ttl=10, show_spinner=False)
def runs_table(root: str) -> pd.DataFrame:
    """The runs of a folder (mixit_lab.analysis.explore.list_runs), cached for ten seconds."""
    return ex.list_runs(root)


def cached_model(root: str, run_dir: str, stamp: tuple, step: int | None = None):
    """A run's model (its final or kept checkpoint), kept while the checkpoint's stamp is unchanged."""
    return _cached_model(str(root), str(run_dir), stamp, step)  # one cache key however it is called


@st.cache_resource(max_entries=8, show_spinner="Loading the model...")
def _cached_model(root: str, run_dir: str, stamp: tuple, step: int | None):
    return ex.load_run_model(Path(root), run_dir, step)


@st.cache_data(max_entries=64, show_spinner=False)
def cached_patterns(root: str, run_dir: str, stamp: tuple, tokens: tuple[int, ...]) -> np.ndarray:
    """Every head's attention pattern on `tokens`: [layer, head, query, key]."""
    return em.attention_patterns(cached_model(root, run_dir, stamp), torch.tensor(tokens, dtype=torch.int64))


# --------------------------------------------------------------------------- runs
def variant_name(variant: str | None) -> str:
    """The variant's label in tables and legends."""
    return variant_label(variant or "?")


def run_caption(row: pd.Series) -> str:
    """A run in a picker: its name, variant, task, size and seed."""
    if row["status"] == "corrupt":
        return f"{row['run']} (damaged)"
    return f"{row['run']}  [{variant_name(row['variant'])}, {row['task_label']}, {row['size']}, seed {row['seed']}]"


def run_message(row: pd.Series) -> str | None:
    """Why a run stopped (the runs table's message, else its error), or None for a run without one."""
    for column in ("message", "error"):
        value = row.get(column)
        if isinstance(value, str) and value:
            return value
    return None


_MARKDOWN = re.compile(r"([\\`*_{}\[\]#!|<>~$])")  # what makes a link, an image, HTML, emphasis, code, maths


def plain(text: object) -> str:
    """Text a runs folder controls (a run's message or name, an error quoting its files) for st.error and the like,
    which render markdown: every markdown character escaped, so it shows as written and never becomes a link, an
    image the browser would fetch, or formatting."""
    return _MARKDOWN.sub(r"\\\1", str(text))


def show_stop_message(row: pd.Series) -> None:
    """A diverged or failed run's message, as an error."""
    message = run_message(row)
    if row["status"] == "diverged":
        st.error(f"Training diverged: {plain(message) if message else 'see its summary.json'}")
    elif row["status"] == "error":
        st.error(f"Training failed: {plain(message) if message else 'see its summary.json'}")


def selected_ids(runs: pd.DataFrame) -> list[str]:
    """The selected runs that this runs folder holds."""
    return [r for r in st.session_state.get("selected", []) if r in set(runs["run"])]


def pick_run(runs: pd.DataFrame, key: str, label: str = "Run", need_checkpoint: bool = False) -> pd.Series | None:
    """A run chosen among all runs; the selected runs come first. None (having said why) if none can be shown."""
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
    missing = isinstance(current, str) and current not in set(runs["run"])  # a link to a run that is not here
    if missing:
        st.warning(f"Run `{current}` (named by the link) is not in this runs folder: moved, deleted or misspelled. "
                   "Choose a run below.")
    index = options.index(current) if current in options else (None if missing else 0)
    captions = {row["run"]: run_caption(row) for _, row in runs.iterrows()}
    choice = st.selectbox(label, options, index=index, key=key, format_func=captions.get)
    if choice is None:
        return None
    st.session_state["current_run"] = choice
    row = runs[runs["run"] == choice].iloc[0]
    if row["status"] == "corrupt":
        st.error(f"This run is damaged and cannot be read: {plain(row['error'])}")
        return None
    return row


def load_model_or_error(root: Path, row: pd.Series):
    """The run's model, or None after showing why it cannot be loaded (this run only)."""
    try:
        return cached_model(str(root), row["path"], ex.checkpoint_stamp(root, row["path"]))
    except Exception as e:  # a half-written or corrupt checkpoint must not take the app down
        st.error(f"Cannot load the model of {plain(row['run'])}: {plain(e)}")
        return None


def task_or_none(root: Path, row: pd.Series):
    """The run's algorithmic task (for eval samples and token names), or None (text runs, or not rebuildable)."""
    try:
        return ex.task_of(root, row["path"])
    except (ValueError, OSError) as e:
        st.warning(f"The task of {plain(row['run'])} cannot be rebuilt ({plain(e)}); type token ids instead.")
        return None


def short_title(runs: pd.DataFrame, run: str) -> str:
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


# --------------------------------------------------------------------------- inputs
def example_picker(model, task, key: str) -> em.Example | None:
    """An input: a sample of the task's eval set, typed token ids, or text (models trained on text)."""
    has_text = em.takes_text(model)  # not a task's vocabulary (algorithmic checkpoints carry one too)
    sources = (["Text"] if has_text else []) + (["Eval sample"] if task is not None else []) + ["Token ids"]
    source = st.radio("Input", sources, horizontal=True, key=f"{key}_source")
    try:
        if source == "Eval sample":
            index = st.number_input(f"Eval sample (0-{SHOWN_EVAL_SAMPLES - 1})", 0, SHOWN_EVAL_SAMPLES - 1, 0,
                                    key=f"{key}_sample")
            return em.eval_example(task, int(index), SHOWN_EVAL_SAMPLES)
        if source == "Token ids":
            n = min(model.cfg.n_ctx, 8)
            default = " ".join(str(i % model.cfg.d_vocab) for i in range(1, n + 1))
            text = st.text_input(f"Token ids (0-{model.cfg.d_vocab - 1}, at most {model.cfg.n_ctx})", default,
                                 key=f"{key}_ids")
            return em.ids_example(text, model, task)
        text = st.text_area("Text", "The quick brown fox jumps over the lazy dog.", key=f"{key}_text", height=80)
        return em.text_example(model, text)
    except ValueError as e:
        st.error(str(e))
        return None


def show_tokens(example: em.Example) -> None:
    """The input's tokens in one line; the answer tokens the task scores in brackets."""
    scored = example.answer is not None and any(example.answer)
    shown = [f"[{t}]" if scored and example.answer[i] else t for i, t in enumerate(example.labels)]
    st.caption(f"{example.source}, {len(shown)} tokens" + (" (the scored answer in brackets)" if scored else ""))
    st.code(" ".join(shown), language=None, wrap_lines=True)


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
