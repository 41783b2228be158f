"""The explorer from a source checkout: `streamlit run app.py -- --runs DIR` (what `mixit app DIR` runs).

The explorer lives in the `explorer` package (explorer/app.py, the frame; explorer/pages/, one file per page),
which ships in the wheel; this file only puts the checkout on the path and runs the frame.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # `streamlit run app.py` from a source checkout
    sys.path.insert(0, str(HERE))

from explorer.app import main  # noqa: E402

main()
