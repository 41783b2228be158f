"""Finding 4 against the learning rate: bits stored per trainable parameter at each dataset size.

Lines: every learning rate of the tuning record at the tuning seed; points: the seeds trained at each variant's
chosen rate (mixit_lab.figures.lr_common). `python -m mixit_lab.figures.lr_memorize RUNS_DIR [--out DIR]` draws it alone.
"""

import sys

from .lr_common import bits_per_param, figure

NAME = "lr_memorize"
GROUPS = ('memorize',)  # the study groups it draws (mixit_lab.training.rundir.group_of)
plot = figure(GROUPS, ('memorize',), bits_per_param, "bits per trainable parameter")

if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
