"""The Streamlit explorer: a frame (`explorer/app.py`) and one file per page (`explorer/pages/`).

`mixit app [DIR]` serves it; `streamlit run <this folder>/app.py -- --runs DIR` does the same by hand.
Importing this package imports nothing else (`mixit app` finds the frame's file through it).
"""
