"""The grid's vocabulary: the kinds of attention a layer can have, and the components a `freeze` entry names.

`COMPONENTS` maps each component to the parameters it covers; `component_of` names a parameter's component by the
same patterns, so freezing and the parameter table (`Transformer.parameter_table`) count alike.
"""

from __future__ import annotations

import re
from typing import Literal

AttentionKind = Literal["softmax", "shaped", "mixing", "learned"]
ATTENTION_KINDS = ("softmax", "shaped", "mixing", "learned")

# The trainability grid: each component names the parameters it covers; `{layer}` is one layer's index
# (a per-layer entry such as "qk@1") or any layer. `ModelConfig.freeze` freezes components at their init;
# FreezeEntry (models/freeze_spec.py) is the grammar of one entry, docs/guides/variants.md what each component means.
COMPONENTS: dict[str, str] = {
    "embed": r"embed\.W_E",
    "pos": r"pos_embed\.W_pos",
    "qk": r"blocks\.{layer}\.attn\.[Wb]_[QK]",
    "q": r"blocks\.{layer}\.attn\.[Wb]_Q",
    "k": r"blocks\.{layer}\.attn\.[Wb]_K",
    "v": r"blocks\.{layer}\.attn\.[Wb]_V",
    "o": r"blocks\.{layer}\.attn\.[Wb]_O",
    "mix": r"blocks\.{layer}\.attn\.A_learned",  # the trainable matrices of "learned" attention
    "mlp": r"blocks\.{layer}\.mlp\..*",
    "norms": r"blocks\.{layer}\.ln[12]\.w",  # plain "norms" also covers ln_final (EVERY_LAYER_ALSO)
    "ln_final": r"ln_final\.w",
    "unembed": r"unembed\..*|classifier\..*",
}
PER_LAYER = ("qk", "q", "k", "v", "o", "mix", "mlp", "norms")
# Components whose parameters are stacked by head on their first dimension (W_Q [head, d_model, d_head],
# b_Q [head, d_head], W_O [head, d_head, d_model], A_learned [head, q, k]): one head can be frozen ("v@0.h1").
PER_HEAD = ("qk", "q", "k", "v", "o", "mix")
# b_O [d_model] is shared by every head: a head entry of "o" freezes W_O[head] and leaves b_O trained.
SHARED_BY_HEADS = ("b_O",)
# What a component without a layer covers besides its own layers' parameters. Plain "norms" has always frozen
# ln_final too, and checkpoints saved with freeze ["norms"] must build the model they were trained as; "norms@1"
# is layer 1's ln1/ln2 only, "ln_final" the final norm alone.
EVERY_LAYER_ALSO = {"norms": "ln_final"}
PAIRS = {"qk": ("q", "k")}  # "qk" is "q" and "k" together: canonical lists write the pair as "qk"


def component_of(param_name: str) -> str:
    """The component of COMPONENTS that holds parameter `param_name`: the first whose pattern matches, in any layer
    (blocks.0.attn.W_Q -> "qk": q and k count together, as canonical freeze lists write them). The one component
    vocabulary: freezing and the parameter table (Transformer.parameter_table) both read COMPONENTS."""
    for component, pattern in COMPONENTS.items():
        if re.fullmatch(pattern.replace("{layer}", r"\d+"), param_name):
            return component
    raise ValueError(f"parameter {param_name!r} is in no component; allowed: names matching COMPONENTS "
                     f"({', '.join(COMPONENTS)}) in models/vocabulary.py")
