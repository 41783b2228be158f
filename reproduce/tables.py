"""The report's tables: the paper's tables with our numbers beside theirs, built from one runs table.

    from mixit_lab.reproduce.tables import build_tables, tables_with_sources
    tables = build_tables("runs/quick")                   # {"table1_retrieval": DataFrame, ...}
    tables, sources = tables_with_sources(runs, runs_dir)  # and which runs each table read

Every number comes from the runs table (mixit_lab.analysis.runs.load_runs: summaries, and analysis/ results read
per run) and the runs folder's stage files (signal/signal.csv, speed/speed.csv). Runs are picked by
task, from the study named for a table when it exists (retrieval, khop, lm, algorithmic, sentiment,
memorize, depth), else from any study (mixit_lab.reproduce.selection). Accuracies are final eval accuracies over
seeds (mean, spread and median).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from mixit_lab.analysis.component_map import who_does_the_work
from mixit_lab.analysis.runs import by_loss, load_runs, records, reported
from mixit_lab.training.run import RecordedRun, Run
from mixit_lab.training.rundir import SIGNAL_FILE, SPEED_FILE
from mixit_lab.training.tasks import resolved_task_params

from mixit_lab.analysis.paper import FULL_ACCURACY, PAPER
from .reference import load_reference, reference_runs, reference_signal
from .selection import BEYOND, accuracy_stats, finished, in_variant_order, mean_by, papers_runs, select

# Table 3's tasks, each with the study it is read from.
TABLE3_STUDIES = {"addition": "algorithmic", "dyck": "algorithmic", "modadd": "algorithmic",
                  "memorize": "algorithmic", "sentiment": "sentiment"}
INDUCTION_COLUMNS = ["variant", "run", "task_head", "task_score", "task_shuffled", "task_chance", "task_positional",
                     "ablation_drop", "repeat_head", "repeat_score", "repeat_chance"]
# The paper's finding next to each task of the beyond-the-paper table.
BEYOND_RELATED = {
    "retrieval": "Table 1: retrieval needs learned attention (standard 100%, frozen_qk 97.0%, mixit 11.2%)",
    "khop": "Table 1: k-hop induction (standard 99.99%, frozen_qk 96.7%, mixit 48.6%)",
    "lm": "Table 2: log-ppl standard 2.78 < frozen_qk 3.07 < mixit 3.73",
}
BEYOND_COLUMNS = ["task", "variant", "metric", "value", "std", "seeds", "paper_related"]
SOURCE_COLUMNS = ["table", "run", "task", "variant"]  # which runs each table read (tables_with_sources)
ACCURACY_COLUMNS = ["task", "variant", "accuracy", "std", "median", "seeds", "stuck", "values"]  # values: per seed


# --------------------------------------------------------------------------- the tables together
def build_tables(runs_dir: str | Path | None = None, *, runs: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Every report table as a DataFrame (empty when the runs have nothing for it): from `runs` (a load_runs
    table) when given, else from the runs below runs_dir; runs_dir also holds the signal and speed files."""
    if runs is None:
        if runs_dir is None:
            raise ValueError("build_tables needs runs_dir or runs")
        runs = load_runs(Path(runs_dir))
    return tables_with_sources(runs, runs_dir)[0]


def tables_with_sources(runs: pd.DataFrame, runs_dir: str | Path | None,
                        fallback: bool = True) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The report's tables from `runs`, and the runs each table read (SOURCE_COLUMNS, `run` relative to the
    runs folder as in the runs table). fallback=False: a table reads only its own study's runs."""
    tables, sources = _build(runs, None if runs_dir is None else Path(runs_dir), fallback)
    return {name: in_variant_order(df) for name, df in tables.items()}, sources


def reference_tables(runs_dir: str | Path | None = None, records: list[dict[str, Any]] | None = None, *,
                     runs: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """The report's tables from the authors' code (mixit_lab.reproduce.reference), at the settings of the runs our report
    reads (`runs`, a load_runs table, when given, else the runs below runs_dir; a tuned setting's at its chosen
    learning rate, so that "the authors' code, same settings" is at each variant's chosen rate).

    Only the tables their scripts can fill (accuracy, memorization, depth) have rows, and Table 7 from their model
    at init at our signal stage's settings (runs_dir's signal/signal.json; mixit_lab.reproduce.reference.reference_signal);
    the others are empty."""
    records = load_reference() if records is None else records
    if runs is None:
        if runs_dir is None:
            raise ValueError("reference_tables needs runs_dir or runs")
        runs = load_runs(Path(runs_dir))
    theirs = reference_runs(records, reported(runs), by_study=True)
    tables = _build(theirs, None, fallback=False)[0]
    tables["table7_signal"] = reference_signal(records, None if runs_dir is None else Path(runs_dir) / SIGNAL_FILE)
    return {name: in_variant_order(df) for name, df in tables.items()}


def _build(runs: pd.DataFrame, runs_dir: Path | None,
           fallback: bool = True) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The tables from `runs` (rows of mixit_lab.analysis.runs.COLUMNS) and the runs each read; runs_dir holds the signal
    and speed stages' files (None: those tables are empty). fallback=False: a table reads only its own study's
    runs (the reference's, whose other studies were run at other settings)."""

    def pick(task: str, study: str) -> pd.DataFrame:
        return select(runs, task, study, fallback)

    retrieval, khop, lm = _most_pairs(pick("retrieval", "retrieval")), pick("khop", "khop"), pick("lm", "lm")
    table3 = [pick(task, study) for task, study in TABLE3_STUDIES.items()]
    memorize, depth = _with_memory(pick("memorize", "memorize")), _several_depths(pick("addition", "depth"))
    per_size = _memorize_sizes(memorize)
    induction = _induction(khop, runs)
    tables = {
        "table1_retrieval": _table1(retrieval, khop),
        "table2_lm": _table2(lm),
        "table3_tasks": _table3(table3),
        "table4_memorize_sizes": per_size,
        "table4_memorize": memorize_regimes(per_size),
        "table6_depth": _table6(depth),
        "table7_signal": _table7(None if runs_dir is None else runs_dir / SIGNAL_FILE),
        "induction": induction,
        "components": who_does_the_work(papers_runs(runs)).drop(columns="layer"),
        "beyond": _beyond(runs),
        "speed": _speed(None if runs_dir is None else runs_dir / SPEED_FILE),
    }
    read = {"table1_retrieval": [retrieval, khop], "table2_lm": [lm], "table3_tasks": table3,
            "table4_memorize_sizes": [memorize], "table4_memorize": [memorize], "table6_depth": [depth],
            "induction": [runs[runs["run"].isin(induction["run"])]]}
    parts = [df[["run", "task", "variant"]].assign(table=name) for name, dfs in read.items() for df in dfs if len(df)]
    sources = pd.concat(parts, ignore_index=True)[SOURCE_COLUMNS] if parts else pd.DataFrame(columns=SOURCE_COLUMNS)
    return tables, sources


# --------------------------------------------------------------------------- which runs a table reads
def _most_pairs(retrieval: pd.DataFrame) -> pd.DataFrame:
    """Retrieval runs at the largest number of pairs trained (the task's default where a run gave none)."""
    if retrieval.empty:
        return retrieval
    pairs = retrieval.apply(lambda r: resolved_task_params(r["task"], r["task_params"]).get("pairs"), axis=1)
    return retrieval[pairs == pairs.max()]


def _several_depths(depth: pd.DataFrame) -> pd.DataFrame:
    """The depth study's runs when it trained two depths or more, else none (no trend to read)."""
    return depth.iloc[0:0] if len(depth) and depth["n_layers"].nunique() < 2 else depth


def _with_memory(memorize: pd.DataFrame) -> pd.DataFrame:
    """The memorization runs with a result (analysed, or a reference record), under a `memory` column."""
    if memorize.empty:
        return memorize.assign(memory=pd.Series(dtype=object))
    memorize = memorize.assign(memory=[r.analysis_summary("memory") for r in records(memorize)])
    return memorize[memorize["memory"].map(bool)]


# --------------------------------------------------------------------------- one table each
def _accuracy_rows(runs: pd.DataFrame, paper: dict[str, float] | None) -> list[dict[str, Any]]:
    """Per variant and task setting, accuracy over seeds (ACCURACY_COLUMNS) and the paper's number."""
    return [{"task": r.task_label, "variant": r.variant, "accuracy": r.acc, "std": r.acc_std, "median": r.median,
             "seeds": r.seeds, "stuck": r.stuck, "values": r.acc_values, "paper": (paper or {}).get(r.variant)}
            for r in accuracy_stats(runs, ["variant", "task_label"]).itertuples()]


def _table1(retrieval: pd.DataFrame, khop: pd.DataFrame) -> pd.DataFrame:
    """Table 1: retrieval (at the largest number of pairs trained) and k-hop induction accuracy over seeds."""
    rows = _accuracy_rows(retrieval, PAPER["retrieval"]) + _accuracy_rows(khop, PAPER["khop"])
    return pd.DataFrame(rows, columns=[*ACCURACY_COLUMNS, "paper"])


def _table2(lm: pd.DataFrame) -> pd.DataFrame:
    """Table 2: language modeling, validation log-perplexity (nats per token) over seeds."""
    t2 = mean_by(lm.assign(log_ppl=lm["eval_loss"].astype(float)), ["variant"], "log_ppl")
    t2["ppl"] = t2["log_ppl"].map(lambda x: math.exp(x) if pd.notna(x) else None)
    t2["paper_log_ppl"] = t2["variant"].map(PAPER["lm"])
    return t2


def _table3(per_task: list[pd.DataFrame]) -> pd.DataFrame:
    """Table 3: the algorithmic tasks and sentiment (one runs table per task), accuracy over seeds with the size
    of each held-out set and the paper's number where it gives one."""
    rows = []
    for runs in per_task:
        if runs.empty:
            continue
        items = {label: _eval_items(record) for label, record in zip(runs["task_label"], records(runs))}
        paper = PAPER.get(str(runs["task"].iloc[0]))
        rows += [{**row, "eval_items": items.get(row["task"])} for row in _accuracy_rows(runs, paper)]
    return pd.DataFrame(rows, columns=[*ACCURACY_COLUMNS, "eval_items", "paper"])


def _memorize_sizes(memorize: pd.DataFrame) -> pd.DataFrame:
    """Table 4's per-run rows: accuracy, bits and bits per trainable parameter at each dataset size (see
    memorize_regimes for the two regimes read from them)."""
    rows = []
    for r in memorize.itertuples():
        params = resolved_task_params(r.task, r.task_params)
        rows.append({"variant": r.variant, "n": params.get("n"), "d": params.get("d"), "seed": r.seed,
                     "accuracy": r.memory.get("accuracy"), "bits": r.memory.get("bits"),
                     "params_trainable": r.memory.get("params_trainable"),
                     "bits_per_trainable_param": r.memory.get("bits_per_trainable_param")})
    return pd.DataFrame(rows, columns=["variant", "n", "d", "seed", "accuracy", "bits", "params_trainable",
                                       "bits_per_trainable_param"])


def memorize_regimes(per_size: pd.DataFrame) -> pd.DataFrame:
    """Bits per trainable parameter per variant (mean and spread over seeds) in two regimes: "fixed", the
    paper's Table 4, at the largest n that standard stores completely (mean accuracy >= FULL_ACCURACY);
    "capacity", at the largest n trained (finding 4 checks that the models ran out of capacity there)."""
    columns = ["regime", "variant", "n", "bits_per_trainable_param", "bits_per_trainable_param_std", "seeds",
               "accuracy", "paper", "bits_per_trainable_param_values"]
    if per_size.empty:
        return pd.DataFrame(columns=columns)
    standard = per_size[per_size["variant"] == "standard"].groupby("n")["accuracy"].mean()
    full = standard[100 * standard >= FULL_ACCURACY]
    picks = ([("fixed", full.index.max())] if len(full) else []) + [("capacity", per_size["n"].max())]
    parts = []
    for regime, n in picks:
        at = per_size[per_size["n"] == n]
        part = mean_by(at, ["variant"], "bits_per_trainable_param")
        part["accuracy"] = part["variant"].map(at.groupby("variant")["accuracy"].mean())
        parts.append(part.assign(regime=regime, n=n))
    out = pd.concat(parts, ignore_index=True)
    out["paper"] = out["variant"].map(PAPER["memorize_bits"])
    return out[columns]


def _table6(depth: pd.DataFrame) -> pd.DataFrame:
    """Table 6: addition accuracy against depth."""
    return accuracy_stats(depth, ["variant", "n_layers", "d_model", "n_heads", "steps"]).rename(
        columns={"acc": "accuracy", "acc_std": "std", "acc_values": "values"})


def _table7(signal_path: Path | None) -> pd.DataFrame:
    """Table 7: token covariance and cosine at the last layer against depth, at initialisation (signal stage), with
    the covariance's spread over seeds (covariance_std, n_seeds) where the stage recorded it."""
    columns = ["variant", "d_model", "depth", "covariance", "cosine"]
    if signal_path is None or not signal_path.is_file():
        return pd.DataFrame(columns=columns)
    sig = pd.read_csv(signal_path)
    columns += [c for c in ("covariance_std", "n_seeds") if c in sig]
    return sig[sig["layer"] == sig["depth"]][columns].reset_index(drop=True)


def _eval_items(record: Run | RecordedRun) -> int | None:
    """How many held-out items a run was scored on (None when unknown, or for a task built from a corpus)."""
    return record.held_out_items()


def _induction_row(run: Any, record: Run | RecordedRun) -> dict[str, Any] | None:
    """One analysed run's induction row (INDUCTION_COLUMNS), or None when its analysis has neither score."""
    summary = (record.analysis() or {}).get("summary") or {}
    heads, aligned = summary.get("heads"), summary.get("task_induction")
    if not heads and not aligned:
        return None
    row = {"variant": run.variant, "run": run.run}
    if aligned:
        top, ablated = aligned["top"], aligned.get("ablation") or {}
        drop = ablated.get("accuracy_drop")
        row.update(task_head=f"L{top['layer']}H{top['head']}", task_score=top["score"],
                   task_shuffled=top.get("shuffled"), task_chance=aligned["chance"],
                   task_positional=aligned.get("positional"), ablation_drop=None if drop is None else 100 * drop)
    if heads:
        top = heads["top_induction"]
        row.update(repeat_head=f"L{top['layer']}H{top['head']}", repeat_score=top["score"],
                   repeat_chance=heads["chance"]["induction"])
    return row


def _induction(khop: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Induction heads per run (k-hop runs preferred): the task-aligned score of each run's best head on the task's
    own inputs, its chance levels and what ablating it costs; the repeated-token score as context."""
    chosen = khop if len(khop) else finished(runs)
    rows = [row for r, record in zip(chosen.itertuples(), records(chosen)) if (row := _induction_row(r, record))]
    ind = pd.DataFrame(rows, columns=INDUCTION_COLUMNS)
    if len(ind):
        # Every seed's run, each variant's best first: by the task-aligned score where there is one, else the
        # repeated-token score (finding 6 reads every seed; the first row of a variant is its best).
        ind = ind.assign(_has_task=ind["task_score"].notna())
        ind = ind.sort_values(["_has_task", "task_score", "repeat_score"], ascending=False, na_position="last")
        ind = ind.drop(columns="_has_task").reset_index(drop=True)
    return ind


def _beyond(runs: pd.DataFrame) -> pd.DataFrame:
    """Beyond the paper: each grid model's headline metric per task (the task's `headline`), over seeds."""
    rows = []
    done = finished(runs)
    for (task, label, variant), df in done[done["group"] == BEYOND].groupby(["task", "task_label", "variant"],
                                                                             sort=False):
        loss = bool(by_loss(df).all())
        values = df["eval_loss" if loss else "eval_acc"].astype(float) * (1 if loss else 100)
        rows.append({"task": label, "variant": variant, "metric": "log-ppl" if loss else "accuracy %",
                     "value": values.mean(), "std": values.std(ddof=0), "seeds": len(values),
                     "paper_related": BEYOND_RELATED.get(task, "")})
    return pd.DataFrame(rows, columns=BEYOND_COLUMNS)


def _speed(speed_path: Path | None) -> pd.DataFrame:
    """Speed: per-sample training time relative to standard, with the spread over the stage's repeats."""
    if speed_path is None or not speed_path.is_file():
        return pd.DataFrame(columns=["variant", "tokens_per_s", "ms_per_sample", "faster_pct", "faster_pct_spread",
                                     "paper_faster_pct"])
    sp = pd.read_csv(speed_path)
    sp["faster_pct"] = -100 * sp["relative_to_standard"]
    # The spread of that saving over the stage's repeats (speed files written before it existed: unknown).
    sp["faster_pct_spread"] = 100 * sp["relative_spread"] if "relative_spread" in sp else float("nan")
    sp["paper_faster_pct"] = sp["variant"].map(PAPER["speed_faster_pct"])
    # Each timed block's saving (files written before it was recorded: none, and no interval)
    per_block = sp["relative_per_block"] if "relative_per_block" in sp else pd.Series([""] * len(sp))
    sp["faster_pct_values"] = [[] if pd.isna(v) else [-100 * float(x) for x in str(v).split()] for v in per_block]
    return sp[["variant", "d_model", "n_layers", "seq_len", "batch_size", "device", "params_trainable",
               "params_frozen", "tokens_per_s", "ms_per_sample", "faster_pct", "faster_pct_spread", "paper_faster_pct",
               "faster_pct_values"]]
