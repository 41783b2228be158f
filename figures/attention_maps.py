"""Attention patterns of a trained Frozen-QK retrieval model next to MixiT's fixed mixing matrices.

The model: the frozen_qk run on the retrieval task (group retrieval if present) with 2 layers, at
the largest `pairs`, best eval accuracy among its seeds and learning rates. On its eval set this
module finds
  * its previous-token head: highest `previous_token` score in the run's analysis/heads.csv
    (`mixit analyze`), else highest mean attention from each position to the one before it;
  * its retrieval head (among the other heads): highest mean attention, from the query token's
    row (which predicts the answer), to the value that follows the matching key,
and draws both heads' patterns on one eval example (the longest the model answers correctly).
Below them: the MixiT model's mixing matrices at the same layers and heads (the mixit run with the
same task and shape, else a fresh mixit model of that shape; the matrices are fixed buffers, equal
at initialization and after training), which are the same for every input.

Patterns come from `model.run_with_cache` at `blocks.{l}.attn.hook_pattern` [batch, head, query, key].

    python -m mixit_lab.figures.attention_maps RUNS_DIR [--out DIR]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from mixit_lab.analysis.runs import read_analysis_table
from mixit_lab.training.run import Run

from mixit_lab.analysis.runs import RunSet

from .common import NoData, as_runs, finished_runs, param
from .style import COLUMN_WIDTH, DIVERGING_CMAP, new_figure, paper_style, variant_label

if TYPE_CHECKING:  # torch (and the model) are imported when a run is drawn: `mixit figures` starts without them
    import torch

NAME = "attention_maps"
GROUPS = ("retrieval",)  # the study groups it draws (mixit_lab.training.rundir.group_of)
N_EVAL = 64  # eval rows used to choose the heads
LABEL_TOKENS_UP_TO = 24  # token labels on the axes up to this many positions


def _pick_run(runs: pd.DataFrame, variant: str, pairs: float | None = None, n_layers: int | None = None,
              n_heads: int | None = None) -> pd.Series | None:
    """The best (eval_acc) run of `variant` with a checkpoint, at the given pairs/shape (largest pairs if None)."""
    d = runs[(runs["variant"] == variant) & runs["has_checkpoint"].astype(bool)]
    if pairs is not None:
        d = d[d["pairs"] == pairs]
    if n_layers is not None:
        d = d[d["n_layers"] == n_layers]
    if n_heads is not None:
        d = d[d["n_heads"] == n_heads]
    if d.empty:
        return None
    d = d.assign(_acc=d["eval_acc"].fillna(-1.0))
    return d.sort_values(["pairs", "_acc"], ascending=False, kind="stable").iloc[0]


def _patterns(model, tokens: torch.Tensor) -> torch.Tensor:
    """[layer, batch, head, query, key] attention patterns of tokens [batch, pos]."""
    import torch

    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    return torch.stack([cache[n].float().cpu() for n in names]), logits.float().cpu()


def _retrieval_positions(task, tokens: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(query position, position of the matching key's value) of every eval row."""
    answer = mask.float().argmax(1)
    query = answer - 1
    key_id = tokens.gather(1, query[:, None])[:, 0] - task.num_keys  # q<j> = k<j> + num_keys
    key_pos = (tokens == key_id[:, None]).float().argmax(1)
    return query, key_pos + 1


def choose_heads(model, task, run: Run) -> dict:
    """The previous-token and retrieval heads and the example to draw (see the module docstring)."""
    import torch

    tokens, mask = task.eval_set(N_EVAL)
    pattern, logits = _patterns(model, tokens)  # [L, B, H, T, T]
    L, B, H, T, _ = pattern.shape
    rows = torch.arange(B)
    query, value_pos = _retrieval_positions(task, tokens, mask)
    retrieval = pattern[:, rows, :, query, value_pos].mean(0)  # indexed: [B, L, H]; mean over rows: [L, H]

    heads = read_analysis_table(run, "heads")
    if heads is not None and {"layer", "head", "previous_token"} <= set(heads.columns):
        prev_scores = torch.zeros(L, H)
        for r in heads.itertuples():
            prev_scores[int(r.layer), int(r.head)] = float(r.previous_token)
        prev_source = "heads.csv"
    else:  # mean attention to the previous position, over the real (non-padding) rows i >= 1
        length = query + 2
        real = torch.arange(1, T)[None, :] < length[:, None]  # [B, T-1]
        diag = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)  # [L, B, H, T-1]
        prev_scores = (diag * real[None, :, None]).sum((1, 3)) / real.sum()
        prev_source = "eval set"
    prev = divmod(int(prev_scores.flatten().argmax()), H)
    masked = retrieval.clone()
    masked[prev] = -np.inf
    ret = divmod(int(masked.flatten().argmax()), H)

    correct = logits[rows, query].argmax(-1) == tokens[rows, query + 1]
    order = sorted(range(B), key=lambda b: (not bool(correct[b]), -int(query[b])))
    b = order[0]
    return {"prev": prev, "prev_score": float(prev_scores[prev]), "prev_source": prev_source,
            "retrieval": ret, "retrieval_score": float(retrieval[ret]), "example": tokens[b],
            "query": int(query[b]), "value_pos": int(value_pos[b]), "correct": bool(correct[b])}


def plot(runs: RunSet | str | Path) -> Figure:
    """The figure (see the module docstring) of `runs`, or of the runs in that folder."""
    runs = finished_runs(as_runs(runs))
    runs = runs[runs["task"] == "retrieval"]
    if runs["group"].isin(GROUPS).any():
        runs = runs[runs["group"].isin(GROUPS)]
    runs = runs.assign(pairs=param(runs, "pairs"))
    fqk = _pick_run(runs, "frozen_qk", n_layers=2)
    if fqk is None:
        raise NoData("no finished 2-layer frozen_qk retrieval run with a checkpoint")
    mix = _pick_run(runs, "mixit", pairs=fqk["pairs"], n_layers=2, n_heads=int(fqk["n_heads"]))
    import torch  # the models are loaded only once there is a run to draw

    from mixit_lab.models import build_model

    torch.manual_seed(0)
    model, task = fqk["record"].model.eval(), fqk["record"].task
    chosen = choose_heads(model, task, fqk["record"])
    if mix is not None:
        mixit = mix["record"].model.eval()
    else:
        mixit = build_model(dataclasses.replace(model.config, variant="mixit")).eval()
    example = chosen["example"]
    n = chosen["query"] + 2  # through the answer token
    tokens = example[None, :n]
    pat_fqk, _ = _patterns(model, tokens)
    pat_mix, _ = _patterns(mixit, tokens)
    labels = [task.vocab[i] for i in tokens[0].tolist()]
    heads = [("previous-token head", chosen["prev"]), ("retrieval head", chosen["retrieval"])]

    causal = np.tril(np.ones((n, n), dtype=bool))
    trained = [np.ma.masked_where(~causal, pat_fqk[layer, 0, head].numpy()) for _, (layer, head) in heads]
    fixed = [np.ma.masked_where(~causal, pat_mix[layer, 0, head].numpy()) for _, (layer, head) in heads]
    off_diag = np.concatenate([np.abs(f[~np.eye(n, dtype=bool) & causal]) for f in fixed])
    vlim = float(off_diag.max()) if off_diag.size and off_diag.max() > 0 else 1.0

    with paper_style():
        width = COLUMN_WIDTH if n <= 12 else 5.0
        fig = new_figure(width, width * 0.95)
        axes = fig.subplots(2, 2, sharex=True, sharey=True)
        for col, (title, (layer, head)) in enumerate(heads):
            im_t = axes[0, col].imshow(trained[col], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            im_f = axes[1, col].imshow(fixed[col], cmap=DIVERGING_CMAP, vmin=-vlim, vmax=vlim, interpolation="nearest")
            axes[0, col].set_title(f"{title}\nlayer {layer}, head {head}")
            axes[1, col].set_title(f"layer {layer}, head {head}")
        for ax in axes.flat:
            ax.grid(False)
            ax.set_facecolor("#F2F2F2")
            for spine in ("top", "right"):
                ax.spines[spine].set_visible(True)
            if n <= LABEL_TOKENS_UP_TO:
                ax.set_xticks(range(n), labels, rotation=90, fontsize=5)
                ax.set_yticks(range(n), labels, fontsize=5)
                ax.tick_params(length=0, pad=1)
        for ax in axes[:, 1]:  # the cell that retrieves: query row, matching value column
            ax.add_patch(Rectangle((chosen["value_pos"] - 0.5, chosen["query"] - 0.5), 1, 1, fill=False,
                                   edgecolor="black" if ax is axes[1, 1] else "white", linewidth=0.8))
        axes[0, 0].set_ylabel(f"{variant_label('frozen_qk')} (trained)\nquery position")
        axes[1, 0].set_ylabel(f"{variant_label('mixit')}: fixed\n(input-independent)\nquery position")
        for ax in axes[1]:
            ax.set_xlabel("key position")
        fig.colorbar(im_t, ax=axes[0, :], shrink=0.9, label="attention weight")
        saturated = max(float(f.max()) for f in fixed) > vlim
        fig.colorbar(im_f, ax=axes[1, :], shrink=0.9, extend="max" if saturated else "neither",
                     label="mixing weight (signed)")
        pairs = int(fqk["pairs"])
        fig.suptitle(f"retrieval, up to {pairs} pairs; {'correct' if chosen['correct'] else 'wrong'} answer; "
                     "□ query → matching value", fontsize=7)
    return fig


if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
