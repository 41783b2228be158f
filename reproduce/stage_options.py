"""The settings of `mixit reproduce`'s signal and speed stages, typed: `SignalOptions` and `SpeedOptions`.

    from mixit_lab.reproduce.stage_options import SignalOptions
    options = SignalOptions.from_dict({"depths": [2, 4], "sink_head": False}, "mine.yaml: signal")
    options.arguments()      # mixit_lab.analysis.signal.signal_propagation's keyword arguments
    options.cache_key()      # what signal/signal.json beside signal/signal.csv holds

A preset's `signal:` and `speed:` blocks (mixit_lab.reproduce.preset) are read into these frozen dataclasses when it
loads: an unknown key or a value of the wrong kind is one ValueError line naming the block, the key and what is
allowed. Each default is written once: the stage's own settings (the fields named in OWN) here, every other one in
the signature of the function the stage calls (signal_propagation, mixit_lab.training.benchmark.measure_throughput),
read from there.

In YAML the ModelConfig fields a signal block sets for every variant sit flat in the block (`sink_head: false`);
here they are `model`. `controls` are extra rows: {label: {variant: NAME, ModelConfig fields}}.

The cache key (and `to_dict`, the block as plain data) holds the stage's own settings, the other settings the file
wrote, and any setting that differs from its default: the key the stages wrote before these options were typed, so
the caches of existing studies stay valid.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from mixit_lab.models.files import as_list

AT_LEAST_ZERO = ("seeds", "warmup")  # integer settings that may be 0; every other one is positive
STRUCTURE = ("model", "controls", "written")  # fields that are no keyword argument of the stage's function


def as_mapping(where: str, block: Any) -> dict[str, Any]:
    """A block of a preset as a dict (absent: empty); ValueError naming it when it is not a mapping."""
    if not isinstance(block or {}, dict):
        raise ValueError(f"{where} must be a mapping, not {block!r}")
    return dict(block or {})


def _items(value: Any) -> list:
    """A setting written as one item or as a list (or tuple) of items, as a list."""
    return list(value) if isinstance(value, tuple) else as_list(value)


def check_setting(where: str, key: str, value: Any, default: Any) -> None:
    """A setting of the same kind as its default: an integer (positive, or >= 0 for AT_LEAST_ZERO), a list of them
    for a list of integers, a string, a boolean; variants must be known (or "all")."""
    from mixit_lab.models import VARIANTS

    least = 0 if key in AT_LEAST_ZERO else 1

    def integer(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= least

    kind, kinds = ("integer >= 0", "integers >= 0") if least == 0 else ("positive integer", "positive integers")
    if key == "variants":
        values = _items(value)
        bad = [v for v in values if not isinstance(v, str) or v not in VARIANTS] if value != "all" else []
        if not values or bad:
            raise ValueError(f"{where}: variants={value!r}: {bad or 'none'} not among: all, {', '.join(VARIANTS)}")
    elif isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {key}={value!r} must be true or false")
    elif isinstance(default, int):
        if not integer(value):
            raise ValueError(f"{where}: {key}={value!r} must be a {kind}")
    elif isinstance(default, (tuple, list)):
        if not _items(value) or not all(integer(v) for v in _items(value)):
            raise ValueError(f"{where}: {key}={value!r} must be a list of {kinds}")
    elif isinstance(default, str) and not isinstance(value, str):
        raise ValueError(f"{where}: {key}={value!r} must be a string")


def _signal_function() -> Callable[..., Any]:
    from mixit_lab.analysis.signal import signal_propagation

    return signal_propagation


def _speed_function() -> Callable[..., Any]:
    from mixit_lab.training.benchmark import measure_throughput

    return measure_throughput


@functools.cache
def _defaults_of(function: Callable[[], Callable[..., Any]]) -> dict[str, Any]:
    """The parameters' defaults of a stage's function, read once, when the first options object is made (its
    module imports torch: not when this module loads)."""
    return {name: p.default for name, p in inspect.signature(function()).parameters.items()}


def _default_of(function: Callable[[], Callable[..., Any]], name: str) -> Any:
    """A field whose default is parameter `name`'s default in the stage's function."""
    return field(default_factory=lambda: _defaults_of(function)[name])


def _every_variant() -> tuple[str, ...]:
    from mixit_lab.models import VARIANTS

    return tuple(VARIANTS)


def _plain(value: Any) -> Any:
    """A setting as JSON-able data: tuples as lists."""
    return list(value) if isinstance(value, tuple) else value


class _StageOptions:
    """What SignalOptions and SpeedOptions share: reading a block's settings, and writing them back as plain data."""

    OWN: ClassVar[tuple[str, ...]]  # the stage's own settings (their defaults written here): always in the cache key
    written: frozenset[str]

    @classmethod
    def settings(cls) -> list[str]:
        """The keyword arguments of the stage's function these options hold."""
        return [f.name for f in dataclasses.fields(cls) if f.name not in STRUCTURE]

    @classmethod
    def _read_settings(cls, where: str, data: dict[str, Any]) -> dict[str, Any]:
        """The block's settings (`data`: known keys only), each checked against its default's kind and normalised:
        lists as tuples, variants "all" as every variant."""
        defaults = cls()
        values = {}
        for key, value in data.items():
            default = getattr(defaults, key)
            check_setting(where, key, value, default)
            if key == "variants":
                value = _every_variant() if value == "all" else tuple(_items(value))
            elif isinstance(default, tuple):
                value = tuple(_items(value))
            values[key] = value
        return values

    def _plain_settings(self) -> dict[str, Any]:
        """The settings the cache key holds: the stage's own, those the file wrote, those off their default."""
        defaults = type(self)()
        return {k: _plain(getattr(self, k)) for k in self.settings()
                if k in self.OWN or k in self.written or getattr(self, k) != getattr(defaults, k)}

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the stage's function."""
        return {k: _plain(getattr(self, k)) for k in self.settings()}


def refuse_unknown(where: str, data: dict[str, Any], allowed: set[str]) -> None:
    """ValueError naming the keys of a block that are not among `allowed`, and the allowed ones."""
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(allowed)}")


def _model_fields() -> set[str]:
    """The ModelConfig fields a signal block or control may set: not those each model of the stage gets from its
    row (variant, width, depth, seed)."""
    from mixit_lab.models.config import ModelConfig

    return {f.name for f in dataclasses.fields(ModelConfig)} - {"variant", "d_model", "n_layers", "seed"}


@dataclass(frozen=True)
class SignalOptions(_StageOptions):
    """The signal stage (mixit_lab.reproduce.pipeline.signal_stage): token similarity vs depth at initialisation,
    per variant x width x depth x seed (signal_propagation), and per control."""

    OWN: ClassVar[tuple[str, ...]] = ("variants", "depths", "widths", "seeds")
    variants: tuple[str, ...] = ("random", "mixit")
    depths: tuple[int, ...] = (2, 4, 8, 16, 32)
    widths: tuple[int, ...] = (128,)
    seeds: tuple[int, ...] = (0, 1, 2)
    n_heads: int = _default_of(_signal_function, "n_heads")
    n_ctx: int = _default_of(_signal_function, "n_ctx")
    d_vocab: int = _default_of(_signal_function, "d_vocab")
    n_seqs: int = _default_of(_signal_function, "n_seqs")
    device: str = _default_of(_signal_function, "device")
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields for every variant and control
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)  # {label: {variant: NAME, ModelConfig fields}}
    written: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # the keys the block wrote

    @classmethod
    def from_dict(cls, block: Any = None, where: str = "signal") -> SignalOptions:
        """Options from a `signal:` block (None: the defaults), or from the cache key a signal stage wrote."""
        data = as_mapping(where, block)
        settings, model_fields = set(cls.settings()), _model_fields() - set(cls.settings())
        refuse_unknown(where, data, {*settings, "controls", *model_fields})
        controls = {}
        for label, control in as_mapping(f"{where}: controls", data.get("controls")).items():
            controls[label] = _read_control(f"{where}: controls: {label!r}", control)
        options = cls(**cls._read_settings(where, {k: v for k, v in data.items() if k in settings}),
                      model={k: v for k, v in data.items() if k in model_fields}, controls=controls,
                      written=frozenset(data))
        options._check_models(where)
        return options

    def _check_models(self, where: str) -> None:
        """Every model the stage builds is a valid ModelConfig (fields of the right kind, width divisible by heads)."""
        from mixit_lab.models.config import ModelConfig

        for label, (variant, fields) in self.labels().items():
            for width in self.widths:
                for depth in self.depths:
                    try:
                        ModelConfig(**{"variant": variant, "d_model": width, "n_layers": depth, "n_heads": self.n_heads,
                                       "n_ctx": self.n_ctx, "d_vocab": self.d_vocab, **fields})
                    except (ValueError, TypeError) as e:
                        raise ValueError(f"{where}: {label!r} at width {width}, depth {depth}: {e}") from None

    def labels(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Each row label of the signal table -> (its variant, the ModelConfig fields it sets): the variants, then
        the controls (a control's fields over the block's)."""
        labels = {v: (v, dict(self.model)) for v in self.variants}
        for label, control in self.controls.items():
            labels[label] = (control["variant"], {**self.model, **{k: v for k, v in control.items() if k != "variant"}})
        return labels

    def arguments(self, label: str | None = None) -> dict[str, Any]:
        """signal_propagation's keyword arguments: for the variants, or for the rows of one label (its variant with
        its fields)."""
        if label is None:
            return {**super().arguments(), **self.model}
        variant, fields = self.labels()[label]
        return {**super().arguments(), "variants": [variant], **fields}

    def to_dict(self) -> dict[str, Any]:
        """The block as plain data, in the YAML form (model fields flat); reads back to equal options."""
        return {**self._plain_settings(), **self.model,
                "controls": {label: dict(control) for label, control in self.controls.items()}}

    def cache_key(self) -> dict[str, Any]:
        """What signal/signal.csv is cached under (signal/signal.json beside it)."""
        return self.to_dict()


def _read_control(where: str, control: Any) -> dict[str, Any]:
    """One control: a mapping naming a known variant, and ModelConfig fields."""
    from mixit_lab.models import VARIANTS

    if not isinstance(control, dict) or "variant" not in control:
        raise ValueError(f"{where} must be a mapping naming a variant")
    if not isinstance(control["variant"], str) or control["variant"] not in VARIANTS:
        raise ValueError(f"{where}: variant={control['variant']!r} is not one of: {', '.join(VARIANTS)}")
    refuse_unknown(where, {k: v for k, v in control.items() if k != "variant"}, _model_fields())
    return dict(control)


@dataclass(frozen=True)
class SpeedOptions(_StageOptions):
    """The speed stage (mixit_lab.reproduce.pipeline.speed_stage): training throughput per variant
    (measure_throughput's parameters)."""

    OWN: ClassVar[tuple[str, ...]] = ("variants", "d_model", "n_layers", "n_heads", "seq_len", "batch_size", "vocab",
                                      "steps", "repeats", "warmup", "device")
    variants: tuple[str, ...] = field(default_factory=_every_variant)  # "all" in YAML
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    batch_size: int = 32
    vocab: int = 512
    steps: int = 5
    repeats: int = 3
    warmup: int = 2
    device: str = "auto"
    compile: bool = _default_of(_speed_function, "compile")
    precision: str = _default_of(_speed_function, "precision")
    written: frozenset[str] = field(default=frozenset(), compare=False, repr=False)  # the keys the block wrote

    @classmethod
    def from_dict(cls, block: Any = None, where: str = "speed") -> SpeedOptions:
        """Options from a `speed:` block (None: the defaults); precision one of TrainConfig's."""
        from mixit_lab.training.config import PRECISIONS

        data = as_mapping(where, block)
        refuse_unknown(where, data, set(cls.settings()))
        options = cls(**cls._read_settings(where, data), written=frozenset(data))
        if options.precision not in PRECISIONS:
            raise ValueError(f"{where}: precision={options.precision!r} is not one of: {', '.join(PRECISIONS)}")
        return options

    def to_dict(self) -> dict[str, Any]:
        """The block as plain data; reads back to equal options."""
        return self._plain_settings()

    def cache_key(self) -> dict[str, Any]:
        """What speed/speed.csv is cached under: the settings and the table's columns (a file written before a
        column existed is measured again)."""
        from mixit_lab.training.benchmark import COLUMNS

        return {**self.to_dict(), "columns": list(COLUMNS)}
