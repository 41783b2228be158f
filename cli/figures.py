"""`mixit figures RUNS_DIR [--out DIR] [--only NAME ...]`: draw the publication figures of a runs directory.

Writes NAME.png and NAME.pdf per figure into --out (default reports/<preset>/figures, the preset in
RUNS_DIR/reproduce.json, else RUNS_DIR's name) and prints one line per figure: the files written,
or why it was skipped (the directory holds nothing for it).
"""

from __future__ import annotations

import argparse
import sys

from mixit_lab.figures import FIGURE_NAMES

from .common import EXIT_FAILED, EXIT_OK, CLIError, add_trust_option, check_output_dir, input_errors, path_arg


def register(subparsers) -> None:
    """Add the `figures` subcommand to the `mixit` parser (called by mixit_lab.cli.main)."""
    p = subparsers.add_parser(
        "figures",
        help="draw the publication figures (PNG + PDF) of a directory of runs",
        description="Draw every figure that the runs in RUNS_DIR have data for; figures without data are skipped.",
    )
    p.set_defaults(handler=cmd_figures)
    add_trust_option(p)
    p.add_argument("runs_dir", type=path_arg, metavar="RUNS_DIR", help="a directory of runs (e.g. from mixit reproduce)")
    p.add_argument("--out", type=path_arg, default=None, help="output directory (default: reports/<preset>/figures)")
    p.add_argument("--only", nargs="+", choices=FIGURE_NAMES, metavar="NAME",
                   help=f"draw only these figures: {', '.join(FIGURE_NAMES)}")


def cmd_figures(args: argparse.Namespace) -> int:
    """Draw and list the figures; exit 1 if one failed or `--only` drew nothing, 2 if they could not be written."""
    from mixit_lab.figures import draw_and_show
    from mixit_lab.figures.common import default_out_dir

    if not args.runs_dir.is_dir():
        raise CLIError(f"mixit figures: error: RUNS_DIR {args.runs_dir} is not a directory")
    with input_errors("figures"):  # before anything is drawn: every figure would fail the same way
        check_output_dir("--out", args.out if args.out is not None else default_out_dir(args.runs_dir))
    out, results, failures = draw_and_show(args.runs_dir, args.out, args.only)
    if failures and all(isinstance(e, OSError) for _, e in failures):
        raise failures[0][1]  # the folder cannot take files (full, read-only): one line naming the file, exit 2
    if failures:
        return EXIT_FAILED
    if args.only and not any(isinstance(r, list) for r in results.values()):
        why = "; ".join(f"{name}: {' '.join(str(reason).split())}" for name, reason in results.items())
        print(f"mixit figures: error: nothing drawn into {out}, {args.runs_dir} has no data for --only "
              f"{' '.join(args.only)} ({why})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
