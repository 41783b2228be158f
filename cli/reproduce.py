"""`mixit reproduce`: a preset through training, analysis, figures and the report (mixit_lab.reproduce.pipeline)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from mixit_lab.figures.common import study_figures_dir

from .common import (
    EXIT_FAILED, EXIT_OK, CLIError, add_executor_options, add_trust_option, check_output_dir,
    check_runs_per_gpu_applies, executor_from_args, input_errors, path_arg, stop_on_sigterm,
)


def register(subparsers) -> None:
    from mixit_lab.reproduce.preset import preset_names
    from mixit_lab.training.trackers import TRACKERS
    from mixit_lab.training.config import PRECISIONS

    p = subparsers.add_parser(
        "reproduce",
        help="train, analyse, plot and report a preset of the paper's experiments (resumable)",
        description="Run a preset's grid through training, analysis, figures and the report. Rerunning skips "
        "finished runs and analyses, so an interrupted reproduction continues where it stopped.",
    )
    p.set_defaults(handler=cmd_reproduce)
    add_trust_option(p)
    p.add_argument("--preset", default="quick", metavar="PRESET",
                   help=f"one of {', '.join(preset_names())}, or a preset YAML file (default: quick)")
    p.add_argument("--out", type=path_arg, default=None, help="runs directory (default: runs/PRESET)")
    p.add_argument("--report-dir", type=path_arg, default=None, help="report directory (default: reports/PRESET)")
    p.add_argument("--figures-dir", type=path_arg, default=None, help="figure directory (default: reports/PRESET/figures)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel training processes (default: CPU cores; runs on CUDA: GPUs x --runs-per-gpu, which "
                        "a given --workers caps)")
    p.add_argument("--text-file", nargs="+", default=None, metavar="PATH",
                   help="corpus for language modeling (default: ../shared/data WikiText-2, else the same "
                        "text from the Hub)")
    p.add_argument("--sentiment-file", nargs="+", default=None, metavar="PATH",
                   help="labelled sentences for sentiment (default: ../shared/data Yelp sentences, else "
                        "1,000 Yelp reviews from the Hub)")
    p.add_argument("--sst2-dir", default=None, metavar="DIR",
                   help="SST-2 as GLUE distributes it, a folder with train.tsv and dev.tsv (default: ../shared/data/"
                        "sst-2, else GLUE's sst2 from the Hub)")
    p.add_argument("--tune", action="store_true",
                   help="train every learning rate of the preset's tuned studies at its tuning seeds and choose each "
                        "setting's on its tuning set now (writes OUT/tuning.json), instead of reading the preset's "
                        "recorded tuning (reproduce/tuning/PRESET.json)")
    p.add_argument("--tuning", type=path_arg, default=None, metavar="FILE",
                   help="read the learning rates chosen from this tuning record (a tuning.json of mixit reproduce "
                        "--tune) instead of the preset's recorded one")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="training precision of every run, over the preset's (quick: fast, i.e. bf16 where this "
                        "CPU's bf16 matmuls beat fp32, else fp32; see mixit train --help)")
    p.add_argument("--cuda-graph", action="store_true",
                   help="on CUDA, replay each run's training step as a CUDA graph (see mixit train --help); the same "
                        "runs, so finished ones are kept")
    p.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--tracker", choices=TRACKERS, default="none",
                   help="also send every run's metrics to TensorBoard (RUN/tensorboard/) or Weights & Biases")
    add_executor_options(p)


def cmd_reproduce(args: argparse.Namespace) -> int:
    """Resolve the preset, its corpora and runs once (every input error before anything trains, --dry-run too),
    then run the pipeline on that plan."""
    from mixit_lab.reproduce.pipeline import plan_reproduction, reproduce
    from mixit_lab.reproduce.preset import load_preset
    from mixit_lab.reproduce.report import check_report_dir
    from mixit_lab.training.tasks import trust_task_code
    from mixit_lab.training.trackers import check_tracker

    with input_errors("reproduce"):  # the preset whole (every block), the corpora, runs trained otherwise
        preset = load_preset(args.preset)
        for spec in preset.task_code():  # the preset names this code: running it is what the user asked for
            trust_task_code(spec)
        if args.precision is not None:
            preset = preset.with_train(precision=args.precision)
        if args.cuda_graph:
            preset = preset.with_train(cuda_graph=True)
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"--workers={args.workers} must be >= 1")
        executor = executor_from_args(args, args.workers or os.cpu_count() or 1)
        check_tracker(args.tracker)
        out = args.out or Path("runs") / preset.name
        report_dir = args.report_dir or Path("reports") / preset.name
        figures_dir = args.figures_dir or study_figures_dir(preset.name)
        for option, folder in (("--out", out), ("--report-dir", report_dir), ("--figures-dir", figures_dir)):
            check_output_dir(option, folder)  # each output folder, before anything trains (--dry-run too)
        check_report_dir(report_dir, out)
        if args.tune and args.tuning is not None:
            raise ValueError("--tune trains the learning-rate grid now and --tuning reads a recorded one: give one")
        plan = plan_reproduction(preset, out, args.text_file, args.sentiment_file, cache=not args.dry_run,
                                 sst2_dir=args.sst2_dir, tune=args.tune, tuning_file=args.tuning)
        check_runs_per_gpu_applies(args, {cfg.device for _, cfg in plan.grid})
    if args.dry_run:
        for run, cfg in plan.runs:
            print(f"{run}  steps={cfg.steps}  precision={cfg.precision}")
        print(f"{len(plan.runs)} runs into {out}")
        if plan.tuning is not None:
            later = "then each tuned setting's other seeds at its chosen learning rate" if plan.tuning.record is None \
                else f"learning rates chosen by {plan.tuning.source}"
            print(f"{len(plan.tuning.grids)} settings tune their learning rate: {later}")
        return 0
    from mixit_lab.training.rundir import RunLocked

    try:
        with stop_on_sigterm():  # SIGTERM stops the workers as Ctrl-C does (exit 143)
            manifest = reproduce(
                preset, out, report_dir, figures_dir,
                workers=args.workers, executor=executor, tracker=args.tracker, progress=not args.quiet, plan=plan,
            )
    except RunLocked as e:  # another reproduction or sweep holds the runs folder: refused before anything is written
        raise CLIError(f"mixit reproduce: error: {e}") from None
    return _exit_status(manifest)


def named(items: list[str], most: int = 3) -> str:
    """Up to `most` items, then how many more: one line however many runs failed (reproduce.json lists them all)."""
    shown = ", ".join(items[:most])
    return shown if len(items) <= most else f"{len(items)} runs ({shown} and {len(items) - most} more, in reproduce.json)"


def _exit_status(manifest: dict) -> int:
    """EXIT_FAILED, with one line naming what failed, if a run, an analysis or a figure failed; else EXIT_OK."""
    failed = []
    if manifest.get("failed_runs"):
        failed.append(f"{manifest['failed_runs']} run(s) not finished")
    if manifest.get("failed_analyses"):
        failed.append(f"analysis of {named(manifest['failed_analyses'])} failed")
    if manifest.get("failed_figures"):
        failed.append(f"figure(s) {', '.join(manifest['failed_figures'])} failed")
    if not failed:
        return EXIT_OK
    print(f"mixit reproduce: error: {'; '.join(failed)} (the rest is kept; see above, rerun to retry)",
          file=sys.stderr)
    return EXIT_FAILED
