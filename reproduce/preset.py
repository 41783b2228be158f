"""Presets of `mixit reproduce` as typed data: a `Preset` of named `Study` grids, read from YAML.

    from reproduce.preset import load_preset
    preset = load_preset("quick")             # reproduce/presets/quick.yaml, or a path to your own
    preset.studies["retrieval"].variants      # ['standard', 'frozen_qk', 'frozen_mlp', 'mixit']

A preset file is a mapping:

    name, about, budget, evidence   text (name defaults to the file's stem)
    train: {...}                    TrainConfig fields shared by every study
    studies: {NAME: STUDY, ...}     each a grid: variants, tasks, sizes, seeds, lrs, train, text, about
    analysis: {...}                 analysis.analyze.AnalysisOptions fields for the analysis stage
    signal: {...}, speed: {...}     settings of the signal-propagation and speed stages
    skip: [signal, speed]           stages this preset leaves out (both run by default)

Unknown keys are refused with one line naming the file, the key and the allowed keys, as
TrainConfig does; checking the values is left to the stage that uses them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from models.files import as_list, load_yaml

PRESET_DIR = Path(__file__).resolve().parent / "presets"
SKIPPABLE = ("signal", "speed")  # stages a preset may leave out (`skip:`)
TEXT_KINDS = ("lm", "sentiment")  # what a study's `text:` may name: the corpus it needs (reproduce.pipeline)


def _grid_default(axis: str) -> list:
    from training.sweep import grid_defaults

    return grid_defaults()[axis]


def _check_keys(where: str, data: dict[str, Any], cls: type) -> None:
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where} unknown keys {unknown}; allowed: {sorted(allowed)}")


def _check_train(where: str, train: Any) -> None:
    """A `train:` block holds TrainConfig fields only (checked when the preset loads, not after training)."""
    from training.trainer import TrainConfig

    if not isinstance(train or {}, dict):
        raise ValueError(f"{where} must be a mapping of TrainConfig fields")
    allowed = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(train or {}) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(allowed)}")


@dataclass
class Study:
    """One grid of training runs: variants x tasks x sizes x seeds x lrs (see training.sweep.expand_grid)."""

    tasks: list[Any]  # names, or {name: {param: value}}
    # An axis the study does not give takes the grid's default (training.sweep.grid_defaults); sizes: [{}]
    # leaves each size field to TrainConfig's default (or the study's train block).
    variants: list[str] = field(default_factory=lambda: _grid_default("variants"))
    sizes: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    seeds: list[int] = field(default_factory=lambda: _grid_default("seeds"))
    lrs: list[float] = field(default_factory=lambda: _grid_default("lrs"))
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
        lists = {k: as_list(data[k]) for k in ("tasks", "variants", "sizes", "seeds", "lrs") if k in data}
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
    analysis: dict[str, Any] = field(default_factory=dict)  # analysis.analyze.AnalysisOptions fields
    signal: dict[str, Any] = field(default_factory=dict)
    speed: dict[str, Any] = field(default_factory=dict)
    skip: list[str] = field(default_factory=list)  # optional stages left out: "signal", "speed"

    @classmethod
    def from_dict(cls, data: Any, where: str = "preset") -> Preset:
        """A Preset from a mapping (a parsed YAML file); `where` names it in errors."""
        if not isinstance(data, dict) or "studies" not in data or not isinstance(data["studies"], dict):
            raise ValueError(f"{where}: a preset is a mapping with 'studies' (and name, train, analysis, signal, speed)")
        _check_keys(f"{where}: preset has", data, cls)
        _check_train(f"{where}: train", data.get("train"))
        studies = {name: Study.from_dict(name, spec, f"{where}: ") for name, spec in data["studies"].items()}
        blocks = {k: dict(data.get(k) or {}) for k in ("train", "analysis", "signal", "speed")}
        skip = as_list(data.get("skip") or [])
        bad = [s for s in skip if s not in SKIPPABLE]
        if bad:
            raise ValueError(f"{where}: skip={bad!r}: only these stages can be skipped: {', '.join(SKIPPABLE)}")
        return cls(**{**data, **blocks, "skip": skip, "name": str(data.get("name", where)), "studies": studies})

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able), as recorded in reproduce.json."""
        return dataclasses.asdict(self)

    def with_train(self, **fields: Any) -> Preset:
        """A copy in which `fields` (TrainConfig fields) hold for every study, over what the file says,
        e.g. `preset.with_train(precision="fp32")` for `mixit reproduce --precision fp32`."""
        _check_train(f"{self.name}: override", fields)
        studies = {name: dataclasses.replace(s, train={**s.train, **fields}) for name, s in self.studies.items()}
        return dataclasses.replace(self, train={**self.train, **fields}, studies=studies)

    def text_kinds(self) -> set[str]:
        """The corpora ("lm", "sentiment") the studies need."""
        return {s.text for s in self.studies.values() if s.text}


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
