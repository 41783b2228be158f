"""The grid's names: a grid field's entries, and the run-directory name (`grid_name`) and readable label
(`grid_label`) of a named variant with `freeze` and `attention` entries on top.

Freeze entries are named in their canonical form (models/freeze_spec.py), so a run's name and its model's label agree.
"""

from __future__ import annotations

from typing import Any

from .freeze_spec import FreezeEntry, _check, canonical_freeze


def _entries(name: str, value: Any) -> list[str]:
    """A grid field as a list of strings: "qk,mlp" (the command line's form) or ["qk", "mlp"]."""
    if isinstance(value, str):
        value = value.split(",")
    _check(isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
           f"{name}={value!r} must be a comma-separated string or a list of strings")
    return [v.strip() for v in value if v.strip()]


def _freeze_names(freeze: Any) -> list[str]:
    """A freeze list as its canonical entries (canonical_freeze), for names and labels; as given if it does not
    parse (a label is no place to refuse it: ModelConfig does, naming the bad entry)."""
    entries = _entries("freeze", freeze or [])
    try:
        return [str(e) for e in canonical_freeze([FreezeEntry.parse(e) for e in entries])]
    except ValueError:
        return entries


def grid_label(variant: str, freeze: Any = (), attention: Any = ()) -> str:
    """'variant', or 'variant [freeze v,o; attention mixing,softmax]' for a grid model (freeze in canonical order)."""
    parts = [f"{name} {','.join(entries)}"
             for name, entries in (("freeze", _freeze_names(freeze)), ("attention", _entries("attention", attention or [])))
             if entries]
    return f"{variant} [{'; '.join(parts)}]" if parts else variant


def grid_name(variant: str, freeze: Any = (), attention: Any = ()) -> str:
    """The variant part of a run directory's name: 'mixit', 'mixit+attn-mixing-softmax', 'standard+freeze-v-o'.

    Freeze entries are canonical and spelled with letters, digits and '_' only: 'v@1' is 'vat1', 'v@1.h2' 'vat1h2'.
    """
    name = variant
    if freeze and _freeze_names(freeze):
        name += "+freeze-" + "-".join(e.replace("@", "at").replace(".", "") for e in _freeze_names(freeze))
    if attention and _entries("attention", attention):
        name += "+attn-" + "-".join(_entries("attention", attention))
    return name
