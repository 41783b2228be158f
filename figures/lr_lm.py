"""Finding 2 against the learning rate: validation log-perplexity per variant.

Lines: every learning rate of the tuning record at the tuning seed; points: the seeds trained at each variant's
chosen rate (mixit_lab.figures.lr_common). `python -m mixit_lab.figures.lr_lm RUNS_DIR [--out DIR]` draws it alone.
"""

import sys

from .lr_common import log_ppl, figure

NAME = "lr_lm"
GROUPS = ('lm',)  # the study groups it draws (mixit_lab.training.rundir.group_of)
plot = figure(GROUPS, ('lm',), log_ppl, "log-perplexity", lower_is_better=True)

if __name__ == "__main__":
    from .common import run_one

    sys.exit(run_one(NAME, plot))
