"""Who does the work: each attention layer's, MLP's and head's share of the answer, by attribution and by ablation.

    from mixit_lab.analysis.components import component_effects
    tokens, mask = task.eval_set(512)
    r = component_effects(model, tokens, mask, task.metric)     # ComponentEffects
    r.table          # one row per component: attribution share, accuracy and loss under two ablations
    r.summary()      # attention vs MLP in a few numbers

The paper reads "attention retrieves, MLP memorizes" off accuracies of models with parts frozen. This
module measures it inside one trained model, on its task's own inputs, two ways:

* **Direct logit attribution (DLA).** The final residual stream is a sum of what the embeddings and every
  sublayer wrote into it, h_L = s^(2L) (embed + pos_embed) + sum_k b s^(2L-1-k) f_k, with (s, b) the
  residual scales of the variant (1 and 1 except in the shaped variants, `ModelConfig.residual_scales`).
  With the final RMSNorm's scale held at its value in the intact run (as TransformerLens's
  `apply_ln_to_stack` does), the answer's logit difference is linear in h_L, so each term gets its exact
  part of it. The logit difference at an answer position is logit(answer) - logit(runner-up), the
  runner-up being the strongest other token in the intact run: positive exactly where the model is right.
  An attention layer's part splits further into its heads (z_h W_O[h]) plus its bias b_O. The parts,
  with the embeddings and the unembedding bias, sum to the total (`share` sums to 1).
* **Ablation (causal effect).** One component's output (`blocks.{l}.hook_attn_out`,
  `blocks.{l}.hook_mlp_out` [batch, pos, d_model], or one head's slice of `blocks.{l}.attn.hook_z`
  [batch, pos, head_index, d_head]) is replaced, the rest of the model runs on, and loss and accuracy
  are measured as in training (`mixit_lab.training.loss.evaluate`):
      mean      by its mean over the given rows at each position (the task's own distribution), so only
                its dependence on the particular input is removed;
      resample  by its output on another row (a fixed random derangement of the rows), so it carries
                some other input's information.
  One component at a time, and every attention layer (`all_attn`) or every MLP (`all_mlp`) at once.
  For the memorize task `memorized_bits` is also measured with each component mean-ablated, so where the
  stored bits live is measured rather than inferred.

Rows of `ComponentEffects.table` (`COLUMNS`): `component` is one of embed, pos_embed, unembed_bias
(attribution only), attn, mlp, head, all_attn, all_mlp (ablation only); `layer` and `head` are -1 where
they do not apply. Accuracy deltas are ablated minus intact (a fraction; negative = the component is
needed); loss deltas in nats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pandas as pd
import torch

from mixit_lab.training.loss import evaluate

from .common import ModelOrPath, as_model, check_positive_int, model_device

METHODS = ("mean", "resample")
COLUMNS = [
    "component", "layer", "head", "dla", "share",
    "mean_loss", "mean_accuracy", "mean_delta_loss", "mean_delta_accuracy",
    "resample_loss", "resample_accuracy", "resample_delta_loss", "resample_delta_accuracy",
    "mean_bits", "mean_bits_lost",
]


def _out_hook(kind: str, layer: int) -> str:
    return f"blocks.{layer}.hook_{kind}_out"


def _z_hook(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


def _check(model, tokens: torch.Tensor, mask: torch.Tensor, metric: str) -> None:
    if not hasattr(model, "unembed"):
        raise ValueError("component analysis needs a model with an unembedding (a next-token task, not a classifier)")
    if tokens.ndim != 2 or tokens.shape != mask.shape:
        raise ValueError(f"tokens and mask must both be [N, pos]; got {tuple(tokens.shape)} and {tuple(mask.shape)}")
    if tokens.shape[0] < 2:
        raise ValueError(f"need at least 2 rows (resample ablation swaps rows); got {tokens.shape[0]}")
    if metric not in ("sequence", "token"):
        raise ValueError(f"metric={metric!r} is not one of: sequence, token")
    if not mask[:, 1:].any():
        raise ValueError("mask marks no answer tokens")


# --------------------------------------------------------------------------- attribution
@torch.no_grad()
def logit_attribution(model: ModelOrPath, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[pd.DataFrame, float]:
    """Each component's mean part of the answer's logit difference, and the mean total.

    tokens int64 / mask bool [N, pos] as the tasks give them (mask marks answer tokens; the logits at
    t - 1 predict tokens[t]). Returns a DataFrame with columns component, layer, head, dla, share (one
    row each for embed, pos_embed if the model has learned positions, unembed_bias, every attn and mlp
    layer and every head; an attn row includes its bias b_O, its heads do not) and the mean logit
    difference over answer tokens, which the attn, mlp, embedding and bias rows sum to.
    """
    model = as_model(model)
    cfg, config = model.cfg, model.config
    n_layers = cfg.n_layers
    names = ["hook_embed", "ln_final.hook_scale"] + [_out_hook(k, l) for l in range(n_layers) for k in ("attn", "mlp")]
    names += [_z_hook(l) for l in range(n_layers)]
    if hasattr(model, "pos_embed"):
        names.append("hook_pos_embed")
    device = model_device(model)
    was_training = model.training
    model.eval()
    try:
        logits, cache = model.run_with_cache(tokens.to(device), names_filter=names, return_cache_object=False)
    finally:
        model.train(was_training)
    predict = mask[:, 1:].to(device)  # [N, pos - 1]: positions whose logits predict an answer token
    answer = tokens[:, 1:].to(device)[predict]  # [n_answers]
    logits = logits[:, :-1][predict].double()  # [n_answers, d_vocab]
    runner_up = logits.scatter(1, answer[:, None], float("-inf")).argmax(1)

    # The unembedding read-out of "answer minus runner-up", through the frozen final norm:
    # logit_diff = sum_c contribution_c . u + bias, with u = mult * w_ln / scale * (W_U[:, a] - W_U[:, r]).
    unembed = model.unembed
    W_U = unembed.W_U.double()
    scale = cache["ln_final.hook_scale"][:, :-1][predict].double()  # [n_answers, 1]
    u = unembed.mult * model.ln_final.w.double() / scale * (W_U[:, answer] - W_U[:, runner_up]).T
    bias_part = unembed.mult * (unembed.b_U[answer] - unembed.b_U[runner_up]).double()

    skip, branch = config.residual_scales
    n_sub = 2 * n_layers

    def read(name: str) -> torch.Tensor:
        act = cache[name]
        act = act.expand(predict.shape[0], *act.shape[1:])  # hook_pos_embed is [1, pos, d_model]
        return act[:, :-1][predict].double()  # [n_answers, ...]

    rows: list[dict[str, Any]] = []

    def add(component: str, parts: torch.Tensor, layer: int = -1, head: int = -1) -> None:
        rows.append({"component": component, "layer": layer, "head": head, "dla": parts.mean().item()})

    embed_coef = skip ** n_sub
    add("embed", embed_coef * (read("hook_embed") * u).sum(-1))
    if hasattr(model, "pos_embed"):
        add("pos_embed", embed_coef * (read("hook_pos_embed") * u).sum(-1))
    add("unembed_bias", bias_part)
    for layer, block in enumerate(model.blocks):
        # Sublayer k = 2 * layer (attention) and 2 * layer + 1 (MLP) is scaled by b s^(2L-1-k) on its way to h_L.
        attn_coef, mlp_coef = (branch * skip ** (n_sub - 1 - k) for k in (2 * layer, 2 * layer + 1))
        add("attn", attn_coef * (read(_out_hook("attn", layer)) * u).sum(-1), layer)
        add("mlp", mlp_coef * (read(_out_hook("mlp", layer)) * u).sum(-1), layer)
        z = read(_z_hook(layer))  # [n_answers, head_index, d_head]
        W_O = block.attn.W_O.double() * block.attn.out_mult  # [head_index, d_head, d_model]
        per_head = attn_coef * torch.einsum("nhe,hed,nd->nh", z, W_O, u)
        for head in range(cfg.n_heads):
            add("head", per_head[:, head], layer, head)
    total = (logits.gather(1, answer[:, None])[:, 0] - logits.gather(1, runner_up[:, None])[:, 0]).mean().item()
    df = pd.DataFrame(rows)
    df["share"] = df["dla"] / total if total != 0 else float("nan")
    return df, total


# --------------------------------------------------------------------------- ablation
def _targets(model, which: str) -> Iterator[tuple[str, int, int, list[str]]]:
    """(component, layer, head, hook names) for every ablation target of the given kind."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if which == "layers":
        for layer in range(n_layers):
            for kind in ("attn", "mlp"):
                yield kind, layer, -1, [_out_hook(kind, layer)]
        for kind in ("attn", "mlp"):
            yield f"all_{kind}", -1, -1, [_out_hook(kind, l) for l in range(n_layers)]
    else:
        for layer in range(n_layers):
            for head in range(n_heads):
                yield "head", layer, head, [_z_hook(layer)]


@torch.no_grad()
def _clean_outputs(model, tokens: torch.Tensor, names: list[str], batch_size: int) -> dict[str, torch.Tensor]:
    """The intact model's activations at `names` for every row, [N, ...] on the model's device."""
    from .common import cached_batches

    parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    for _, _, cache in cached_batches(model, tokens, names, batch_size):
        for name in names:
            parts[name].append(cache[name])
    return {name: torch.cat(chunks) for name, chunks in parts.items()}


def _derangement(n: int, seed: int) -> torch.Tensor:
    """A random permutation of range(n) with no fixed point (one cycle through a shuffled order)."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    perm = torch.empty(n, dtype=torch.long)
    perm[order] = order.roll(-1)
    return perm


def _replace_hook(replacement: torch.Tensor, head: int):
    """A forward hook writing `replacement` ([pos, ...] broadcast over rows, or [N, ...]) over the activation,
    or over head `head`'s slice of it (hook_z) when head >= 0."""

    def hook(act: torch.Tensor, hook) -> torch.Tensor:
        if head < 0:
            return replacement.to(act.dtype).expand_as(act).clone()
        act = act.clone()
        act[..., head, :] = replacement[..., head, :].to(act.dtype)
        return act

    return hook


@dataclass
class ComponentEffects:
    """What `component_effects` measures: the table (`COLUMNS`) and the intact model's baseline."""

    table: pd.DataFrame
    baseline_loss: float
    baseline_accuracy: float
    logit_diff: float  # mean answer-minus-runner-up logit difference of the intact model
    n_examples: int
    baseline_bits: float | None = None  # memorize task: memorized_bits of the intact model
    max_bits: float | None = None

    def frame(self) -> pd.DataFrame:
        """The table (`COLUMNS`): one row per component, as the other analyses' typed results give theirs."""
        return self.table

    def summary(self) -> dict[str, Any]:
        """Attention against MLP: the all-at-once ablations and the summed attribution shares."""
        t = self.table
        out: dict[str, Any] = {
            "examples": self.n_examples, "baseline_loss": self.baseline_loss,
            "baseline_accuracy": self.baseline_accuracy, "logit_diff": self.logit_diff,
        }
        for kind in ("attn", "mlp"):
            row = t[t["component"] == f"all_{kind}"].iloc[0]
            out[kind] = {
                "share": float(t.loc[t["component"] == kind, "share"].sum()),
                "mean_delta_accuracy": float(row["mean_delta_accuracy"]),
                "resample_delta_accuracy": float(row["resample_delta_accuracy"]),
                "mean_delta_loss": float(row["mean_delta_loss"]),
                "resample_delta_loss": float(row["resample_delta_loss"]),
            }
            if self.baseline_bits is not None:
                out[kind]["bits_lost"] = float(row["mean_bits_lost"])
        if self.baseline_bits is not None:
            out["bits"], out["max_bits"] = self.baseline_bits, self.max_bits
        return out


def component_effects(
    model: ModelOrPath,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    metric: str,
    *,
    heads: bool = False,
    memorize_task=None,
    seed: int = 0,
    batch_size: int = 512,
) -> ComponentEffects:
    """Attribution of every attention layer, MLP and head; mean/resample ablation of every layer's
    attention and MLP (and of every head, with `heads`: 2 x n_layers x n_heads more forward passes).

    tokens int64 / mask bool [N, pos] (mask marks answer tokens), metric "sequence" or "token", as
    `mixit_lab.training.loss.evaluate` takes them. `memorize_task` (a `memorize` task) adds memorized bits on its
    full key set with each component mean-ablated (means over `tokens`). `seed` picks the resample
    derangement. Ablated runs see all N rows at once (resampling pairs rows across the whole set).
    `model` may be a run directory or checkpoint path.
    """
    model = as_model(model)
    _check(model, tokens, mask, metric)
    check_positive_int("batch_size", batch_size)
    n = tokens.shape[0]
    dla, total = logit_attribution(model, tokens, mask)
    base = evaluate(model, tokens, mask, metric, batch_size)
    bits_fn = None
    if memorize_task is not None:
        from .memory import memorized_bits

        def bits_fn() -> pd.DataFrame:
            return memorized_bits(model, memorize_task)

        intact = bits_fn().iloc[0]
    kinds = ("layers", "heads") if heads else ("layers",)
    # The intact activations of only the hooks some ablation replaces (hook_z only when heads are ablated).
    names = sorted({name for which in kinds for *_, hook_names in _targets(model, which) for name in hook_names})
    clean = _clean_outputs(model, tokens, names, batch_size)
    means = {name: act.double().mean(0).to(act.dtype) for name, act in clean.items()}
    perm = _derangement(n, seed).to(model_device(model))

    rows: list[dict[str, Any]] = []
    for which in kinds:
        for component, layer, head, hook_names in _targets(model, which):
            row: dict[str, Any] = {"component": component, "layer": layer, "head": head}
            for method in METHODS:
                fwd = [(name, _replace_hook(means[name] if method == "mean" else clean[name][perm], head))
                       for name in hook_names]
                with model.hooks(fwd_hooks=fwd):
                    r = evaluate(model, tokens, mask, metric, batch_size=n)
                    if method == "mean" and bits_fn is not None:
                        row["mean_bits"] = float(bits_fn().iloc[0]["bits"])
                row[f"{method}_loss"], row[f"{method}_accuracy"] = r["eval_loss"], r["eval_acc"]
                row[f"{method}_delta_loss"] = r["eval_loss"] - base["eval_loss"]
                row[f"{method}_delta_accuracy"] = r["eval_acc"] - base["eval_acc"]
            if bits_fn is not None:
                row["mean_bits_lost"] = float(intact["bits"]) - row["mean_bits"]
            rows.append(row)
    ablated = pd.DataFrame(rows)
    table = dla.merge(ablated, on=["component", "layer", "head"], how="outer")
    order = {c: i for i, c in enumerate(("embed", "pos_embed", "unembed_bias", "attn", "mlp", "all_attn", "all_mlp", "head"))}
    table = table.sort_values(["component", "layer", "head"], key=lambda s: s.map(order) if s.name == "component" else s)
    table = table.reindex(columns=COLUMNS).reset_index(drop=True)
    return ComponentEffects(
        table=table, baseline_loss=base["eval_loss"], baseline_accuracy=base["eval_acc"], logit_diff=total,
        n_examples=n,
        baseline_bits=None if bits_fn is None else float(intact["bits"]),
        max_bits=None if bits_fn is None else float(intact["max_bits"]),
    )
