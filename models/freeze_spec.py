"""The freeze grammar: one `freeze` entry ("v", "v@1", "v@1.h2") parsed, checked against a model's shape and matched
against parameter names, and a freeze list in its one canonical form (`canonical_freeze`).

`ModelConfig.freeze` is stored canonical; models/freeze.py applies it to a built model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .vocabulary import COMPONENTS, EVERY_LAYER_ALSO, PAIRS, PER_HEAD, PER_LAYER, SHARED_BY_HEADS


def _check(ok: bool, message: str) -> None:
    """Raise ValueError(message) unless `ok`."""
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class FreezeEntry:
    """One `freeze` entry: a component in every layer ("v"), in one ("v@1"), or one head of one layer ("v@1.h2")."""

    component: str
    layer: int | None = None
    head: int | None = None

    @classmethod
    def parse(cls, text: str) -> "FreezeEntry":
        """Parse "component[@LAYER[.hHEAD]]"; ranges are checked against a model's shape by `check_shape`."""
        component, at, scope = text.partition("@")
        base, dot, after = component.partition(".")
        _check(at or not dot, f"freeze entry {text!r}: a head needs a layer; write e.g. {base}@0.{after}")
        _check(component in COMPONENTS, f"freeze entry {text!r}: {component!r} is not one of: {', '.join(COMPONENTS)}")
        if not at:
            return cls(component)
        _check(component in PER_LAYER,
               f"freeze entry {text!r}: only {', '.join(PER_LAYER)} can be frozen in one layer")
        layer, dot, head = scope.partition(".")
        _check(re.fullmatch(r"[0-9]+", layer) is not None,
               f"freeze entry {text!r}: {layer!r} after '@' is not a layer number; write {component} (every layer) "
               f"or {component}@LAYER (one layer)")
        if not dot:
            return cls(component, int(layer))
        _check(component in PER_HEAD, f"freeze entry {text!r}: only {', '.join(PER_HEAD)} can be frozen in one head")
        _check(re.fullmatch(r"h[0-9]+", head) is not None,
               f"freeze entry {text!r}: head {head!r} is not h followed by a head number, e.g. {component}@{layer}.h0")
        return cls(component, int(layer), int(head[1:]))

    def __str__(self) -> str:
        layer = "" if self.layer is None else f"@{self.layer}"
        return self.component + layer + ("" if self.head is None else f".h{self.head}")

    def check_shape(self, n_layers: int, n_heads: int) -> None:
        """Refuse a layer or head the model does not have."""
        _check(self.layer is None or self.layer < n_layers,
               f"freeze entry {str(self)!r}: layer '{self.layer}' is not one of 0..{n_layers - 1}")
        _check(self.head is None or self.head < n_heads,
               f"freeze entry {str(self)!r}: head 'h{self.head}' is not one of h0..h{n_heads - 1}")

    def pattern(self) -> str:
        """The regex of the parameter names this entry touches (wholly, or a head's slice of them)."""
        pattern = COMPONENTS[self.component].replace("{layer}", r"\d+" if self.layer is None else str(self.layer))
        if self.layer is None and self.component in EVERY_LAYER_ALSO:
            pattern += "|" + COMPONENTS[EVERY_LAYER_ALSO[self.component]]
        return pattern

    def covers(self, param_name: str) -> bool:
        """Whether this entry keeps `param_name`, or (a head entry) its slice [head], at init."""
        if self.head is not None and param_name.rsplit(".", 1)[-1] in SHARED_BY_HEADS:
            return False
        return re.fullmatch(self.pattern(), param_name) is not None

    def absorbs(self, other: "FreezeEntry") -> bool:
        """Whether this entry freezes everything `other` does (and is another entry): "v" absorbs "v@0", "v@0.h1"."""
        if self == other:
            return False
        if self.layer is None and EVERY_LAYER_ALSO.get(self.component) == other.component:
            return True
        if self.component != other.component:
            return False
        return self.layer is None or (self.layer == other.layer and self.head is None)

    def sort_key(self) -> tuple[int, int, int]:
        """Component in COMPONENTS' order, then layer, then head; every layer (or head) before one."""
        return list(COMPONENTS).index(self.component), -1 if self.layer is None else self.layer, \
            -1 if self.head is None else self.head


def canonical_freeze(entries: list[FreezeEntry]) -> list[FreezeEntry]:
    """One list per set of frozen weights: "qk" split into "q" and "k", duplicates and entries a broader one
    covers dropped ("v" absorbs "v@0", "norms" absorbs "ln_final"), "q" and "k" of one scope joined back
    into "qk", sorted by component (COMPONENTS' order), layer, head. Needs no model shape, so a run's
    name (grid_name) and its model's label agree; entries that together cover every layer are not merged."""
    split = {FreezeEntry(part, e.layer, e.head) for e in entries for part in PAIRS.get(e.component, (e.component,))}
    kept = {e for e in split if not any(other.absorbs(e) for other in split)}
    for pair, (first, second) in PAIRS.items():
        for e in [e for e in kept if e.component == first]:
            partner = FreezeEntry(second, e.layer, e.head)
            if partner in kept:
                kept -= {e, partner}
                kept.add(FreezeEntry(pair, e.layer, e.head))
    return sorted(kept, key=FreezeEntry.sort_key)
