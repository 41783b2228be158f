"""The process pools of the project. `pool_map`: spawned workers, each leading its own process group, that end
quietly with their parent, each in a slot that may give it an environment of its own (the GPU it trains on,
mixit_lab.training.placement); sweeps, reproduction and its analysis stage run on it (mixit_lab.training.sweep). `forked_map`:
forked processes that share this one's memory, for short work that only reads what is already loaded (a runs
folder's table, the figures drawn from it)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Mapping, Sequence


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
    """Torch threads for each of `workers` processes sharing the cores this process may use: the CPUs it may run on,
    at most OMP_NUM_THREADS when set (a shared machine's limit, which mixit train honours too)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if limit.isdigit() and int(limit) > 0:
        cores = min(cores, int(limit))
    return max(1, cores // max(1, workers))


class WorkerDied(RuntimeError):
    """A pool worker process ended (a signal such as the OOM killer's SIGKILL, or an exit) while running a job."""


def _worker_signals(parent: int) -> None:
    """A worker leads its own process group (the pool stops it with whatever it started; a terminal's Ctrl-C reaches
    the parent alone), dies quietly on SIGINT or SIGTERM, and ends, with its group, once `parent` is gone."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no process groups (Windows)
        os.setpgid(0, 0)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if hasattr(os, "killpg") and os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker(payload: bytes, env: dict[str, str], threads: int, conn: Any, parent: int) -> None:
    """A pool worker: set its slot's environment `env` (CUDA_VISIBLE_DEVICES, say) before anything reads it, then
    load the function (`payload`, pickled: its module, torch with it, is imported only now), run the jobs sent on
    `conn` one at a time and send back (index, ("ok"|"error", value))."""
    os.environ.update(env)
    _worker_signals(parent)
    fn = pickle.loads(payload)
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
        except OSError:  # the parent is gone (a broken pipe): nobody waits for the result
            return
        except Exception as e:  # a result or error that does not pickle
            with contextlib.suppress(OSError):
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


def _signal_group(process: Any, sig: int) -> None:
    """Send `sig` to a worker's process group (the worker and whatever it started), or to the worker alone."""
    try:
        os.killpg(process.pid, sig)
    except (AttributeError, OSError):  # no process groups here, or the worker does not lead its own yet
        with contextlib.suppress(OSError):
            os.kill(process.pid, sig)


def _stop_workers(procs: dict[Any, Any], busy: set[Any]) -> None:
    """Stop the pool: idle workers are told to leave; busy ones (an interrupted or failed map) get SIGTERM with
    everything they started; whatever is left after 5 s is killed. (A worker whose parent dies ends by itself.)"""
    for conn, process in procs.items():
        if conn not in busy:
            with contextlib.suppress(OSError):
                conn.send(None)
        conn.close()
        if conn in busy:
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + 5
    left = [p.sentinel for p in procs.values()]
    while left and time.monotonic() < deadline:
        done = mp.connection.wait(left, timeout=max(0.0, deadline - time.monotonic()))
        left = [s for s in left if s not in done]
    for process in procs.values():  # not yet reaped, so its group is still its own
        _signal_group(process, getattr(signal, "SIGKILL", signal.SIGTERM))
    for process in procs.values():
        process.join()


class _Workers:
    """The spawned workers of one pool_map: each in a slot (0..workers-1) whose environment it starts with."""

    def __init__(self, fn: Callable[[Any], Any], threads: int, worker_env: Sequence[Mapping[str, str]] | None):
        self.ctx = mp.get_context("spawn")
        self.payload = pickle.dumps(fn)  # loaded by the worker once its slot's environment is set
        self.threads, self.worker_env = threads, worker_env
        self.procs: dict[Any, Any] = {}  # the parent's end of each worker's pipe -> its process
        self.slots: dict[Any, int] = {}  # pipe -> the worker's slot

    def start(self, slot: int) -> Any:
        """A new worker in `slot` (a dead one's replacement gets its slot, and so its environment); its pipe."""
        mine, theirs = self.ctx.Pipe()
        env = dict(self.worker_env[slot]) if self.worker_env is not None else {}
        process = self.ctx.Process(target=_worker, args=(self.payload, env, self.threads, theirs, os.getpid()),
                                   daemon=True)
        process.start()
        with contextlib.suppress(OSError, AttributeError):  # the worker does it too: whichever comes first
            os.setpgid(process.pid, process.pid)
        theirs.close()
        self.procs[mine], self.slots[mine] = process, slot
        return mine

    def lost(self, conn: Any) -> tuple[Any, int]:
        """Forget the worker behind `conn` (dead): its process and its slot."""
        conn.close()
        return self.procs.pop(conn), self.slots.pop(conn)


def pool_map(fn: Callable[[Any], Any], jobs: Sequence[Any], workers: int,
             failed: Callable[[Any, Exception], Any] | None = None,
             worker_env: Sequence[Mapping[str, str]] | None = None) -> Iterator[Any]:
    """fn over jobs on `workers` spawned processes, results in completion order (inline for one).

    The one process pool of the project: sweeps, reproduction and its analysis stage run on it. A worker
    that dies while running a job (SIGKILL from the OOM killer, say) gives `failed(job, WorkerDied)` for
    that job (raised when `failed` is None) and is replaced, so the other jobs still run; an exception
    raised by fn is raised here. Leaving the iterator early (Ctrl-C, SIGTERM in the command line, an error) stops
    the workers and whatever they started; a worker whose parent dies (even by SIGKILL) ends quietly.

    worker_env: what each worker slot adds to its environment (slot s: worker_env[s]; at least `workers` of them),
    set in the worker before it imports fn's module: CUDA_VISIBLE_DEVICES, so that CUDA sees the slot's GPU alone
    (mixit_lab.training.placement). A worker's replacement starts in its slot. With it, jobs always run in spawned
    workers, one job or one worker too: only a new process starts with the environment in place.
    """
    if worker_env is not None and len(worker_env) < workers:
        raise ValueError(f"worker_env has {len(worker_env)} environments for {workers} workers; give one a worker")
    threads = threads_per_worker(workers)
    if worker_env is None and (workers <= 1 or len(jobs) <= 1):
        _set_threads(threads)
        yield from map(fn, jobs)
        return
    pool = _Workers(fn, threads, worker_env)
    todo = list(enumerate(jobs))[::-1]  # popped from the end: jobs start in the order given
    running: dict[Any, int] = {}  # pipe -> index of the job it runs
    idle = [pool.start(slot) for slot in range(min(workers, len(jobs)))]
    try:
        while todo or running:
            while idle and todo:
                conn = idle.pop()
                index, job = todo.pop()
                try:
                    conn.send((index, job))
                except OSError:  # it died while idle: replace it, the job waits for the next one
                    process, slot = pool.lost(conn)
                    process.join(timeout=5)
                    todo.append((index, job))
                    idle.append(pool.start(slot))
                    continue
                running[conn] = index
            ready = mp.connection.wait([*running, *(pool.procs[c].sentinel for c in running)])
            for conn in list(running):
                if conn not in ready and pool.procs[conn].sentinel not in ready:
                    continue
                try:
                    _, (kind, value) = conn.recv()
                except (EOFError, OSError):  # the worker died with this job
                    index = running.pop(conn)
                    process, slot = pool.lost(conn)
                    error = _death(process)
                    if todo:
                        idle.append(pool.start(slot))
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
        _stop_workers(pool.procs, set(running))


def fork_workers(requested: int | None, n_items: int, *, torch_in_children: bool = True) -> int:
    """How many forked processes `forked_map` uses: `requested` (default: one per usable core), never more than
    items, and 1 where forking is not safe: off Linux, while another Python thread runs (it could hold a lock at
    the fork), or, for work that may run torch (`torch_in_children`), once torch is imported here (a child that
    enters torch's OpenMP pool after its parent used it waits forever)."""
    unsafe = (not sys.platform.startswith("linux") or threading.active_count() > 1
              or torch_in_children and "torch" in sys.modules)
    if unsafe:
        return 1
    return max(1, min(int(requested) if requested is not None else len(os.sched_getaffinity(0)), n_items))


_FORKED: Callable[[Any], Any] | None = None  # the function forked processes run: set before they fork


def _run_forked(item: Any) -> Any:
    return _FORKED(item)


def forked_map(fn: Callable[[Any], Any], items: Sequence[Any], workers: int | None = None, *,
                torch_in_children: bool = True) -> list[Any]:
    """fn over items, results in order, on fork_workers(workers, ...) forked processes (inline for one). An item
    whose fn raised, or whose process died, has that exception as its result (the child's traceback as its
    cause). The processes start as copies of this one: what is loaded (modules, tables) is not loaded again and
    fn need not be picklable; only items and results travel. Nothing they change comes back but the results."""
    global _FORKED
    workers = fork_workers(workers, len(items), torch_in_children=torch_in_children)
    if workers <= 1:
        return [_call(fn, item) for item in items]
    from concurrent.futures import ProcessPoolExecutor

    _FORKED = fn
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            futures = [pool.submit(_run_forked, item) for item in items]
            return [_result(future) for future in futures]
    finally:
        _FORKED = None


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    try:
        return fn(item)
    except Exception as e:  # noqa: BLE001 - the item's result, as from a forked process
        return e


def _result(future: Any) -> Any:
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - fn's error, or the process's death (BrokenProcessPool)
        return e
