"""training.pool.forked_map: results in order, errors and dead processes as results, the same as inline."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from training.pool import fork_workers, forked_map

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked_map forks only on Linux")


def _square_or_fail(x: int) -> int:
    if x == 3:
        raise ZeroDivisionError(f"planted at {x}")
    if x == 5:
        os._exit(9)  # the process dies mid-item, as an OOM kill would end it
    return x * x


@pytest.mark.parametrize("workers", [1, 2])
def test_forked_map_gives_results_in_order_and_errors_as_results(workers):
    items = [0, 1, 2, 3, 4] if workers == 1 else [0, 1, 2, 3, 4, 6]
    out = forked_map(_square_or_fail, items, workers, torch_in_children=False)
    assert [r for r in out if not isinstance(r, BaseException)] == [x * x for x in items if x != 3]
    error = out[items.index(3)]
    assert isinstance(error, ZeroDivisionError) and "planted at 3" in str(error)
    if workers == 2:  # the child's traceback travels as the cause
        assert "_square_or_fail" in str(error.__cause__)


def test_a_process_that_dies_is_an_error_for_its_item_not_a_hang():
    out = forked_map(_square_or_fail, [1, 5], 2, torch_in_children=False)
    assert out[0] == 1 or isinstance(out[0], BaseException)  # a broken pool may take its neighbour with it
    assert isinstance(out[1], BaseException)


def test_forked_processes_share_what_this_one_holds():
    table = {"rows": list(range(1000))}  # not passed: read in the children from memory they were forked with
    assert forked_map(lambda i: table["rows"][i] + 1, [10, 999], 2, torch_in_children=False) == [11, 1000]


def test_fork_workers_is_one_where_forking_is_unsafe_or_for_one_item(monkeypatch):
    assert fork_workers(4, 1, torch_in_children=False) == 1
    assert fork_workers(2, 10, torch_in_children=False) == 2
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or object())
    assert fork_workers(2, 10) == 1  # torch is imported here: work that may run it stays in this process
    assert fork_workers(2, 10, torch_in_children=False) == 2
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert fork_workers(2, 10, torch_in_children=False) == 1  # another thread could hold a lock at the fork
    finally:
        stop.set()
        thread.join()
