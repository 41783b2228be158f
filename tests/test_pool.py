"""mixit_lab.training.pool.forked_map: results in order, errors and dead processes as results, the same as inline; and
fork_workers, which keeps the work in the calling process wherever forking is unsafe."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from conftest import ROOT
from mixit_lab.training.pool import fork_workers, forked_map

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked_map forks only on Linux")

# Run in a fresh interpreter: the test process may hold threads (a progress bar's monitor) that rule out forking,
# and an item that kills its process must not run inline here.
FORKED = """
import json, os, sys
from mixit_lab.training.pool import fork_workers, forked_map

def square_or_fail(x):
    if x == 3:
        raise ZeroDivisionError(f"planted at {x}")
    if x == 5:
        os._exit(9)  # the process dies mid-item, as an OOM kill would end it
    return x * x

table = {"rows": list(range(1000))}  # read by the children from the memory they were forked with
assert fork_workers(2, 6, torch_in_children=False) == 2, "this process cannot fork"
out = forked_map(square_or_fail, [0, 1, 2, 3, 4, 6], 2, torch_in_children=False)
dead = forked_map(square_or_fail, [1, 5], 2, torch_in_children=False)
shared = forked_map(lambda i: table["rows"][i] + 1, [10, 999], 2, torch_in_children=False)
print(json.dumps({"values": [r for r in out if not isinstance(r, BaseException)], "error": repr(out[3]),
                  "cause": str(out[3].__cause__), "dead": [type(r).__name__ for r in dead], "shared": shared}))
"""


def test_forked_processes_give_results_in_order_errors_with_their_traceback_and_deaths_as_errors():
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["values"] == [0, 1, 4, 16, 36]
    assert "ZeroDivisionError('planted at 3')" == result["error"] and "square_or_fail" in result["cause"]
    assert result["dead"][1] == "BrokenProcessPool"  # an error for its item, not a hang
    assert result["shared"] == [11, 1000]


def test_inline_the_results_are_the_same_and_an_error_is_a_result():
    def square_or_fail(x: int) -> int:
        if x == 3:
            raise ZeroDivisionError(f"planted at {x}")
        return x * x

    out = forked_map(square_or_fail, [0, 1, 2, 3, 4], 1)
    assert out[:3] + out[4:] == [0, 1, 4, 16] and isinstance(out[3], ZeroDivisionError)


def test_fork_workers_is_one_where_forking_is_unsafe_or_for_one_item(monkeypatch):
    assert fork_workers(4, 1, torch_in_children=False) == 1
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert fork_workers(2, 10, torch_in_children=False) == 1  # another thread could hold a lock at the fork
    finally:
        stop.set()
        thread.join()
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # as in a process with no other thread
    assert fork_workers(2, 10, torch_in_children=False) == 2
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    assert fork_workers(2, 10) == 1  # torch is imported here: work that may run it stays in this process
