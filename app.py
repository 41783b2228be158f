"""The explorer from a source checkout: `streamlit run app.py -- --runs DIR` (what `mixit app DIR` runs).

The explorer lives in `mixit_lab.explorer` (explorer/app.py, the frame; explorer/pages/, one file per page), which
ships in the wheel; this file only runs the frame. Streamlit runs it as `__main__`; importing it does nothing.
"""

from __future__ import annotations

if __name__ == "__main__":
    from mixit_lab.explorer.app import main

    main()
