"""`mixit analyze CHECKPOINT... [--out DIR]`: every analysis that applies to each checkpoint (mixit_lab.analysis.analyze).

Results go into RUN/analysis/ (or CHECKPOINT/analysis/ for a bare checkpoint), or into DIR/NAME/
with --out DIR (NAME = the run or checkpoint directory's name; DIR/summary.csv then has one row per
checkpoint). An analysis of unchanged checkpoint files with the same options is reused; --force
recomputes it.
"""

from __future__ import annotations

import argparse
import inspect
import time
from pathlib import Path
from typing import Any

from mixit_lab.analysis.analyze import ABLATION_METHODS, AnalysisOptions, analyze_checkpoint
from mixit_lab.models.checkpoint import CheckpointError
from mixit_lab.models.files import atomic_file
from mixit_lab.training.rundir import ANALYSIS_DIR, DYNAMICS_FILE, RUNS_SUMMARY

from .common import CLIError, add_trust_option, check_output_dir, input_errors, path_arg

DEFAULTS = AnalysisOptions()  # the one set of analysis defaults: the options below start here
DEVICE = inspect.signature(analyze_checkpoint).parameters["device"].default  # "auto"


def register(subparsers) -> None:
    """Add the `analyze` subcommand to the `mixit` parser (called by mixit_lab.cli.main)."""
    p = subparsers.add_parser(
        "analyze",
        help="head scores, attention statistics, signal propagation, memorization and ablations of checkpoints",
        description="Run every analysis that applies to each checkpoint; results are cached by checkpoint hash.",
    )
    p.set_defaults(handler=cmd_analyze)
    add_trust_option(p)
    p.add_argument("checkpoints", nargs="+", type=path_arg, metavar="CHECKPOINT",
                   help="run directory (run.json + checkpoint/) or checkpoint directory (config.json + model.safetensors)")
    p.add_argument("--out", type=path_arg, default=None,
                   help="write results to OUT/NAME/ (default: RUN/analysis/ or CHECKPOINT/analysis/)")
    p.add_argument("--n-seqs", type=int, default=DEFAULTS.n_seqs, help="repeated sequences for head scores; inputs for attention/signal")
    p.add_argument("--seq-len", type=int, default=DEFAULTS.seq_len, help="length of r in the head-score sequences [r, r] (capped at n_ctx/2)")
    p.add_argument("--eval-samples", type=int, default=DEFAULTS.eval_samples, help="eval-set rows for head ablation and components (at most the rows the run held out)")
    p.add_argument("--ablation", choices=ABLATION_METHODS, default=DEFAULTS.ablation, help="head ablation method")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--device", default=DEVICE, help="auto (CUDA if present, else CPU), cpu, cuda, cuda:N, mps")
    p.add_argument("--force", action="store_true", help="recompute even if a cached analysis matches")
    p.add_argument("--checkpoints", dest="kept", action="store_true",
                   help="also score every checkpoint the run kept (mixit train --keep-checkpoints): head scores "
                        "by training step, into RUN/analysis_dynamics.csv")


def _options(args: argparse.Namespace) -> AnalysisOptions:
    return AnalysisOptions(n_seqs=args.n_seqs, seq_len=args.seq_len, eval_samples=args.eval_samples,
                           ablation=args.ablation, seed=args.seed)


def _check_device(name: str) -> None:
    """ValueError unless `name` is a device this machine has (pick_device); torch's own error for a misspelled
    one is a RuntimeError, turned into a ValueError naming what is allowed."""
    from mixit_lab.training.machine import pick_device

    try:
        pick_device(name)
    except RuntimeError:
        raise ValueError(f"--device={name!r} is not one of: auto, cpu, cuda, cuda:N, mps") from None


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



def _score_kept(args: argparse.Namespace, refs) -> None:
    """--checkpoints: mixit_lab.analysis.dynamics over the kept checkpoints of each run, into RUN/analysis_dynamics.csv."""
    from mixit_lab.analysis.dynamics import checkpoint_dynamics

    device = "cpu" if args.device == "auto" else args.device
    for ref in refs:
        if ref.run_dir is None:
            raise CLIError(f"mixit analyze: error: --checkpoints: {ref.checkpoint} is not in a run directory")
        table = checkpoint_dynamics(ref.run_dir, args.n_seqs, args.seq_len, args.seed, device=device)
        if table.empty:
            print(f"{ref.run_dir}: kept no checkpoints (train it with --keep-checkpoints N)")
            continue
        with atomic_file(ref.run_dir / DYNAMICS_FILE) as fh:
            table.to_csv(fh, index=False)
        print(f"{ref.run_dir}: {len(table)} kept checkpoints -> {ref.run_dir / DYNAMICS_FILE}")
        print(table.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.4g}"))


def cmd_analyze(args: argparse.Namespace) -> int:
    import pandas as pd

    from mixit_lab.training.rundir import find_checkpoint

    for name in ("n_seqs", "seq_len", "eval_samples"):
        value = getattr(args, name)
        if value < (2 if name == "seq_len" else 1):
            raise CLIError(f"mixit analyze: error: --{name.replace('_', '-')}={value} must be >= {2 if name == 'seq_len' else 1}")
    with input_errors("analyze"):  # the options, the device and every checkpoint, before anything is analysed
        _options(args)
        _check_device(args.device)
        refs = [(path, find_checkpoint(path)) for path in args.checkpoints]
        if args.out is not None:
            check_output_dir("--out", args.out)
    if args.out is not None:
        names = [ref.name for _, ref in refs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise CLIError(f"mixit analyze: error: several checkpoints are named {dup[0]!r}; with --out each needs its own name")
        targets = [args.out / ref.name for _, ref in refs]
    else:
        targets = [(ref.run_dir or ref.checkpoint) / ANALYSIS_DIR for _, ref in refs]

    rows = []
    for (path, ref), out_dir in zip(refs, targets):
        started = time.perf_counter()
        try:
            status, result = analyze_checkpoint(path, out_dir, _options(args), device=args.device, force=args.force)
        except (FileExistsError, CheckpointError) as e:
            raise CLIError(f"mixit analyze: error: {e}") from None
        note = "checkpoint unchanged" if status == "cached" else f"{time.perf_counter() - started:.1f}s"
        skipped = f"; skipped: {', '.join(result['skipped'])}" if result["skipped"] else ""
        print(f"{path}: {status} ({note}) -> {out_dir} [{', '.join(result['computed'])}{skipped}]")
        _print_skip_reasons(result["skipped"])
        rows.append(_summary_row(ref.name, status, out_dir, result))
    table = pd.DataFrame(rows)
    if args.out is not None:
        with atomic_file(args.out / RUNS_SUMMARY) as fh:
            table.to_csv(fh, index=False)
    columns = ["checkpoint", "variant", "task", "top_induction", "task_induction", "in_context_drop",
               "bits_per_trainable_param", "accuracy", "most_needed_head"]
    print(table[columns].to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.4g}"))
    if args.kept:
        _score_kept(args, [ref for _, ref in refs])
    return 0


def _print_skip_reasons(skipped: dict[str, str]) -> None:
    """Why each analysis was skipped, one line per reason (the analyses it skipped named), not only in analysis.json."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in skipped.items():
        by_reason.setdefault(str(reason), []).append(name)
    for reason, names in by_reason.items():
        print(f"  skipped {', '.join(names)}: {reason}")
