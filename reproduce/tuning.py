"""The tune stage of `mixit reproduce`: which of a preset's runs choose a learning rate, where the choices come from,
and which runs are then trained at each variant's chosen learning rate.

    from mixit_lab.reproduce.tuning import plan_tuning
    tuning = plan_tuning(preset, grid, tune=False)   # the preset's recorded tuning (reproduce/tuning/PRESET.json)
    tuning.runs_to_train(grid, tuning.record.choices())

A study whose `lrs` (or `schedules`) name several options is tuned: each setting it trains (mixit_lab.training.tuning's
`tuning_key`: everything but the learning rate and seed) is trained at every learning rate at the preset's tuning
seeds (`tune: {seeds: [0]}`), and each setting's learning rate is chosen on its tuning set (mixit_lab.training.tuning.choose).
Every other seed is trained at the chosen learning rate only; so is the tuning seed, whose run at the chosen rate
is the tuning run itself. The choices come from one of two places:

* the preset's recorded tuning, `reproduce/tuning/<preset>.json` (or `mixit reproduce --tuning FILE`): the grid's
  runs were trained once, on the machine named in the record, and only the chosen runs are trained now;
* `mixit reproduce --tune`: the grid is trained now, into the study folders, and its record is written as
  <out>/tuning.json (copy it to reproduce/tuning/ to ship it).

Either way <out>/tuning.json holds the record the report and the figures read: every learning rate's tuning and eval
scores, and the analyses (memorized bits, induction heads) of the grid's runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixit_lab.training.config import TrainConfig
from mixit_lab.training.tuning import Tuning, corpus_key, tuning_key

TUNING_DIR = Path(__file__).resolve().parent / "tuning"  # the presets' recorded tunings, one file per preset
TUNED_NOW = "trained now (mixit reproduce --tune)"


def recorded_tuning_file(preset: str) -> Path:
    """Where the preset's recorded tuning is shipped."""
    return TUNING_DIR / f"{preset}.json"


@dataclass(frozen=True)
class TuningPlan:
    """The tuned settings of a preset's grid and where their choices come from."""

    keys: dict[str, str]  # run name -> its tuning key
    grids: dict[str, list[float]]  # tuned key -> the learning rates its study tries
    tuning_runs: list[str]  # the grid's runs at the tuning seeds (trained with --tune)
    record: Tuning | None  # the recorded tuning the choices are read from; None: trained now
    source: str  # the record's path, or TUNED_NOW
    record_only: frozenset[str] = frozenset()  # studies whose chosen runs are the record's (Study.tuning_only)
    chosen: dict[str, float] | None = None  # the record's choice for each tuned key (None: trained now)
    notes: tuple[str, ...] = ()  # how the record was read (a choice found on another copy of a corpus)

    def runs_to_train(self, grid: list[tuple[str, TrainConfig]], choices: dict[str, float]) -> list[str]:
        """The runs trained for the report: every run of an untuned setting, and each tuned setting's runs at its
        chosen learning rate (every seed), except those of a tuning-only study (read from the record)."""
        return [name for name, cfg in grid if name.split("/", 1)[0] not in self.record_only
                and (self.keys[name] not in self.grids or _same_lr(cfg.lr, choices.get(self.keys[name])))]

    def check_choices(self, choices: dict[str, float], runs: dict[str, tuple[str, TrainConfig]]) -> None:
        """ValueError naming the first tuned setting the choices leave out, or choose a learning rate its grid does
        not try (a record made for other settings)."""
        for key, lrs in self.grids.items():
            name, cfg = runs[key]
            where = (f"study {name.split('/', 1)[0]!r}: {cfg.task} {cfg.task_params or ''} {cfg.variant} "
                     f"(width {cfg.d_model}, {cfg.n_layers} layers, {cfg.n_heads} heads, schedule {cfg.schedule})")
            chosen = choices.get(key)
            if chosen is None:
                raise ValueError(f"{self.source} chooses no learning rate for {where}: its settings differ from the "
                                 "record's, or every one of its runs failed; rerun with --tune to train the grid")
            if not any(_same_lr(chosen, lr) for lr in lrs):
                raise ValueError(f"{self.source} chose lr {chosen:g} for {where}, which its grid "
                                 f"({', '.join(f'{x:g}' for x in lrs)}) does not try; rerun with --tune")


def _same_lr(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def plan_tuning(grid: list[tuple[str, TrainConfig]], seeds: list[int], preset: str, tune: bool = False,
                record: str | Path | None = None, record_only: frozenset[str] = frozenset()) -> TuningPlan | None:
    """The tuned settings of `grid` (run name, config) and their tuning runs at `seeds`; None when no setting tries
    two learning rates. With `tune`, the choices are made from the grid trained now; else they are read from
    `record` (default: the preset's shipped one) and checked against the grid. `record_only`: the tuning-only studies,
    whose chosen runs are the record's. ValueError (one line) for a tuned setting without runs at the tuning seeds, a
    missing or unreadable record, or one that does not cover the grid."""
    keys = {name: tuning_key(cfg) for name, cfg in grid}
    lrs: dict[str, set[float]] = {}
    first: dict[str, tuple[str, TrainConfig]] = {}
    for name, cfg in grid:
        lrs.setdefault(keys[name], set()).add(float(cfg.lr))
        first.setdefault(keys[name], (name, cfg))
    grids = {key: sorted(values) for key, values in lrs.items() if len(values) > 1}
    if not grids:
        return None
    tuning_runs = [name for name, cfg in grid if keys[name] in grids and cfg.seed in seeds]
    without = [key for key in grids if not any(keys[n] == key for n in tuning_runs)]
    if without:
        name, cfg = first[without[0]]
        raise ValueError(f"study {name.split('/', 1)[0]!r} tries learning rates {', '.join(f'{x:g}' for x in grids[without[0]])} "
                         f"but trains no run at the tuning seeds {seeds} (the preset's tune: seeds)")
    if tune:
        return TuningPlan(keys, grids, tuning_runs, None, TUNED_NOW, record_only)
    path = Path(record) if record is not None else recorded_tuning_file(preset)
    if not path.is_file():
        raise ValueError(f"preset {preset!r} tries several learning rates and no recorded tuning is there ({path}); "
                         "pass --tune to train the grid and choose now, or --tuning FILE")
    record = Tuning.read(path)
    chosen, notes = _read_choices(record, grids, first)
    plan = TuningPlan(keys, grids, tuning_runs, record, str(path), record_only, chosen, notes)
    plan.check_choices(chosen, first)
    return plan


def _read_choices(record: Tuning, grids: dict[str, list[float]],
                  first: dict[str, tuple[str, TrainConfig]]) -> tuple[dict[str, float], tuple[str, ...]]:
    """The record's choice for each tuned key: its own, else (a text study reading another copy of its corpus, such
    as the Hub's WikiText-2 where the record read ../shared/data's) the choice of the same setting on the record's
    corpus, said in a note."""
    exact, by_corpus = record.choices(), record.corpus_choices()
    chosen, notes = {}, []
    for key in grids:
        if key in exact:
            chosen[key] = exact[key]
            continue
        name, cfg = first[key]
        lr = by_corpus.get(corpus_key(cfg))
        if lr is not None:
            chosen[key] = lr
            notes.append(f"study {name.split('/', 1)[0]!r} ({cfg.variant}) reads its corpus from elsewhere than the "
                         f"record's runs did: its learning rate {lr:g} is the one chosen there")
    return chosen, tuple(notes)


def record_from_runs(plan: TuningPlan, grid: list[tuple[str, TrainConfig]], out: Path,
                     about: dict[str, Any]) -> Tuning:
    """The record of a grid trained now: each tuning run's settings, summary and kept analyses, read from `out`."""
    from mixit_lab.models.files import read_json
    from mixit_lab.training.run import read_analysis
    from mixit_lab.training.rundir import SUMMARY_FILE

    configs = dict(grid)
    runs = []
    for name in plan.tuning_runs:
        summary_path = out / name / SUMMARY_FILE
        try:
            summary = read_json(summary_path) if summary_path.is_file() else None
        except (OSError, ValueError):
            summary = None
        runs.append(Tuning.entry(name.split("/", 1)[0], name, configs[name], summary, read_analysis(out / name)))
    return Tuning(runs=runs, about=about)
