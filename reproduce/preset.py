"""Presets of `mixit reproduce` as typed data: a `Preset` of named `Study` grids, read from YAML.

    from mixit_lab.reproduce.preset import load_preset
    preset = load_preset("quick")             # reproduce/presets/quick.yaml, or a path to your own
    preset.studies["retrieval"].variants      # ['standard', 'frozen_qk', 'frozen_mlp', 'mixit']

A preset file is a mapping:

    name, about, budget, evidence   text (name defaults to the file's stem)
    train: {...}                    TrainConfig fields shared by every study
    studies: {NAME: STUDY, ...}     each a grid: variants, tasks, sizes, seeds, lrs, schedules, train, text, about
    tune: {seeds: [0]}              the tuning seeds: a study with several lrs trains them all at these seeds and
                                    every other seed at each setting's chosen lr (mixit_lab.reproduce.tuning)
    analysis: {...}                 mixit_lab.analysis.analyze.AnalysisOptions fields for the analysis stage
    signal: {...}                   the signal-propagation stage: mixit_lab.reproduce.stage_options.SignalOptions
                                    fields, with the ModelConfig fields it sets for every variant flat in the block
                                    (sink_head: false) and controls: {label: {variant: NAME, ModelConfig fields}}
    speed: {...}                    the speed stage: SpeedOptions fields (measure_throughput's parameters)
    skip: [signal, speed]           stages this preset leaves out (both run by default)

A preset is checked whole when it loads, before anything trains: an unknown key or a bad value in any block
(train, a study, analysis, signal, speed, skip) is one ValueError naming the file, the block and the key.
The train blocks are checked as TrainConfig, the analysis block as AnalysisOptions; these and `tune:` stay the
mappings the file holds. The signal and speed blocks become `Preset.signal` (SignalOptions) and `Preset.speed`
(SpeedOptions): typed, frozen, each default written once (the stage's own there, the rest in the signature of
mixit_lab.analysis.signal.signal_propagation and mixit_lab.training.benchmark.measure_throughput), with the
cache keys the stages wrote before they were typed. `Preset.to_dict()` gives them back as plain blocks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mixit_lab.models.files import as_list, load_yaml

from .stage_options import SignalOptions, SpeedOptions, as_mapping, check_setting, refuse_unknown

PRESET_DIR = Path(__file__).resolve().parent / "presets"
SKIPPABLE = ("signal", "speed")  # stages a preset may leave out (`skip:`)
TEXT_KINDS = ("lm", "sentiment", "sst2")  # what a study's `text:` may name: the corpus it needs (mixit_lab.reproduce.corpora)


def _grid_default(axis: str) -> list:
    from mixit_lab.training.sweep import grid_defaults

    return grid_defaults()[axis]


def _check_keys(where: str, data: dict[str, Any], cls: type) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where} unknown keys {unknown}; allowed: {sorted(allowed)}")


def _check_train(where: str, train: Any) -> None:
    """A `train:` block holds TrainConfig fields with values TrainConfig accepts (checked when the preset loads,
    not after training)."""
    from mixit_lab.models.model_extra import check_model_extra
    from mixit_lab.training.config import TrainConfig

    if not isinstance(train or {}, dict):
        raise ValueError(f"{where} must be a mapping of TrainConfig fields")
    refuse_unknown(where, train or {}, {f.name for f in dataclasses.fields(TrainConfig)})
    try:
        TrainConfig.from_dict(dict(train or {}))
        check_model_extra((train or {}).get("model_extra", {}))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _check_analysis(where: str, block: Any) -> None:
    """The `analysis:` block: AnalysisOptions fields and values."""
    from mixit_lab.analysis.analyze import AnalysisOptions

    try:
        AnalysisOptions.from_dict(as_mapping(where, block))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _check_tune(where: str, block: Any) -> None:
    """The `tune:` block: `seeds`, a non-empty list of integers >= 0."""
    block = as_mapping(where, block)
    refuse_unknown(where, block, {"seeds"})
    if "seeds" in block:
        check_setting(where, "seeds", block["seeds"], [0])


def _check_schedules(where: str, schedules: Any) -> None:
    from mixit_lab.training.optim import SCHEDULES

    bad = [s for s in as_list(schedules) if s not in SCHEDULES]
    if not as_list(schedules) or bad:
        raise ValueError(f"{where}: schedules={schedules!r}: {bad or 'none'} not among: {', '.join(SCHEDULES)}")


@dataclass
class Study:
    """One grid of training runs: variants x tasks x sizes x seeds x lrs x schedules (mixit_lab.training.sweep.expand_grid,
    once per schedule). Several lrs make a tuned study (mixit_lab.reproduce.tuning)."""

    tasks: list[Any]  # names, or {name: {param: value}}
    # An axis the study does not give takes the grid's default (mixit_lab.training.sweep.grid_defaults); sizes: [{}]
    # leaves each size field to TrainConfig's default (or the study's train block).
    variants: list[str] = field(default_factory=lambda: _grid_default("variants"))
    sizes: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    seeds: list[int] = field(default_factory=lambda: _grid_default("seeds"))
    lrs: list[float] = field(default_factory=lambda: _grid_default("lrs"))
    schedules: list[str] | None = None  # mixit_lab.training.optim.SCHEDULES, an axis of the grid (None: the train block's)
    # tuning_only: the study trains only its learning-rate grid at the tuning seeds (mixit reproduce --tune); its
    # chosen runs are read from the tuning record, never trained again (a side study, such as another schedule)
    tuning_only: bool = False
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields, over the preset's
    text: str | None = None  # "lm" or "sentiment": the study needs that corpus
    about: str = ""

    @classmethod
    def from_dict(cls, name: str, data: Any, where: str = "") -> Study:
        if not isinstance(data, dict) or "tasks" not in data:
            raise ValueError(f"{where}study {name!r} must be a mapping with 'tasks'")
        _check_keys(f"{where}study {name!r} has", data, cls)
        _check_train(f"{where}study {name!r}: train", data.get("train"))
        if data.get("text") not in (None, *TEXT_KINDS):
            raise ValueError(f"{where}study {name!r}: text={data['text']!r} must be one of {sorted(TEXT_KINDS)}")
        if data.get("schedules") is not None:
            _check_schedules(f"{where}study {name!r}", data["schedules"])
        if not isinstance(data.get("tuning_only", False), bool):
            raise ValueError(f"{where}study {name!r}: tuning_only={data['tuning_only']!r} must be true or false")
        lists = {k: as_list(data[k]) for k in ("tasks", "variants", "sizes", "seeds", "lrs", "schedules")
                 if data.get(k) is not None}
        return cls(**{**data, **lists, "train": dict(data.get("train") or {})})


@dataclass
class Preset:
    """A whole reproduction: shared training settings, the studies, and the later stages' settings."""

    name: str
    studies: dict[str, Study]
    about: str = ""
    budget: str = ""
    evidence: str = ""
    train: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] = field(default_factory=dict)  # mixit_lab.analysis.analyze.AnalysisOptions fields
    signal: SignalOptions = field(default_factory=SignalOptions)
    speed: SpeedOptions = field(default_factory=SpeedOptions)
    tune: dict[str, Any] = field(default_factory=dict)  # {seeds: [...]}: the tuning seeds (default [0])
    skip: list[str] = field(default_factory=list)  # optional stages left out: "signal", "speed"

    @classmethod
    def from_dict(cls, data: Any, where: str = "preset") -> Preset:
        """A Preset from a mapping (a parsed YAML file); `where` names it in errors."""
        if not isinstance(data, dict) or "studies" not in data or not isinstance(data["studies"], dict):
            raise ValueError(f"{where}: a preset is a mapping with 'studies' (and name, train, analysis, signal, speed)")
        _check_keys(f"{where}: preset has", data, cls)
        _check_train(f"{where}: train", data.get("train"))
        _check_analysis(f"{where}: analysis", data.get("analysis"))
        signal = SignalOptions.from_dict(data.get("signal"), f"{where}: signal")
        speed = SpeedOptions.from_dict(data.get("speed"), f"{where}: speed")
        _check_tune(f"{where}: tune", data.get("tune"))
        studies = {name: Study.from_dict(name, spec, f"{where}: ") for name, spec in data["studies"].items()}
        seeds = set(as_list((data.get("tune") or {}).get("seeds", [0])))
        for name, study in studies.items():
            if study.tuning_only and (len(study.lrs) < 2 or not set(study.seeds) <= seeds):
                raise ValueError(f"{where}: study {name!r}: tuning_only needs several lrs and seeds among the tuning "
                                 f"seeds {sorted(seeds)}, not lrs={study.lrs} seeds={study.seeds}")
        for name, study in studies.items():  # the study's settings over the preset's, as the grid combines them
            _check_train(f"{where}: study {name!r}: train (over the preset's)", {**(data.get("train") or {}), **study.train})
        blocks = {k: dict(data.get(k) or {}) for k in ("train", "analysis", "tune")}
        skip = as_list(data.get("skip") or [])
        bad = [s for s in skip if s not in SKIPPABLE]
        if bad:
            raise ValueError(f"{where}: skip={bad!r}: only these stages can be skipped: {', '.join(SKIPPABLE)}")
        return cls(**{**data, **blocks, "signal": signal, "speed": speed, "skip": skip,
                      "name": str(data.get("name", where)), "studies": studies})

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able), as recorded in reproduce.json; from_dict reads it back to an equal preset."""
        return {**dataclasses.asdict(self), "signal": self.signal.to_dict(), "speed": self.speed.to_dict()}

    def with_train(self, **fields: Any) -> Preset:
        """A copy in which `fields` (TrainConfig fields) hold for every study, over what the file says,
        e.g. `preset.with_train(precision="fp32")` for `mixit reproduce --precision fp32`."""
        _check_train(f"{self.name}: override", fields)
        studies = {name: dataclasses.replace(s, train={**s.train, **fields}) for name, s in self.studies.items()}
        return dataclasses.replace(self, train={**self.train, **fields}, studies=studies)

    def tuning_seeds(self) -> list[int]:
        """The seeds at which tuned studies train every learning rate (`tune: seeds`, default [0])."""
        return [int(s) for s in as_list(self.tune.get("seeds", [0]))]

    def text_kinds(self) -> set[str]:
        """The corpora ("lm", "sentiment") the studies need."""
        return {s.text for s in self.studies.values() if s.text}

    def task_code(self) -> list[str]:
        """The import paths of the studies' own tasks ('file.py:Class'): code the preset names, so the user's to run."""
        names = [next(iter(t)) if isinstance(t, dict) and len(t) == 1 else t
                 for s in self.studies.values() for t in as_list(s.tasks)]
        return sorted({n for n in names if isinstance(n, str) and ":" in n})


def preset_names() -> list[str]:
    """The presets shipped in reproduce/presets/."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name_or_path: str | Path) -> Preset:
    """A preset by name (reproduce/presets/NAME.yaml) or path, checked for unknown keys."""
    path = Path(name_or_path)
    if not path.suffix:
        if str(name_or_path) not in preset_names():
            raise ValueError(f"preset {str(name_or_path)!r} is not one of: {', '.join(preset_names())} (or a YAML path)")
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ValueError(f"preset file not found: {path}")
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: cannot parse preset ({str(e).splitlines()[0]})") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    return Preset.from_dict(data, str(path))
