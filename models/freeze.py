"""Freezing one head: keeping a slice of a stacked parameter at its init while the rest of it trains.

A whole parameter is frozen with `requires_grad=False` (`ModelConfig.is_frozen`). A head entry such as
"v@0.h1" freezes W_V[1] and b_V[1] of layer 0 only, and requires_grad cannot freeze a slice, so:

1. the model records a boolean mask of each partly frozen parameter's frozen elements (`model.frozen_masks`),
2. a gradient hook zeroes their gradient, so clipping, AdamW's moments and any optimizer see none, and
3. after every optimizer step the trainer writes the frozen elements' values back (`hold_frozen_slices`),
   undoing what decoupled weight decay (and any optimizer that moves weights without a gradient) did to them.

The values written back are those the model holds when the trainer starts or resumes: init, or a checkpoint's
weights, which equal init since they never moved. The restored elements are bit-identical to init.

The same mechanism keeps the embedding row of `ModelConfig.zero_pad_token` at zero (the authors' classifier: their
nn.Embedding's padding_idx row is zero at init and gets no gradient).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from .config import ModelConfig


class ZeroFrozenGrad:
    """A gradient hook: the gradient with the masked (frozen) elements set to zero."""

    def __init__(self, mask: torch.Tensor):
        self.mask = mask

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        if self.mask.device != grad.device:  # the model moved after the hook was registered: move the mask once
            self.mask = self.mask.to(grad.device)
        return grad.masked_fill(self.mask, 0)


def head_mask(shape: torch.Size, heads: list[int]) -> torch.Tensor:
    """A boolean mask of `shape` that is True on the slices [h] (heads are the first dimension)."""
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[heads] = True
    return mask


def apply_freeze(model: nn.Module, config: ModelConfig) -> None:
    """Freeze `model`'s parameters as `config` says: requires_grad off for whole parameters, and for frozen heads
    (and the zero_pad_token row of W_E) a mask in `model.frozen_masks` ({name: BoolTensor}) and a hook that keeps
    their gradient at zero."""
    masks: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        param.requires_grad_(not config.is_frozen(name))
        heads = config.frozen_heads(name)
        if heads:
            masks[name] = head_mask(param.shape, heads)
        elif name == "embed.W_E" and config.zero_pad_token is not None and param.requires_grad:
            masks[name] = head_mask(param.shape, [config.zero_pad_token])  # one row: the first dimension, as heads
        if name in masks:
            param.register_hook(ZeroFrozenGrad(masks[name]))
    model.frozen_masks = masks


def frozen_elements(model: nn.Module, name: str, param: torch.Tensor) -> int:
    """How many elements of `param` keep their init: all if it is frozen, its frozen heads' if partly frozen."""
    if not param.requires_grad:
        return param.numel()
    mask = getattr(model, "frozen_masks", {}).get(name)
    return 0 if mask is None else int(mask.sum())


class FrozenSlices:
    """The current values of every partly frozen parameter's frozen elements, to write back after each step."""

    def __init__(self, model: nn.Module):
        params = dict(model.named_parameters())
        self.slices = []
        for name, mask in getattr(model, "frozen_masks", {}).items():
            param = params[name]
            mask = mask.to(param.device)
            self.slices.append((param, mask, param.detach()[mask].clone()))

    @torch.no_grad()
    def restore(self) -> None:
        """Write the recorded values back into the frozen elements."""
        for param, mask, values in self.slices:
            param.masked_scatter_(mask, values)


def hold_frozen_slices(model: nn.Module, optimizer: torch.optim.Optimizer) -> FrozenSlices | None:
    """Keep `model`'s frozen heads at their present values through every `optimizer.step()` (a post-step hook).

    Call it once the weights are in place (after a resume's load). Returns the FrozenSlices, or None if the
    model has no frozen heads (then nothing is hooked and a step costs nothing more)."""
    frozen = FrozenSlices(model)
    if not frozen.slices:
        return None
    optimizer.register_step_post_hook(lambda *_: frozen.restore())
    return frozen


UNIFORM_SCORE_STD = 0.1  # below this, softmax over a few dozen keys stays within ~10% of uniform


def frozen_score_std(config: ModelConfig) -> float | None:
    """About the std of the attention scores at init of an unshaped softmax layer whose W_Q and W_K are both frozen
    (unit-variance inputs: d_model * qk_init_std^2, the 1/sqrt(d_head) included), or None if no layer is such. Frozen,
    they stay there: below UNIFORM_SCORE_STD every such head attends about uniformly for the whole run."""
    std = config.init_std if config.qk_init_std is None else config.qk_init_std
    frozen = any(config.layer_attention(i) == "softmax"
                 and all(config.is_frozen(f"blocks.{i}.attn.W_{x}") for x in "QK") for i in range(config.n_layers))
    return config.d_model * std**2 if frozen and not config.spec.shaped else None


def warn_if_frozen_attention_is_uniform(config: ModelConfig) -> None:
    """Warn when frozen W_Q/W_K at the default init (qk_init_std unset: init_std, 0.02) keep every softmax head about
    uniform, as at small widths; a qk_init_std set on purpose (the memorize presets' 0.02) is not warned about."""
    std = frozen_score_std(config)
    if config.qk_init_std is None and std is not None and std < UNIFORM_SCORE_STD:
        warnings.warn(f"frozen W_Q/W_K at qk_init_std={config.init_std:g} (the default) give attention scores of std "
                      f"about {std:.2g} at width {config.d_model}: every head attends about uniformly, and stays so; "
                      f"the presets use qk_init_std = 1/sqrt(d_model) (qk_init_std={config.d_model ** -0.5:.3g})",
                      stacklevel=3)
