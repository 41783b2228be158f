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

import contextlib
import itertools
import json
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import pandas as pd
import yaml
from tqdm.auto import tqdm

from mixit_lab.models import VARIANTS, ModelConfig
from mixit_lab.models.files import as_list, load_yaml, write_text
from mixit_lab.models.grid import grid_name
from mixit_lab.models.model_extra import check_grid_models, grid_extra

from .config import TrainConfig
from .placement import RUNS_PER_GPU, check_runs_per_gpu, gpu_slots, gpus_here, slot_environments
from .pool import _set_threads, pool_map
from .resolve import resolve
from .rundir import RUNS_SUMMARY, SWEEP_FILE, is_finished, read_summary, run_lock, write_runs_table
from .settings import check_same_settings
from .tasks import TASKS, is_import_path, load_task_class, register_task
from .jobs import lost_job, plan_jobs, run_job

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
    schedule = "" if cfg.schedule == "ours" else f"-{cfg.schedule}"  # ours unnamed: names from before it existed hold
    return (
        f"{cfg.task}{params}__{variant}__d{cfg.d_model}_l{cfg.n_layers}_h{cfg.n_heads}"
        f"__lr{cfg.lr:g}{schedule}__s{cfg.seed}"
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


def task_name(spec: str) -> str:
    """A sweep's task as its name: a name in TASKS as given, an import path (package.module:Class,
    path/to/file.py:Class) imported and registered as `mixit train --task` does, so that the runs are named and
    recorded alike; ValueError (one line) naming what is allowed otherwise."""
    if spec in TASKS:
        return spec
    if is_import_path(spec):
        return register_task(load_task_class(spec)).name
    raise ValueError(f"task {spec!r} is not one of: {', '.join(TASKS)}, or the import path of your own Task class "
                     "(package.module:Class or path/to/file.py:Class)")


def tasks_from_file(entries: Any, as_names: bool = True) -> list[tuple[str, dict]]:
    """A grid file's task entries as (task, parameters); as_names: import paths registered and given as names (a
    sweep's, see task_name), else kept as written (a preset's: its run folders are named by them)."""
    named = task_name if as_names else str
    out = []
    for entry in as_list(entries):
        if isinstance(entry, str):
            out.append((named(entry), {}))
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, params), = entry.items()
            out.append((named(name), dict(params or {})))
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
                                                                cache_dir, fields_used=True)]


def expand_grid_models(
    variants: Sequence[str],
    tasks: Sequence[tuple[str, dict]],
    sizes: Sequence[dict],
    seeds: Sequence[int],
    lrs: Sequence[float],
    train_fields: dict[str, Any],
    cache_dir: Path | None = None,
    fields_used: bool = False,
) -> list[tuple[str, TrainConfig, ModelConfig]]:
    """expand_grid, with each run's ModelConfig: resolved once (building the task), so that a caller that needs
    the model's size (a cost estimate) does not build the task again. `fields_used`: refuse a model_extra field that
    no model of the grid uses (a sweep's; a preset's train block is shared by studies, some of which use it)."""
    allowed = {"variants": f"'all' or some of: {', '.join(VARIANTS)}", "tasks": f"some of: {', '.join(TASKS)}",
               "sizes": "{d_model, n_layers, n_heads} mappings", "seeds": "integers", "lrs": "numbers"}
    for axis, values in zip(allowed, (variants, tasks, sizes, seeds, lrs)):
        if not list(values):  # an empty axis would be an empty grid: nothing to train, and nothing said
            raise ValueError(f"{axis}=[] is empty; give at least one ({allowed[axis]})")
    variants = list(VARIANTS) if list(variants) == ["all"] else list(variants)
    entries = [variant_entry(v) for v in variants]
    runs: list[tuple[str, TrainConfig, ModelConfig]] = []
    unused: list[dict[str, tuple[Any, str]]] = []  # per run: the fields set that its model does not use
    for (task, params), size, (variant, grid), lr, seed in itertools.product(tasks, sizes, entries, lrs, seeds):
        fields = {**train_fields, "task": task, "task_params": params, "variant": variant, "lr": lr, "seed": seed, **size}
        fields["model_extra"] = grid_extra(train_fields.get("model_extra", {}), grid)
        cfg = TrainConfig.from_dict(fields)
        # ValueError on a bad task, size or eval size; the device is checked where the runs train (not on --dry-run)
        resolved = resolve(cfg, cache_dir, device=False)
        model = resolved.model
        unused.append({k: (getattr(model, k), users) for k, users in model.unused_fields().items()})
        if set(unused[-1]) & set(fields["model_extra"]):
            # A shared setting this model does not use (residual_scale on standard) is not recorded: the run's config
            # is then what `mixit train` with only the fields that apply gives, one model one config.
            fields["model_extra"] = {k: v for k, v in fields["model_extra"].items() if k not in unused[-1]}
            cfg = TrainConfig.from_dict(fields)
            model = resolve(cfg, task=resolved.task, device=False).model
        runs.append((run_name(cfg), cfg, model))
    check_grid_models([(name, model) for name, _, model in runs], fields_used, unused)  # duplicates, unused fields
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
        tasks = [(task_name(t), {}) for t in overrides["tasks"]]
    elif "tasks" in grid:
        tasks = tasks_from_file(grid["tasks"])
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
EXECUTORS = ("pool", "ray")


@dataclass(frozen=True)
class Executor:
    """Where the training runs of a sweep or reproduction execute.

    "pool": processes on this machine (pool_map): `workers` of them for runs on the CPU. Runs on CUDA train
    `runs_per_gpu` (default RUNS_PER_GPU) at a time on each visible GPU, each worker pinned to its GPU
    (mixit_lab.training.placement): G x runs_per_gpu workers, or at most `workers` where the user gave it
    (`workers_given`; False: `workers` is only the CPU runs' default). "ray": one Ray task per run, each declaring
    `cpus_per_run` CPUs and `gpus_per_run` GPUs (`runs_per_gpu` N instead: 1/N GPU, `run_gpus`); on the Ray cluster
    at `address` ("auto", "ray://HOST:10001"), or, without one, on a Ray started here with `workers` x
    `cpus_per_run` CPUs. With `stack` N > 1 a worker or task trains up to N runs as one wherever their settings stack
    (mixit_lab.training.jobs.plan_jobs); such a job takes one place (one worker slot, one Ray task's share). Either way the runs write the same run directories, so on a cluster the runs folder must be
    on a filesystem every node sees.
    """

    kind: str = "pool"
    workers: int = 1
    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    runs_per_gpu: int | None = None
    workers_given: bool = True
    stack: int = 1  # runs trained as one in each process where their settings allow (mixit_lab.training.stack)

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise ValueError(f"executor={self.kind!r} is not one of: {', '.join(EXECUTORS)}")
        if self.workers < 1:
            raise ValueError(f"workers={self.workers} must be >= 1")
        if isinstance(self.stack, bool) or not isinstance(self.stack, int) or self.stack < 1:
            raise ValueError(f"stack={self.stack!r} must be a whole number >= 1 (1: each run alone)")
        if self.address is not None and self.kind != "ray":
            raise ValueError(f"address={self.address!r} needs executor='ray'")
        if not self.cpus_per_run > 0 or self.gpus_per_run < 0:
            raise ValueError(f"cpus_per_run={self.cpus_per_run} must be > 0 and gpus_per_run={self.gpus_per_run} >= 0")
        if self.runs_per_gpu is not None:
            check_runs_per_gpu(self.runs_per_gpu)
            if self.gpus_per_run:
                raise ValueError(f"runs_per_gpu={self.runs_per_gpu} and gpus_per_run={self.gpus_per_run:g} both set "
                                 "a run's share of a GPU; give one (runs_per_gpu=N declares 1/N GPU a run)")

    @property
    def run_gpus(self) -> float:
        """The GPUs each Ray task declares: 1/runs_per_gpu when given, else gpus_per_run."""
        return 1 / self.runs_per_gpu if self.runs_per_gpu else self.gpus_per_run

    def gpu_slots(self, on_cuda: bool) -> list[str] | None:
        """The pool's worker slots as the GPU each trains on (mixit_lab.training.placement.gpu_slots) when the runs
        train on CUDA (`on_cuda`) and this machine has a GPU; None otherwise (Ray, runs on the CPU): `workers`
        workers as before, no GPU of their own."""
        if self.kind != "pool" or not on_cuda:
            return None
        visible = gpus_here()
        if not visible:
            return None
        return gpu_slots(visible, self.runs_per_gpu or RUNS_PER_GPU, self.workers if self.workers_given else None)

    def where(self, on_cuda: bool) -> str:
        """Where the runs train, for a log line."""
        stacked = f", up to {self.stack} runs stacked in each" if self.stack > 1 else ""
        return self._where(on_cuda) + stacked

    def _where(self, on_cuda: bool) -> str:
        if self.kind == "ray":
            gpus = f", {self.run_gpus:g} GPU(s)" if self.run_gpus else ""
            return f"as Ray tasks ({self.address or 'local Ray'}, {self.cpus_per_run:g} CPU(s){gpus} each)"
        slots = self.gpu_slots(on_cuda)
        if slots is None:
            return f"on {self.workers} worker(s)"
        gpus = sorted(set(slots), key=slots.index)
        return f"on {len(slots)} worker(s), up to {self.runs_per_gpu or RUNS_PER_GPU} a GPU on GPU(s) {', '.join(gpus)}"

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any],
            failed: Callable[[Any, Exception], Any], on_cuda: bool = False) -> Iterator[Any]:
        """fn over jobs, results in completion order; `failed(job, error)` stands in for a job whose
        process died (a Ray worker lost with its node, killed for memory, ...). `on_cuda`: the jobs train on CUDA,
        so the pool places its workers on the GPUs (gpu_slots)."""
        if self.kind == "ray":
            return ray_map(fn, jobs, self, failed)
        slots = self.gpu_slots(on_cuda)
        if slots is None:
            return pool_map(fn, jobs, self.workers, failed)
        if len(slots) == 1 or len(jobs) <= 1:  # one at a time: here, on this process's first GPU, slot 0's GPU
            return pool_map(fn, jobs, 1, failed)
        return pool_map(fn, jobs, len(slots), failed, worker_env=slot_environments(slots))


def gpu_placed(configs: Iterable[TrainConfig]) -> bool:
    """Whether the pool places these runs on this machine's GPUs (Executor.gpu_slots): some of them train on CUDA
    here by device "auto" or "cuda", and none names its GPU ("cuda:N", which a pinned worker would not see). Runs
    on the CPU alone are not placed, nor are runs on a device this machine lacks (each fails with its own error)."""
    from .resolve import resolve_device

    devices = {cfg.device for cfg in configs}
    if any(device.startswith("cuda:") for device in devices):
        return False
    for device in sorted(devices & {"auto", "cuda"}):
        try:
            if resolve_device(device).type == "cuda":
                return True
        except ValueError:
            continue
    return False


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


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """Put this process's SIGTERM and SIGINT handlers back after the block. ray.init replaces them (its Python
    handler exits with status 15, its core worker's C++ one dumps a stack and aborts), so a SIGTERM to `mixit sweep
    --executor ray` would skip the cleanup that ends the Ray tasks; with the command's handlers kept it stops them
    and exits 143 with the resume hint, as the local pool does (mixit_lab.cli.common.stop_on_sigterm)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:  # None: set outside Python, which cannot be put back
                signal.signal(sig, handler)


def ray_map(fn: Callable[[Any], Any], jobs: Sequence[Any], executor: Executor,
            failed: Callable[[Any, Exception], Any]) -> Iterator[Any]:
    """fn over jobs as Ray tasks (see Executor), results in completion order. Ray is started here, and
    stopped at the end, unless the caller already started it; leaving early ends the pending tasks (_stop)."""
    check_ray()
    import ray

    if not jobs:
        return
    started = not ray.is_initialized()
    if started:
        local = {"num_cpus": max(1, round(executor.workers * executor.cpus_per_run))} if executor.address is None else {}
        with _keep_signal_handlers():  # ray.init takes SIGTERM over (exit 15, or a C++ dump and SIGABRT)
            ray.init(address=executor.address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False, **local)
    remote = ray.remote(num_cpus=executor.cpus_per_run, num_gpus=executor.run_gpus)(_ray_task)
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
        _stop(ray, pending, started)


def _stop(ray: Any, pending: dict[Any, Any], started: bool) -> None:
    """End the tasks still pending. Ray started here: ray.shutdown() ends the job, and with it every task (the local
    cluster's workers stop, tests/test_signals.py; on a cluster joined at --address the driver's disconnect ends
    its job, whose workers Ray stops, which no test here exercises). Cancelling them one by one first races with
    the reply of a task finishing at that moment: Ray 2.60's core worker then completes a task its cancel has
    already failed and aborts the command ("Tried to complete task that was not pending", exit 1 for 130). Ray
    started by the caller stays up, so its tasks are cancelled instead."""
    if started:
        ray.shutdown()
        return
    for ref in pending:
        ray.cancel(ref, force=True)


def train_runs(runs: Sequence[Run], out: Path, executor: Executor | int, command: str,
               tracker: str | None = None) -> Iterator[dict[str, Any]]:
    """Train `runs` (in the order given) into out/<name> on `executor` (an int: that many local
    processes; runs on CUDA are placed on the GPUs, Executor.gpu_slots); yield each summary row."""
    if isinstance(executor, int):
        executor = Executor(workers=executor)
    jobs = plan_jobs(runs, out, command, tracker, executor.stack)
    on_cuda = executor.kind == "pool" and gpu_placed(cfg for _, cfg in runs)
    for rows in executor.map(run_job, jobs, lost_job, on_cuda):
        yield from rows


def run_sweep(runs: list[Run], out: str | Path, workers: int | Executor = 1, progress: bool = True,
              tracker: str | None = None) -> pd.DataFrame:
    """Train every run not yet finished on `workers` (local processes, or an Executor); write and return
    summary.csv.

    SettingsChanged (before anything trains) if a run directory holds a run with other settings; a run
    that another process is writing is left to it (status "running elsewhere"); RunLocked, naming the other
    process, if another sweep is running in `out` (nothing is written then).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):  # one sweep at a time in a folder: another is refused (RunLocked, naming its PID)
        (out / RUNS_SUMMARY).unlink(missing_ok=True)  # written at the end: none is left that says otherwise
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
