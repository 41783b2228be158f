"""MixiT Lab: which trainable parts of a Transformer do what.

One import package, `mixit_lab`, whose subpackages are the checkout's top-level folders (setuptools maps the
package onto the project root, pyproject.toml's `[tool.setuptools]`), one layer each, lowest first:

    mixit_lab.models      the Transformer, its variants and components, checkpoints
    mixit_lab.training    tasks, the training loop, run folders, sweeps
    mixit_lab.analysis    heads, attention, memorisation, signal, ablation, patching, the runs table
    mixit_lab.figures     the paper's figures from a runs folder
    mixit_lab.reproduce   presets, the reproduction pipeline and its report
    mixit_lab.explorer    the Streamlit explorer
    mixit_lab.cli         the `mixit` command line

Importing this package imports nothing else.
"""

__version__ = "0.1.0"
