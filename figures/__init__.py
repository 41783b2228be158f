"""Publication figures of a reproduction: one module per figure, drawn from a directory of runs.

    from mixit_lab.analysis.runs import RunSet
    from mixit_lab.figures import FIGURES, make_all
    results = make_all("runs/quick", "reports/quick/figures")     # name -> [png, pdf] or "skip reason"
    fig = FIGURES["retrieval_pairs"].plot(RunSet("runs/quick"))  # a matplotlib Figure

Each module (`python -m mixit_lab.figures.<name> RUNS_DIR [--out DIR]` runs one alone) exposes
`plot(runs: RunSet) -> Figure`, raising `mixit_lab.figures.common.NoData` when the runs have nothing for it, and
`GROUPS`, the study groups whose runs it draws (empty for a figure of the runs folder's own data, such
as signal/signal.csv); `figures_for_group` answers from them. A RunSet (mixit_lab.analysis.runs) is the runs
folder, its runs and their table, each read once: `make_all` builds one and every figure draws from it (`plot`
also takes a folder, read into a RunSet of its own); a figure reads a run's files through the row's `record`. Figures only read run
directories and their analyses; they never train. Looks (variant names, colours, fonts, sizes) come
from mixit_lab.figures.style.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from mixit_lab.analysis.runs import RunSet

from .common import NoData, runs_frame

if TYPE_CHECKING:
    import pandas as pd

FIGURE_NAMES = (
    "task_accuracy",
    "retrieval_pairs",
    "attention_maps",
    "induction_heads",
    "memorization",
    "lm_curves",
    "signal_depth",
    "speed",
    "depth_accuracy",
    "dynamics",
    "beyond",
    "components",
    "scale_dyck",
    "scale_sentiment",
    "scale_memorize",
    "scale_depth",
    "lr_retrieval",
    "lr_lm",
    "lr_tasks",
    "lr_memorize",
    "lr_depth",
)


def __getattr__(name: str):
    """`FIGURES` (name -> figure module) is built on first use, so that importing the package (as the
    `mixit` command line does) does not import matplotlib and every figure module."""
    if name == "FIGURES":
        figures = {n: importlib.import_module(f"{__name__}.{n}") for n in FIGURE_NAMES}
        globals()["FIGURES"] = figures
        return figures
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def figures_for_group(group: str | None = None) -> list[str]:
    """Names of the figures that draw runs of `group` (mixit_lab.training.rundir.group_of a study), in FIGURE_NAMES
    order; with None, every figure."""
    modules = __getattr__("FIGURES") if "FIGURES" not in globals() else globals()["FIGURES"]
    return [n for n in FIGURE_NAMES if group is None or group in modules[n].GROUPS]


class FigureError(RuntimeError):
    """One or more figures failed for a reason other than missing data (a bug, or a malformed file).

    `results` holds what the other figures gave (as make_all returns it), `failures` the
    (name, exception) of each failed figure.
    """

    def __init__(self, results: dict[str, list[Path] | str], failures: list[tuple[str, BaseException]]):
        detail = "; ".join(f"{name}: {type(e).__name__}: {e}" for name, e in failures)
        super().__init__(f"{len(failures)} figure(s) failed: {detail}")
        self.results = results
        self.failures = failures


# Drawn first when several processes draw: the figures that read files of every run (or load a checkpoint), so
# that the processes finish together.
DRAW_FIRST = ("attention_maps", "components", "memorization", "induction_heads", "lm_curves", "dynamics")


def make_all(
    runs_dir: str | Path, out_dir: str | Path, only: Iterable[str] | None = None, *, runs: pd.DataFrame | None = None,
    workers: int | None = None,
) -> dict[str, list[Path] | str]:
    """Draw every figure (or those named in `only`) from runs_dir into out_dir as PNG and PDF.

    The runs below runs_dir are read once, for every figure; `runs` is that table
    (mixit_lab.analysis.runs.load_runs(runs_dir)) when the caller already has it. Returns name -> the files written,
    or the one-line reason it was skipped (NoData). Any other error in a figure does not stop the others:
    they are all drawn first, then a FigureError names the figures that failed (the first error is its cause).

    `workers` processes draw side by side (mixit_lab.training.pool.forked_map; default: one per usable core where
    forking is safe, else 1); a figure comes out the same whichever process draws it.
    """
    from mixit_lab.training.pool import forked_map

    names = list(FIGURE_NAMES if only is None else only)
    unknown = [n for n in names if n not in FIGURE_NAMES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURE_NAMES)}")
    shared = RunSet(runs_dir, runs)
    modules = [importlib.import_module(f"{__name__}.{name}") for name in names]  # here once, not in each process
    if any(module.GROUPS for module in modules):  # some figure draws runs: the table is read here once too
        try:
            runs_frame(shared)
        except NoData:
            pass  # each figure says so itself
    order = sorted(names, key=lambda n: n not in DRAW_FIRST)
    outcomes = dict(zip(order, forked_map(functools.partial(_draw, runs=shared, out_dir=Path(out_dir)), order,
                                          workers)))
    results: dict[str, list[Path] | str] = {}
    failures: list[tuple[str, BaseException]] = []
    for name in names:
        if isinstance(outcomes[name], BaseException):
            failures.append((name, outcomes[name]))
        else:
            results[name] = outcomes[name]
    if failures:
        raise FigureError(results, failures) from failures[0][1]
    return results


def _draw(name: str, runs: RunSet, out_dir: Path) -> list[Path] | str:
    """One figure: the files written, or the reason it was skipped (NoData); any other error is raised."""
    from .style import save

    try:
        return save(importlib.import_module(f"{__name__}.{name}").plot(runs), out_dir, name)
    except NoData as e:
        return str(e)


def draw_and_show(runs_dir: Path, out: Path | None = None, only: Sequence[str] | None = None
                  ) -> tuple[Path, dict[str, list[Path] | str], list[tuple[str, BaseException]]]:
    """Draw the figures (all, or `only`) of runs_dir into out (default: default_out_dir) and print one line
    per figure: the files written, why it was skipped, or FAILED. Returns (out, make_all's results, failures).

    A figure that failed to be written (an OSError: a full or read-only disk) is its one line, naming the file
    and the cause; any other failure's traceback goes to stderr (a bug or a malformed file)."""
    import traceback

    from .common import default_out_dir

    out = out if out is not None else default_out_dir(runs_dir)
    failures: list[tuple[str, BaseException]] = []
    try:
        results = make_all(runs_dir, out, only=only)
    except FigureError as e:  # show the others, then each failure
        results, failures = e.results, e.failures
    shown = {**results, **{name: None for name, _ in failures}}
    width = max(len(name) for name in shown)
    for name in (n for n in FIGURE_NAMES if n in shown):
        result = shown[name]
        if isinstance(result, list):
            line = ", ".join(str(p) for p in result)
        elif result is None:
            line = f"FAILED: {_failure_line(dict(failures)[name])}"
        else:
            line = f"skipped: {result}"
        print(f"{name:<{width}}  {line}")
    drawn = sum(isinstance(r, list) for r in results.values())
    print(f"{drawn} of {len(shown)} figures written to {out}")
    for name, error in failures:
        if not isinstance(error, OSError):
            print(f"--- {name}:", file=sys.stderr)
            traceback.print_exception(error, file=sys.stderr)
    return out, results, failures


def _failure_line(error: BaseException) -> str:
    """A failed figure in one line: for an OSError the file and the cause, else the exception and its message."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"cannot write {error.filename}: {error.strerror}"
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def draw_and_list(runs_dir: Path, out: Path | None = None, only: Sequence[str] | None = None) -> int:
    """draw_and_show, then 1 if a figure failed, else 0 (what `python -m mixit_lab.figures` exits with)."""
    _, _, failures = draw_and_show(runs_dir, out, only)
    return 1 if failures else 0


__all__ = ["FIGURES", "FIGURE_NAMES", "FigureError", "NoData", "draw_and_list", "draw_and_show",
           "figures_for_group", "make_all"]
