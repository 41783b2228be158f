"""Finding 1 against the learning rate: retrieval and k-hop accuracy per variant.

Lines: every learning rate of the tuning record at the tuning seed; points: the seeds trained at each variant's
chosen rate (mixit_lab.figures.lr_common). `python -m mixit_lab.figures.lr_retrieval RUNS_DIR [--out DIR]` draws it alone.
"""

import sys

from .lr_common import accuracy, figure

NAME = "lr_retrieval"
GROUPS = ('retrieval', 'khop')  # the study groups it draws (mixit_lab.training.rundir.group_of)
plot = figure(GROUPS, ('retrieval', 'khop'), accuracy, "eval accuracy (%)")

if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
