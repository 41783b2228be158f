"""`mixit figures RUNS_DIR [--out DIR] [--only NAME ...]`: draw the publication figures of a runs directory.

Writes NAME.png and NAME.pdf per figure into --out (default figures/out/<preset>, the preset in
RUNS_DIR/reproduce.json, else RUNS_DIR's name) and prints one line per figure: the files written,
or why it was skipped (the directory holds nothing for it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from figures import FIGURE_NAMES

from .common import CLIError, path_arg


def register(subparsers) -> None:
    """Add the `figures` subcommand to the `mixit` parser (called by cli.main)."""
    p = subparsers.add_parser(
        "figures",
        help="draw the publication figures (PNG + PDF) of a directory of runs",
        description="Draw every figure that the runs in RUNS_DIR have data for; figures without data are skipped.",
    )
    p.set_defaults(handler=cmd_figures)
    p.add_argument("runs_dir", type=path_arg, metavar="RUNS_DIR", help="a directory of runs (e.g. from mixit reproduce)")
    p.add_argument("--out", type=path_arg, default=None, help="output directory (default: figures/out/<preset>)")
    p.add_argument("--only", nargs="+", choices=FIGURE_NAMES, metavar="NAME",
                   help=f"draw only these figures: {', '.join(FIGURE_NAMES)}")


def cmd_figures(args: argparse.Namespace) -> int:
    from figures import draw_and_list

    if not args.runs_dir.is_dir():
        raise CLIError(f"mixit figures: error: RUNS_DIR {args.runs_dir} is not a directory")
    if args.out is not None:
        _check_out_dir(args.out)
    return draw_and_list(args.runs_dir, args.out, args.only)


def _check_out_dir(out: Path) -> None:
    """--out must be a directory or a place one can be made: not an existing file, nor below one (otherwise
    every figure would fail on its own with the same error)."""
    for path in (out, *out.parents):
        if path.exists():
            if not path.is_dir():
                where = "" if path == out else f" (its parent {path} is a file)"
                raise CLIError(f"mixit figures: error: --out {out} is not a directory{where}; "
                               "give a directory, new or existing")
            return
