"""docs/promises.md stays true to the tests: every promise names at least one test as `tests/FILE.py::TEST`, every
test it names exists (a module-level test function of that file), and the count of command-line cases it states is
the contract table's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import torch

from conftest import ROOT

PROMISES = ROOT / "docs" / "promises.md"
NAMED = re.compile(r"`(tests/[A-Za-z0-9_/]+\.py)::([A-Za-z0-9_]+)`")


def _rows() -> list[str]:
    """The promise rows of the table (not its header or separator)."""
    lines = [line for line in PROMISES.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    return [line for line in lines if not line.startswith("| promise |")]


def _tests_in(path: Path) -> set[str]:
    return {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def test_every_promise_names_a_test_and_every_test_named_exists():
    rows = _rows()
    assert len(rows) >= 20, "the promises table was not found"
    missing = []
    for row in rows:
        promise, tests = row.strip("| ").rsplit(" | ", 1)
        named = NAMED.findall(tests)
        assert named, f"a promise names no test as tests/FILE.py::TEST: {promise[:80]}"
        # no shorthand that could name a test that does not exist: "::test_x" without its file, "test_x_..."
        shorthand = [t for t in re.findall(r"`([^`]*test_[^`]*)`", tests) if not NAMED.fullmatch(f"`{t}`")]
        assert not shorthand, f"write tests in full (tests/FILE.py::TEST): {shorthand}"
        for file, test in named:
            path = ROOT / file
            if not path.is_file() or test not in _tests_in(path):
                missing.append(f"{file}::{test}")
    assert not missing, f"docs/promises.md names tests that do not exist: {missing}"


def test_the_count_of_command_line_cases_is_the_contract_tables():
    import test_cli_contract

    text = " ".join(PROMISES.read_text(encoding="utf-8").split())
    found = re.search(r"(\d+) cases across every subcommand \((\d+) on a machine with a GPU\)", text)
    assert found, "docs/promises.md no longer states the number of command-line cases"
    without_gpu, with_gpu = int(found[1]), int(found[2])
    assert len(test_cli_contract.CASES) == (with_gpu if torch.cuda.is_available() else without_gpu)
