"""`mixit figures RUNS_DIR [--out DIR] [--only NAME ...]`: draw the publication figures of a runs directory.

Writes NAME.png and NAME.pdf per figure into --out (default figures/out/<preset>, the preset in
RUNS_DIR/reproduce.json, else RUNS_DIR's name) and prints one line per figure: the files written,
or why it was skipped (the directory holds nothing for it).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from . import FIGURE_NAMES


def register(subparsers) -> None:
    """Add the `figures` subcommand to the `mixit` parser (called by training.cli)."""
    p = subparsers.add_parser(
        "figures",
        help="draw the publication figures (PNG + PDF) of a directory of runs",
        description="Draw every figure that the runs in RUNS_DIR have data for; figures without data are skipped.",
    )
    p.set_defaults(handler=cmd_figures)
    p.add_argument("runs_dir", type=Path, metavar="RUNS_DIR", help="a directory of runs (e.g. from mixit reproduce)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: figures/out/<preset>)")
    p.add_argument("--only", nargs="+", choices=FIGURE_NAMES, metavar="NAME",
                   help=f"draw only these figures: {', '.join(FIGURE_NAMES)}")


def cmd_figures(args: argparse.Namespace) -> int:
    from training.cli import CLIError

    from . import FigureError, make_all
    from .common import default_out_dir

    if not args.runs_dir.is_dir():
        raise CLIError(f"mixit figures: error: RUNS_DIR {args.runs_dir} is not a directory")
    out = args.out if args.out is not None else default_out_dir(args.runs_dir)
    failures: list = []
    try:
        results = make_all(args.runs_dir, out, only=args.only)
    except FigureError as e:  # a bug or a malformed file: show the others, then each failure in full
        results, failures = e.results, e.failures
    shown = {**results, **{name: None for name, _ in failures}}
    width = max(len(name) for name in shown)
    for name in (n for n in FIGURE_NAMES if n in shown):
        result = shown[name]
        if isinstance(result, list):
            line = ", ".join(str(p) for p in result)
        elif result is None:
            error = dict(failures)[name]
            line = f"FAILED: {type(error).__name__}: {error}"
        else:
            line = f"skipped: {result}"
        print(f"{name:<{width}}  {line}")
    drawn = sum(isinstance(r, list) for r in results.values())
    print(f"{drawn} of {len(shown)} figures written to {out}")
    for name, error in failures:
        print(f"--- {name}:", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
    return 1 if failures else 0
