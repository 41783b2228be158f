"""`mixit analyze CHECKPOINT... [--out DIR]`: every analysis that applies to a checkpoint, cached by its hash.

For each CHECKPOINT (a run directory from `mixit train`, its checkpoint/ subdirectory, or a bare
checkpoint directory from `save_pretrained`) this writes a directory holding

    analysis.json        metadata (checkpoint SHA-256, model, task, options, what was computed or
                         skipped and why) and a summary of every table
    heads.csv            analysis.heads.head_scores on repeated random sequences
    in_context_loss.csv  loss per position on those sequences (models with an unembedding)
    attention.csv        analysis.attention.attention_stats on the task's eval set (random tokens
                         for a bare checkpoint)
    signal.csv           analysis.signal.signal_propagation_model on the same inputs, for the
                         checkpoint ("checkpoint") and the same config freshly initialised ("init")
    memory.csv           analysis.memory.memorized_bits (memorize task only)
    ablation.csv         analysis.ablation.head_ablation on the task's eval set (run directories only;
                         class loss and accuracy for classifiers)
    task_induction.csv   analysis.heads.task_induction_scores on the same eval rows (khop runs only):
                         per head, the attention mass on the positions holding each answer and a
                         shuffled-source control; the summary adds chance, the positional ceiling
                         and the head-ablation result of the top head

into RUN/analysis/ (or CHECKPOINT/analysis/ for a bare checkpoint), or into DIR/NAME/ with
--out DIR (NAME = the run or checkpoint directory's name; DIR/summary.csv then has one row per
checkpoint). The directory is replaced atomically. If it already holds an analysis of the same
checkpoint files (config.json + model.safetensors, by SHA-256) with the same options, nothing is
recomputed; --force recomputes anyway.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

FORMAT = "mixit-lab/analysis"
ANALYSIS_VERSION = 3  # bump when a definition changes, so cached results are recomputed
ANALYSIS_FILE = "analysis.json"
ANALYSIS_SUBDIR = "analysis"


def register(subparsers) -> None:
    """Add the `analyze` subcommand to the `mixit` parser (called by training.cli)."""
    p = subparsers.add_parser(
        "analyze",
        help="head scores, attention statistics, signal propagation, memorization and ablations of checkpoints",
        description="Run every analysis that applies to each checkpoint; results are cached by checkpoint hash.",
    )
    p.set_defaults(handler=cmd_analyze)
    p.add_argument("checkpoints", nargs="+", type=Path, metavar="CHECKPOINT",
                   help="run directory (run.json + checkpoint/) or checkpoint directory (config.json + model.safetensors)")
    p.add_argument("--out", type=Path, default=None,
                   help="write results to OUT/NAME/ (default: RUN/analysis/ or CHECKPOINT/analysis/)")
    p.add_argument("--n-seqs", type=int, default=64, help="repeated sequences for head scores; inputs for attention/signal")
    p.add_argument("--seq-len", type=int, default=64, help="length of r in the head-score sequences [r, r] (capped at n_ctx/2)")
    p.add_argument("--eval-samples", type=int, default=512, help="eval-set rows for head ablation")
    p.add_argument("--ablation", choices=["mean", "zero", "none"], default="mean", help="head ablation method")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto (CUDA if present, else CPU), cpu, cuda, cuda:N, mps")
    p.add_argument("--force", action="store_true", help="recompute even if a cached analysis matches")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"n_seqs": args.n_seqs, "seq_len": args.seq_len, "eval_samples": args.eval_samples,
            "ablation": args.ablation, "seed": args.seed}


def _read_previous(out_dir: Path) -> dict | None:
    """The analysis.json in out_dir if it is one of ours, else None."""
    try:
        data = json.loads((out_dir / ANALYSIS_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _is_replaceable(out_dir: Path) -> bool:
    """Only replace a directory that is missing, empty, or an earlier analysis."""
    return not out_dir.exists() or (out_dir.is_dir() and (not any(out_dir.iterdir()) or _read_previous(out_dir)))


def _load_task(ref, model) -> tuple[Any, str | None]:
    """(task, None) for a run whose task can be rebuilt and fits the model, else (None, reason).

    The task is rebuilt from the run's training config, as `training.train` builds it (text tasks
    reuse the run's token cache); a text corpus that changed since training is refused.
    """
    from training import TrainConfig
    from training.tasks import DATA_CACHE_DIR, task_data_cache

    info = ref.run_info()
    if info is None:
        return None, "bare checkpoint (no run.json): task-specific analyses skipped"
    try:
        with task_data_cache(ref.run_dir.parent / DATA_CACHE_DIR):
            task = TrainConfig.from_dict(info["train"]).build_task()
    except (KeyError, TypeError, ValueError, OSError) as e:
        return None, f"task of this run cannot be rebuilt ({e})"
    saved = (info.get("task") or {}).get("data_fingerprint")
    if saved is not None and saved != task.data_fingerprint:
        return None, f"the {task.name} data differ from those the run was trained on"
    if task.d_vocab != model.cfg.d_vocab or task.seq_len > model.cfg.n_ctx:
        return None, (f"task {task.name!r} (d_vocab {task.d_vocab}, seq_len {task.seq_len}) does not fit the model "
                      f"(d_vocab {model.cfg.d_vocab}, n_ctx {model.cfg.n_ctx})")
    return task, None


def _head(df, column: str) -> dict[str, Any]:
    row = df.loc[df[column].idxmax()]
    return {"layer": int(row["layer"]), "head": int(row["head"]), "score": float(row[column])}


def analyze_checkpoint(
    path: Path, out_dir: Path, options: dict[str, Any], device: str = "auto", force: bool = False
) -> tuple[str, dict[str, Any]]:
    """Analyse one checkpoint into out_dir. Returns ("cached" | "computed", analysis.json contents)."""
    import torch

    from models import build_model, load_model
    from models.checkpoint import atomic_directory, write_json
    from training.cli import CLIError
    from training.trainer import pick_device, provenance

    from . import ablation, attention, heads, memory, signal
    from .common import checkpoint_hash, find_checkpoint, random_tokens

    ref = find_checkpoint(path)
    digest = checkpoint_hash(ref.checkpoint)
    previous = _read_previous(out_dir)
    if (
        not force
        and previous is not None
        and previous.get("checkpoint_sha256") == digest
        and previous.get("analysis_version") == ANALYSIS_VERSION
        and previous.get("options") == options
        and all((out_dir / f).is_file() for f in previous.get("tables", {}).values())
    ):
        return "cached", previous
    if not _is_replaceable(out_dir):
        raise CLIError(f"mixit analyze: error: refusing to replace {out_dir}: it exists and is not an earlier analysis")

    started = time.perf_counter()
    model = load_model(ref.checkpoint, device=pick_device(device))
    task, task_note = _load_task(ref, model)
    n_ctx = model.cfg.n_ctx
    tables: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    skipped: dict[str, str] = {}

    # Heads: repeated random sequences [r, r], as long as the context allows.
    seq_len = min(options["seq_len"], n_ctx // 2)
    if seq_len >= 2:
        df = heads.head_scores(model, n_seqs=options["n_seqs"], seq_len=seq_len, seed=options["seed"])
        tables["heads"] = df
        summary["heads"] = {
            "seq_len": seq_len,
            "top_induction": _head(df, "induction"),
            "top_previous_token": _head(df, "previous_token"),
            "chance": df.attrs["chance"],
            "labels": df["label"].value_counts().to_dict(),
            **{k: df.attrs[k] for k in ("loss_first_half", "loss_second_half", "in_context_drop")},
        }
        if df.attrs["loss_by_position"] is not None:
            loss = df.attrs["loss_by_position"]
            tables["in_context_loss"] = _loss_table(loss, seq_len)
    else:
        skipped["heads"] = f"n_ctx={n_ctx} is too short for repeated sequences [r, r] (needs n_ctx >= 4)"

    # Inputs for attention statistics and signal propagation: the task's eval set, else random tokens.
    if task is not None:
        inputs = task.eval_set(min(options["n_seqs"], task.default_eval_size))[0]
        inputs_note = f"first {inputs.shape[0]} rows of the {task.name} eval set, without a padding mask"
    else:
        inputs = random_tokens(model.cfg.d_vocab, options["n_seqs"], n_ctx, options["seed"])
        inputs_note = f"{inputs.shape[0]} random sequences of {n_ctx} tokens"
    df = attention.attention_stats(model, inputs)
    tables["attention"] = df
    summary["attention"] = {
        "inputs": inputs_note,
        "mean_entropy_normalized": float(df["entropy_normalized"].mean()),
        "mean_sink_mass": float(df["sink_mass"].mean()),
        "max_input_dependence": float(df["input_dependence"].max()),
        "source": str(df["source"].iloc[0]),
    }

    trained = signal.signal_propagation_model(model, inputs)
    init = signal.signal_propagation_model(build_model(model.config).to(model.cfg.device), inputs)
    tables["signal"] = _concat({"checkpoint": trained, "init": init}, "state")
    summary["signal"] = {
        "inputs": inputs_note,
        "last_layer": {"checkpoint": trained.iloc[-1].drop("layer").to_dict(), "init": init.iloc[-1].drop("layer").to_dict()},
    }

    if task is not None and task.name == "memorize":
        df = memory.memorized_bits(model, task)
        tables["memory"] = df
        summary["memory"] = df.iloc[0].to_dict()
    else:
        skipped["memory"] = task_note or f"memorized bits apply to the memorize task, not {task.name!r}"

    if options["ablation"] == "none":
        skipped["ablation"] = "--ablation none"
    elif task is None:
        skipped["ablation"] = task_note
    else:
        # (tokens, mask) for next-token tasks; (tokens, attention mask, labels) for classification tasks.
        batch = task.eval_set(min(options["eval_samples"], task.default_eval_size))
        tokens, mask, labels = batch[0], batch[1], (batch[2] if len(batch) > 2 else None)
        df = ablation.head_ablation(model, tokens, mask, task.metric, method=options["ablation"], labels=labels)
        tables["ablation"] = df
        summary["ablation"] = {
            "method": options["ablation"],
            "examples": int(tokens.shape[0]),
            "baseline_loss": df.attrs["baseline_loss"],
            "baseline_accuracy": df.attrs["baseline_accuracy"],
            "top": df.head(3)[["layer", "head", "delta_loss", "delta_accuracy"]].to_dict("records"),
        }

    if task is not None and hasattr(task, "answer_sources"):
        tokens = task.eval_set(min(options["eval_samples"], task.default_eval_size))[0]
        df = heads.task_induction_scores(model, task, tokens)
        tables["task_induction"] = df
        summary["task_induction"] = _task_induction_summary(df, tables.get("ablation"), options["ablation"], task.name)
    else:
        skipped["task_induction"] = task_note or f"task-aligned induction applies to the khop task, not {task.name!r}"

    info = ref.run_info()
    result = {
        "format": FORMAT,
        "analysis_version": ANALYSIS_VERSION,
        "checkpoint": str(path),
        "checkpoint_sha256": digest,
        "options": options,
        "model": model.config.to_dict(),
        "params": model.parameter_counts(),
        "task": info.get("task") if info else None,
        "computed": list(tables),
        "skipped": skipped,
        "tables": {name: f"{name}.csv" for name in tables},
        "summary": summary,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "device": str(model.cfg.device),
        "versions": provenance([])["versions"],
        "torch_threads": torch.get_num_threads(),
    }
    with atomic_directory(out_dir) as tmp:
        for name, df in tables.items():
            df.to_csv(tmp / f"{name}.csv", index=False)
        write_json(tmp / ANALYSIS_FILE, _jsonable(result))
    return "computed", _jsonable(result)


def _task_induction_summary(scores, ablation_df, method: str, task_name: str) -> dict[str, Any]:
    """The head with the highest task-aligned induction score, its reference levels, and what ablating it costs.

    `top` holds the head's layer, head, score and shuffled score (its mass on other sequences'
    sources: what position alone explains); chance and positional are the task's reference levels.

    The ablation comes from the head-ablation table (computed on the same eval rows): accuracy
    with that head ablated and `accuracy_drop` = intact minus ablated accuracy (fractions; positive
    = the head is needed). None when ablation was switched off (--ablation none).
    """
    top = _head(scores, "score")
    top["shuffled"] = float(scores.loc[scores["score"].idxmax(), "shuffled"])
    ablated = None
    if ablation_df is not None:
        row = ablation_df[(ablation_df["layer"] == top["layer"]) & (ablation_df["head"] == top["head"])].iloc[0]
        ablated = {
            "method": method,
            "accuracy": float(row["accuracy"]),
            "accuracy_drop": 0.0 - float(row["delta_accuracy"]),  # not -x: no "-0.0" in the JSON
            "delta_loss": float(row["delta_loss"]),
        }
    return {
        "inputs": f"first {scores.attrs['n_seqs']} rows of the {task_name} eval set",
        "hops": scores.attrs.get("hops"),
        "rows": scores.attrs["rows"],
        "top": top,
        "chance": scores.attrs["chance"],
        "positional": scores.attrs["positional"],
        "ablation": ablated,
    }


def _loss_table(loss_by_target: list[float], seq_len: int):
    import pandas as pd

    position = list(range(1, len(loss_by_target) + 1))
    half = ["first" if t < seq_len else "boundary" if t == seq_len else "second" for t in position]
    return pd.DataFrame({"position": position, "half": half, "loss": loss_by_target})


def _concat(frames: dict, key: str):
    import pandas as pd

    return pd.concat([df.assign(**{key: name}) for name, df in frames.items()], ignore_index=True)[
        [key, *next(iter(frames.values())).columns]
    ]


def _jsonable(value: Any) -> Any:
    """Plain JSON types (numpy scalars -> Python numbers, NaN -> None)."""
    import math

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _summary_row(name: str, status: str, out_dir: Path, result: dict) -> dict[str, Any]:
    s = result["summary"]
    top = s.get("heads", {}).get("top_induction")
    aligned = s.get("task_induction") or {}
    aligned_top, aligned_ablation = aligned.get("top"), aligned.get("ablation") or {}
    ablated = (s.get("ablation", {}).get("top") or [None])[0]
    return {
        "checkpoint": name,
        "variant": result["model"]["variant"],
        "task": (result["task"] or {}).get("name"),
        "params_trainable": result["params"]["trainable"],
        "top_induction": top["score"] if top else None,
        "top_induction_head": f"L{top['layer']}H{top['head']}" if top else None,
        "in_context_drop": s.get("heads", {}).get("in_context_drop"),
        "task_induction": aligned_top["score"] if aligned_top else None,
        "task_induction_head": f"L{aligned_top['layer']}H{aligned_top['head']}" if aligned_top else None,
        "task_induction_chance": aligned.get("chance"),
        "task_induction_ablation_drop": aligned_ablation.get("accuracy_drop"),
        "bits_per_trainable_param": s.get("memory", {}).get("bits_per_trainable_param"),
        "accuracy": s.get("ablation", {}).get("baseline_accuracy"),
        "most_needed_head": f"L{ablated['layer']}H{ablated['head']}" if ablated else None,
        "status": status,
        "out": str(out_dir),
    }


def cmd_analyze(args: argparse.Namespace) -> int:
    import pandas as pd

    from training.cli import CLIError

    from .common import find_checkpoint

    for name in ("n_seqs", "seq_len", "eval_samples"):
        value = getattr(args, name)
        if value < (2 if name == "seq_len" else 1):
            raise CLIError(f"mixit analyze: error: --{name.replace('_', '-')}={value} must be >= {2 if name == 'seq_len' else 1}")
    refs = []
    for path in args.checkpoints:
        try:
            refs.append((path, find_checkpoint(path)))
        except (FileNotFoundError, ValueError) as e:
            raise CLIError(f"mixit analyze: error: {e}") from None
    if args.out is not None:
        names = [ref.name for _, ref in refs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise CLIError(f"mixit analyze: error: several checkpoints are named {dup[0]!r}; with --out each needs its own name")
        targets = [args.out / ref.name for _, ref in refs]
    else:
        targets = [(ref.run_dir or ref.checkpoint) / ANALYSIS_SUBDIR for _, ref in refs]

    rows = []
    for (path, ref), out_dir in zip(refs, targets):
        started = time.perf_counter()
        status, result = analyze_checkpoint(path, out_dir, _options(args), device=args.device, force=args.force)
        note = "checkpoint unchanged" if status == "cached" else f"{time.perf_counter() - started:.1f}s"
        skipped = f"; skipped: {', '.join(result['skipped'])}" if result["skipped"] else ""
        print(f"{path}: {status} ({note}) -> {out_dir} [{', '.join(result['computed'])}{skipped}]")
        rows.append(_summary_row(ref.name, status, out_dir, result))
    table = pd.DataFrame(rows)
    if args.out is not None:
        table.to_csv(args.out / "summary.csv", index=False)
    columns = ["checkpoint", "variant", "task", "top_induction", "task_induction", "in_context_drop",
               "bits_per_trainable_param", "accuracy", "most_needed_head"]
    print(table[columns].to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.4g}"))
    return 0
