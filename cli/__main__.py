"""`python -m cli ...`: the same as `mixit ...`."""

import sys

from cli.main import main

sys.exit(main())
