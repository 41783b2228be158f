"""The HookedTransformer side of the model: weights as the forward pass applies them, and a cache whose
decompositions sum to what the model computed, on every variant.

The shaped variants (mixit, shaped) carry multipliers that a plain weight does not show:

    attention   q, k, v = out_mult * (x W_Q + b_Q), ...    attn_out = out_mult * (z W_O + b_O)
    MLP         pre = in_mult * (x W_gate + b_gate), ...  mlp_out  = out_mult * (post W_out + b_out)
    residual    resid = skip * resid + branch * sublayer_out      (skip = s, branch = sqrt(1 - s^2))
    readout     logits = mult * (ln_final(resid) W_U + b_U)

(all 1 in standard, frozen_qk, frozen_mlp and random; `blocks[l].attn.out_mult`, `blocks[l].mlp.in_mult`,
`blocks[l].mlp.out_mult`, `blocks[l].skip`, `blocks[l].branch`, `unembed.mult` hold them). The model-level
accessors here (`model.W_Q`, `model.W_U`, `model.OV`, ...) return the weights with their multipliers folded
in, so `x @ model.W_V[l, h]` is the value the forward pass computes. The parameters inside the blocks
(`blocks[l].attn.W_Q`) stay the raw trained tensors.

`LensCache` is the `ActivationCache` that `run_with_cache` returns. Its decompositions weigh each write
by what it is worth where it is read: a write of sublayer j arrives at residual state T (T = 2 * layer,
+1 for an MLP input) as `branch * skip ** (T - 1 - j)` times itself, the embeddings as `skip ** T`. So
`decompose_resid`, `stack_head_results`, `stack_neuron_results` and `get_full_resid_decomposition` sum to
the residual stream they decompose, and `logit_attrs` over them sums to the logits, on every variant.

What a model cannot give exactly is refused with a `LensRefusal` (a ValueError) that says why: W_Q and W_K
of a layer with input-independent mixing (mixit), one QK matrix for rotary positions (the scores depend on
both positions: `QK_at`), an unembedding on a classifier, direct path patching where a head's write is
scaled on its way to the residual stream.
"""

from __future__ import annotations

import warnings
from typing import Literal, Optional, Union

import einops
import torch
from transformer_lens import ActivationCache, FactoredMatrix
from transformer_lens.utilities import composition_scores
from transformer_lens.utilities.slice import Slice

QK_KINDS = ("softmax", "shaped")  # layers whose attention has queries and keys


def _as_slice(x) -> Slice:
    """A pos or neuron slice as TransformerLens's cache methods take it: an int indexes, so its dimension goes
    (Slice(-1) on [batch, pos, ...] gives [batch, ...]); Slice.unwrap would keep it as length 1."""
    return x if isinstance(x, Slice) else Slice(x)


class LensRefusal(ValueError):
    """A weight or TransformerLens utility this model does not have, or cannot compute exactly; the message says why."""


class LensWeights:
    """HookedTransformer's weight accessors and helpers, mixed into `Transformer`.

    Every stacked weight is [n_layers, ...] in TransformerLens's layout, multipliers folded in.
    """

    # ------------------------------------------------------------------ residual bookkeeping
    def residual_weight(self, source: int | None, target: int) -> float:
        """What one unit written by sublayer `source` (2 l: attention of layer l, 2 l + 1: its MLP; None: the
        embeddings) is worth at residual state `target` (2 l: resid_pre of layer l, 2 l + 1: its resid_mid,
        2 n_layers: the final residual stream).

        resid_T = skip**T * embed + sum_{j < T} branch * skip**(T - 1 - j) * out_j, since every block's two
        residual adds are resid <- skip * resid + branch * out.
        """
        skip, branch = self.config.residual_scales
        if not 0 <= target <= 2 * self.config.n_layers:
            raise ValueError(f"target={target} is not a residual state 0..{2 * self.config.n_layers}")
        if source is None:
            return skip**target
        if not 0 <= source < target:
            raise ValueError(f"source sublayer {source} does not write into residual state {target}")
        return branch * skip ** (target - 1 - source)

    # ------------------------------------------------------------------ embeddings and readout
    @property
    def W_E(self) -> torch.Tensor:
        """[d_vocab, d_model]: the token embedding."""
        return self.embed.W_E

    @property
    def W_pos(self) -> torch.Tensor:
        """[n_ctx, d_model]: the learned position embedding (mixit); rotary models have none."""
        if not hasattr(self, "pos_embed"):
            raise LensRefusal("model.W_pos: this model has rotary positions, no position embedding; the rotation "
                              "is applied to queries and keys (see model.QK_at)")
        return self.pos_embed.W_pos

    @property
    def W_U(self) -> torch.Tensor:
        """[d_model, d_vocab]: the unembedding times the readout multiplier, so logits = ln_final(resid) @ W_U + b_U."""
        return self._readout().W_U * self._readout().mult

    @property
    def b_U(self) -> torch.Tensor:
        """[d_vocab]: the unembedding bias times the readout multiplier (zero when the model has none)."""
        return self._readout().b_U * self._readout().mult

    def _readout(self):
        if not hasattr(self, "unembed"):
            raise LensRefusal(f"this model is a classifier (n_classes={self.config.n_classes}): it has no "
                              "unembedding; its readout is classifier.W_C times classifier.mult, applied to the pooled "
                              "final residual stream")
        return self.unembed

    # ------------------------------------------------------------------ folding the norms (HookedTransformer's fold_ln)
    @torch.no_grad()
    def fold_layer_norm(self):
        """Fold every norm's weight into the matrices that read the norm's output, in place, and set the weight to 1:
        ln1 into W_Q, W_K, W_V; ln2 into W_gate, W_in; ln_final into W_U (a classifier's W_C). The model computes the
        same function (to float rounding), and the idioms that assume folded norms, `cache.apply_ln_to_stack(stack)
        @ model.W_U` first, become exact. Returns the model. Fold a copy to keep the checkpoint's weights as trained."""
        for block in self.blocks:
            for w, matrices in ((block.ln1.w, [getattr(block.attn, n) for n in ("W_Q", "W_K", "W_V")
                                               if hasattr(block.attn, n)]),
                                (block.ln2.w, [block.mlp.W_gate, block.mlp.W_in])):
                for W in matrices:  # [head, d_model, d_head] or [d_model, d_mlp]: scale the d_model rows
                    W.mul_(w[:, None])
                w.fill_(1.0)
        readout = self.classifier.W_C if hasattr(self, "classifier") else self.unembed.W_U  # [d_model, ...]
        readout.mul_(self.ln_final.w[:, None])
        self.ln_final.w.fill_(1.0)
        return self

    def process_weights_(self, fold_ln: bool = True, center_writing_weights: bool = True, center_unembed: bool = True,
                         refactor_factored_attn_matrices: bool = False):
        """HookedTransformer.process_weights_: fold_ln folds the norm weights (fold_layer_norm). Centering the writing
        weights or the unembedding is exact only under LayerNorm, which subtracts the mean; these models' RMSNorm does
        not, so it is skipped with a warning, as TransformerLens skips it for its RMSNorm models. Refactoring the
        factored attention matrices is refused (LensRefusal). Returns the model."""
        if refactor_factored_attn_matrices:
            raise LensRefusal("refactor_factored_attn_matrices is not offered: fold the norms, then read QK/OV "
                              "(or QK_at for rotary models)")
        if center_writing_weights or center_unembed:
            warnings.warn("RMSNorm does not subtract the mean, so centering the writing weights or the unembedding "
                          "would change the model: skipped (as TransformerLens skips it without LayerNorm)", stacklevel=2)
        return self.fold_layer_norm() if fold_ln else self

    # ------------------------------------------------------------------ stacked attention and MLP weights
    def _stacked(self, part: str, name: str) -> torch.Tensor:
        """blocks[l].{part}.{name} times the multiplier the forward applies to it, stacked over layers."""
        if part == "attn" and name[-1] in "QK":
            self._require_qk(f"model.{name}")
        tensors = []
        for block in self.blocks:
            if part == "attn":
                tensors.append(block.attn.folded(name))
            else:
                mult = block.mlp.out_mult if name.endswith("out") else block.mlp.in_mult
                tensors.append(getattr(block.mlp, name) * mult)
        return torch.stack(tensors)

    def _require_qk(self, what: str) -> None:
        missing = [l for l, block in enumerate(self.blocks) if block.attn.kind not in QK_KINDS]
        if missing:
            kinds = sorted({self.blocks[l].attn.kind for l in missing})
            raise LensRefusal(f"{what}: layer(s) {', '.join(map(str, missing))} have {'/'.join(kinds)} attention, an "
                              "input-independent pattern with no queries or keys (blocks[l].attn.mixing_pattern(n_ctx))")

    W_Q = property(lambda self: self._stacked("attn", "W_Q"), doc="[n_layers, n_heads, d_model, d_head]")
    W_K = property(lambda self: self._stacked("attn", "W_K"), doc="[n_layers, n_heads, d_model, d_head]")
    W_V = property(lambda self: self._stacked("attn", "W_V"), doc="[n_layers, n_heads, d_model, d_head]")
    W_O = property(lambda self: self._stacked("attn", "W_O"), doc="[n_layers, n_heads, d_head, d_model]")
    b_Q = property(lambda self: self._stacked("attn", "b_Q"), doc="[n_layers, n_heads, d_head]")
    b_K = property(lambda self: self._stacked("attn", "b_K"), doc="[n_layers, n_heads, d_head]")
    b_V = property(lambda self: self._stacked("attn", "b_V"), doc="[n_layers, n_heads, d_head]")
    b_O = property(lambda self: self._stacked("attn", "b_O"), doc="[n_layers, d_model]")
    W_gate = property(lambda self: self._stacked("mlp", "W_gate"), doc="[n_layers, d_model, d_mlp]")
    W_in = property(lambda self: self._stacked("mlp", "W_in"), doc="[n_layers, d_model, d_mlp]")
    W_out = property(lambda self: self._stacked("mlp", "W_out"), doc="[n_layers, d_mlp, d_model]")
    b_gate = property(lambda self: self._stacked("mlp", "b_gate"), doc="[n_layers, d_mlp]")
    b_in = property(lambda self: self._stacked("mlp", "b_in"), doc="[n_layers, d_mlp]")
    b_out = property(lambda self: self._stacked("mlp", "b_out"), doc="[n_layers, d_model]")

    # ------------------------------------------------------------------ circuits
    @property
    def OV(self) -> FactoredMatrix:
        """[n_layers, n_heads, d_model, d_model]: each head's value-output map from its input (ln1's output)."""
        return FactoredMatrix(self.W_V, self.W_O)

    @property
    def QK(self) -> FactoredMatrix:
        """[n_layers, n_heads, d_model, d_model]: scores = attn.scale * ln1(x_q) @ QK @ ln1(x_k)^T (+ bias terms).

        Refused for rotary models, whose scores depend on the positions: use `QK_at(query_pos, key_pos)`.
        """
        self._require_qk("model.QK")
        if self.config.spec.positions == "rotary":
            raise LensRefusal("model.QK: rotary positions rotate queries and keys by position, so no single matrix "
                              "gives the scores; use model.QK_at(query_pos, key_pos)")
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    def QK_at(self, query_pos: int, key_pos: int) -> FactoredMatrix:
        """[n_layers, n_heads, d_model, d_model]: the QK circuit between two positions, rotations included.

        scores[q, k] = attn.scale * ln1(x_q) @ QK_at(q, k) @ ln1(x_k)^T when the biases b_Q, b_K are zero
        (otherwise they add the terms their products give). For learned positions it is `QK` at any positions.
        """
        self._require_qk("model.QK_at")
        W_Q, W_K = self.W_Q, self.W_K
        if self.config.spec.positions == "rotary":
            for pos in (query_pos, key_pos):
                if not 0 <= pos < self.config.n_ctx:
                    raise ValueError(f"position {pos} is not one of 0..{self.config.n_ctx - 1}")
            W_Q = W_Q @ self._rotation(query_pos, 0)
            W_K = W_K @ self._rotation(key_pos, 1)
        return FactoredMatrix(W_Q, W_K.transpose(-2, -1))

    def _rotation(self, pos: int, which: int) -> torch.Tensor:
        """[n_layers, n_heads, d_head, d_head]: R with rotary(x) = x @ R at `pos` (which: 0 queries, 1 keys)."""
        return torch.stack([block.attn.rotation(pos, which) for block in self.blocks])

    def all_composition_scores(self, mode: Literal["Q", "K", "V"],
                               positions: tuple[int, int] | None = None) -> torch.Tensor:
        """[n_layers, n_heads, n_layers, n_heads]: how much each head's OV output feeds a later head's
        queries (Q), keys (K) or values (V); zero where the second head is not in a later layer.

        ||left @ right|| / (||left|| ||right||) as in TransformerLens, with the reading layer's RMSNorm weight
        applied (TransformerLens assumes it folded into the weights); scalar multipliers cancel in the ratio.
        Q and K composition read the QK circuit, which rotary models have only between two positions:
        pass positions=(query_pos, key_pos) there.
        """
        if mode not in ("Q", "K", "V"):
            raise ValueError(f"mode={mode!r} is not one of: 'Q', 'K', 'V'")
        left = self.OV
        norm_w = torch.stack([block.ln1.w for block in self.blocks])[:, None, :, None]  # [layer, 1, d_model, 1]
        if mode == "V":
            right = FactoredMatrix(norm_w * self.W_V, self.W_O)
        else:
            if positions is None and self.config.spec.positions == "rotary":
                self._require_qk(f"all_composition_scores({mode!r})")
                raise LensRefusal(f"all_composition_scores({mode!r}): rotary positions make the QK circuit depend on "
                                  "the query and key positions; pass positions=(query_pos, key_pos)")
            qk = self.QK if positions is None else self.QK_at(*positions)
            right = FactoredMatrix(norm_w * qk.A, qk.B * norm_w.transpose(-1, -2))
            right = right if mode == "Q" else right.T
        scores = composition_scores(left, right, broadcast_dims=True)
        layers = torch.arange(self.config.n_layers, device=scores.device)
        later = layers[:, None, None, None] < layers[None, None, :, None]
        return torch.where(later, scores, torch.zeros_like(scores))

    # ------------------------------------------------------------------ residual directions and biases
    def tokens_to_residual_directions(self, tokens: Union[str, int, torch.Tensor]) -> torch.Tensor:
        """[..., d_model]: the direction each token's logit reads from the final residual stream after its
        RMS scale: logit_t = (resid / scale) @ dir_t + b_U[t], dir_t = ln_final.w * W_U[:, t]."""
        if isinstance(tokens, str):
            tokens = self.to_single_token(tokens)
        tokens = torch.as_tensor(tokens, device=self.W_E.device)
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be token ids (int); got dtype {tokens.dtype}")
        if tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < self.config.d_vocab):
            raise ValueError(f"token ids must lie in 0..{self.config.d_vocab - 1}; got {int(tokens.min())}..{int(tokens.max())}")
        directions = self.W_U * self.ln_final.w[:, None]
        return einops.rearrange(directions[:, tokens], "d_model ... -> ... d_model")

    def to_single_token(self, string: str) -> int:
        """The id of a string that is one token (models with a tokenizer)."""
        ids = self.to_tokens(string, prepend_bos=False, move_to_device=False)[0]
        if ids.numel() != 1:
            raise ValueError(f"{string!r} is {ids.numel()} tokens, not one")
        return int(ids[0])

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> torch.Tensor:
        """[d_model]: the attention (b_O) and MLP (b_out) biases as they arrive at the input of `layer`
        (its MLP's input with mlp_input), each weighed by `residual_weight`."""
        n = self.config.n_layers
        if not 0 <= layer <= n or (mlp_input and layer == n):
            raise ValueError(f"layer={layer} (mlp_input={mlp_input}) is not a residual stream of a {n}-layer model")
        target = 2 * layer + int(mlp_input)
        total = torch.zeros(self.config.d_model, device=self.W_E.device, dtype=self.W_E.dtype)
        b_O, b_out = self.b_O, self.b_out
        for l in range(n):
            if 2 * l < target:
                total = total + self.residual_weight(2 * l, target) * b_O[l]
            if include_mlp_biases and 2 * l + 1 < target:
                total = total + self.residual_weight(2 * l + 1, target) * b_out[l]
        return total

    # ------------------------------------------------------------------ forward switches
    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Compute each head's result (`blocks.{l}.attn.hook_result`, [batch, pos, head_index, d_model],
        summing with b_O to hook_attn_out) in the forward pass, so it can be hooked or patched."""
        for block in self.blocks:
            block.attn.use_attn_result = bool(use_attn_result)
        self.cfg.use_attn_result = bool(use_attn_result)

    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        """Give each head its own copy of the attention input (`blocks.{l}.attn.hook_q_input` / `hook_k_input` /
        `hook_v_input`, [batch, pos, head_index, d_model], before ln1), as TransformerLens's direct path
        patching needs. Refused where a head's residual write is not `hook_z @ W_O` (the scaled variants)."""
        if use_split_qkv_input:
            skip, branch = self.config.residual_scales
            mults = {block.attn.out_mult for block in self.blocks}
            if (skip, branch) != (1.0, 1.0) or mults != {1.0}:
                raise LensRefusal(
                    f"set_use_split_qkv_input: a head's write reaches the residual stream as {branch:.3g} * "
                    f"{skip:.3g}**k * {max(mults):.3g} * (hook_z @ W_O) in this {self.config.variant} model, and "
                    "TransformerLens's direct path patching adds hook_z @ W_O; patch hook_z or hook_result instead")
        for block in self.blocks:
            block.attn.use_split_qkv_input = bool(use_split_qkv_input)
        self.cfg.use_split_qkv_input = bool(use_split_qkv_input)

    def set_use_attn_in(self, use_attn_in: bool) -> None:
        """Not offered: refused when switched on (one input per head for q, k and v alike is `set_use_split_qkv_input`)."""
        if use_attn_in:
            raise LensRefusal("set_use_attn_in: not offered by this model; set_use_split_qkv_input gives each head its "
                              "own q, k and v inputs")
        self.cfg.use_attn_in = False


class LensCache(ActivationCache):
    """`ActivationCache` whose decompositions weigh each component as it arrives where it is read (see the
    module docstring); the same methods and arguments as TransformerLens's, the same results on a model
    with unit multipliers."""

    def _target(self, layer: Optional[int], mlp_input: bool) -> tuple[int, int]:
        """(layer, residual state index) of the stream that `layer` / `mlp_input` name; None and -1: the final one."""
        n = self.model.cfg.n_layers
        layer = n if layer is None or layer == -1 else layer
        if not 0 <= layer <= n or (mlp_input and layer == n):
            raise ValueError(f"layer={layer} (mlp_input={mlp_input}) is not a residual stream of a {n}-layer model")
        return layer, 2 * layer + int(mlp_input)

    def apply_slice_to_batch_dim(self, batch_slice) -> "LensCache":
        sliced = super().apply_slice_to_batch_dim(batch_slice)
        return LensCache(sliced.cache_dict, self.model, has_batch_dim=sliced.has_batch_dim)

    def decompose_resid(self, layer: Optional[int] = None, mlp_input: bool = False,
                        mode: Literal["all", "mlp", "attn"] = "all", apply_ln: bool = False,
                        pos_slice=None, incl_embeds: bool = True, return_labels: bool = False):
        """[component, *batch_and_pos, d_model]: embeddings and each attention / MLP output, as they arrive at
        the input of `layer` (its MLP's input with mlp_input); they sum to that residual stream."""
        layer, target = self._target(layer, mlp_input)
        stack, labels = super().decompose_resid(layer, mlp_input, mode, False, pos_slice, incl_embeds, True)
        weights = [self._label_weight(label, target) for label in labels]
        stack = stack * torch.tensor(weights, dtype=stack.dtype, device=stack.device).view(-1, *[1] * (stack.ndim - 1))
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice, mlp_input=mlp_input)
        return (stack, labels) if return_labels else stack

    def _label_weight(self, label: str, target: int) -> float:
        """residual_weight of a decompose_resid label: embed, pos_embed, {l}_attn_out, {l}_mlp_out."""
        if label in ("embed", "pos_embed"):
            return self.model.residual_weight(None, target)
        layer, kind = label.split("_", 1)
        return self.model.residual_weight(2 * int(layer) + (kind == "mlp_out"), target)

    def stack_head_results(self, layer: int = -1, return_labels: bool = False, incl_remainder: bool = False,
                           pos_slice=None, apply_ln: bool = False, mlp_input: bool = False):
        """[layer * n_heads (+1), *batch_and_pos, d_model]: every head of the layers before `layer` as it arrives
        at that layer's input (at its MLP's input with mlp_input, the heads of `layer` too); with incl_remainder
        a last row holds the rest of that residual stream."""
        layer, target = self._target(layer, mlp_input)
        pos_slice = _as_slice(pos_slice)
        self._ensure_head_results()
        rows, labels = [], []
        for l in range(layer + int(mlp_input)):
            result = pos_slice.apply(self[("result", l, "attn")], dim=-3)  # [..., head_index, d_model]
            rows.append(result * self.model.residual_weight(2 * l, target))
            labels += [f"L{l}H{h}" for h in range(self.model.cfg.n_heads)]
        stack = self._finish(rows, labels, layer, mlp_input, pos_slice, incl_remainder, apply_ln)
        return (stack, labels) if return_labels else stack

    def get_neuron_results(self, layer: int, neuron_slice=None, pos_slice=None,
                           project_output_onto: Optional[torch.Tensor] = None) -> torch.Tensor:
        """[*batch_and_pos, neuron, d_model]: each neuron's write, post * W_out (multiplier included); with b_out
        the neurons sum to hook_mlp_out."""
        neuron_slice, pos_slice = _as_slice(neuron_slice), _as_slice(pos_slice)
        post = neuron_slice.apply(pos_slice.apply(self[("post", layer, "mlp")], dim=-2), dim=-1)
        W_out = neuron_slice.apply(self.model.W_out[layer], dim=0)  # [neuron, d_model]
        if project_output_onto is not None:
            projected = W_out @ project_output_onto.to(W_out.dtype)
            return post * projected if project_output_onto.ndim == 1 else post[..., None] * projected
        return post[..., None] * W_out

    def stack_neuron_results(self, layer: int, pos_slice=None, neuron_slice=None, return_labels: bool = False,
                             incl_remainder: bool = False, apply_ln: bool = False,
                             project_output_onto: Optional[torch.Tensor] = None, mlp_input: bool = False):
        """[layer * neurons (+1), *batch_and_pos, d_model]: every MLP neuron of the layers before `layer` as it
        arrives at that layer's input (its MLP's input with mlp_input)."""
        layer, target = self._target(layer, mlp_input)
        neuron_slice, pos_slice = Slice.unwrap(neuron_slice), _as_slice(pos_slice)  # an int neuron keeps its row
        if neuron_slice.mode == "int":
            neuron_slice = Slice([neuron_slice.slice])
        ids = neuron_slice.apply(torch.arange(self.model.cfg.d_mlp), dim=0).tolist()
        rows, labels = [], []
        for l in range(layer):
            rows.append(self.get_neuron_results(l, neuron_slice, pos_slice) * self.model.residual_weight(2 * l + 1, target))
            labels += [f"L{l}N{i}" for i in ids]
        stack = self._finish(rows, labels, layer, mlp_input, pos_slice, incl_remainder, apply_ln)
        if project_output_onto is not None:
            stack = stack @ project_output_onto.to(stack.dtype)
        return (stack, labels) if return_labels else stack

    def get_full_resid_decomposition(self, layer: Optional[int] = None, mlp_input: bool = False,
                                     expand_neurons: bool = True, apply_ln: bool = False, pos_slice=None,
                                     return_labels: bool = False, project_output_onto: Optional[torch.Tensor] = None):
        """[component, *batch_and_pos, d_model]: every head, every neuron (or MLP layer), the embeddings and the
        accumulated biases, as they arrive at the input of `layer`; they sum to that residual stream."""
        layer, target = self._target(layer, mlp_input)
        pos_slice = _as_slice(pos_slice)
        heads, labels = self.stack_head_results(layer, True, pos_slice=pos_slice, mlp_input=mlp_input)
        parts = [heads]
        if layer > 0:
            if expand_neurons:
                mlp, mlp_labels = self.stack_neuron_results(layer, pos_slice, return_labels=True, mlp_input=mlp_input)
            else:
                mlp, mlp_labels = self.decompose_resid(layer, mlp_input, "mlp", pos_slice=pos_slice,
                                                       incl_embeds=False, return_labels=True)
            parts.append(mlp)
            labels += mlp_labels
        for name in ("embed", "pos_embed"):
            if f"hook_{name}" in self.cache_dict:
                embed = pos_slice.apply(self[f"hook_{name}"], dim=-2)
                parts.append(embed[None] * self.model.residual_weight(None, target))
                labels.append(name)
        bias = self.model.accumulated_bias(layer, mlp_input, include_mlp_biases=expand_neurons)
        parts.append(bias.to(heads.dtype).expand(1, *heads.shape[1:]))
        labels.append("bias")
        stack = torch.cat(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice, mlp_input=mlp_input)
        if project_output_onto is not None:
            stack = stack @ project_output_onto.to(stack.dtype)
        return (stack, labels) if return_labels else stack

    def _resid(self, layer: int, mlp_input: bool, pos_slice: Slice) -> torch.Tensor:
        """The residual stream at the input of `layer` (its MLP's input with mlp_input; the final one at n_layers)."""
        n = self.model.cfg.n_layers
        name = ("resid_mid", layer) if mlp_input else ("resid_pre", layer) if layer < n else ("resid_post", n - 1)
        return pos_slice.apply(self[name], dim=-2)

    def _finish(self, rows: list[torch.Tensor], labels: list[str], layer: int, mlp_input: bool, pos_slice: Slice,
                incl_remainder: bool, apply_ln: bool) -> torch.Tensor:
        """The stack of `rows`; with incl_remainder a last row (labelled) holding the rest of the residual stream
        they decompose; with apply_ln divided by that stream's cached norm scale."""
        stack = self._stack_rows(rows, pos_slice)
        if incl_remainder:
            stack = torch.cat([stack, (self._resid(layer, mlp_input, pos_slice) - stack.sum(0))[None]])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice, mlp_input=mlp_input)
        return stack

    def _stack_rows(self, rows: list[torch.Tensor], pos_slice: Slice) -> torch.Tensor:
        """[..., row, d_model] blocks -> [row, ..., d_model]; an empty stack shaped like the embeddings."""
        if rows:
            return einops.rearrange(torch.cat(rows, dim=-2), "... row d_model -> row ... d_model")
        embed = pos_slice.apply(self["hook_embed"], dim=-2)
        return embed.new_zeros(0, *embed.shape)
