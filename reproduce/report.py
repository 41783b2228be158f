"""The reproduction report: the paper's tables with our numbers beside theirs, and a verdict per finding.

    from mixit_lab.reproduce.report import write_report
    findings = write_report("runs/quick", "reports/quick", manifest)    # report.md + one CSV per table

The report is written from one runs table (mixit_lab.analysis.runs.load_runs, read once, or given as `runs=`), which
every table builder reads. The work is split by job, one module each:

    mixit_lab.reproduce.selection  which runs a table reads; statistics over seeds (medians, stuck seeds)
    mixit_lab.reproduce.tables     the tables (build_tables, reference_tables, memorize_regimes)
    mixit_lab.reproduce.claims     a finding's parts and claims (Claim, Part, Finding)
    mixit_lab.reproduce.findings   the seven findings, thresholds as named fields (FINDINGS)
    mixit_lab.reproduce.verdicts   verdicts against the authors' code (check_findings, verdict_of, VERDICTS)
    mixit_lab.reproduce.emergence  the scale preset's tables and section

Each finding's criterion is written out in the report, and a finding whose data is missing is "not
measured", never "holds". findings.json holds, per finding, the keys of check_findings: its verdict, its
parts (ours beside the authors' code's) and the runs it read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from mixit_lab.analysis.runs import damaged_files, load_runs, reported, tuning_runs
from mixit_lab.models.files import atomic_directory, atomic_file, recover_directory, remove_leftovers, write_json, write_text
from mixit_lab.training.rundir import REPORT_FILE

from .emergence import emergence_section, emergence_tables
from .findings import FINDINGS
from .grid import across_the_grid, grid_text, measured_at
from .markdown import markdown_table
from .reference import end_to_end, load_reference
from .selection import BEYOND, SCHEDULE
from .tables import reference_tables, tables_with_sources
from .verdicts import check_findings

TITLES = {
    "table1_retrieval": ("Table 1: retrieval and k-hop induction", "Final eval accuracy (%): mean, spread and median "
                         "over seeds, and the seeds stuck far below the median; paper: 100 / ~100 / 97.0 / 11.2 (standard / frozen_mlp / frozen_qk / mixit) on retrieval."),
    "table2_lm": ("Table 2: language modeling", "Validation log-perplexity (nats per token; lower is better). "
                  "The paper's numbers are on WikiText-103 at 12 layers, ours on the corpus named below."),
    "table3_tasks": ("Table 3: algorithmic tasks and sentiment", "Final eval accuracy (%), mean over seeds; the "
                     "paper's sentiment numbers are on Yelp reviews, ours on the corpus named below."),
    "table4_memorize": ("Table 4: memorization", "Bits stored per trainable parameter, mean over seeds, in two "
                        "regimes: `fixed` is the paper's (the largest dataset size that standard stores completely, so "
                        "its bits measure the data as much as the model), `capacity` the largest size trained (a "
                        "capacity only where no variant stores it; see finding 4)."),
    "table4_memorize_sizes": ("Memorization per dataset size", "Accuracy and bits for every n (keys = n^d)."),
    "table6_depth": ("Table 6: addition accuracy vs depth", "Final eval accuracy (%)."),
    "table7_signal": ("Table 7: token covariance vs depth at initialisation",
                      "Mean off-diagonal token covariance and cosine after the last layer (mixit_lab.analysis.signal)."),
    "induction": ("Induction heads",
                  "task_*: on the k-hop eval inputs, the head with the most attention from each answer's query to "
                  "the two positions holding the answer, its letter in the input and that letter's aligned position "
                  "in the answer part (non-null answers; mixit_lab.analysis.heads.task_induction_scores), per variant the "
                  "run where it is highest; task_shuffled is that head's attention on other sequences' "
                  "sources (what position alone gives), task_chance attention spread evenly over the visible "
                  "keys, task_positional the most attention that ignores the tokens can get, ablation_drop the "
                  "accuracy (points) lost by mean-ablating the head. repeat_*: the TransformerLens-style induction "
                  "score on repeated random tokens [r, r], which k-hop models never see, as context."),
    "components": ("Who does the work", "Inside each trained model, on its task's eval inputs "
                   "(mixit_lab.analysis.components): `share` is the part of the answer's logit difference (answer minus the "
                   "strongest other token) written directly by all attention layers or all MLPs (direct logit "
                   "attribution; the rest comes from the embeddings); `mean_drop` and `resample_drop` the accuracy "
                   "(points) lost when every attention layer, or every MLP, has its output replaced by its mean over "
                   "the eval inputs or by its output on another input; `bits_lost` the share (%) of stored bits lost "
                   "under mean ablation (memorization). Medians over seeds, `_std` their spread."),
    "beyond": ("Beyond the paper: grid models", "Models the paper does not train: per-layer attention "
               "(`[attention mixing,softmax]`: MixiT with its last layer softmax; `learned`: trainable "
               "input-independent matrices) and frozen components (`[freeze v,o]`), final eval metric over seeds "
               "with its spread. New results: no verdict, the paper's related finding alongside."),
    "end_to_end": ("The authors' code beside ours", "Final metric per seed of the authors' own training scripts "
                   "(`benchmarks/authors_reference.py`, recorded in `reproduce/authors_reference.json`) and of our "
                   "runs at the same settings; `spread` is the larger of the two sides' ranges over seeds, and "
                   "`beyond_spread` marks a difference (ours - theirs, medians) larger than it. "
                   "`mixit_weight_frozen` is MixiT as their depth script trains it by default (only embeddings "
                   "and readout), which is none of our variants."),
    "speed": ("Training speed", "Full training step (forward, backward, AdamW) at the size given; faster_pct is "
              "the per-sample time saved relative to standard."),
    "schedules": ("At the authors' schedule", "Each variant at the learning rate chosen for it under the authors' "
                  "scripts' default schedule (warmup max(4% of the steps, 500), then linear decay to 0; group "
                  "`schedule`), beside the same task at ours (warmup 5%, cosine to 10%) at its own chosen rate: "
                  "final eval metric per seed and mean (accuracy %, or log-perplexity for language modeling)."),
    "learning_rates": ("Learning rates", "Each tuned setting (a study's task, size and variant; its schedule) with "
                       "the learning rate chosen on its tuning set (rows held out of training and apart from the eval "
                       "rows every table above reports) and every rate's tuning score at the tuning seed(s): "
                       "tune_acc (higher is better), or tune_loss for language modeling (lower is better). `at_edge`: "
                       "the rate chosen is the grid's smallest or largest, so the best one may lie beyond it."),
}


# The text corpus behind a table, stated under its caption: (table, manifest "text" key, label).
CORPUS_OF = {"table2_lm": ("lm", "Corpus"), "table3_tasks": ("sentiment", "Sentiment rows")}


def corpus_line(manifest: dict[str, Any], kind: str, label: str) -> str:
    """Where a text study's data came from, from the manifest's corpus notes (or that there was none)."""
    info = (manifest.get("text") or {}).get(kind)
    if info is None:
        return f"**{label}**: none (this preset has no {kind} study)."
    note = str(info.get("note") or "").removeprefix(f"{kind}: ")
    if info.get("skipped"):
        return f"**{label}**: none; {note}."
    return f"**{label}**: {note}."


def precision_line(runs: pd.DataFrame) -> str:
    """'Training precision: fp32 (58 runs).', from the finished runs' summaries."""
    finished = runs[runs["status"] == "finished"]
    if finished.empty:
        return ""
    counts = finished["precision"].fillna("not recorded").value_counts()
    return "Training precision: " + ", ".join(f"{p} ({n} runs)" for p, n in counts.items()) + "."



FINDINGS_TABLE_HEAD = ["| # | finding | criterion | ours | learning rates (each variant's chosen) | across the "
                       "learning-rate grid | authors' code, same settings | verdict |", "|---|---|---|---|---|---|---|---|"]
FINDINGS_FILE = "findings.json"  # the report folder's files: report.md (mixit_lab.training.rundir.REPORT_FILE), these,
REPORT_TABLE = "{}.csv"  # and one CSV per table (the explorer's Study page reads them)
NESTED_KEYS = ("runs", "parts")  # findings.json's lists, left out of findings.csv


def write_report(runs_dir: str | Path, report_dir: str | Path, manifest: dict[str, Any],
                 figures_dir: str | Path | None = None, reference: list[dict[str, Any]] | None = None, *,
                 runs: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """Write report.md, findings.json, findings.csv and one CSV per table into report_dir; return the findings.

    `reference`: the authors' code's records (mixit_lab.reproduce.reference; default: the recorded file). `runs`: the
    runs below runs_dir as mixit_lab.analysis.runs.load_runs gives them (read here when not given)."""
    runs_dir, report_dir = Path(runs_dir), Path(report_dir)
    check_report_dir(report_dir, runs_dir)
    runs = load_runs(runs_dir) if runs is None else runs
    reference = load_reference() if reference is None else reference
    tables, sources = tables_with_sources(runs, runs_dir)
    findings = check_findings(tables, reference_tables(runs_dir, reference, runs=runs), sources)
    grid_runs = tuning_runs(runs_dir)
    grid = across_the_grid(grid_runs, runs_dir)
    for f in findings:
        f["learning_rates"] = measured_at(f, runs)
        f["across_grid"] = grid_text(grid[f["id"]]) if f["id"] in grid and _trained(f) else ""
    tables["end_to_end"] = end_to_end(runs, reference)
    tables["schedules"] = schedules_table(runs, grid_runs)
    tables["learning_rates"] = learning_rates_table(grid_runs)
    scale = {name: df for name, df in emergence_tables(runs_dir, runs=runs).items() if len(df)}  # the scale preset
    flat = pd.DataFrame([{k: v for k, v in f.items() if k not in NESTED_KEYS} for f in findings])
    lines = [*_header(runs_dir, runs, manifest), *_damaged_section(runs_dir, runs),
             *_findings_section(findings, tables, scale)]
    for name, df in tables.items():
        title, caption = TITLES[name]
        lines += [f"## {title}", "", caption, ""]
        if name in CORPUS_OF:
            lines += [corpus_line(manifest, *CORPUS_OF[name]), ""]
        lines.append(markdown_table(df))
    lines += emergence_section(scale)  # [] without scale runs
    lines += _figures_section(report_dir, figures_dir, manifest.get("failed_figures") or {})
    with report_folder(report_dir) as folder:
        for name, df in {**tables, **scale, "findings": flat}.items():
            with atomic_file(folder / REPORT_TABLE.format(name)) as fh:
                df.to_csv(fh, index=False)
        write_text(folder / REPORT_FILE, "\n".join(lines))
        write_json(folder / FINDINGS_FILE, findings)
    return findings


def check_report_dir(report_dir: str | Path, runs_dir: str | Path) -> None:
    """ValueError (one line) if the report folder holds the runs folder: a report is swapped in whole."""
    report, runs = Path(report_dir).resolve(), Path(runs_dir).resolve()
    if report == runs or report in runs.parents:
        raise ValueError(f"--report-dir {report_dir} holds the runs folder {runs_dir}: a report folder is replaced "
                         "whole each time it is written, so give the report a folder of its own")


def is_report_file(name: str) -> bool:
    """Whether a name in a report folder is one of the report's own files (report.md, findings.json, a table)."""
    return name in (REPORT_FILE, FINDINGS_FILE) or name.endswith(REPORT_TABLE.format(""))


@contextlib.contextmanager
def report_folder(report_dir: Path) -> Iterator[Path]:
    """A folder to write a report into, swapped in whole for `report_dir` when the block ends (mixit_lab.models.files.
    atomic_directory): a reader or a kill never sees one reproduction's tables beside another's report.md. What
    else the folder holds (a figures folder put inside it, notes of one's own) is copied over first, so it stays."""
    recover_directory(report_dir)  # a swap a kill interrupted: the complete copy back first
    remove_leftovers(report_dir)
    with atomic_directory(report_dir) as folder:
        if report_dir.is_dir():
            for entry in report_dir.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, folder / entry.name, symlinks=True)
                elif not is_report_file(entry.name):
                    shutil.copy2(entry, folder / entry.name, follow_symlinks=False)
        yield folder


def _trained(finding: dict[str, Any]) -> bool:
    """Whether a finding reads trained runs (a learning rate matters), not only measurements at init or of speed."""
    parts = next((f for f in FINDINGS if f.title == finding["finding"]), None)
    return parts is not None and any(p.table not in ("speed", "table7_signal") for p in parts.parts())


def schedules_table(runs: pd.DataFrame, grid_runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The `schedule` group's runs (the authors' default schedule: trained here, or a tuning-only study's chosen runs
    in the tuning record, `grid_runs`) beside the same tasks and sizes at ours: per task, variant and schedule, the
    chosen learning rate and the final metric per seed and its mean."""
    columns = ["task", "variant", "schedule", "lr", "metric", "mean", "values", "seeds"]
    done = reported(runs)
    recorded = grid_runs[(grid_runs["group"] == SCHEDULE) & grid_runs["selected"].astype(bool)
                         & ~grid_runs["run"].isin(done["run"])] if grid_runs is not None and len(grid_runs) else None
    theirs = pd.concat([done[done["group"] == SCHEDULE], recorded]) if recorded is not None and len(recorded) else \
        done[done["group"] == SCHEDULE]
    if theirs.empty:
        return pd.DataFrame(columns=columns)
    keys = ["task_label", "d_model", "n_layers", "n_heads", "steps"]
    wanted = set(map(tuple, theirs[keys].to_numpy().tolist()))
    same = done[(done["group"] != SCHEDULE) & done[keys].apply(lambda r: tuple(r) in wanted, axis=1)]
    rows = []
    for (task, variant, schedule), g in pd.concat([theirs, same]).groupby(["task_label", "variant", "schedule"],
                                                                          sort=False):
        by_loss = str(g["task"].iloc[0]) == "lm"
        values = (g.sort_values("seed")["eval_loss" if by_loss else "eval_acc"].astype(float) * (1 if by_loss else 100))
        rows.append({"task": task, "variant": variant, "schedule": schedule,
                     "lr": "/".join(sorted({f"{x:g}" for x in g["lr"]})), "metric": "log-ppl" if by_loss else "accuracy %",
                     "mean": float(values.mean()), "values": [float(v) for v in values], "seeds": len(values)})
    return pd.DataFrame(rows, columns=columns).sort_values(["task", "variant", "schedule"], kind="stable")


def learning_rates_table(grid_runs: pd.DataFrame) -> pd.DataFrame:
    """One row per tuned setting of the tuning record: its study, task, size, variant, schedule, the chosen rate and
    each rate's mean tuning score over the tuning seeds."""
    columns = ["study", "task", "variant", "size", "schedule", "chosen_lr", "at_edge", "metric", "scores"]
    if grid_runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, g in grid_runs.groupby("tuning_key", sort=False):
        by_loss = str(g["task"].iloc[0]) == "lm"
        metric = "tune_loss" if by_loss else "tune_acc"
        scores = g.groupby("lr")[metric].mean()
        chosen = g.loc[g["selected"].astype(bool), "lr"]
        first = g.iloc[0]
        rows.append({"study": first["study"], "task": first["task_label"], "variant": first["variant"],
                     "size": f"{first['d_model']}/{first['n_layers']}/{first['n_heads']}", "schedule": first["schedule"],
                     "chosen_lr": f"{chosen.iloc[0]:g}" if len(chosen) else "none",
                     # the smallest or largest rate tried: the best rate may lie beyond the grid
                     "at_edge": bool(len(chosen)) and chosen.iloc[0] in (scores.index.min(), scores.index.max()),
                     "metric": metric, "scores": ", ".join(f"{lr:g}: {v:.3f}" for lr, v in scores.items())})
    return pd.DataFrame(rows, columns=columns)


def _header(runs_dir: Path, runs: pd.DataFrame, manifest: dict[str, Any]) -> list[str]:
    """The report's title, what was run and how long it took, and the text corpora's notes."""
    lines = [
        f"# Reproduction report: preset `{manifest.get('preset')}`",
        "",
        f"Reproducing Dong, Noci, Khodak, Li (2025), *Attention Retrieves, MLP Memorizes*. "
        f"Preset: {(manifest.get('preset_contents') or {}).get('about', manifest.get('preset'))}. Runs: `{runs_dir}` "
        f"({int((runs['status'] == 'finished').sum())} of {len(runs)} finished). "
        f"Wall time {manifest.get('wall_s', float('nan')):.0f} s on {manifest.get('workers')} worker(s); stages (s): "
        + ", ".join(f"{k} {v:g}" for k, v in (manifest.get("timings_s") or {}).items()) + ". "
        + precision_line(runs),
        "",
    ]
    for info in (manifest.get("text") or {}).values():
        lines.append(f"- **{'Skipped' if info.get('skipped') else 'Text'}**: {info['note']}")
    return lines


def _damaged_section(runs_dir: Path, runs: pd.DataFrame) -> list[str]:
    """"## Damaged runs": each damaged file (a corrupt run left out of every table, an unreadable analysis table
    read as missing) with what is wrong ([] when there is none)."""
    damaged = damaged_files(runs)
    if damaged.empty:
        return []
    lines = ["## Damaged runs", "",
             f"{damaged['run'].nunique()} run(s) have damaged files: a damaged run.json or summary.json leaves the run "
             "out of every table, a damaged analysis table reads as missing.", ""]
    for r in damaged.itertuples():
        shown = os.path.relpath(r.file, runs_dir) if os.path.isabs(r.file) == runs_dir.is_absolute() else r.file
        lines.append(f"- `{r.run}`: **damaged** `{Path(shown).as_posix()}` ({r.problem})")
    return [*lines, ""]


def _findings_section(findings: list[dict[str, Any]], tables: dict[str, pd.DataFrame],
                      scale: dict[str, pd.DataFrame]) -> list[str]:
    """"## Findings": one row per finding with its verdict, or why no finding was measured."""
    lines = ["", "## Findings", ""]
    if all(f["verdict"] == "not_measured" for f in findings):
        if len(tables.get(BEYOND, ())):
            why = " (its grid models are under \"Beyond the paper\" below)."
        elif scale:
            why = " at one setting; \"Where the findings emerge\" below follows them across settings."
        else:
            why = "."
        return [*lines, "No run of this preset measures one of the paper's findings" + why, ""]
    lines += ["Each verdict reads our numbers, every variant at the learning rate chosen for it on its tuning set "
              "(\"Learning rates\" below), against the criterion on 95% intervals over seeds: a part holds where each "
              "interval it reads meets its threshold, fails where one misses it entirely, and is undecided where one "
              "straddles it. Where our numbers fail it, the same criterion is applied to the authors' own training "
              "code run at the same settings (`benchmarks/authors_reference.py`, recorded in "
              "`reproduce/authors_reference.json`), to tell a claim that does not show at this size from a "
              "reproduction that fails. \"Across the learning-rate grid\" judges the same finding with every variant at "
              "one shared rate, for each rate tried (the tuning seed's runs: one seed, no interval).", "",
              *FINDINGS_TABLE_HEAD]
    for f in findings:
        lines.append(f"| {f['id']} | {f['finding']} | {f['criterion']} | {f['ours']} | {f.get('learning_rates') or '—'} "
                     f"| {f.get('across_grid') or '—'} | {f['reference']} | **{f['verdict_text']}** |")
    return [*lines, ""]


def _figures_section(report_dir: Path, figures_dir: str | Path | None, failed: dict[str, str]) -> list[str]:
    """"## Figures": a link to each figure drawn, and each that failed with its reason ([] when neither)."""
    pngs = sorted(Path(figures_dir).glob("*.png")) if figures_dir is not None and Path(figures_dir).is_dir() else []
    if not pngs and not failed:
        return []
    lines = ["## Figures", ""]
    lines += [f"- [{p.stem}]({Path(os.path.relpath(p, report_dir)).as_posix()})" for p in pngs if p.stem not in failed]
    lines += [f"- {name}: **failed** ({reason})" for name, reason in sorted(failed.items())]
    return [*lines, ""]


__all__ = ["CORPUS_OF", "FINDINGS_FILE", "REPORT_TABLE", "TITLES", "check_report_dir", "corpus_line", "precision_line",
           "schedules_table", "write_report"]
