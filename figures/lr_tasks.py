"""Finding 3 against the learning rate: standard and MixiT on the algorithmic tasks and sentiment.

Lines: every learning rate of the tuning record at the tuning seed; points: the seeds trained at each variant's
chosen rate (mixit_lab.figures.lr_common). `python -m mixit_lab.figures.lr_tasks RUNS_DIR [--out DIR]` draws it alone.
"""

import sys

from .lr_common import accuracy, figure

NAME = "lr_tasks"
GROUPS = ('algorithmic', 'sentiment')  # the study groups it draws (mixit_lab.training.rundir.group_of)
plot = figure(GROUPS, ('addition', 'dyck', 'modadd', 'memorize', 'sentiment'), accuracy, "eval accuracy (%)")

if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
