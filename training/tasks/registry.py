"""The task registry: `TASKS` (name -> Task class), `get_task`, `register_task` and import paths.

A task is found by its name (a built-in task, or one registered with `register_task`) or by an import
path, `package.module:Class` or `path/to/file.py:Class`, which imports the class (a module path is
looked up in the current directory first, as `python -m` does). A run records its task's import path
(`task_import_path`) in run.json, so that a new process rebuilds a task it has never seen registered
(mixit_lab.training.run.run_task).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, NamedTuple

import torch

from .algorithmic import Addition, Dyck, KHop, Memorize, ModAdd, Retrieval
from .base import Task, parameter_names
from .text import LanguageModeling, SentimentClassification

TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (Addition, Dyck, Retrieval, KHop, ModAdd, Memorize, LanguageModeling, SentimentClassification)
}
BUILTIN_TASKS: tuple[str, ...] = tuple(TASKS)  # the toolkit's own; register_task adds others to TASKS
ALGORITHMIC_TASKS: tuple[str, ...] = tuple(name for name, cls in TASKS.items() if not cls.needs_corpus)
METRICS = ("sequence", "token")
OBJECTIVES = ("next_token", "classification")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_FILE_MODULES: dict[str, Path] = {}  # module name given to a task file -> the file (see _import_file)


class TaskImportError(ValueError):
    """A task's import path cannot be imported, or names no Task class."""


class TaskNotTrusted(TaskImportError):
    """A run names task code that opening it would import, and the user has not consented (trust_task_code)."""


# --------------------------------------------------------------------------- consent to run a run's task code
# Opening a runs folder (analysing, drawing, reporting, exploring it) imports the task code a run names only with
# the user's consent: MIXIT_TRUST_TASKS holds "1" (any) or import paths, one per line. It is an environment variable
# so that the workers and the explorer's server a command starts inherit it. Code the user names (`mixit train
# --task file.py:Class`, a preset's study) is theirs to run: the commands that take it add it themselves.
TRUST_ENV = "MIXIT_TRUST_TASKS"


def trust_task_code(spec: str | None = None) -> None:
    """Consent, for this process and those it starts, to import the task code `spec` (an import path), or any
    task code a run names (None): do it only for runs folders whose code you trust."""
    listed = os.environ.get(TRUST_ENV, "")
    os.environ[TRUST_ENV] = "1" if spec is None or listed == "1" else "\n".join(filter(None, [listed, spec]))


def task_code_trusted(spec: str) -> bool:
    """Whether the user has consented to importing the task code `spec` (trust_task_code)."""
    listed = os.environ.get(TRUST_ENV, "")
    return listed == "1" or spec in listed.split("\n")


# --------------------------------------------------------------------------- registering
def register_task(cls: type[Task]) -> type[Task]:
    """Add a Task subclass to `TASKS` under `cls.name`, so that `get_task`, `TrainConfig` and `mixit train`
    know it; returns `cls`, so it works as a class decorator.

    TypeError for something not a Task subclass; ValueError (one line) for a class missing what a task
    needs (`check_task_class`) or a name taken by a built-in task or by another class.
    """
    check_task_class(cls)
    if cls.name in BUILTIN_TASKS:
        raise ValueError(f"task name {cls.name!r} is a built-in task ({task_import_path(TASKS[cls.name])}); "
                         f"give {cls.__qualname__} another name")
    old = TASKS.get(cls.name)
    if old is not None and old is not cls and task_import_path(old) != task_import_path(cls):
        raise ValueError(f"task name {cls.name!r} is already registered by {task_import_path(old)}; "
                         f"give {task_import_path(cls)} another name")
    TASKS[cls.name] = cls  # a redefinition of the same class (a reloaded module, a rerun cell) replaces it
    return cls


def check_task_class(cls: Any) -> None:
    """TypeError unless `cls` is a Task subclass; ValueError naming the first thing it lacks: a `name`
    (letters, digits, '_' and '-'), a `metric`, a one-line `layout`, an `objective` and a `_sample`."""
    if not (isinstance(cls, type) and issubclass(cls, Task)) or cls is Task:
        raise TypeError(f"{cls!r} is not a subclass of mixit_lab.training.tasks.Task")
    where = cls.__qualname__
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: name={name!r}; a task needs a class attribute `name` of letters, digits, "
                         "'_' and '-' (e.g. name = \"reverse\")")
    if getattr(cls, "metric", None) not in METRICS:
        raise ValueError(f"{where}: metric={getattr(cls, 'metric', None)!r}; allowed: {', '.join(METRICS)}")
    if not isinstance(getattr(cls, "layout", None), str):
        raise ValueError(f"{where}: a task needs a class attribute `layout`, a one-line picture of a row")
    if cls.objective not in OBJECTIVES:
        raise ValueError(f"{where}: objective={cls.objective!r}; allowed: {', '.join(OBJECTIVES)}")
    if cls._sample is Task._sample:
        raise ValueError(f"{where}: a task needs a method `_sample(self, n, g)` returning (tokens, mask)")


def check_task(task: Task) -> None:
    """ValueError naming what a built task gets wrong: its vocab (distinct strings without spaces), seq_len,
    pad_id, parameters (stored as attributes, JSON-able) or the format of two sampled rows."""
    where = task.name
    vocab, seq_len, pad = getattr(task, "vocab", None), getattr(task, "seq_len", None), getattr(task, "pad_id", None)
    if not isinstance(vocab, list) or not vocab or not all(isinstance(s, str) for s in vocab):
        raise ValueError(f"{where}: vocab={vocab!r:.60}; a task needs self.vocab, a non-empty list of token strings")
    for attr, value, lo in (("seq_len", seq_len, 2), ("pad_id", pad, 0)):
        hi = len(vocab) - 1 if attr == "pad_id" else None
        if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
            raise ValueError(f"{where}: {attr}={value!r}; allowed: an int in {lo}..{hi if hi is not None else ''}")
    missing = [p for p in parameter_names(type(task)) if not hasattr(task, p)]
    if missing:
        raise ValueError(f"{where}: store each constructor parameter as an attribute of the same name "
                         f"(self.{missing[0]} = {missing[0]}); missing: {', '.join(missing)}")
    try:
        json.dumps(task.params)
    except TypeError as e:
        raise ValueError(f"{where}: parameters {task.params!r} must be JSON values (run.json records them): {e}") from None
    if task.text_tokenizer is None:
        try:
            task.model_tokenizer()  # what every checkpoint will carry: the vocab must be typeable
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    task.sample(2, torch.Generator().manual_seed(0))  # its rows' format (check_batch, as for every batch drawn)


# --------------------------------------------------------------------------- import paths
def is_import_path(spec: str) -> bool:
    """Whether `spec` names a class by import path ('pkg.module:Class', 'path/to/file.py:Class')."""
    return isinstance(spec, str) and ":" in spec


def task_import_path(cls: type[Task]) -> str:
    """Where `cls` lives, as `get_task` and a new process take it: 'module:QualName', or 'FILE.py:QualName'
    for a class loaded from a file or defined in a script run as __main__."""
    module = cls.__module__
    if module in _FILE_MODULES:
        return f"{_FILE_MODULES[module]}:{cls.__qualname__}"
    main_file = getattr(sys.modules.get(module), "__file__", None)
    if module == "__main__" and main_file:
        return f"{Path(main_file).resolve()}:{cls.__qualname__}"
    return f"{module}:{cls.__qualname__}"


def task_source_file(cls: type[Task]) -> Path | None:
    """The Python file a task class of one's own was loaded from (None for a built-in task or one without a file)."""
    if cls.name in BUILTIN_TASKS and TASKS.get(cls.name) is cls:
        return None
    module = cls.__module__
    file = _FILE_MODULES.get(module) or getattr(sys.modules.get(module), "__file__", None)
    return Path(file).resolve() if file else None


def task_record(task: Task, eval_samples: int | None, run_dir: Path) -> dict[str, Any]:
    """run.json's task section: name, the class's import path (a new process rebuilds a task of one's own from it),
    every parameter, the fingerprints of its held-out rows and (text) data, and for a task of one's own its source
    file relative to the run and the file's SHA-256, so that a runs folder moved to another machine still names
    its task (mixit_lab.training.run_task looks there when the import path does not exist)."""
    record = {"name": task.name, "import_path": task_import_path(type(task)), **task.params,
              "eval_fingerprint": task.eval_fingerprint(eval_samples)}
    if task.data_fingerprint is not None:
        record["data_fingerprint"] = task.data_fingerprint
    source = task_source_file(type(task))
    if source is not None and source.is_file():
        record["source_file"] = os.path.relpath(source, Path(run_dir).resolve())
        record["source_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    return record


def load_task_class(spec: str) -> type[Task]:
    """The Task class at import path `spec` ('pkg.module:Class' or 'path/to/file.py:Class'); the module is
    imported with the current directory on sys.path. TaskImportError (one line, naming the module) else."""
    module_name, _, qualname = spec.rpartition(":")
    if not module_name or not qualname:
        raise TaskImportError(f"task {spec!r} is not an import path; expected package.module:Class or "
                              "path/to/file.py:Class")
    is_file = module_name.endswith(".py") or "/" in module_name or os.sep in module_name
    module = _import_file(module_name) if is_file else _import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise TaskImportError(f"task {spec!r}: module {module_name!r} has no {qualname!r}")
        obj = getattr(obj, part)
    try:
        check_task_class(obj)
    except TypeError:
        kind = "the base class itself" if obj is Task else f"a {type(obj).__name__}"
        raise TaskImportError(f"task {spec!r} names {kind}, not a subclass of mixit_lab.training.tasks.Task") from None
    return obj


def _import_module(name: str) -> types.ModuleType:
    """Import module `name`, the current directory first on sys.path (as `python -m` has it)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as e:  # the module's own errors (and a sys.exit in it) too: one line, naming it
        raise TaskImportError(f"cannot import task module {name!r} ({type(e).__name__}: {e}); make it importable "
                              f"from the current directory ({cwd}) or install it, or give path/to/file.py:Class") from None


def _import_file(path: str) -> types.ModuleType:
    """Import a Python file as a module named after its resolved path (re-importing it returns the same module)."""
    file = Path(path).expanduser().resolve()
    name = "mixit_task_file_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    if not file.is_file():
        raise TaskImportError(f"cannot import task file {path!r}: no such file")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and annotations look it up
    _FILE_MODULES[name] = file
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # a sys.exit(0) in the file must not end the command as if it had worked
        del sys.modules[name], _FILE_MODULES[name]
        raise TaskImportError(f"cannot import task file {path!r} ({type(e).__name__}: {e})") from None
    return module


# --------------------------------------------------------------------------- building tasks
def task_class(spec: str) -> type[Task]:
    """The class of a task name (`TASKS`) or import path; ValueError naming what is allowed."""
    if isinstance(spec, str) and spec in TASKS:
        return TASKS[spec]
    if is_import_path(spec):
        return load_task_class(spec)
    raise ValueError(f"unknown task {spec!r}; allowed: {', '.join(sorted(TASKS))}, or the import path of your "
                     "own Task class (package.module:Class or path/to/file.py:Class)")


def get_task(name: str, *, cache_dir: str | Path | None = None, **params: Any) -> Task:
    """Build a task by name or import path; unknown names/parameters and bad values raise a one-line ValueError.

    Args:
        name: one of `TASKS` (`addition`, `dyck`, `retrieval`, `khop`, `modadd`, `memorize`, `lm`,
            `sentiment`, and tasks added by `register_task`), or the import path of a Task class
            (`package.module:Class`, `path/to/file.py:Class`).
        cache_dir: where a task built from a corpus caches its tokenizer and token arrays (ignored by
            the others; None caches nothing).
        **params: the task's parameters (e.g. `digits=3` for addition); the task's defaults otherwise.

    Returns:
        The `Task`: `task.sample(n)` gives `(tokens int64 [n, seq_len], mask bool [n, seq_len])`,
        `task.eval_set()` the fixed held-out rows.
    """
    cls = task_class(name)
    allowed = parameter_names(cls)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"{cls.name}: unknown parameter(s) {', '.join(map(repr, unknown))}; "
                         f"allowed: {', '.join(allowed) or 'none'}")
    if cls.name in BUILTIN_TASKS and TASKS[cls.name] is cls:
        return cls(**params, cache_dir=cache_dir) if cls.needs_corpus else cls(**params)
    try:  # a researcher's task: its mistakes are one line too, naming it
        task = cls(**params, cache_dir=cache_dir) if cls.needs_corpus else cls(**params)
        check_task(task)
    except TypeError as e:
        raise ValueError(f"{cls.name}: {e}") from None
    except ValueError:
        raise
    except Exception as e:  # its own code failed (building it, or drawing its first rows)
        raise ValueError(f"{cls.name}: {type(e).__name__} when built: {e}") from None
    return task


def resolved_task_params(task_name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """A run's task parameters with the task's constructor defaults filled in (a run records only the
    parameters it was given); a given None leaves the default. A task not in `TASKS`: `params` as given."""
    given = {k: v for k, v in (params or {}).items() if v is not None}
    cls = TASKS.get(task_name)
    if cls is None:
        return dict(params or {})
    signature = inspect.signature(cls.__init__).parameters
    defaults = {name: signature[name].default for name in parameter_names(cls)
                if signature[name].default is not inspect.Parameter.empty}
    return {**defaults, **given}


# --------------------------------------------------------------------------- parameters as options
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
