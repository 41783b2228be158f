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
    signal: {...}, speed: {...}     settings of the signal-propagation and speed stages
    skip: [signal, speed]           stages this preset leaves out (both run by default)

A preset is checked whole when it loads, before anything trains: an unknown key or a bad value in any block
(train, a study, analysis, signal, speed, skip) is one ValueError naming the file, the block and the key.
The train blocks are checked as TrainConfig, the analysis block as AnalysisOptions, the signal and speed blocks
against the parameters of mixit_lab.analysis.signal.signal_propagation and mixit_lab.training.benchmark.measure_throughput. The
blocks stay the mappings the file holds (they are the stages' cache keys), their defaults the stages' own.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mixit_lab.models.files import as_list, load_yaml

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
    allowed = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(train or {}) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(allowed)}")
    try:
        TrainConfig.from_dict(dict(train or {}))
        check_model_extra((train or {}).get("model_extra", {}))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _mapping(where: str, block: Any) -> dict[str, Any]:
    """A stage's block as a dict (absent: empty); ValueError naming it when it is not a mapping."""
    if not isinstance(block or {}, dict):
        raise ValueError(f"{where} must be a mapping, not {block!r}")
    return dict(block or {})


def _check_analysis(where: str, block: Any) -> None:
    """The `analysis:` block: AnalysisOptions fields and values."""
    from mixit_lab.analysis.analyze import AnalysisOptions

    try:
        AnalysisOptions.from_dict(_mapping(where, block))
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: {e}") from None


def _parameters(fn: Any) -> dict[str, inspect.Parameter]:
    """The named parameters of a stage's function (not **kwargs)."""
    return {name: p for name, p in inspect.signature(fn).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _check_value(where: str, key: str, value: Any, default: Any) -> None:
    """A stage setting of the same kind as its function's default: a positive integer (lists of them for lists
    of integers), a string, a boolean; variants must be known (or "all")."""
    from mixit_lab.models import VARIANTS

    def positive_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= (0 if key == "seeds" else 1)

    if key == "variants":
        values = as_list(value)
        bad = [v for v in values if v not in VARIANTS] if value != "all" else []
        if not values or bad:
            raise ValueError(f"{where}: variants={value!r}: {bad or 'none'} not among: all, {', '.join(VARIANTS)}")
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {key}={value!r} must be true or false")
    elif isinstance(default, int):
        if not positive_int(value):
            raise ValueError(f"{where}: {key}={value!r} must be a positive integer")
    elif isinstance(default, (tuple, list)):
        if not as_list(value) or not all(positive_int(v) for v in as_list(value)):
            kind = "integers >= 0" if key == "seeds" else "positive integers"
            raise ValueError(f"{where}: {key}={value!r} must be a list of {kind}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise ValueError(f"{where}: {key}={value!r} must be a string")


def _check_model_fields(where: str, fields: dict[str, Any]) -> None:
    from mixit_lab.models.config import ModelConfig

    allowed = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(allowed)}")


def _check_stage(where: str, block: Any, fn: Any, extra: tuple[str, ...] = ()) -> None:
    """A signal or speed block: the named parameters of `fn` (plus `extra`), each of its default's kind."""
    block = _mapping(where, block)
    params = _parameters(fn)
    unknown = sorted(set(block) - set(params) - set(extra))
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted({*params, *extra})}")
    for key, value in block.items():
        if key in params:
            _check_value(where, key, value, params[key].default)


def _check_signal(where: str, block: Any) -> None:
    """The `signal:` block: signal_propagation's parameters, ModelConfig fields, and `controls`
    ({label: {variant: NAME, ModelConfig fields}})."""
    from mixit_lab.analysis.signal import signal_propagation
    from mixit_lab.models.config import ModelConfig

    block = _mapping(where, block)
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)} - {"variant", "d_model", "n_layers", "seed"}
    _check_stage(where, block, signal_propagation, ("controls", *model_fields))
    for label, control in _mapping(f"{where}: controls", block.get("controls")).items():
        if not isinstance(control, dict) or "variant" not in control:
            raise ValueError(f"{where}: controls: {label!r} must be a mapping naming a variant")
        _check_value(f"{where}: controls: {label!r}", "variants", [control["variant"]], None)
        _check_model_fields(f"{where}: controls: {label!r}", {k: v for k, v in control.items() if k != "variant"})


def _check_speed(where: str, block: Any) -> None:
    """The `speed:` block: measure_throughput's parameters; precision one of TrainConfig's."""
    from mixit_lab.training.benchmark import measure_throughput
    from mixit_lab.training.config import PRECISIONS

    _check_stage(where, block, measure_throughput)
    precision = _mapping(where, block).get("precision", "auto")
    if precision not in PRECISIONS:
        raise ValueError(f"{where}: precision={precision!r} is not one of: {', '.join(PRECISIONS)}")


def _check_tune(where: str, block: Any) -> None:
    """The `tune:` block: `seeds`, a non-empty list of integers >= 0."""
    block = _mapping(where, block)
    unknown = sorted(set(block) - {"seeds"})
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: ['seeds']")
    if "seeds" in block:
        _check_value(where, "seeds", block["seeds"], [0])


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
    signal: dict[str, Any] = field(default_factory=dict)
    speed: dict[str, Any] = field(default_factory=dict)
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
        _check_signal(f"{where}: signal", data.get("signal"))
        _check_speed(f"{where}: speed", data.get("speed"))
        _check_tune(f"{where}: tune", data.get("tune"))
        studies = {name: Study.from_dict(name, spec, f"{where}: ") for name, spec in data["studies"].items()}
        seeds = set(as_list((data.get("tune") or {}).get("seeds", [0])))
        for name, study in studies.items():
            if study.tuning_only and (len(study.lrs) < 2 or not set(study.seeds) <= seeds):
                raise ValueError(f"{where}: study {name!r}: tuning_only needs several lrs and seeds among the tuning "
                                 f"seeds {sorted(seeds)}, not lrs={study.lrs} seeds={study.seeds}")
        for name, study in studies.items():  # the study's settings over the preset's, as the grid combines them
            _check_train(f"{where}: study {name!r}: train (over the preset's)", {**(data.get("train") or {}), **study.train})
        blocks = {k: dict(data.get(k) or {}) for k in ("train", "analysis", "signal", "speed", "tune")}
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
