"""Tasks: one registry (`TASKS`) of the algorithmic tasks of the paper and the text tasks.

    from training.tasks import TASKS, get_task
    task = get_task("addition", digits=10)
    tokens, mask = task.sample(1000, generator=torch.Generator().manual_seed(0))
    TASKS["sentiment"].needs_corpus, TASKS["sentiment"].is_classifier()   # facts of a task: ask its class

    base.py         Task, the batch format, TrainStream (training batches that never hold an eval row)
    algorithmic.py  addition, dyck, retrieval, khop, modadd, memorize
    text.py         lm, sentiment, over corpora.py (local files), hub.py (Hugging Face datasets),
                    bpe.py (tokenizers) and cache.py (the token cache)

A new task is a subclass of Task in its own module (or algorithmic.py) and one entry in TASKS below.
"""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

from .algorithmic import Addition, Dyck, KHop, Memorize, ModAdd, Retrieval
from .base import DEFAULT_EVAL_SIZE, EVAL_SEED, Batch, Task, TrainStream, parameter_names, row_hash
from .text import LanguageModeling, SentimentClassification

__all__ = [
    "ALGORITHMIC_TASKS", "Addition", "Batch", "DEFAULT_EVAL_SIZE", "Dyck", "EVAL_SEED", "KHop", "LanguageModeling",
    "Memorize", "ModAdd", "Retrieval", "SentimentClassification", "TASKS", "Task", "TaskOption", "TrainStream",
    "parameter_names",
    "get_task", "row_hash", "task_parameters",
]


# --------------------------------------------------------------------------- registry
TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (Addition, Dyck, Retrieval, KHop, ModAdd, Memorize, LanguageModeling, SentimentClassification)
}
ALGORITHMIC_TASKS: tuple[str, ...] = tuple(name for name, cls in TASKS.items() if not cls.needs_corpus)


def get_task(name: str, *, cache_dir: str | Path | None = None, **params: Any) -> Task:
    """Build a task by name; unknown names/parameters and bad values raise a one-line ValueError.

    Args:
        name: one of `TASKS` (`addition`, `dyck`, `retrieval`, `khop`, `modadd`, `memorize`, `lm`,
            `sentiment`).
        cache_dir: where a task built from a corpus caches its tokenizer and token arrays (ignored by
            the others; None caches nothing).
        **params: the task's parameters (e.g. `digits=3` for addition); the task's defaults otherwise.

    Returns:
        The `Task`: `task.sample(n)` gives `(tokens int64 [n, seq_len], mask bool [n, seq_len])`,
        `task.eval_set()` the fixed held-out rows.
    """
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}")
    cls = TASKS[name]
    allowed = parameter_names(cls)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown parameter(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")
    return cls(**params, cache_dir=cache_dir) if cls.needs_corpus else cls(**params)


class TaskOption(NamedTuple):
    """A task constructor parameter, as the command line and sweeps see it."""

    type: type  # of one value
    tasks: list[str]  # the tasks that take it
    many: bool  # a list-valued parameter (e.g. text_file)


def _option_type(param: inspect.Parameter, hints: dict[str, Any]) -> tuple[type, bool]:
    """(value type, is a list) of a constructor parameter, from its annotation (else its default)."""
    hint = hints.get(param.name)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None -> X
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) in (list, tuple):
        return (typing.get_args(hint) or (str,))[0], True
    if isinstance(hint, type):
        return hint, False
    return (type(param.default) if param.default not in (None, inspect.Parameter.empty) else int), False


def task_parameters() -> dict[str, TaskOption]:
    """Every task constructor parameter: name -> TaskOption(type, tasks that take it, many)."""
    params: dict[str, TaskOption] = {}
    for task_name, cls in TASKS.items():
        hints = typing.get_type_hints(cls.__init__)
        signature = inspect.signature(cls.__init__).parameters
        for p in (signature[name] for name in parameter_names(cls)):
            kind, many = _option_type(p, hints)
            params.setdefault(p.name, TaskOption(kind, [], many)).tasks.append(task_name)
    return params
