"""Where a run came from: the command line, git commit, library versions and thread count (in run.json)."""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch


def provenance(argv: list[str] | None = None) -> dict[str, Any]:
    """Command line, git commit, library versions and torch's CPU thread count, recorded in every run directory.

    The thread count is there because it changes how CPU kernels split their sums: the same config and
    seed give the same numbers on the same machine at the same thread count, float-rounding-different
    ones at another."""
    import numpy
    import transformer_lens

    commit, dirty = _git_state(Path(__file__).resolve().parent.parent)
    try:
        from importlib.metadata import version

        ours = version("mixit-lab")
    except Exception:
        ours = None
    argv = list(sys.argv if argv is None else argv)
    return {
        "command": shlex.join(argv),
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": {
            "mixit-lab": ours,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformer_lens": getattr(transformer_lens, "__version__", None),
            "numpy": numpy.__version__,
        },
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }


def _git_state(repo: Path) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it) of the repository at `repo`; Nones outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip() or None
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()
        ) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return commit, dirty
