"""Several runs per GPU (mixit_lab.training.placement, `--runs-per-gpu`): which GPU each pool worker slot trains on,
the per-worker environment pool_map gives its spawned workers (kept by a dead worker's replacement), what the
Executor hands the pool and Ray, and runs on the CPU placed as before."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from mixit_lab.training.config import TrainConfig
from mixit_lab.training.placement import RUNS_PER_GPU, gpu_slots, slot_environments, visible_gpus


# --------------------------------------------------------------------------- the placement itself
def test_slot_s_trains_on_gpu_s_mod_g_and_no_gpu_gets_more_than_n():
    assert gpu_slots(["0", "1"], 2) == ["0", "1", "0", "1"]  # --workers not given: G x N
    assert gpu_slots(["0", "1", "2"], 4, 5) == ["0", "1", "2", "0", "1"]  # a given --workers caps it
    assert gpu_slots(["0", "1"], 2, 16) == ["0", "1", "0", "1"]  # ... and never lifts it past G x N
    assert gpu_slots(["0"], 3) == ["0", "0", "0"]
    slots = gpu_slots([str(i) for i in range(8)], RUNS_PER_GPU, 13)
    assert max(slots.count(g) for g in set(slots)) <= RUNS_PER_GPU and len(set(slots)) == 8


def test_the_parents_cuda_visible_devices_list_is_what_the_slots_name():
    """Slots map onto the parent's own CUDA_VISIBLE_DEVICES entries (indices, UUIDs), as many as CUDA counts."""
    assert visible_gpus(None, 3) == ["0", "1", "2"]
    assert visible_gpus("3, 5", 2) == ["3", "5"]
    assert visible_gpus("GPU-aa,GPU-bb,7", 2) == ["GPU-aa", "GPU-bb"]  # CUDA stopped at the first it cannot use
    assert visible_gpus("", 0) == [] and visible_gpus(None, 0) == []
    assert gpu_slots(visible_gpus("3,5", 2), 2) == ["3", "5", "3", "5"]
    assert slot_environments(["3", "5"]) == [{"CUDA_VISIBLE_DEVICES": "3"}, {"CUDA_VISIBLE_DEVICES": "5"}]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_a_bad_runs_per_gpu_is_one_line_naming_it(bad):
    with pytest.raises(ValueError, match=f"runs_per_gpu={bad!r} is not allowed: give a whole number >= 1"):
        gpu_slots(["0"], bad)
    with pytest.raises(ValueError, match="no GPU to place runs on"):
        gpu_slots([], 2)


# --------------------------------------------------------------------------- the Executor
def test_the_executor_checks_runs_per_gpu_and_refuses_it_with_gpus_per_run():
    from mixit_lab.training.sweep import Executor

    with pytest.raises(ValueError, match="runs_per_gpu=0 is not allowed"):
        Executor(runs_per_gpu=0)
    with pytest.raises(ValueError, match=r"runs_per_gpu=2 and gpus_per_run=0.5 both set a run's share of a GPU"):
        Executor("ray", runs_per_gpu=2, gpus_per_run=0.5)
    assert Executor("ray", runs_per_gpu=4).run_gpus == 0.25
    assert Executor("ray", gpus_per_run=1.0).run_gpus == 1.0 and Executor("ray").run_gpus == 0


class _Recorded:
    """pool_map, recorded: the workers and worker_env it is asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, object]] = []

    def __call__(self, fn, jobs, workers, failed=None, worker_env=None):
        self.calls.append((workers, worker_env))
        return iter([fn(job) for job in jobs])


@pytest.mark.parametrize("given, runs_per_gpu, expected", [
    (False, None, ["3", "5"] * RUNS_PER_GPU),  # --workers not given: G x the default
    (False, 2, ["3", "5", "3", "5"]),
    (True, 3, ["3", "5", "3"]),  # a given --workers caps G x N
    (True, None, ["3", "5", "3"]),  # the default N: 8 slots, 3 asked for
])
def test_the_pool_pins_each_worker_of_runs_on_cuda_to_its_gpu(monkeypatch, given, runs_per_gpu, expected):
    from mixit_lab.training import sweep

    monkeypatch.setattr(sweep, "gpus_here", lambda: ["3", "5"])  # a machine with two GPUs, as the parent lists them
    pool = _Recorded()
    monkeypatch.setattr(sweep, "pool_map", pool)
    executor = sweep.Executor(workers=3, runs_per_gpu=runs_per_gpu, workers_given=given)
    assert list(executor.map(str, list(range(9)), None, on_cuda=True)) == [str(i) for i in range(9)]
    assert pool.calls == [(len(expected), slot_environments(expected))]
    assert f"on {len(expected)} worker(s)" in executor.where(True) and "GPU(s) 3, 5" in executor.where(True)
    pool.calls.clear()  # one job: here, on this process's first GPU (slot 0's), as before
    list(executor.map(str, [0], None, on_cuda=True))
    assert pool.calls == [(1, None)]


def test_runs_on_the_cpu_are_placed_as_before(monkeypatch):
    """No worker environment and `workers` processes, whatever --runs-per-gpu and the machine's GPUs."""
    from mixit_lab.training import sweep

    monkeypatch.setattr(sweep, "gpus_here", lambda: ["0", "1"])
    pool = _Recorded()
    monkeypatch.setattr(sweep, "pool_map", pool)
    cpu = [("a", TrainConfig(task="addition", device="cpu")), ("b", TrainConfig(task="addition", device="cpu"))]
    assert not sweep.gpu_placed(cfg for _, cfg in cpu)
    named = [("a", TrainConfig(task="addition", device="cuda:1"))]  # names its GPU: a pinned worker would not see it
    assert not sweep.gpu_placed(cfg for _, cfg in named)
    list(sweep.Executor(workers=3, workers_given=False).map(str, list(range(5)), None, on_cuda=False))
    assert pool.calls == [(3, None)]


def test_ray_tasks_declare_one_nth_of_a_gpu(monkeypatch):
    """--runs-per-gpu N on Ray: each task asks for 1/N GPU (a stand-in for Ray records what it is given)."""
    import sys
    import types

    from mixit_lab.training import sweep

    asked = {}
    ray = types.ModuleType("ray")
    ray.exceptions = types.SimpleNamespace(RayError=RuntimeError)
    ray.is_initialized = lambda: True  # the caller's Ray: nothing started or stopped here

    class Remote:
        def __init__(self, fn):
            self.fn = fn

        def remote(self, *args):
            return self.fn(*args)  # the reference is the result itself

    def remote(**resources):
        asked.update(resources)
        return Remote

    ray.remote, ray.wait = remote, lambda refs, num_returns: (refs[:1], refs[1:])
    ray.get, ray.cancel = (lambda ref: ref), (lambda ref, force: None)
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setattr(sweep, "_set_threads", lambda threads: None)  # the task's threads: not this process's
    got = list(sweep.Executor("ray", runs_per_gpu=4).map(lambda job: job * 2, [1, 2], None))
    assert sorted(got) == [2, 4] and asked == {"num_cpus": 1.0, "num_gpus": 0.25}


# --------------------------------------------------------------------------- the environment reaches the workers
def report_slot(job: int) -> tuple[int, str | None]:
    """A job: its worker's PID and the slot variable it sees."""
    return os.getpid(), os.environ.get("MIXIT_TEST_SLOT")


@pytest.mark.slow  # worker processes
def test_each_spawned_worker_sees_its_slots_environment():
    from mixit_lab.training.pool import pool_map

    env = [{"MIXIT_TEST_SLOT": "a"}, {"MIXIT_TEST_SLOT": "b"}]
    got = list(pool_map(report_slot, [0, 1, 2, 3], 2, worker_env=env))
    seen = {}
    for pid, slot in got:
        seen.setdefault(pid, set()).add(slot)
    assert sorted(v for values in seen.values() for v in values) == ["a", "b"]  # each worker one slot, both used
    assert "MIXIT_TEST_SLOT" not in os.environ  # set in the workers, never here
    [(pid, slot)] = list(pool_map(report_slot, [0], 1, worker_env=env[1:]))  # one job: still a worker, with its env
    assert slot == "b" and pid != os.getpid()
    with pytest.raises(ValueError, match="worker_env has 1 environments for 2 workers"):
        list(pool_map(report_slot, [0, 1], 2, worker_env=env[:1]))


def die_once_in_slot_b(folder: str) -> tuple[int, str]:
    """Slot b's first worker kills itself (as the OOM killer would) and its replacement says it ran; slot a's job
    waits for that, so the replacement is what runs the next job. Returns (PID, slot)."""
    slot, died, replaced = os.environ["MIXIT_TEST_SLOT"], Path(folder) / "died", Path(folder) / "replaced"
    if slot == "b" and not died.exists():
        died.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    if slot == "b":
        replaced.write_text(str(os.getpid()))
    else:
        deadline = time.monotonic() + 120  # a replacement in the wrong slot never writes it: give up, not hang
        while not replaced.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return os.getpid(), slot


@pytest.mark.slow  # worker processes
def test_a_dead_workers_replacement_keeps_its_slots_environment(tmp_path):
    from mixit_lab.training.pool import WorkerDied, pool_map

    env = [{"MIXIT_TEST_SLOT": "a"}, {"MIXIT_TEST_SLOT": "b"}]
    got = list(pool_map(die_once_in_slot_b, [str(tmp_path)] * 3, 2, failed=lambda job, error: error, worker_env=env))
    deaths = [r for r in got if isinstance(r, WorkerDied)]
    done = sorted((slot, pid) for pid, slot in (r for r in got if not isinstance(r, WorkerDied)))
    assert len(deaths) == 1 and [slot for slot, _ in done] == ["a", "b"]
    dead = int((tmp_path / "died").read_text())
    assert done[1][1] != dead and done[1][1] == int((tmp_path / "replaced").read_text())  # slot b, a new worker

