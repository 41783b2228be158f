"""`python -m figures RUNS_DIR [--out DIR] [--only NAME ...]`: the same as `mixit figures`."""

import sys

from training.cli import main

sys.exit(main(["figures", *sys.argv[1:]]))
