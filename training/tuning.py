"""Choosing each variant's learning rate on its tuning set: the rule, a tuning's record, and `tune`, which trains a
grid of learning rates and chooses.

    from mixit_lab.training.tuning import tune
    tuning = tune(TrainConfig(task="addition", task_params={"digits": 3}, steps=3000, tune_samples=512),
                  variants=["standard", "mixit"], lrs=[3e-4, 1e-3, 3e-3, 1e-2], out="runs/tune")
    tuning.selected()      # one row per setting: the learning rate chosen, its tuning score, and every lr's
    tuning.frame()         # one row per run: lr, seed, status, tune_acc / tune_loss, eval_acc / eval_loss

The rule (`choose`): a setting is everything a run is but its learning rate and seed (`tuning_key`: task and its
parameters, variant, size, schedule, steps, ...). Its learning rate is the one whose runs at the tuning seeds score
best on the tuning set (TrainConfig.tune_samples: rows held out of training and apart from the eval rows), averaged
over those seeds: the highest tune_acc, ties broken by the lowest tune_loss, for a task judged by accuracy; the
lowest tune_loss for one judged by its loss (a language model, `headline = "eval_loss"`). A run that diverged or
failed is never chosen, and the eval rows a run reports are never read.

A tuning's record (`Tuning`, written as mixit_lab.training.rundir.TUNING_FILE): each run's settings (text files by their
base names, so a record made on one machine matches runs on another), status, scores and the analysis summaries a
report reads. `mixit reproduce` ships one per preset (reproduce/tuning/) so that a reproduction reads its choices
without training the grid again; `mixit tune` writes one beside the runs it trains.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from mixit_lab.models.files import read_json, write_json

from .run import judged_by_loss
from .rundir import DATA_CACHE_DIR, TUNING_FILE, is_finished, read_summary
from .settings import plain
from .settings import IGNORED_SETTINGS
from .config import TrainConfig

FORMAT = "mixit-lab/tuning"
# What a setting is not: the options chosen among, the repeats, and how a run executes or logs.
NOT_SETTINGS = ("lr", "seed", *IGNORED_SETTINGS, "eval_batch_size", "log_every", "checkpoint_every")
PATH_PARAMS = ("text_file", "test_file")  # task parameters that are files: recorded by their base names
CORPUS_PARAMS = (*PATH_PARAMS, "dataset")  # where a text task's corpus comes from (corpus_key leaves them out)
ANALYSES_KEPT = ("memory", "task_induction", "heads")  # analysis summaries a record keeps (what the report reads)
TUNING_COLUMNS = ["key", "study", "run", "variant", "task", "task_params", "d_model", "n_layers", "n_heads",
                  "schedule", "steps", "lr", "seed", "status", "headline", "tune_acc", "tune_loss", "eval_acc",
                  "eval_loss"]


def portable_params(params: dict[str, Any]) -> dict[str, Any]:
    """Task parameters with file paths replaced by their base names (the same corpus on any machine)."""
    out = dict(params)
    for name in PATH_PARAMS:
        if out.get(name):
            out[name] = [Path(str(p)).name for p in (out[name] if isinstance(out[name], list) else [out[name]])]
    return out


def setting(cfg: TrainConfig) -> dict[str, Any]:
    """What a run is but its learning rate and seed (NOT_SETTINGS left out, file paths by base name)."""
    out = {f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name not in NOT_SETTINGS}  # plain() copies them
    out["task_params"] = portable_params(cfg.task_params)
    return plain(out)


def tuning_key(cfg: TrainConfig) -> str:
    """The setting's identity: runs with the same key differ only in learning rate and seed."""
    return hashlib.sha256(json.dumps(setting(cfg), sort_keys=True).encode()).hexdigest()[:16]


def corpus_key(cfg: TrainConfig) -> str:
    """The setting but where its corpus comes from (local files or a Hub dataset): how a record's choice made on one
    copy of a corpus is found for a run that reads another (mixit_lab.reproduce.tuning says so when it does)."""
    plain_setting = setting(cfg)
    plain_setting["task_params"] = {k: v for k, v in plain_setting["task_params"].items() if k not in CORPUS_PARAMS}
    return hashlib.sha256(json.dumps(plain_setting, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Tuning:
    """A tuning's runs (dicts: study, run, train, status, metrics, analysis) and what it chose."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    about: dict[str, Any] = field(default_factory=dict)  # what made it: preset, grid, machine, date

    # ------------------------------------------------------------------ reading and writing
    @classmethod
    def read(cls, path: str | Path) -> Tuning:
        """A record written by `write`; ValueError naming the file when it is not one."""
        path = Path(path)
        data = read_json(path)
        runs = data.get("runs")
        if data.get("format") != FORMAT or not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
            raise ValueError(f"{path}: not a tuning record (format {FORMAT!r} with a list of runs)")
        for r in runs:
            try:
                TrainConfig.from_dict(dict(r["train"]))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}: run {r.get('run')!r}: {e}") from None
        return cls(runs=runs, about=dict(data.get("about") or {}))

    def write(self, path: str | Path) -> Path:
        write_json(Path(path), {"format": FORMAT, "about": self.about, "runs": self.runs})
        return Path(path)

    @staticmethod
    def entry(study: str, run: str, cfg: TrainConfig, summary: dict[str, Any] | None,
              analysis: dict[str, Any] | None = None) -> dict[str, Any]:
        """One run as a record holds it: its settings (portable), status, scores and kept analysis summaries."""
        summary = summary or {}
        train = {**cfg.to_dict(), "task_params": portable_params(cfg.task_params)}
        metrics = {k: summary.get(k) for k in ("eval_acc", "eval_loss", "tune_acc", "tune_loss", "step",
                                               "params_trainable", "params_frozen", "params_total", "elapsed_s")}
        kept = {k: v for k, v in ((analysis or {}).get("summary") or {}).items() if k in ANALYSES_KEPT}
        return {"study": study, "run": run, "train": plain(train),
                "status": summary.get("status", "running"), "headline": summary.get("headline"), "metrics": metrics,
                "analysis": kept}

    # ------------------------------------------------------------------ what it holds
    def frame(self) -> pd.DataFrame:
        """One row per run (TUNING_COLUMNS)."""
        rows = []
        for r in self.runs:
            cfg = TrainConfig.from_dict(dict(r["train"]))
            rows.append({"key": tuning_key(cfg), "study": r.get("study"), "run": r.get("run"), "variant": cfg.variant,
                         "task": cfg.task, "task_params": cfg.task_params, "d_model": cfg.d_model,
                         "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "schedule": cfg.schedule,
                         "steps": cfg.steps, "lr": cfg.lr, "seed": cfg.seed, "status": r.get("status"),
                         "headline": r.get("headline"),
                         **{m: (r.get("metrics") or {}).get(m) for m in ("tune_acc", "tune_loss", "eval_acc",
                                                                        "eval_loss")}})
        return pd.DataFrame(rows, columns=TUNING_COLUMNS)

    def choices(self) -> dict[str, float]:
        """Each setting's (tuning_key's) chosen learning rate; settings none of whose runs finished are absent."""
        return {key: lr for key, lr in choose(self.frame()).items() if lr is not None}

    def corpus_choices(self) -> dict[str, float]:
        """The choices by corpus_key, where one corpus_key holds one choice (else it is left out)."""
        by_corpus: dict[str, set[float]] = {}
        chosen = self.choices()
        for r in self.runs:
            cfg = TrainConfig.from_dict(dict(r["train"]))
            if tuning_key(cfg) in chosen:
                by_corpus.setdefault(corpus_key(cfg), set()).add(chosen[tuning_key(cfg)])
        return {key: lrs.pop() for key, lrs in by_corpus.items() if len(lrs) == 1}

    def selected(self) -> pd.DataFrame:
        """One row per setting: task, variant, size, schedule, the chosen lr, its mean tuning score, and the mean
        tuning score of every learning rate tried ("scores", lr -> score; None where every run failed)."""
        df = self.frame()
        rows = []
        for key, group in df.groupby("key", sort=False):
            loss = _by_loss(group)
            scores = {lr: _score(runs, loss) for lr, runs in group.groupby("lr")}
            chosen = choose(group).get(key)
            first = group.iloc[0]
            rows.append({**{c: first[c] for c in ("key", "study", "task", "task_params", "variant", "d_model",
                                                  "n_layers", "n_heads", "schedule", "steps")},
                         "metric": "tune_loss" if loss else "tune_acc", "lr": chosen,
                         "score": None if chosen is None else scores[chosen][0],
                         "scores": {lr: s[0] for lr, s in sorted(scores.items())},
                         "seeds": int(group["seed"].nunique())})
        return pd.DataFrame(rows)


def _by_loss(group: pd.DataFrame) -> bool:
    """Whether one setting's runs (rows of `Tuning.frame()`) are judged by their loss: as a finished run recorded it."""
    recorded = group["headline"].dropna() if "headline" in group else ()
    return judged_by_loss(group["task"].iloc[0], recorded.iloc[0] if len(recorded) else None)


def _score(runs: pd.DataFrame, by_loss: bool) -> tuple[float | None, float]:
    """(the headline tuning score, the tie-break) of one learning rate's runs, means over seeds; None if a run did
    not finish (it diverged, failed, or is missing its score): that learning rate is not chosen."""
    done = runs[runs["status"] == "finished"]
    column = "tune_loss" if by_loss else "tune_acc"
    values = pd.to_numeric(done[column], errors="coerce")
    if len(done) < len(runs) or not len(done) or values.isna().any():
        return None, math.inf
    tie = pd.to_numeric(done["tune_loss"], errors="coerce").mean()
    return float(values.mean()), float(tie) if not math.isnan(tie) else math.inf


def choose(runs: pd.DataFrame) -> dict[str, float | None]:
    """The rule, on rows of `Tuning.frame()`: per key, the learning rate with the best mean tuning score over its
    seeds (accuracy: highest, then lowest loss; loss: lowest); None for a key none of whose learning rates finished."""
    out: dict[str, float | None] = {}
    for key, group in runs.groupby("key", sort=False):
        loss = _by_loss(group)
        best, best_rank = None, None
        for lr, at in sorted(group.groupby("lr"), key=lambda item: item[0]):
            score, tie = _score(at, loss)
            if score is None:
                continue
            rank = (score, -tie) if not loss else (-score, -tie)  # larger is better
            if best_rank is None or rank > best_rank:
                best, best_rank = float(lr), rank
        out[key] = best
    return out


# --------------------------------------------------------------------------- training a grid and choosing
def tune(base: TrainConfig, variants: Sequence[str], lrs: Sequence[float], out: str | Path,
         seeds: Sequence[int] = (0,), workers: Any = 1, progress: bool = True, tracker: str | None = None,
         tune_samples: int = 512) -> Tuning:
    """Train `base` for every variant x learning rate x seed into `out` (a sweep: finished runs are kept) and choose
    each variant's learning rate on its tuning set; the record is written to out/TUNING_FILE.

    `base.tune_samples` is raised to `tune_samples` when it is 0; a text task without a tuning split gets
    `tune_fraction=0.1`. ValueError (before anything trains) for fewer than two learning rates."""
    from .sweep import expand_grid, run_sweep
    from .tasks import task_class

    lrs = sorted({float(x) for x in lrs})
    if len(lrs) < 2:
        raise ValueError(f"lrs={lrs}: tuning chooses among two learning rates or more")
    fields = base.to_dict()
    fields["tune_samples"] = fields["tune_samples"] or tune_samples
    if task_class(base.task).needs_corpus and not fields["task_params"].get("tune_fraction"):
        fields["task_params"] = {**fields["task_params"], "tune_fraction": 0.1}
    out = Path(out)
    sizes = [{"d_model": base.d_model, "n_layers": base.n_layers, "n_heads": base.n_heads}]
    train = {k: v for k, v in fields.items() if k not in ("task", "task_params", "variant", "lr", "seed",
                                                          "d_model", "n_layers", "n_heads")}
    runs = expand_grid(list(variants), [(base.task, fields["task_params"])], sizes, list(seeds), lrs, train,
                       out / DATA_CACHE_DIR)
    run_sweep(runs, out, workers=workers, progress=progress, tracker=tracker)
    tuning = Tuning(about={"lrs": lrs, "seeds": list(seeds), "variants": list(variants)})
    tuning.runs = [Tuning.entry("", name, cfg, read_summary(out / name) if is_finished(out / name) else None)
                   for name, cfg in runs]
    tuning.write(out / TUNING_FILE)
    return tuning
