"""The explorer's pages, one file each. Streamlit runs a page file as a script (its `__name__` is
"__main__"), after the frame (explorer/app.py) has drawn the sidebar; importing one draws nothing."""
