"""The code's shape: the layer contract (import-linter, configured in pyproject.toml), no import cycles
anywhere, and only the command line turning errors into exit codes."""

from __future__ import annotations

import ast
import sys

import grimp
import pytest

from conftest import ROOT

PACKAGES = ("models", "training", "analysis", "figures", "reproduce", "cli")


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components (Tarjan) of more than one module: each is an import cycle."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in edges:
        if module not in index:
            visit(module)
    return found


def _graph() -> grimp.ImportGraph:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_the_layer_contract_holds(monkeypatch):
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0, \
        "an import breaks the layers; run `lint-imports` for the chain"


def test_no_module_sits_in_an_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = _graph()
    graph.add_import(importer="models.config", imported="models.transformer")  # transformer imports config
    assert any({"models.config", "models.transformer"} <= set(cycle) for cycle in _cycles(graph))


def test_only_the_command_line_knows_about_exit_codes():
    """Library code raises ordinary exceptions; `cli` alone turns them into CLIError and exit statuses."""
    for package in PACKAGES[:-1]:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cli":
                    pytest.fail(f"{path.relative_to(ROOT)} imports {node.module}")
                if isinstance(node, ast.Name) and node.id == "CLIError":
                    pytest.fail(f"{path.relative_to(ROOT)} uses CLIError")


def _modules_calling(names: set[str]) -> set[str]:
    """The modules (dotted) of the packages, and app.py, that call json.<name> for a name in `names`."""
    found = set()
    for path in [*(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_json_files_are_read_where_docs_architecture_says():
    """docs/architecture.md, "Reading JSON files": read_json, and the readers it lists by name."""
    assert _modules_calling({"load", "loads"}) == {
        "models.files", "models.tokenizer",  # read_json; a tokenizer's own JSON string, re-indented
        "models.checkpoint", "training.tasks.cache", "reproduce.pipeline", "analysis.analyze",
        "training.rundir", "training.sweep", "analysis.explore",
    }


def test_only_the_trainer_and_mixit_train_use_training_parallel():
    """docs/architecture.md, "One run on several processes"."""
    assert _graph().find_modules_that_directly_import("training.parallel") == {"training.trainer", "cli.main"}


def test_grids_and_studies_share_one_set_of_defaults():
    """docs/architecture.md, "Typed options": a study and a sweep that give no variants, seeds or lrs get the
    same ones, TrainConfig's seed and learning rate among them."""
    from reproduce.preset import Study
    from training.sweep import build_grid, grid_defaults
    from training.trainer import TrainConfig

    defaults, train = grid_defaults(), TrainConfig()
    assert defaults["seeds"] == [train.seed] and defaults["lrs"] == [train.lr]
    study = Study(tasks=["addition"])
    assert (study.variants, study.seeds, study.lrs) == (defaults["variants"], defaults["seeds"], defaults["lrs"])
    runs = build_grid(None, {"tasks": ["addition"]})
    assert {(cfg.seed, cfg.lr, cfg.d_model) for _, cfg in runs} == {(train.seed, train.lr, train.d_model)}


def test_module_docstrings_name_modules_and_names_that_exist():
    """A docstring that points at `package.module` (or `package.name`) points at something that is there."""
    import importlib
    import re

    stale = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            for pkg, name in re.findall(rf"\b({'|'.join(PACKAGES)})\.([A-Za-z_]\w*)\b", doc):
                if name in ("json", "jsonl", "csv", "yaml", "md", "png", "pdf", "txt", "py"):  # a file: analysis.json
                    continue
                if (ROOT / pkg / f"{name}.py").is_file() or (ROOT / pkg / name).is_dir():
                    continue
                if not hasattr(importlib.import_module(pkg), name):
                    stale.append(f"{path.relative_to(ROOT)}: {pkg}.{name}")
    assert stale == []
