"""`python -m mixit_lab.figures RUNS_DIR [--out DIR] [--only NAME ...]`: the same as `mixit figures`."""

import argparse
import sys
from pathlib import Path

from mixit_lab.figures import FIGURE_NAMES, draw_and_list

parser = argparse.ArgumentParser(prog="python -m mixit_lab.figures", description="Draw the figures of a directory of runs.",
                                 allow_abbrev=False)
parser.add_argument("runs_dir", type=Path, metavar="RUNS_DIR")
parser.add_argument("--out", type=Path, default=None, help="output directory (default: reports/<preset>/figures)")
parser.add_argument("--only", nargs="+", choices=FIGURE_NAMES, metavar="NAME", help=", ".join(FIGURE_NAMES))
args = parser.parse_args()
if not args.runs_dir.is_dir():
    parser.error(f"RUNS_DIR {args.runs_dir} is not a directory")
sys.exit(draw_and_list(args.runs_dir, args.out, args.only))
