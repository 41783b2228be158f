"""A Llama-style decoder with TransformerLens hook points, in all six study variants.

Here: the block (pre-norm attention and gated MLP on a residual stream) and the model (embeddings, blocks,
readout; input checks, the forward passes, bookkeeping). Attention is models/attention/ (one module per kind:
softmax, shaped, MixiT's fixed mixing, learned mixing); the small building blocks (RMSNorm, rotary embeddings,
the MLP, embeddings and readouts) are models/components.py. Weights use the TransformerLens layout so
`FactoredMatrix`, `head_detector` and `patching` apply:

    embed.W_E        [d_vocab, d_model]        pos_embed.W_pos [n_ctx, d_model]  (mixit only)
    attn.W_Q/W_K/W_V [n_heads, d_model, d_head] attn.b_Q/b_K/b_V [n_heads, d_head]
    attn.W_O         [n_heads, d_head, d_model] attn.b_O         [d_model]
    mlp.W_gate/W_in  [d_model, d_mlp]          mlp.W_out       [d_mlp, d_model]
    unembed.W_U      [d_model, d_vocab]        unembed.b_U     [d_vocab]
    classifier.W_C   [d_model, n_classes]      classifier.b_C  [n_classes]  (n_classes set: replaces unembed)

Biases are trained parameters with `config.bias` (attention, MLP; on by default) and
`config.unembed_bias` (b_U, b_C; off by default, as in the authors' models); a bias that is off is a zero
buffer (not saved), so code written for the TransformerLens layout still finds it.

Hook shapes follow TransformerLens: hook_q/k/v/z are [batch, pos, head_index, d_head],
hook_attn_scores/hook_pattern are [batch, head_index, query_pos, key_pos].

HookedTransformer's weight accessors (`model.W_Q`, `model.W_U`, `model.OV`, `model.QK_at`, ...) and the cache's
decompositions are in models/lens.py: they fold in the shaped variants' multipliers, which the block
parameters above do not show.

Trained models carry their task's tokenizer (`model.tokenizer`, see models/tokenizer.py: a BPE for text, the
task's token strings for the algorithmic tasks) and offer TransformerLens's `to_tokens`, `to_string`,
`to_str_tokens` and `generate` (models/text.py, mixed in).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformer_lens import HookedRootModule
from transformer_lens.config import TransformerLensConfig
from transformer_lens.hook_points import HookPoint

from .attention import Attention
from .checkpoint import check_state, read_weights, save_model
from .components import MLP, Classifier, Embed, PosEmbed, RMSNorm, Unembed
from .config import ModelConfig
from .freeze import apply_freeze, frozen_elements
from .lens import LensCache, LensWeights
from .seeds import derive_seed
from .text import TextMethods
from .vocabulary import component_of


class Block(nn.Module):
    """One pre-norm layer: attention on ln1 of the residual stream, then the gated MLP on ln2, each added back."""

    # hook_resid_post is the one residual stream the next block (or ln_final) reads: what TransformerLens's logit lens
    # asks of a block before it reads the stack through the final norm and W_U.
    hook_out_is_single_residual_stream = True

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, layer)
        self.ln2 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.skip, self.branch = cfg.residual_scales
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, resid: torch.Tensor, key_padding_mask: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """resid [batch, pos, d_model] -> [batch, pos - start, d_model]: with start > 0 the block's output only at
        positions start.. (the earlier ones still serve as keys)."""
        resid = self.hook_resid_pre(resid)
        attn_in = self.attn.split_inputs(resid, self.ln1) if self.attn.use_split_qkv_input else self.ln1(resid)
        attn_out = self.hook_attn_out(self.attn(attn_in, key_padding_mask, start))
        resid = self.hook_resid_mid(self._residual(resid[:, start:], attn_out))
        mlp_out = self.hook_mlp_out(self.mlp(self.ln2(resid)))
        return self.hook_resid_post(self._residual(resid, mlp_out))

    def _residual(self, resid: torch.Tensor, branch_out: torch.Tensor) -> torch.Tensor:
        """skip * resid + branch * f(resid): 1 and 1, or s and sqrt(1 - s^2) in the shaped variants."""
        if self.skip == 1.0 and self.branch == 1.0:
            return resid + branch_out
        return torch.add(resid * self.skip, branch_out, alpha=self.branch)


def model_bytes(config: ModelConfig) -> int:
    """About the bytes of a model's fp32 parameters and buffers (embeddings, blocks, readout, MixiT's matrices)."""
    d, mlp, layers = config.d_model, config.d_mlp or 4 * config.d_model, config.n_layers
    readout = config.d_vocab if config.n_classes is None else config.n_classes
    params = (config.d_vocab + config.n_ctx + readout) * d + layers * (4 * d * d + 3 * d * mlp)
    return 4 * (params + layers * config.n_heads * config.n_ctx**2)


def check_fits_in_memory(config: ModelConfig) -> None:
    """ValueError naming the sizes when the model alone would not fit in this machine's memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return  # unknown here (not POSIX): let the allocator decide
    need = model_bytes(config)
    if need > memory:
        raise ValueError(f"a model of d_model={config.d_model}, n_layers={config.n_layers}, d_vocab={config.d_vocab}, "
                         f"n_ctx={config.n_ctx} needs about {need / 2**30:,.0f} GiB for its weights alone, more than "
                         f"this machine's {memory / 2**30:,.0f} GiB; choose smaller sizes")


class Transformer(TextMethods, LensWeights, HookedRootModule):
    """The study's decoder. `model(tokens)` maps int64 [batch, pos] to logits [batch, pos, d_vocab].

    With `config.n_classes` set it is a sequence classifier instead: a `classifier` head replaces the
    unembedding and `model(tokens, attention_mask=...)` returns class logits [batch, n_classes].

    `model.config` is the `ModelConfig`; `model.cfg` is a `TransformerLensConfig` view of it
    (n_layers, n_heads, d_model, d_head, n_ctx, d_vocab, device, dtype) for TransformerLens tools.
    """

    def __init__(self, config: ModelConfig):
        check_fits_in_memory(config)  # before any tensor: an impossible size is one line, not an allocator error
        super().__init__()
        self.config = config
        spec = config.spec
        self.cfg = TransformerLensConfig(
            d_model=config.d_model,
            d_head=config.d_head,
            n_layers=config.n_layers,
            n_ctx=config.n_ctx,
            n_heads=config.n_heads,
            d_mlp=config.d_mlp,
            d_vocab=config.d_vocab,
            device="cpu",
            positional_embedding_type="standard" if spec.positions == "learned" else "rotary",
            gated_mlp=True,
            uses_rms_norm=True,
            normalization_type="RMS",
            final_rms=True,
            act_fn="leaky_relu" if spec.shaped else "silu",
            eps=config.norm_eps,
            default_prepend_bos=False,
        )
        self.embed = Embed(config.d_vocab, config.d_model)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if spec.positions == "learned":
            self.pos_embed = PosEmbed(config.n_ctx, config.d_model)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layers))
        self.ln_final = RMSNorm(config.d_model, config.norm_eps)
        if config.n_classes is None:
            self.unembed = Unembed(config)
        else:
            self.classifier = Classifier(config)
        self.tokenizer = None  # a tokenizers.Tokenizer: the task's, set by training (set_tokenizer)
        self._values_trusted = False  # inside trusted_inputs(): the checks that read token values are skipped
        self._init_weights()
        apply_freeze(self, config)  # requires_grad, and masks + gradient hooks for frozen heads (models/freeze.py)
        self.setup()  # registers hook points with HookedRootModule

    @torch.no_grad()
    def _init_weights(self) -> None:
        """N(0, init_std^2) for every weight matrix and embedding (W_Q, W_K: qk_init_std if set),
        zeros for biases, ones for norms; the zero_pad_token row of W_E zero (models/freeze.py keeps it there).

        Uses a private generator, so the weights depend only on the config's seed.
        """
        g = torch.Generator().manual_seed(derive_seed(self.config.seed, "weights"))
        qk_std = self.config.qk_init_std or self.config.init_std
        for name, param in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                param.normal_(0.0, qk_std if leaf in ("W_Q", "W_K") else self.config.init_std, generator=g)
        if self.config.zero_pad_token is not None:  # drawn first, so every other weight is as without it
            self.embed.W_E[self.config.zero_pad_token] = 0.0

    def forward(
        self,
        tokens: torch.Tensor | str | list[str],
        return_type: Literal["logits", "loss", "both"] | None = "logits",
        attention_mask: torch.Tensor | None = None,
        *,
        from_pos: int = 0,
        stop_at_layer: int | None = None,
    ):
        """tokens int64 [batch, pos] -> logits [batch, pos, d_vocab].

        return_type "loss" gives the mean next-token cross-entropy, "both" gives (logits, loss),
        None gives the final residual stream [batch, pos, d_model] (after ln_final).
        attention_mask [batch, pos] (1 = real token) masks padded keys out of attention (not with config.attend_padding).
        A model with a tokenizer also takes text (a string or a list, tokenized by `to_tokens`).
        A classifier (n_classes set) returns class logits [batch, n_classes], as `classify`.
        from_pos > 0 computes the output only at positions from_pos.. ([batch, pos - from_pos, ...]; not with
        "loss"/"both"): the last block skips the earlier positions' queries and MLP, which every position
        still serves as keys and values for. The trainer uses it when its loss reads late positions only.
        stop_at_layer (as TransformerLens's) returns the residual stream entering that block instead, [batch, pos,
        d_model], before any norm: 0 gives the embeddings, -1 the input of the last block.
        """
        if stop_at_layer is not None:
            tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
            return self.residual_stream(tokens, attention_mask, stop_at_layer=stop_at_layer)
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
        if self.config.n_classes is not None and return_type is not None:
            if return_type != "logits":
                raise ValueError(
                    f"return_type={return_type!r}: a classifier has no next-token loss; "
                    "use model.classify(tokens, attention_mask) and a cross-entropy on the labels"
                )
            if from_pos:
                raise ValueError(f"from_pos={from_pos}: a classifier's logits pool the whole sequence; pass return_type=None")
            return self.classify(tokens, attention_mask)
        if from_pos and return_type not in ("logits", None):
            raise ValueError(f"from_pos={from_pos} needs return_type 'logits' or None: the loss reads every position")
        resid = self.residual_stream(tokens, attention_mask, from_pos)
        if return_type is None:
            return resid
        logits = self.unembed(resid)
        if return_type == "logits":
            return logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())
        if return_type == "loss":
            return loss
        if return_type == "both":
            return logits, loss
        raise ValueError(f"return_type={return_type!r} is not one of: 'logits', 'loss', 'both', None")

    def classify(self, tokens: torch.Tensor | str | list[str], attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Class logits [batch, n_classes]: the final residual stream at the last real token (or mean-pooled).

        attention_mask [batch, pos] (1 = real token) keeps padding out of attention (unless config.attend_padding,
        the authors' classifier) and of the pooling; text input is tokenized (and its mask built) by `to_tokens`.
        """
        if self.config.n_classes is None:
            raise ValueError("this model has no classification head (its config has n_classes=None)")
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)
        return self.classifier(self.residual_stream(tokens, attention_mask), attention_mask)

    def residual_stream(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                        from_pos: int = 0, stop_at_layer: int | None = None) -> torch.Tensor:
        """Final normalized residual stream [batch, pos - from_pos, d_model], at positions from_pos.. (see forward);
        with stop_at_layer, the (unnormalized) stream entering that block."""
        tokens, attention_mask = self._tokens_and_mask(tokens, attention_mask)  # after forward's: only checks
        if attention_mask is not None and not self._values_trusted:  # every forward pass comes here once
            self._check_no_left_padding(attention_mask)
        if tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"tokens must be an integer tensor [batch, pos]; got dtype={tokens.dtype}, shape={tuple(tokens.shape)}"
            )
        if tokens.shape[1] > self.config.n_ctx:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds n_ctx={self.config.n_ctx}")
        if tokens.numel() and not self._values_trusted:  # an id out of range: a bare IndexError or a device-side assert
            lo, hi = (int(v) for v in tokens.aminmax())
            if lo < 0 or hi >= self.config.d_vocab:
                raise ValueError(f"token id {lo if lo < 0 else hi} is out of range: allowed 0..{self.config.d_vocab - 1} "
                                 f"(d_vocab={self.config.d_vocab})")
        if not (isinstance(from_pos, int) and 0 <= from_pos < tokens.shape[1]):
            raise ValueError(f"from_pos={from_pos!r} must be an integer in [0, {tokens.shape[1] - 1}] for {tokens.shape[1]} positions")
        resid = self.hook_embed(self.embed(tokens))
        if hasattr(self, "pos_embed"):
            resid = resid + self.hook_pos_embed(self.pos_embed(tokens))
        if self.config.attend_padding:  # padding attended like any token (the pooling still reads the mask)
            attention_mask = None
        if stop_at_layer is not None:
            n = self.config.n_layers
            if not (isinstance(stop_at_layer, int) and -n <= stop_at_layer <= n):
                raise ValueError(f"stop_at_layer={stop_at_layer!r} must be an integer in [{-n}, {n}] for {n} layers")
            for block in self.blocks[:stop_at_layer]:
                resid = block(resid, attention_mask)
            return resid
        for layer, block in enumerate(self.blocks):
            resid = block(resid, attention_mask, from_pos if layer == self.config.n_layers - 1 else 0)
        return self.ln_final(resid)

    def run_with_cache(self, *model_args, return_cache_object: bool = True, remove_batch_dim: bool = False, **kwargs):
        """Like HookedRootModule.run_with_cache, but returns an `ActivationCache` (as HookedTransformer did): a
        `LensCache`, whose residual decompositions weigh each write as it arrives (models/lens.py).

        Returns:
            `(output, cache)`: the forward's output (logits `[batch, pos, d_vocab]` by default) and the
            activations by hook name, e.g. `cache["blocks.0.attn.hook_pattern"]` `[batch, head,
            query_pos, key_pos]`, `cache["blocks.0.hook_resid_post"]` `[batch, pos, d_model]`.
        """
        out, cache_dict = super().run_with_cache(*model_args, remove_batch_dim=remove_batch_dim, **kwargs)
        if return_cache_object:
            return out, LensCache(cache_dict, self, has_batch_dim=not remove_batch_dim)
        return out, cache_dict

    @contextmanager
    def trusted_inputs(self) -> Iterator[None]:
        """Skip the checks that read token and mask values (ids in range, no left padding) inside this block: each
        is a host read, which on a GPU waits for every queued kernel. The trainer's batches are its task's own."""
        before, self._values_trusted = self._values_trusted, True
        try:
            yield
        finally:
            self._values_trusted = before

    def _tokens_and_mask(self, tokens, attention_mask):
        """Tokenize text input (building its padding mask); check a token tensor's mask and make it bool.

        One sequence [pos] (with its mask [pos]) becomes a batch of one. The mask must have the tokens'
        shape [batch, pos] (else it would broadcast inside attention), and be bool or hold only 0 and 1
        (TransformerLens's masks are int 0/1; floats 0./1. too): anything else is refused, not rounded.
        """
        if not isinstance(tokens, (str, list)):
            if isinstance(tokens, torch.Tensor) and tokens.ndim == 1:
                tokens = tokens[None]
                if isinstance(attention_mask, torch.Tensor) and attention_mask.ndim == 1:
                    attention_mask = attention_mask[None]
            if attention_mask is None or (attention_mask.dtype == torch.bool and attention_mask.shape == tokens.shape):
                return tokens, attention_mask
            if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != tokens.shape:
                raise ValueError(f"attention_mask must be [batch, pos] = {list(tokens.shape)}, the tokens' shape "
                                 f"(bool, or 0/1); got shape {list(getattr(attention_mask, 'shape', []))}")
            bad = (attention_mask != 0) & (attention_mask != 1)
            if bad.any():
                raise ValueError(f"attention_mask must be bool or hold only 0 and 1 (1 = real token); got the value "
                                 f"{attention_mask[bad][0].item()} (dtype {attention_mask.dtype})")
            return tokens, attention_mask.bool()
        if attention_mask is not None:
            raise ValueError("pass attention_mask only with token tensors; text input builds its own")
        tokens, lengths = self._encode(tokens, None, truncate=True)
        tokens = tokens.to(self.cfg.device)
        if (lengths == tokens.shape[1]).all():
            return tokens, None
        return tokens, torch.arange(tokens.shape[1], device=tokens.device) < lengths.to(tokens.device)[:, None]

    def _check_no_left_padding(self, mask: torch.Tensor) -> None:
        """Refuse a real token after padding (left padding) where positions are absolute: learned W_pos, or MixiT's
        fixed matrices, index by position from 0, so shifted tokens would be read at other positions. With
        attend_padding (the authors' classifier) padding is attended as tokens at their positions: allowed."""
        cfg = self.config
        if cfg.attend_padding or not (cfg.spec.positions == "learned" or any(
                cfg.layer_attention(i) in ("mixing", "learned") for i in range(cfg.n_layers))):
            return  # relative positions (rotary), or padding attended as tokens: nothing to check
        late = mask[:, 1:] & ~mask[:, :-1]
        if late.any():
            row = int(late.any(-1).nonzero()[0])
            raise ValueError(f"attention_mask row {row} has padding before a real token (left padding); this model's "
                             "positions are absolute (learned W_pos or fixed mixing matrices): pad on the right")

    # ----------------------------------------------------------------- bookkeeping
    def parameter_counts(self) -> dict[str, int]:
        """Trainable, frozen and total parameter counts (buffers such as mixing matrices excluded); a frozen
        head's slice of a trained parameter counts as frozen."""
        frozen = sum(frozen_elements(self, name, p) for name, p in self.named_parameters())
        total = sum(p.numel() for p in self.parameters())
        return {"trainable": total - frozen, "frozen": frozen, "total": total}

    def parameter_table(self) -> list[dict[str, object]]:
        """Parameter counts per component of mixit_lab.models.vocabulary.COMPONENTS (`component_of`: embed, pos, qk, v, o, mix,
        mlp, norms, ln_final, unembed, the classifier in unembed), in the order the parameters come."""
        rows: dict[str, dict[str, int]] = {}
        for name, param in self.named_parameters():
            comp = component_of(name)
            row = rows.setdefault(comp, {"trainable": 0, "frozen": 0})
            frozen = frozen_elements(self, name, param)  # a frozen head's slice counts as frozen
            row["frozen"] += frozen
            row["trainable"] += param.numel() - frozen
        return [{"component": c, **r} for c, r in rows.items()]

    def _apply(self, fn, *args, **kwargs):
        # Keep cfg.device/dtype in sync after .to(), .cuda(), .half(), ...
        out = super()._apply(fn, *args, **kwargs)
        param = next(self.parameters(), None)
        if param is not None:
            self.cfg.device = str(param.device)
            self.cfg.dtype = param.dtype
        return out

    def save_pretrained(self, path: str | Path) -> Path:
        """Write config.json + model.safetensors into directory `path`, atomically."""
        return save_model(self, path)


def load_model(path: str | Path, device: str | torch.device | None = None) -> Transformer:
    """Load a checkpoint directory written by `save_pretrained` (or a training run directory) into a new model.

    A checkpoint with a tokenizer.json (models trained on text) gets its tokenizer attached.

    Args:
        path: a run directory (its latest checkpoint), its `checkpoint/` folder, or a folder written by
            `save_pretrained`.
        device: where to put the weights (`"cpu"` loads a CUDA-trained run on any machine); None keeps
            them where loading put them.

    Returns:
        The `Transformer`, with the weights and config of the checkpoint.

    Raises:
        FileNotFoundError: a missing directory or file.
        CheckpointError: a truncated, corrupt or mismatched checkpoint; the message names the file.
    """
    config, state, tokenizer = read_weights(path)
    model = Transformer(config)
    check_state(path, state, model.state_dict())
    model.load_state_dict(state)
    if tokenizer is not None:
        model.set_tokenizer(tokenizer)
    if device is not None:
        model.to(device)
    return model.eval()
