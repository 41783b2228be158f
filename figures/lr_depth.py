"""Finding 5 against the learning rate: addition accuracy of random and MixiT at each depth.

Lines: every learning rate of the tuning record at the tuning seed; points: the seeds trained at each variant's
chosen rate (mixit_lab.figures.lr_common). `python -m mixit_lab.figures.lr_depth RUNS_DIR [--out DIR]` draws it alone.
"""

import sys

from .lr_common import accuracy, figure

NAME = "lr_depth"
GROUPS = ('depth',)  # the study groups it draws (mixit_lab.training.rundir.group_of)
plot = figure(GROUPS, ('addition',), accuracy, "eval accuracy (%)", panels=("task_label", "n_layers"))

if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
