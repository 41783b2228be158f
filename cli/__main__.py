"""`python -m mixit_lab.cli ...`: the same as `mixit ...`."""

import sys

from mixit_lab.cli.main import main

sys.exit(main())
