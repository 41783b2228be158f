"""A run's `model_extra`, the ModelConfig fields set on top of its variant: checked (`check_model_extra`), merged with
a grid's (`grid_extra`), and a grid's models checked together (`check_grid_models`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .config import ModelConfig
from .freeze_spec import _check
from .grid import _entries


SET_BY_RUN = ("variant", "d_model", "n_layers", "n_heads", "n_ctx", "d_vocab", "seed")  # set by TrainConfig and the task


def check_model_extra(extra: Any) -> None:
    """A `model_extra` block: a mapping of ModelConfig fields that neither the run nor its task sets (SET_BY_RUN)."""
    allowed = sorted(f.name for f in dataclasses.fields(ModelConfig) if f.name not in SET_BY_RUN)
    _check(isinstance(extra, dict), f"model_extra={extra!r} must be a mapping; allowed keys: {', '.join(allowed)}")
    unknown = sorted(set(extra) - set(allowed))
    _check(not unknown, f"model_extra has unknown keys {unknown}; allowed: {', '.join(allowed)}")


def grid_extra(extra: Any, grid: dict[str, Any]) -> dict[str, Any]:
    """A grid run's model_extra (checked): a variant entry's settings on top of the grid's; its freeze entries add to
    the grid's, as repeated --freeze do."""
    check_model_extra(extra)
    merged = {**extra, **grid}
    if extra.get("freeze") and grid.get("freeze"):
        merged["freeze"] = list(dict.fromkeys([*_entries("freeze", extra["freeze"]), *_entries("freeze", grid["freeze"])]))
    return merged


def check_grid_models(runs: list[tuple[str, ModelConfig]], fields_used: bool = True,
                      unused: list[dict[str, tuple[Any, str]]] | None = None) -> None:
    """Refuse a grid's duplicate run names (naming them) and (fields_used) a field set that changes none of its models
    (`unused`: per run, each such field's value and users, as set before the grid dropped it from the run's config)."""
    names = [name for name, _ in runs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    _check(not repeated, f"grid has duplicate runs: {', '.join(repeated[:3])}{' ...' * (len(repeated) > 3)}; give "
           "each variant (freeze entries in canonical form: 'v,v' is 'v'), task, size, seed and lr once")
    unused = unused or [{k: (getattr(m, k), users) for k, users in m.unused_fields().items()} for _, m in runs]
    for name in (unused[0] if fields_used and runs and all(unused) else {}):
        _check(not all(name in u for u in unused), f"model_extra {name}={unused[0][name][0]!r} has no effect on any "
               f"model of this grid ({'; '.join(sorted({m.label for _, m in runs}))}); it applies to {unused[0][name][1]}")
