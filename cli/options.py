"""Command-line options from a dataclass's fields, and the field values back from the parsed options.

`add_field_options` adds `--batch-size` for the field `batch_size`: its type from the field's annotation, its default
the dataclass's own, so an option states no default of its own (docs/architecture.md, "Typed options"); what else
--help says (help, metavar, choices) comes from the caller's table. `field_values` reads the fields back.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Collection, Iterable, Mapping

OPTION_TYPES = (bool, int, float, str)  # bool: an off-by-default switch (store_true)


def option_flag(name: str) -> str:
    """The option of field `name`: `--batch-size` for batch_size."""
    return "--" + name.replace("_", "-")


def _option_type(cls: type, name: str, hint: Any) -> type:
    """The type an option of this annotation parses to: `int | None` (None: the dataclass's "not set") gives int."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    if len(kinds) != 1 or kinds[0] not in OPTION_TYPES:
        raise TypeError(f"{cls.__name__}.{name}: {hint} is not one of the option types {OPTION_TYPES}")
    return kinds[0]


def add_field_options(parser: argparse.ArgumentParser, cls: type, table: Mapping[str, Mapping[str, Any]],
                      many: Collection[str] = ()) -> None:
    """Add an option for each field of dataclass `cls` that `table` names, in its order, with the row's extra
    add_argument keywords (help, metavar, choices); a field in `many` takes several values (default: [its default])."""
    hints = typing.get_type_hints(cls)  # the annotations are strings under `from __future__ import annotations`
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, extra in table.items():
        kind, default = _option_type(cls, name, hints[name]), defaults[name]
        if default is dataclasses.MISSING or (kind is bool and default is not False):
            raise TypeError(f"{cls.__name__}.{name}: an option needs a plain default (False for a switch)")
        if kind is bool:
            options: dict[str, Any] = {"action": "store_true"}
        elif name in many:
            options = {"type": kind, "nargs": "+", "default": [default]}
        else:
            options = {"type": kind, "default": default}
        parser.add_argument(option_flag(name), **options, **extra)


def field_values(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The parsed values of the fields `names` that are options of the parser that gave `args` (a command may
    leave some out)."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}
