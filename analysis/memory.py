"""Memorization: how many bits of a random labelling a model stores, per parameter.

    from mixit_lab.analysis.memory import memorized_bits, capacity_sweep
    row = memorized_bits(model, get_task("memorize", n=16, d=2))   # one-row DataFrame
    row["bits_per_trainable_param"]

For N labelled examples (x, y) with labels from a set Y, the memorized information is

    bits = sum over examples of max(0, log2 |Y| + log2 p(y | x))

in bits: log2 |Y| for an example the model is certain of, 0 for one it rates at or below
chance (1/|Y|). At most N log2 |Y|. For the `memorize` task, Y is the task's n label tokens and
p(y | x) is the softmax of the model's logits over that slice of the vocabulary only (the
model's other tokens are not candidate labels), and accuracy is the argmax over the same slice.
Every key tuple is one example (the task's eval set is the whole training set). Bits per
parameter divide by `model.parameter_counts()`: trainable (what training could change) and
total (frozen included); buffers such as MixiT's mixing matrices are not parameters.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import torch
import torch.nn.functional as F

from mixit_lab.training.tasks import Task
from mixit_lab.training.loss import masked_logits

from .common import ModelOrPath, as_model, batches, check_positive_int, model_and_task, model_device

COLUMNS = [
    "examples",
    "labels",
    "accuracy",
    "bits",
    "max_bits",
    "params_trainable",
    "params_total",
    "bits_per_trainable_param",
    "bits_per_total_param",
]


def bits_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Memorized bits of logits [N, |Y|] (over the label set only) for labels int [N] in [0, |Y|).

    Returns examples (N), labels (|Y|), accuracy (argmax == label), bits and max_bits (N log2 |Y|).
    """
    if logits.ndim != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"logits must be [N, n_labels] and labels [N]; got {tuple(logits.shape)} and {tuple(labels.shape)}")
    n, k = logits.shape
    if k < 2:
        raise ValueError(f"need at least 2 labels; got {k}")
    if n and (int(labels.min()) < 0 or int(labels.max()) >= k):
        raise ValueError(f"labels must lie in [0, {k}); got [{int(labels.min())}, {int(labels.max())}]")
    log2_p = F.log_softmax(logits.double(), dim=-1).gather(1, labels[:, None].long())[:, 0] / math.log(2)
    bits = (math.log2(k) + log2_p).clamp_min(0).sum().item()
    accuracy = (logits.argmax(-1) == labels).double().mean().item() if n else float("nan")
    return {"examples": n, "labels": k, "accuracy": accuracy, "bits": bits, "max_bits": n * math.log2(k)}


def is_memorization_task(task: Any) -> bool:
    """Whether memorized bits apply to `task`: its class says its eval set is the whole training set
    (`Task.eval_is_train`, as `memorize`'s), never its name, so a task of your own can be one."""
    return bool(getattr(type(task), "eval_is_train", False))


@torch.no_grad()
def memorized_bits(
    model: ModelOrPath,
    task: Task | None = None,
    *,
    tokens: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    label_ids: Sequence[int] | torch.Tensor | None = None,
    batch_size: int = 4096,
) -> pd.DataFrame:
    """Accuracy, memorized bits and bits per trainable / total parameter, as a one-row DataFrame.

    Args:
        model: a mixit_lab.models.Transformer with an unembedding; it stays on its device. Or a run directory /
            checkpoint path: given neither task nor tokens, the run's own task is rebuilt.
        task: a memorization task (its class's `eval_is_train`, e.g. mixit_lab.training.get_task("memorize", n=..., d=...)):
            its whole eval set (memorize: all n^d keys) is scored over its `label_ids` (memorize: its n label
            tokens; a task without a label set: the whole vocabulary). Other tasks are refused; pass data instead.
        tokens, mask: any other labelled dataset, int64 / bool [N, pos] as the tasks produce them
            (mask marks the label tokens; logits at t - 1 predict tokens[t]). Each marked token is
            one example.
        label_ids: token ids forming the label set Y (default: the whole vocabulary); marked
            tokens must be among them.

    Returns:
        DataFrame with one row and columns `COLUMNS` (bits in bits, parameters as counts).
    """
    check_positive_int("batch_size", batch_size)
    model, task = model_and_task(model, task) if tokens is None and mask is None else (as_model(model), task)
    if not hasattr(model, "unembed"):
        raise ValueError("memorized_bits needs a model with an unembedding (token logits)")
    if task is not None:
        if tokens is not None or mask is not None:
            raise ValueError("pass either a task or tokens and mask, not both")
        if not is_memorization_task(task):
            raise ValueError(
                f"memorized_bits: task {getattr(task, 'name', task)!r} is not a memorization task (its class's "
                "eval_is_train is False: it is evaluated on held-out rows, not on what it trained on); use a task "
                "such as 'memorize', or pass tokens, mask (and label_ids) of a labelled dataset"
            )
        tokens, mask = task.eval_set()
        if label_ids is None:
            label_ids = task.label_ids  # the task's label set (None: the whole vocabulary)
    elif tokens is None or mask is None:
        raise ValueError("memorized_bits needs a memorize task, or both tokens and mask")
    if tokens.shape != mask.shape or tokens.ndim != 2:
        raise ValueError(f"tokens and mask must both be [N, pos]; got {tuple(tokens.shape)} and {tuple(mask.shape)}")
    d_vocab = model.cfg.d_vocab
    label_ids = torch.arange(d_vocab) if label_ids is None else torch.as_tensor(label_ids, dtype=torch.long)
    if label_ids.ndim != 1 or label_ids.numel() < 2 or int(label_ids.min()) < 0 or int(label_ids.max()) >= d_vocab:
        raise ValueError(f"label_ids must be at least 2 distinct token ids in [0, {d_vocab})")
    position = torch.full((d_vocab,), -1, dtype=torch.long)
    position[label_ids] = torch.arange(label_ids.numel())
    targets = position[tokens[mask.bool()]]
    if (targets < 0).any():
        raise ValueError("some marked tokens are not in label_ids")

    device = model_device(model)
    was_training = model.training
    model.eval()
    chunks = []
    try:
        for part in batches(tokens.shape[0], batch_size):
            logits, _ = masked_logits(model, tokens[part].to(device), mask[part].to(device))
            chunks.append(logits[:, label_ids.to(device)].double().cpu())
    finally:
        model.train(was_training)
    result = bits_from_logits(torch.cat(chunks), targets)
    counts = model.parameter_counts()
    result.update(
        params_trainable=counts["trainable"],
        params_total=counts["total"],
        bits_per_trainable_param=result["bits"] / counts["trainable"] if counts["trainable"] else float("nan"),
        bits_per_total_param=result["bits"] / counts["total"],
    )
    return pd.DataFrame([result], columns=COLUMNS)


def capacity_sweep(
    variant: str,
    ns: Iterable[int],
    out_dir: str | Path,
    *,
    d: int = 2,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    steps: int = 2000,
    lr: float = 1e-3,
    batch_size: int = 256,
    seed: int = 0,
    progress: bool = False,
    **train_fields,
) -> pd.DataFrame:
    """Train `variant` on `memorize` with n^d keys for each n in `ns`, and measure memorized bits.

    Each size trains through `mixit_lab.training.train` into `out_dir/n{n}_d{d}` (finished runs are reused,
    interrupted ones resumed); `train_fields` are further TrainConfig fields. Memorized bits grow
    with the dataset until the model's capacity is reached, then level off.

    Returns:
        DataFrame, one row per n: n, d, run (directory), and `COLUMNS`. `attrs`: plateau_bits
        (the most bits memorized at any size), plateau_n (where), plateau_bits_per_trainable_param,
        and saturated (True if the largest dataset was memorized to less than 90% of its
        N log2 |Y|, i.e. the sweep went past capacity; if False, plateau_bits is a lower bound).
    """
    from mixit_lab.models import load_model
    from mixit_lab.training import TrainConfig, get_task, train

    ns = [check_positive_int("n", n, 2) for n in ns]
    if not ns:
        raise ValueError("ns must hold at least one dataset size")
    out_dir = Path(out_dir)
    rows = []
    for n in sorted(ns):
        cfg = TrainConfig(
            task="memorize", task_params={"n": n, "d": d}, variant=variant, d_model=d_model, n_layers=n_layers,
            n_heads=n_heads, steps=steps, lr=lr, batch_size=batch_size, seed=seed,
            **{"eval_every": steps, **train_fields},
        )
        run = out_dir / f"n{n}_d{d}"
        train(cfg, run, resume=True, progress=progress)
        row = memorized_bits(load_model(run), get_task("memorize", n=n, d=d)).iloc[0].to_dict()
        rows.append({"n": n, "d": d, "run": str(run), **row})
    df = pd.DataFrame(rows, columns=["n", "d", "run", *COLUMNS])
    best = df.loc[df["bits"].idxmax()]
    last = df.iloc[-1]
    df.attrs.update(
        plateau_bits=float(best["bits"]),
        plateau_n=int(best["n"]),
        plateau_bits_per_trainable_param=float(best["bits_per_trainable_param"]),
        saturated=bool(last["bits"] < 0.9 * last["max_bits"]),
    )
    return df
