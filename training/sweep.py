"""Sweeps: a grid of runs (variants x tasks x sizes x seeds x lrs) trained by parallel workers.

A grid comes from command-line options, a YAML/JSON file, or both (options override the file):

    variants: [standard, mixit]          # or "all"
    tasks: [{addition: {digits: 3}}, retrieval]
    sizes: [{d_model: 64, n_layers: 2, n_heads: 4}]   # or d_model/n_layers/n_heads lists (product)
    seeds: [0, 1]
    lrs: [0.001]
    train: {steps: 500, batch_size: 128}  # any TrainConfig field

Each run gets its own directory under the sweep's output directory; finished runs are skipped,
unfinished ones resume, and `summary.csv` collects one row per run.

The runs execute on an `Executor`: a pool of processes on this machine (the default), or Ray tasks on
a local Ray or a Ray cluster (`pip install 'mixit-lab[ray]'`).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import signal
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
import yaml
from tqdm.auto import tqdm

from models import VARIANTS, ModelConfig
from models.config import grid_name
from models.files import as_list, load_yaml

from .rundir import RUNS_SUMMARY, SWEEP_FILE, RunLocked, is_finished, read_summary, write_runs_table, write_text
from .tasks import TASKS
from .trainer import TrainConfig, check_same_settings, train

Run = tuple[str, TrainConfig]


def _name_part(value: Any) -> str:
    """A task parameter value as part of a directory name: file paths by their base name, lists joined by +."""
    if isinstance(value, (list, tuple)):
        return "+".join(_name_part(v) for v in value)
    text = str(value)
    if "/" in text or os.sep in text:
        text = Path(text).name
    return re.sub(r"[^A-Za-z0-9._+=-]", "-", text)


def run_name(cfg: TrainConfig) -> str:
    params = "".join(f"_{k}{_name_part(v)}" for k, v in sorted(cfg.task_params.items()))
    variant = grid_name(cfg.variant, cfg.model_extra.get("freeze", ()), cfg.model_extra.get("attention", ()))
    return (
        f"{cfg.task}{params}__{variant}__d{cfg.d_model}_l{cfg.n_layers}_h{cfg.n_heads}"
        f"__lr{cfg.lr:g}__s{cfg.seed}"
    )


GRID_KEYS = ("freeze", "attention")  # what a variant entry may set on top of its named variant


def variant_entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """A sweep's variant: a name, or {name: {freeze: ..., attention: ...}} (a grid model), as (name, settings)."""
    if isinstance(entry, str):
        name, settings = entry, {}
    elif isinstance(entry, dict) and len(entry) == 1:
        (name, settings), = entry.items()
        settings = dict(settings or {})
        unknown = sorted(set(settings) - set(GRID_KEYS))
        if unknown:
            raise ValueError(f"variant {name!r}: unknown grid keys {unknown}; allowed: {list(GRID_KEYS)}")
    else:
        raise ValueError(f"variant entry {entry!r} must be a name or {{name: {{freeze: ..., attention: ...}}}}")
    if name not in VARIANTS:
        raise ValueError(f"variant {name!r} is not one of: {', '.join(VARIANTS)}")
    return name, settings


def _tasks_from_file(entries: Any) -> list[tuple[str, dict]]:
    out = []
    for entry in as_list(entries):
        if isinstance(entry, str):
            out.append((entry, {}))
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, params), = entry.items()
            out.append((name, dict(params or {})))
        else:
            raise ValueError(f"grid: task entry {entry!r} must be a name or {{name: {{param: value}}}}")
    return out


def load_grid_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"grid file not found: {path}")
    text = path.read_text()
    try:
        grid = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot parse grid ({str(e).splitlines()[0]})") from None
    if not isinstance(grid, dict):
        raise ValueError(f"{path}: a grid file must hold a mapping (variants, tasks, sizes, seeds, lrs, train)")
    allowed = {"variants", "tasks", "sizes", "seeds", "lrs", "train"}
    unknown = sorted(set(grid) - allowed)
    if unknown:
        raise ValueError(f"{path}: unknown grid keys {unknown}; allowed: {sorted(allowed)}")
    return grid


def expand_grid(
    variants: Sequence[str],
    tasks: Sequence[tuple[str, dict]],
    sizes: Sequence[dict],
    seeds: Sequence[int],
    lrs: Sequence[float],
    train_fields: dict[str, Any],
    cache_dir: Path | None = None,
) -> list[Run]:
    """The cross product as (run name, TrainConfig), validating every value up front (text tasks are
    built once, their tokens cached in `cache_dir`)."""
    return [(name, cfg) for name, cfg, _ in expand_grid_models(variants, tasks, sizes, seeds, lrs, train_fields,
                                                                cache_dir)]


def expand_grid_models(
    variants: Sequence[str],
    tasks: Sequence[tuple[str, dict]],
    sizes: Sequence[dict],
    seeds: Sequence[int],
    lrs: Sequence[float],
    train_fields: dict[str, Any],
    cache_dir: Path | None = None,
) -> list[tuple[str, TrainConfig, ModelConfig]]:
    """expand_grid, with each run's ModelConfig: resolved once (building the task), so that a caller that needs
    the model's size (a cost estimate) does not build the task again."""
    allowed = {"variants": f"'all' or some of: {', '.join(VARIANTS)}", "tasks": f"some of: {', '.join(TASKS)}",
               "sizes": "{d_model, n_layers, n_heads} mappings", "seeds": "integers", "lrs": "numbers"}
    for axis, values in zip(allowed, (variants, tasks, sizes, seeds, lrs)):
        if not list(values):  # an empty axis would be an empty grid: nothing to train, and nothing said
            raise ValueError(f"{axis}=[] is empty; give at least one ({allowed[axis]})")
    variants = list(VARIANTS) if list(variants) == ["all"] else list(variants)
    entries = [variant_entry(v) for v in variants]
    runs: list[tuple[str, TrainConfig, ModelConfig]] = []
    for (task, params), size, (variant, grid), lr, seed in itertools.product(tasks, sizes, entries, lrs, seeds):
        fields = {**train_fields, "task": task, "task_params": params, "variant": variant, "lr": lr, "seed": seed, **size}
        if grid:
            fields["model_extra"] = {**train_fields.get("model_extra", {}), **grid}
        cfg = TrainConfig.from_dict(fields)
        model = cfg.model_config(cache_dir=cache_dir)  # raises ValueError on a bad task or size
        runs.append((run_name(cfg), cfg, model))
    names = [n for n, _, _ in runs]
    if len(set(names)) != len(names):
        raise ValueError("grid has duplicate runs")
    return runs


GRID_OVERRIDES = ("variants", "tasks", "seeds", "sizes", "lrs", "train", "task_options")


def grid_defaults() -> dict[str, list]:
    """What a grid (a sweep file, a preset's study) holds for an axis it does not give: every variant, and
    TrainConfig's size, seed and learning rate. The one set of grid defaults; TrainConfig's are the run's."""
    train = TrainConfig()
    return {"variants": ["all"], "sizes": [{"d_model": train.d_model, "n_layers": train.n_layers, "n_heads": train.n_heads}],
            "seeds": [train.seed], "lrs": [train.lr]}


def build_grid(grid_file: Path | None, overrides: dict[str, Any] | None = None,
               cache_dir: Path | None = None) -> list[Run]:
    """The runs of a grid file (if any) with `overrides` on top; what neither gives takes TrainConfig's defaults.

    overrides (each optional): variants, tasks (names), seeds, sizes ([{d_model, n_layers, n_heads}]),
    lrs, train (TrainConfig fields), task_options ({parameter: [alternatives]}: each task is expanded
    over the product of the alternatives of the parameters it takes; a list-valued parameter such
    as text_file is one alternative holding the list).
    """
    from .tasks import task_parameters

    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(GRID_OVERRIDES))
    if unknown:
        raise ValueError(f"unknown grid override(s) {unknown}; allowed: {list(GRID_OVERRIDES)}")
    grid = load_grid_file(Path(grid_file)) if grid_file else {}
    defaults = grid_defaults()

    variants = overrides.get("variants") or as_list(grid.get("variants", defaults["variants"]))
    if overrides.get("tasks"):
        for t in overrides["tasks"]:
            if t not in TASKS:
                raise ValueError(f"task {t!r} is not one of: {', '.join(TASKS)}")
        tasks = [(t, {}) for t in overrides["tasks"]]
    elif "tasks" in grid:
        tasks = _tasks_from_file(grid["tasks"])
    else:
        raise ValueError("no tasks: pass --tasks or put 'tasks' in the grid file")

    params = task_parameters()
    options = overrides.get("task_options") or {}
    for name in options:
        if name not in params or not any(t in params[name].tasks for t, _ in tasks):
            raise ValueError(f"--{name.replace('_', '-')} does not apply to any of the tasks {[t for t, _ in tasks]}")
    expanded = []
    for task, task_params in tasks:
        mine = {k: v for k, v in options.items() if task in params[k].tasks}
        for values in itertools.product(*mine.values()):
            expanded.append((task, {**task_params, **dict(zip(mine, values))}))

    if "sizes" in overrides or "sizes" not in grid:
        sizes = overrides.get("sizes") or defaults["sizes"]
    else:
        sizes = [dict(s) for s in as_list(grid["sizes"])]
    seeds = overrides.get("seeds") or as_list(grid.get("seeds", defaults["seeds"]))
    lrs = overrides.get("lrs") or as_list(grid.get("lrs", defaults["lrs"]))
    train_fields = {**grid.get("train", {}), **overrides.get("train", {})}
    if "model_extra" in grid.get("train", {}) and "model_extra" in overrides.get("train", {}):
        train_fields["model_extra"] = {**grid["train"]["model_extra"], **overrides["train"]["model_extra"]}
    try:
        return expand_grid(variants, expanded, sizes, seeds, lrs, train_fields, cache_dir)
    except ValueError as e:
        raise ValueError(f"{grid_file}: {e}" if grid_file else str(e)) from None


# --------------------------------------------------------------------------- the executor
@dataclass(frozen=True)
class TrainJob:
    """One training run for a worker process: plain values, so it pickles across `spawn`."""

    name: str  # the run's name, relative to the runs folder (e.g. "algorithmic/addition_...")
    config: dict[str, Any]  # TrainConfig.to_dict()
    run_dir: str
    command: str  # recorded in run.json as the command that trained it ("sweep", "reproduce")
    tracker: str | None = None  # training.trackers: also send the metrics to TensorBoard or W&B


def train_one(job: TrainJob) -> dict[str, Any]:
    """Worker: train one run (resuming it if it was interrupted) and return its summary row.

    A run that fails becomes a row with status "error" and the message, so one failure never
    stops the others.
    """
    cfg = TrainConfig.from_dict(job.config)
    start = time.perf_counter()
    try:
        summary = train(cfg, job.run_dir, resume=True, progress=False,
                        argv=["mixit", job.command, f"(run {job.name})"], tracker=job.tracker)
    except RunLocked as e:  # another sweep (or mixit train) is training it: leave it to that one
        summary = {"status": "running elsewhere", "message": str(e), "variant": cfg.variant, "task": cfg.task}
    except Exception as e:  # one failed run must not stop the sweep
        summary = {"status": "error", "message": f"{type(e).__name__}: {e}", "variant": cfg.variant, "task": cfg.task}
    summary.setdefault("elapsed_s", time.perf_counter() - start)
    return {"run": job.name, **summary}


def one_line_warnings() -> None:
    """Print warnings as 'warning: MESSAGE (Category)', one line a user can act on, instead of Python's
    default, which adds the file, line number and a line of the library's source. Only the format changes:
    whoever records warnings (warnings.catch_warnings, pytest.warns) still gets them."""
    def one_line(message, category, filename, lineno, line=None):  # the signature warnings expects
        return f"warning: {message} ({category.__name__})\n"

    warnings.formatwarning = one_line


def _set_threads(threads: int) -> None:
    """A worker's setup: its torch threads, and warnings on one line as in the command that started it."""
    import torch

    torch.set_num_threads(threads)
    one_line_warnings()


def threads_per_worker(workers: int) -> int:
    """Torch threads for each of `workers` processes sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // max(1, workers))


class WorkerDied(RuntimeError):
    """A pool worker process ended (a signal such as the OOM killer's SIGKILL, or an exit) while running a job."""


def _worker(fn: Callable[[Any], Any], threads: int, conn: Any) -> None:
    """A pool worker: run the jobs sent on `conn` one at a time and send back (index, ("ok"|"error", value))."""
    _set_threads(threads)
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        index, job = item
        try:
            result = ("ok", fn(job))
        except Exception as e:  # fn's own error: raised again in the parent, as multiprocessing.Pool does
            result = ("error", e)
        try:
            conn.send((index, result))
        except Exception as e:  # a result or error that does not pickle
            conn.send((index, ("error", RuntimeError(f"{type(e).__name__}: {e}"))))


def _death(process: Any) -> WorkerDied:
    process.join(timeout=5)
    code = process.exitcode
    if code is not None and code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
        if -code == signal.SIGKILL:
            how += " (out of memory?)"
    else:
        how = f"exited with code {code}"
    return WorkerDied(f"worker process {how}")


def pool_map(fn: Callable[[Any], Any], jobs: Sequence[Any], workers: int,
             failed: Callable[[Any, Exception], Any] | None = None) -> Iterator[Any]:
    """fn over jobs on `workers` spawned processes, results in completion order (inline for one).

    The one process pool of the project: sweeps, reproduction and its analysis stage run on it. A worker
    that dies while running a job (SIGKILL from the OOM killer, say) gives `failed(job, WorkerDied)` for
    that job (raised when `failed` is None) and is replaced, so the other jobs still run; an exception
    raised by fn is raised here. Leaving the iterator early (Ctrl-C, an error) stops the workers.
    """
    threads = threads_per_worker(workers)
    if workers <= 1 or len(jobs) <= 1:
        _set_threads(threads)
        yield from map(fn, jobs)
        return
    ctx = mp.get_context("spawn")
    todo = list(enumerate(jobs))[::-1]  # popped from the end: jobs start in the order given
    procs: dict[Any, Any] = {}  # the parent's end of each worker's pipe -> its process
    running: dict[Any, int] = {}  # pipe -> index of the job it runs

    def start() -> Any:
        mine, theirs = ctx.Pipe()
        process = ctx.Process(target=_worker, args=(fn, threads, theirs), daemon=True)
        process.start()
        theirs.close()
        procs[mine] = process
        return mine

    idle = [start() for _ in range(min(workers, len(jobs)))]
    try:
        while todo or running:
            while idle and todo:
                conn = idle.pop()
                index, job = todo.pop()
                try:
                    conn.send((index, job))
                except OSError:  # it died while idle: replace it, the job waits for the next one
                    procs.pop(conn).join(timeout=5)
                    conn.close()
                    todo.append((index, job))
                    idle.append(start())
                    continue
                running[conn] = index
            ready = mp.connection.wait([*running, *(procs[c].sentinel for c in running)])
            for conn in list(running):
                if conn not in ready and procs[conn].sentinel not in ready:
                    continue
                try:
                    _, (kind, value) = conn.recv()
                except (EOFError, OSError):  # the worker died with this job
                    index = running.pop(conn)
                    error = _death(procs.pop(conn))
                    conn.close()
                    if todo:
                        idle.append(start())
                    if failed is None:
                        raise error from None
                    yield failed(jobs[index], error)
                    continue
                running.pop(conn)
                idle.append(conn)
                if kind == "error":
                    raise value
                yield value
    finally:
        for conn, process in procs.items():
            try:
                conn.send(None)
            except OSError:
                pass
            conn.close()
        for process in procs.values():
            process.join(timeout=1)
            if process.is_alive():
                process.terminate()
                process.join()


EXECUTORS = ("pool", "ray")


@dataclass(frozen=True)
class Executor:
    """Where the training runs of a sweep or reproduction execute.

    "pool": `workers` processes on this machine (pool_map). "ray": one Ray task per run, each declaring
    `cpus_per_run` CPUs and `gpus_per_run` GPUs; on the Ray cluster at `address` ("auto", "ray://HOST:10001"),
    or, without one, on a Ray started here with `workers` x `cpus_per_run` CPUs. Either way the runs write
    the same run directories, so on a cluster the runs folder must be on a filesystem every node sees.
    """

    kind: str = "pool"
    workers: int = 1
    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"executor={self.kind!r} is not one of: {', '.join(EXECUTORS)}")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} must be >= 1")
        if self.address is not None and self.kind != "ray":
            raise ValueError(f"address={self.address!r} needs executor='ray'")
        if not self.cpus_per_run > 0 or self.gpus_per_run < 0:
            raise ValueError(f"cpus_per_run={self.cpus_per_run} must be > 0 and gpus_per_run={self.gpus_per_run} >= 0")

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any],
            failed: Callable[[Any, Exception], Any]) -> Iterator[Any]:
        """fn over jobs, results in completion order; `failed(job, error)` stands in for a job whose
        process died (a Ray worker lost with its node, killed for memory, ...)."""
        if self.kind == "pool":
            return pool_map(fn, jobs, self.workers, failed)
        return ray_map(fn, jobs, self, failed)


def check_ray() -> None:
    """ValueError, with the command that fixes it, if Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ValueError("executor 'ray' needs Ray, which is not installed: pip install 'mixit-lab[ray]'") from None


def check_ray_address(address: str | None, timeout: float = 3.0) -> None:
    """ValueError within `timeout` seconds if `address` ("HOST:PORT" or "ray://HOST:PORT") has nothing listening:
    ray.init would otherwise retry for minutes, printing a warning each time. "auto", "local" and None are left to
    Ray."""
    import socket

    if not address or address in ("auto", "local"):
        return
    match = re.fullmatch(r"(?:ray://)?\[?([^\]\s]+?)\]?:(\d+)", address.strip())
    if not match:
        raise ValueError(f"address={address!r} is not HOST:PORT, ray://HOST:PORT, auto or local")
    host, port = match[1], int(match[2])
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, socket.timeout) else (e.strerror or type(e).__name__)
        raise ValueError(f"address={address!r}: no Ray cluster answers there ({reason}); start one with "
                         f"`ray start --head --port {port}`, or leave --address out to start Ray here") from None


def _ray_task(fn: Callable[[Any], Any], threads: int, job: Any) -> Any:
    _set_threads(threads)
    return fn(job)


def ray_map(fn: Callable[[Any], Any], jobs: Sequence[Any], executor: Executor,
            failed: Callable[[Any, Exception], Any]) -> Iterator[Any]:
    """fn over jobs as Ray tasks (see Executor), results in completion order. Ray is started here, and
    stopped at the end, unless the caller already started it; leaving early cancels the pending tasks."""
    check_ray()
    import ray

    if not jobs:
        return
    started = not ray.is_initialized()
    if started:
        local = {"num_cpus": max(1, round(executor.workers * executor.cpus_per_run))} if executor.address is None else {}
        ray.init(address=executor.address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, **local)
    remote = ray.remote(num_cpus=executor.cpus_per_run, num_gpus=executor.gpus_per_run)(_ray_task)
    threads = max(1, int(executor.cpus_per_run))
    pending = {remote.remote(fn, threads, job): job for job in jobs}
    try:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.RayError as e:  # the task's process died; errors inside fn are fn's to report
                yield failed(job, e)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()


def _lost_run(job: TrainJob, error: Exception) -> dict[str, Any]:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return {"run": job.name, "status": "error", "message": f"{type(error).__name__}: {first}"}


def train_runs(runs: Sequence[Run], out: Path, executor: Executor | int, command: str,
               tracker: str | None = None) -> Iterator[dict[str, Any]]:
    """Train `runs` (in the order given) into out/<name> on `executor` (an int: that many local
    processes); yield each summary row."""
    if isinstance(executor, int):
        executor = Executor(workers=executor)
    jobs = [TrainJob(name, cfg.to_dict(), str(Path(out) / name), command, tracker) for name, cfg in runs]
    yield from executor.map(train_one, jobs, _lost_run)


def run_sweep(runs: list[Run], out: str | Path, workers: int | Executor = 1, progress: bool = True,
              tracker: str | None = None) -> pd.DataFrame:
    """Train every run not yet finished on `workers` (local processes, or an Executor); write and return
    summary.csv.

    SettingsChanged (before anything trains) if a run directory holds a run with other settings; a run
    that another process is writing is left to it (status "running elsewhere").
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / SWEEP_FILE, json.dumps([{"run": n, **c.to_dict()} for n, c in runs], indent=1) + "\n")
    for name, cfg in runs:  # before anything trains: every existing run must have the settings asked for
        check_same_settings(out / name, cfg)
    rows: dict[str, dict] = {}
    todo = []
    for name, cfg in runs:
        if is_finished(out / name):
            rows[name] = {"run": name, **read_summary(out / name)}
        else:
            todo.append((name, cfg))
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc="sweep", unit="run", disable=not progress)
    try:
        for row in train_runs(todo, out, workers, "sweep", tracker):
            rows[row["run"]] = row
            bar.set_postfix_str(f"{row['run'][:40]}: {row['status']}")
            bar.update(1)
    finally:
        bar.close()
    return write_runs_table([rows[name] for name, _ in runs if name in rows], out / RUNS_SUMMARY)
