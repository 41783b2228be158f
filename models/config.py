"""Model configuration: `ModelConfig`, and which of its fields change which models.

`ModelConfig` is the single description of a model: it is what `build_model` takes,
what `config.json` in a checkpoint holds, and (with the seed) all that is needed to
rebuild a model bit for bit. The variant it names is in `VARIANTS` (models/variants.py),
its `freeze` entries follow the grammar of models/freeze_spec.py, and its label is
`grid_label` (models/grid.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from .freeze_spec import FreezeEntry, _check, canonical_freeze
from .grid import _entries, grid_label
from .variants import VARIANTS, VariantSpec
from .vocabulary import ATTENTION_KINDS, COMPONENTS


# Fields that change only some models: field -> whether a model (variant spec, its layers' attention kinds) uses it.
# Set on a model that does not, a field would be recorded and do nothing: commands refuse it (unused_fields).
FIELD_USE: dict[str, Callable[[VariantSpec, set[str]], bool]] = {
    "residual_scale": lambda spec, kinds: spec.shaped,
    "base_width": lambda spec, kinds: spec.shaped or "shaped" in kinds,
    "base_width_down": lambda spec, kinds: spec.shaped,
    "scaled_readout": lambda spec, kinds: spec.shaped,
    "tau0": lambda spec, kinds: "shaped" in kinds,
    "width_scaled_temperature": lambda spec, kinds: "shaped" in kinds,
    "sink_head": lambda spec, kinds: bool(kinds & {"mixing", "learned"}),
    "qk_init_std": lambda spec, kinds: bool(kinds & {"softmax", "shaped"}),
    "rope_base": lambda spec, kinds: spec.positions == "rotary" and bool(kinds & {"softmax", "shaped"}),
    "mixing_centre": lambda spec, kinds: "mixing" in kinds,
    "causal_softmax": lambda spec, kinds: bool(kinds & {"softmax", "shaped"}),
}
BIDIRECTIONAL_ONLY = ("mixing_centre", "causal_softmax")  # FIELD_USE fields that change only models with causal=False
CHOICES = {"pooling": ("last", "mean"), "mixing_centre": ("own", "causal")}  # fields that take one of a few words


def field_users(name: str) -> str:
    """Which models field `name` of FIELD_USE changes: 'variants mixit, shaped' plus the attention kinds that use it."""
    variants = [v for v, spec in VARIANTS.items() if FIELD_USE[name](spec, {spec.attention})]
    kinds = [k for k in ATTENTION_KINDS if FIELD_USE[name](VARIANTS["standard"], {k})]
    where = f"variant{'s' * (len(variants) > 1)} {', '.join(variants)}"
    where += f" and layers with attention {' or '.join(kinds)} (--attention)" if kinds else ""
    return where + (", in bidirectional models (causal=False, as classifiers)" if name in BIDIRECTIONAL_ONLY else "")


@dataclass
class ModelConfig:
    """Hyperparameters of a model. Every field is JSON-serialisable.

    `base_width` / `base_width_down` set the width scaling of the shaped variants
    (mixit, shaped): each linear output, the readout included, is multiplied by
    sqrt(base / fan_in), with `base_width_down` for the MLP down-projection, as in the
    authors' code. docs/fidelity.md lists every choice against the authors' models.
    """

    variant: str = "standard"
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_ctx: int = 64
    d_vocab: int = 32
    seed: int = 0
    d_mlp: int | None = None  # default 4 * d_model
    causal: bool = True  # False: bidirectional attention (sequence classification)
    n_classes: int | None = None  # set: a classification head replaces the unembedding (see Transformer.classify)
    init_std: float = 0.02
    # W_Q and W_K at init (None: init_std). Frozen at std 0.02, attention logits scale like
    # 0.0004 * d_model, so small frozen_qk models attend uniformly; 1/sqrt(d_model) gives O(1) logits.
    qk_init_std: float | None = None
    # MixiT: head 0 of each layer is a sink head (0.5 I + 0.5 on column 0). False makes every head a
    # random mixing head. The sink pulls all tokens towards token 0, so at init it is what makes
    # token similarity grow with depth (mixit_lab.analysis.signal); without it MixiT's stays flat.
    sink_head: bool = True
    rope_base: float = 10_000.0
    norm_eps: float = 1e-6
    base_width: int = 512
    base_width_down: int = 1
    residual_scale: float = math.sqrt(0.5)  # s in h = s*h + sqrt(1-s^2)*f(h), shaped variants
    # Trained, zero-initialised biases on attention (b_Q, b_K, b_V, b_O) and MLP (b_gate, b_in, b_out), as
    # every one of the authors' training scripts sets; and on the readout (b_U / b_C), which theirs lacks.
    # A bias that is off stays a zero buffer, so the TransformerLens layout (b_Q, b_U, ...) holds.
    bias: bool = True
    unembed_bias: bool = False
    # Shaped variants: the unembedding/classifier is width-scaled like every other linear layer,
    # logits = sqrt(base_width / d_model) * (x @ W_U), as the authors' lm_head and score.
    scaled_readout: bool = True
    # Shaped attention temperature tau = tau0 * sqrt(d_head), divided by base_width / d_model when
    # width_scaled_temperature (the authors' choice): scores = q.k * (base_width / d_model) / (tau0 sqrt(d_head)).
    tau0: float = 1.0
    width_scaled_temperature: bool = True
    # The authors' depth option: if depth_alpha != 0, every block has skip 1 and branches scaled by
    # (base_layers / n_layers) ** depth_alpha (all variants), and MixiT's matrices drop the identity
    # (centred noise at std 1/sqrt(n_ctx)). 0 (their default) leaves both as described above.
    depth_alpha: float = 0.0
    base_layers: int = 1
    # Classifier pooling: "last" real token (the authors' sequence classifier) or "mean" over real tokens.
    pooling: Literal["last", "mean"] = "last"
    # The authors' classifier (docs/fidelity.md, "Readout, classifier, embeddings"). mixing_centre, MixiT with
    # causal=False: "causal" (theirs, the default: with it MixiT learns SST-2) divides each row's noise sum by the
    # causal count i + 1, rows not summing to 1, and padding cuts the matrices without re-centring; "own" centres
    # each row over the keys it sees (rows sum to 1). Each field below: default ours, the other value theirs.
    mixing_centre: Literal["own", "causal"] = "causal"
    # attend_padding (classifiers): True ignores attention_mask in attention (padding is attended like any
    # token, MixiT's matrices are not re-centred); the pooling still reads only the real tokens.
    attend_padding: bool = False
    # causal_softmax, causal=False: True keeps softmax and shaped layers causal (theirs, transformers 4.51.3).
    causal_softmax: bool = False
    # zero_pad_token: a token id (theirs: the pad token) whose row of W_E is zero at init and never trains.
    zero_pad_token: int | None = None
    # The grid on top of the variant (both empty for the six named variants). `freeze`: components kept
    # at their init, in all layers ("qk"), one ("qk@1") or one head of one ("qk@1.h2"); see COMPONENTS and
    # FreezeEntry; stored canonical (canonical_freeze: sorted, each weight once). `attention`: each layer's
    # attention (one entry: every layer), replacing the variant's: softmax, shaped, mixing (MixiT's fixed
    # matrices) or learned (the same matrices, trained: input-independent but learned).
    freeze: list[str] = field(default_factory=list)
    attention: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # free-form metadata, saved with the model

    def __post_init__(self) -> None:
        _check(self.variant in VARIANTS, f"variant={self.variant!r} is not one of: {', '.join(VARIANTS)}")
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        for name in ("d_model", "n_layers", "n_heads", "n_ctx", "d_vocab", "d_mlp", "base_width", "base_width_down",
                     "base_layers"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                   f"{name}={value!r} must be a positive integer")
        _check(self.d_model % self.n_heads == 0, f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        _check(isinstance(self.seed, int) and not isinstance(self.seed, bool), f"seed={self.seed!r} must be an integer")
        for name in ("init_std", "qk_init_std", "rope_base", "norm_eps", "residual_scale", "tau0", "depth_alpha"):
            value = getattr(self, name)
            _check(value is None and name == "qk_init_std" or isinstance(value, (int, float))
                   and not isinstance(value, bool) and math.isfinite(value), f"{name}={value!r} must be a finite number")
        _check(isinstance(self.extra, dict), f"extra={self.extra!r} must be a mapping of metadata (e.g. {{note: text}})")
        _check(self.init_std > 0, f"init_std={self.init_std!r} must be > 0")
        _check(self.qk_init_std is None or self.qk_init_std > 0, f"qk_init_std={self.qk_init_std!r} must be > 0 or None")
        _check(self.rope_base > 0, f"rope_base={self.rope_base!r} must be > 0")
        _check(self.norm_eps > 0, f"norm_eps={self.norm_eps!r} must be > 0")
        _check(0 < self.residual_scale < 1, f"residual_scale={self.residual_scale!r} must lie in (0, 1)")
        for name in ("sink_head", "causal", "bias", "unembed_bias", "scaled_readout", "width_scaled_temperature",
                     "attend_padding", "causal_softmax"):
            _check(isinstance(getattr(self, name), bool), f"{name}={getattr(self, name)!r} must be True or False")
        _check(self.tau0 > 0, f"tau0={self.tau0!r} must be > 0")
        _check(self.depth_alpha >= 0, f"depth_alpha={self.depth_alpha!r} must be a number >= 0")  # type: checked above
        for name, allowed in CHOICES.items():
            _check(getattr(self, name) in allowed, f"{name}={getattr(self, name)!r} is not one of: "
                   f"{', '.join(map(repr, allowed))}")
        pad = self.zero_pad_token
        _check(pad is None or isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < self.d_vocab,
               f"zero_pad_token={pad!r} must be None (every row of W_E trained) or a token id in 0..{self.d_vocab - 1}")
        self.attention = _entries("attention", self.attention)
        entries = [FreezeEntry.parse(e) for e in _entries("freeze", self.freeze)]
        for entry in entries:
            entry.check_shape(self.n_layers, self.n_heads)
        self.freeze = [str(e) for e in canonical_freeze(entries)]  # one model, one list: its name and label
        for kind in self.attention:
            _check(kind in ATTENTION_KINDS, f"attention={kind!r} is not one of: {', '.join(ATTENTION_KINDS)}")
        _check(len(self.attention) in (0, 1, self.n_layers),
               f"attention={','.join(self.attention)} has {len(self.attention)} entries; give one (every layer) "
               f"or n_layers={self.n_layers}")
        self._check_freeze_applies()
        if any(self.layer_attention(i) in ("softmax", "shaped") for i in range(self.n_layers)) \
                and self.spec.positions == "rotary":
            _check(self.d_head % 2 == 0, f"d_head={self.d_head} (d_model / n_heads) must be even for rotary embeddings")
        _check(self.n_classes is None or (isinstance(self.n_classes, int) and not isinstance(self.n_classes, bool)
               and self.n_classes >= 2), f"n_classes={self.n_classes!r} must be None (language model) or an integer >= 2")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def spec(self) -> VariantSpec:
        return VARIANTS[self.variant]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def width_mult(self) -> float:
        """The width multiplier of a linear layer with fan-in d_model: sqrt(base_width / d_model) in shaped
        variants (attention projections, the MLP's up-projections, the readout), 1 elsewhere."""
        return math.sqrt(self.base_width / self.d_model) if self.spec.shaped else 1.0

    @property
    def readout_mult(self) -> float:
        """The readout's width multiplier: width_mult, unless scaled_readout is off."""
        return self.width_mult if self.scaled_readout else 1.0

    def layer_attention(self, layer: int) -> str:
        """The attention of one layer: from `attention` if set, else the variant's."""
        if not self.attention:
            return self.spec.attention
        return self.attention[0] if len(self.attention) == 1 else self.attention[layer]

    def freeze_entries(self) -> list[FreezeEntry]:
        """`freeze`, parsed."""
        return [FreezeEntry.parse(e) for e in self.freeze]

    def is_frozen(self, param_name: str) -> bool:
        """True if all of `param_name` keeps its init: frozen by the variant, by a `freeze` entry, or in every head."""
        if self.spec.is_frozen(param_name):
            return True
        entries = [e for e in self.freeze_entries() if e.covers(param_name)]
        return any(e.head is None for e in entries) or len({e.head for e in entries}) == self.n_heads

    def frozen_heads(self, param_name: str) -> list[int]:
        """The heads h whose slice param[h] keeps its init while the rest of `param_name` trains ("v@0.h1");
        [] if none, or if the whole parameter is frozen (`is_frozen`)."""
        if self.is_frozen(param_name):
            return []
        return sorted({e.head for e in self.freeze_entries() if e.head is not None and e.covers(param_name)})

    def parameter_names(self) -> list[str]:
        """The names of the model's parameters (`Transformer.named_parameters()`), from the config alone:
        what `freeze` entries are checked against. tests/test_grid.py checks it against built models."""
        names = ["embed.W_E"] + (["pos_embed.W_pos"] if self.spec.positions == "learned" else [])
        biases = self.bias
        for i in range(self.n_layers):
            block = f"blocks.{i}"
            names.append(f"{block}.ln1.w")
            kind = self.layer_attention(i)
            if kind in ("softmax", "shaped"):
                names += [f"{block}.attn.W_Q", f"{block}.attn.W_K"]
                names += [f"{block}.attn.b_Q", f"{block}.attn.b_K"] if biases else []
            elif kind == "learned":
                names.append(f"{block}.attn.A_learned")
            names.append(f"{block}.attn.W_V")
            names += [f"{block}.attn.b_V"] if biases else []
            names.append(f"{block}.attn.W_O")
            names += [f"{block}.attn.b_O"] if biases else []
            names.append(f"{block}.ln2.w")
            for leaf in ("gate", "in", "out"):
                names.append(f"{block}.mlp.W_{leaf}")
                names += [f"{block}.mlp.b_{leaf}"] if biases else []
        names.append("ln_final.w")
        readout = ("unembed", "U") if self.n_classes is None else ("classifier", "C")
        names.append(f"{readout[0]}.W_{readout[1]}")
        names += [f"{readout[0]}.b_{readout[1]}"] if self.unembed_bias else []
        return names

    def _check_freeze_applies(self) -> None:
        """Each `freeze` entry must keep some parameter at its init that the variant would train (else it is a
        silent no-op on a run labelled as frozen), and something must be left to train."""
        names = self.parameter_names()
        trained = [n for n in names if not self.spec.is_frozen(n)]
        for entry in self.freeze_entries():
            if any(entry.covers(n) for n in trained):
                continue
            if any(entry.covers(n) for n in names):
                reason = f"variant {self.variant} already keeps it at its init"
            else:
                layers = [entry.layer] if entry.layer is not None else range(self.n_layers)
                kinds = sorted({self.layer_attention(i) for i in layers})
                reason = f"this model has no such parameters (attention {','.join(kinds)}, {self.spec.positions} positions)"
            applicable = [c for c in COMPONENTS if any(FreezeEntry(c).covers(n) for n in trained)]
            raise ValueError(f"freeze entry {str(entry)!r} does not apply: {reason}; "
                             f"allowed for this model: {', '.join(applicable)}")
        _check(not self.freeze or any(not self.is_frozen(n) for n in trained),
               f"freeze={','.join(self.freeze)} leaves nothing left to train in variant {self.variant}; "
               f"freeze fewer components")

    def unused_fields(self) -> dict[str, str]:
        """The fields set away from their default that change nothing in this model (inert_fields), with their users."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        return {name: users for name, users in self.inert_fields().items() if getattr(self, name) != defaults[name]}

    def inert_fields(self) -> dict[str, str]:
        """The fields that change nothing in this model whatever their value, each with the models it would change
        (field_users; pooling, attend_padding: classifiers; base_layers: depth_alpha != 0)."""
        kinds = {self.layer_attention(i) for i in range(self.n_layers)}
        inert = {name: field_users(name) for name, uses in FIELD_USE.items()
                 if not uses(self.spec, kinds) or (self.causal and name in BIDIRECTIONAL_ONLY)}
        inert.update({"residual_scale": "models with depth_alpha=0 (depth_alpha sets the residual scales)"}
                     if self.depth_alpha != 0 else {"base_layers": "models with depth_alpha != 0"})
        if self.n_classes is None:  # only classifiers are run with an attention_mask
            inert["pooling"] = inert["attend_padding"] = "classifiers (a task with n_classes, such as sentiment)"
        return inert

    def check_fields_apply(self) -> None:
        """Refuse a field set away from its default that changes nothing in this model (unused_fields)."""
        for name, users in self.unused_fields().items():
            attention = f", attention {','.join(self.attention)}" if self.attention else ""
            raise ValueError(f"{name}={getattr(self, name)!r} has no effect on variant {self.variant}{attention}; "
                             f"it applies to {users}")

    @property
    def is_grid(self) -> bool:
        """Whether the grid changes the named variant (a `freeze` or `attention` entry)."""
        return bool(self.freeze or self.attention)

    @property
    def label(self) -> str:
        """A readable name: the variant, plus its grid settings, e.g. 'mixit [attention mixing,softmax]'."""
        return grid_label(self.variant, self.freeze, self.attention)

    @property
    def attn_scale(self) -> float:
        """What q.k is multiplied by before the softmax: 1/sqrt(d_head), width-scaled in shaped attention."""
        return self.attn_scale_for(self.spec.attention)

    def attn_scale_for(self, kind: str) -> float:
        """The q.k multiplier of a layer whose attention is `kind`.

        A softmax layer in a shaped-variant model (a grid hybrid such as mixit with one softmax layer)
        undoes the width multipliers that its W_Q and W_K carry (width_mult each): without this its
        logits at init would be base_width / d_model times a standard model's (8x at width 64), a
        saturated softmax that barely trains.
        """
        if kind == "softmax":  # divided by width_mult**2, written exactly (sqrt(8)**2 is not 8 in floats)
            qk_mult = self.base_width / self.d_model if self.spec.shaped else 1.0
            return 1 / (qk_mult * math.sqrt(self.d_head))
        if kind != "shaped":
            return 1 / math.sqrt(self.d_head)
        width = self.base_width / self.d_model if self.width_scaled_temperature else 1.0
        return width / (self.tau0 * math.sqrt(self.d_head))

    @property
    def residual_scales(self) -> tuple[float, float]:
        """(skip, branch) in h = skip * h + branch * f(h)."""
        if self.depth_alpha != 0:
            return 1.0, (self.base_layers / self.n_layers) ** self.depth_alpha
        if self.spec.shaped:
            return self.residual_scale, math.sqrt(1 - self.residual_scale**2)
        return 1.0, 1.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelConfig":
        """Build a config from a dict, rejecting unknown keys with a clear message."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        _check(not unknown, f"unknown model config keys {unknown}; allowed: {sorted(known)}")
        return cls(**data)
