"""docs/architecture.md's rules, each a test: the layer contract (import-linter, configured in pyproject.toml), no
import cycles anywhere, only the command line turning errors into exit codes, one owner for each file name and
vocabulary, one set of defaults; and a test that every rule the document lists names its test here (or says why
it is a convention)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import grimp
import pytest

from conftest import ROOT

PACKAGES = ("models", "training", "analysis", "figures", "reproduce", "explorer", "cli")  # cli last: the top


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
    return grimp.build_graph("mixit_lab", cache_dir=None)


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
    graph.add_import(importer="mixit_lab.models.config", imported="mixit_lab.models.transformer")  # transformer imports config
    assert any({"mixit_lab.models.config", "mixit_lab.models.transformer"} <= set(cycle) for cycle in _cycles(graph))


def test_only_the_command_line_knows_about_exit_codes():
    """Library code raises ordinary exceptions; `cli` alone turns them into CLIError and exit statuses."""
    for package in PACKAGES[:-1]:
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mixit_lab.cli"):
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
                found.add(_module_name(path))
    return found


def test_json_files_are_read_where_docs_architecture_says():
    """docs/architecture.md, "Reading JSON files": read_json, and the readers it lists by name."""
    assert _modules_calling({"load", "loads"}) == {
        "mixit_lab.models.files", "mixit_lab.models.tokenizer",  # read_json; a tokenizer's own JSON string, re-indented
        "mixit_lab.models.checkpoint", "mixit_lab.training.tasks.cache", "mixit_lab.reproduce.pipeline", "mixit_lab.analysis.analyze",
        "mixit_lab.training.rundir", "mixit_lab.training.sweep",
        "mixit_lab.explorer.report",  # findings.json, a list (read_json takes objects)
    }


def test_only_the_trainer_and_mixit_train_use_training_parallel():
    """docs/architecture.md, "One run on several processes": the trainer, mixit train, the device resolution
    (this rank's own GPU under torchrun) and the stack of runs (one process: it refuses torchrun)."""
    assert _graph().find_modules_that_directly_import("mixit_lab.training.parallel") == {
        "mixit_lab.training.trainer", "mixit_lab.cli.train", "mixit_lab.training.resolve", "mixit_lab.training.stack"}


def _modules_using(names: set[str]) -> set[str]:
    """The modules (dotted) of the packages, and app.py, that use a name in `names` (`name` or `x.name`), its
    definition aside."""
    found = set()
    for path in [*(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Name) and node.id in names) or \
                    (isinstance(node, ast.Attribute) and node.attr in names):
                found.add(_module_name(path))
    return found


def test_a_run_is_resolved_in_one_place():
    """docs/architecture.md, "What a run's settings come to": mixit_lab.training.resolve alone builds a run's task, reads
    its eval-size bound and required model fields, and picks a training run's device; mixit train, the trainer and
    the grids (sweeps, presets, mixit tune) all resolve through it. pick_device elsewhere picks the device of other
    work: an analysis, a speed measurement."""
    resolve = "mixit_lab.training.resolve"
    assert _modules_using({"build_task", "max_eval_size", "held_out_size", "model_overrides", "local_device"}) - {
        "mixit_lab.training.tasks.base", "mixit_lab.training.tasks.algorithmic", "mixit_lab.training.tasks.text",
    } == {resolve}
    assert _modules_using({"pick_device"}) == {resolve, "mixit_lab.training.benchmark", "mixit_lab.analysis.analyze",
                                               "mixit_lab.cli.analyze"}
    assert {"mixit_lab.cli.train", "mixit_lab.training.trainer", "mixit_lab.training.sweep"} <= \
        _graph().find_modules_that_directly_import(resolve)


def test_grids_and_studies_share_one_set_of_defaults():
    """docs/architecture.md, "Typed options": a study and a sweep that give no variants, seeds or lrs get the
    same ones, TrainConfig's seed and learning rate among them."""
    from mixit_lab.reproduce.preset import Study
    from mixit_lab.training.sweep import build_grid, grid_defaults
    from mixit_lab.training.config import TrainConfig

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
                if not hasattr(importlib.import_module(f"mixit_lab.{pkg}"), name):
                    stale.append(f"{path.relative_to(ROOT)}: {pkg}.{name}")
    assert stale == []


# --------------------------------------------------------------------------- one owner for each file name
# A string literal that is a file name (or the end of one, as ".csv" in f"{name}.csv"); docstrings are prose.
FILE_NAME = re.compile(r"^[\w./{}*-]*\.(json|jsonl|csv|safetensors|lock|npy|pt|parquet)$")
# The modules that own a file format, and so spell its file names (docs/architecture.md, "Run directory").
FILE_NAME_OWNERS = {
    "training/rundir.py": "the run directory and the runs folder",
    "models/checkpoint.py": "the checkpoint folder (config.json, model.safetensors)",
    "models/tokenizer.py": "a checkpoint's tokenizer.json",
    "training/tasks/cache.py": "the token cache's own files, in the folder it is passed",
    "training/precision.py": "the machine's bf16 speed cache, outside any run",
    "reproduce/reference.py": "the authors' recorded runs, a data file of the package",
    "reproduce/tuning.py": "the presets' recorded tunings, data files of the package (reproduce/tuning/)",
    "reproduce/report.py": "the report folder (report.md, findings.json, its tables)",
}
# Literals that are not a file this code names: the suffix of a file the user gives.
NOT_FILE_NAMES = {
    ("training/sweep.py", ".json"),  # a grid file given as JSON rather than YAML
    ("training/tasks/corpora.py", ".csv"),  # a corpus given as CSV
    ("reproduce/pipeline.py", ".json"),  # a cached table's settings beside it (path.with_suffix)
}
# Spelled outside their owner still, in files whose owners are fixing them; this list only shrinks (a test checks).
NOT_YET_MOVED = {
    ("figures/attention_maps.py", "heads.csv"),  # a caption naming the table: mixit_lab.training.rundir.ANALYSIS_TABLE
}


def _source_files() -> list[Path]:
    return [*(p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))), ROOT / "app.py"]


def _file_name_literals(path: Path) -> set[str]:
    """The string literals of a module that look like file names, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and FILE_NAME.match(node.value)}


def test_file_names_are_spelled_by_their_owner_only():
    """docs/architecture.md, "Run directory and runs folder": nobody else spells a file name."""
    found = {(str(path.relative_to(ROOT)), literal) for path in _source_files()
             if str(path.relative_to(ROOT)) not in FILE_NAME_OWNERS for literal in _file_name_literals(path)}
    assert found - NOT_FILE_NAMES - NOT_YET_MOVED == set(), "use mixit_lab.training.rundir's constants (or the owner's)"
    assert NOT_YET_MOVED <= found, f"moved to its owner: drop it from NOT_YET_MOVED: {NOT_YET_MOVED - found}"


def test_the_file_name_scan_finds_an_f_string_and_skips_docstrings(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""Writes heads.csv."""\ndef f(name):\n    return f"{name}.csv", "run.json"\n')
    assert _file_name_literals(module) == {".csv", "run.json"}


# --------------------------------------------------------------------------- one vocabulary each
def test_one_component_vocabulary():
    """Freezing and the parameter table name components alike: component_of answers with COMPONENTS' keys, for
    every parameter of every variant (and a classifier)."""
    from mixit_lab.models import VARIANTS, ModelConfig, build_model
    from mixit_lab.models.vocabulary import COMPONENTS, component_of
    import mixit_lab.models.transformer
    assert mixit_lab.models.transformer.component_of is component_of
    seen = set()
    for variant in VARIANTS:
        for extra in ({}, {"n_classes": 2, "causal": False}, {"attention": "learned"}):
            model = build_model(ModelConfig(variant=variant, d_model=16, n_layers=2, n_heads=2, d_vocab=8, n_ctx=8,
                                            **extra))
            seen |= {row["component"] for row in model.parameter_table()}
    assert seen <= set(COMPONENTS) and {"embed", "qk", "v", "o", "mix", "mlp", "norms", "ln_final", "unembed"} <= seen
    assert component_of("blocks.3.attn.W_Q") == "qk" and component_of("classifier.W_C") == "unembed"
    with pytest.raises(ValueError, match="'blocks.0.wings.W'"):
        component_of("blocks.0.wings.W")


def test_one_head_score_vocabulary():
    """mixit_lab.analysis.heads.HEAD_SCORES names every score column and every label; the explorer's Heads page shows that dict,
    imported from where it lives."""
    from mixit_lab.analysis import explore, heads

    assert not hasattr(explore, "HEAD_SCORES")
    assert "from mixit_lab.analysis.heads import HEAD_SCORES" in (ROOT / "explorer" / "pages" / "heads.py").read_text()
    assert set(heads.HEAD_SCORES) == {*heads.SCORES, "copying"}
    assert set(heads.LABEL_THRESHOLDS) <= set(heads.HEAD_SCORES)
    assert not hasattr(heads, "LABEL_NAMES")


# --------------------------------------------------------------------------- facts about a task
TASK_NAME_DECISIONS_CHECKED = ("analysis/analyze.py", "analysis/memory.py", "cli/train.py", "cli/analyze.py")


def _is_name(node: ast.AST) -> bool:
    """`x.name` or `getattr(x, "name", ...)`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "name"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "name")


def test_analysis_decides_by_task_class_attributes_not_names():
    """docs/architecture.md, "Facts about a task": no comparison of a task's name with a literal in the modules
    that ask for facts (selecting runs by name, elsewhere, is allowed)."""
    for relative in TASK_NAME_DECISIONS_CHECKED:
        for node in ast.walk(ast.parse((ROOT / relative).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and _is_name(node.left):
                literals = [c for c in node.comparators if isinstance(c, (ast.Constant, ast.Tuple, ast.List, ast.Set))]
                assert not literals, f"{relative}:{node.lineno} decides by task name; ask the task class"


# --------------------------------------------------------------------------- one set of defaults
def _defaults(parser, command: str) -> dict[str, object]:
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: a.default for a in sub._actions if a.option_strings and not a.required}


def test_the_command_line_restates_no_default():
    """docs/architecture.md, "Typed options": each option of mixit train / sweep / analyze that sets a TrainConfig or
    AnalysisOptions field defaults to that field's own default (a sweep's: a one-element list of it)."""
    import dataclasses

    from mixit_lab.analysis.analyze import AnalysisOptions
    from mixit_lab.cli.main import build_parser
    from mixit_lab.training.config import TrainConfig

    parser = build_parser()
    for cls, command, many in ((TrainConfig, "train", False), (TrainConfig, "sweep", True),
                               (AnalysisOptions, "analyze", False)):
        fields = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        shown = _defaults(parser, command)
        checked = set(shown) & set(fields)
        assert len(checked) >= 5, (command, checked)
        for name in checked:
            if isinstance(shown[name], bool) or (many and name not in ("d_model", "n_layers", "n_heads", "lr")):
                expected = fields[name]
            else:
                expected = [fields[name]] if many else fields[name]
            assert shown[name] == expected, f"mixit {command} --{name.replace('_', '-')}"


def test_typed_options_refuse_unknown_keys_naming_them():
    """docs/architecture.md, "Typed options": each from_dict refuses an unknown key with one line naming it."""
    from mixit_lab.analysis.analyze import AnalysisOptions
    from mixit_lab.reproduce.preset import Preset, Study
    from mixit_lab.reproduce.stage_options import SignalOptions, SpeedOptions
    from mixit_lab.training.config import TrainConfig

    for cls, data in ((TrainConfig, {"bogus_key": 1}), (AnalysisOptions, {"bogus_key": 1}),
                      (SignalOptions, {"bogus_key": 1}), (SpeedOptions, {"bogus_key": 1}),
                      (Study, {"tasks": ["addition"], "bogus_key": 1}),
                      (Preset, {"studies": {"a": {"tasks": ["addition"]}}, "bogus_key": 1})):
        with pytest.raises(ValueError, match="bogus_key") as refused:
            cls.from_dict(data) if cls is not Study else cls.from_dict("a", data)
        assert "\n" not in str(refused.value) and "allowed" in str(refused.value)


def test_caches_are_passed_explicitly():
    """docs/architecture.md, "Caches are passed explicitly": the token cache is a keyword-only argument."""
    import inspect

    from mixit_lab.training.tasks import get_task
    from mixit_lab.training.config import TrainConfig

    assert inspect.signature(get_task).parameters["cache_dir"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "cache_dir" in inspect.signature(TrainConfig.build_task).parameters


# --------------------------------------------------------------------------- every rule has its test
def _rules_table() -> list[tuple[str, str]]:
    """The rows (rule, how it is kept) of docs/architecture.md's "Which test keeps each rule"."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Which test keeps each rule", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return [(rule.strip(), kept.strip()) for rule, kept in rows[1:]]  # less the header


def test_every_rule_of_the_architecture_names_its_test_or_is_a_convention():
    """Each bold rule of "One owner for each format and fact" and each row of the rules table either names tests
    that exist (`tests/FILE.py::test_name`) or says "convention" and why."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    owners = text.split("### One owner for each format and fact", 1)[1].split("\n## ", 1)[0]
    bold = [m.rstrip(":.").strip() for m in re.findall(r"^- \*\*(.+?)\*\*", owners, flags=re.M)]
    table = _rules_table()
    assert table and set(bold) <= {rule for rule, _ in table}, set(bold) - {rule for rule, _ in table}
    for rule, kept in table:
        tests = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", kept)
        if not tests:
            assert kept.lower().startswith("convention") and len(kept) > len("convention: "), rule
        for file, name in tests:
            tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
            assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, f"{rule}: {file}::{name}"


LONG_ALLOWED = {("models/transformer.py", "forward")}  # the model's forward passes, read in one sitting


def test_rooms_stay_small():
    """No module over 600 lines, models/transformer.py (the model, read in one sitting; attention one kind per module
    in models/attention/) under 450, and no function over 80 lines (the model's forward passes aside): files that
    do one job, functions that fit on a screen."""
    files = [*(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")), ROOT / "app.py"]
    big = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not big, big
    assert len((ROOT / "models" / "transformer.py").read_text(encoding="utf-8").splitlines()) < 450
    long = []
    for path in files:
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (rel, node.name) not in LONG_ALLOWED:
                if node.end_lineno - node.lineno + 1 > 80:
                    long.append(f"{rel}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


# --------------------------------------------------------------------------- light commands stay light
def test_reading_runs_imports_no_torch_and_figures_from_tables_no_transformerlens(explorer_runs, tmp_path):
    """docs/architecture.md, `cli/`: `mixit figures` imports only its own command's module, reading a runs folder
    (mixit_lab.training.run, mixit_lab.analysis.runs, the figures) imports no torch (a run's summary records the metric it is judged
    by, so no task class is asked), and drawing figures from tables imports no torch or
    TransformerLens (with the libraries it brings, about 2 s of every start on 2 cores); only a figure drawn from
    a checkpoint (attention_maps) loads a model."""
    import subprocess

    script = f"""
import sys
import mixit_lab.analysis.runs, mixit_lab.figures.common, mixit_lab.training.run
from mixit_lab.cli.main import build_parser, main
build_parser("figures")
assert "torch" not in sys.modules, "reading runs imported torch"
code = main(["figures", {str(explorer_runs["root"])!r}, "--out", {str(tmp_path / "out")!r},
             "--only", "task_accuracy", "memorization", "lm_curves", "components"])
print(code, "transformer_lens" in sys.modules, "torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "0 False False", done.stdout


# --------------------------------------------------------------------------- names imported from where they live
def _module_names(tree: ast.Module) -> tuple[set[str], list[str]]:
    """The names a module defines at its top level (functions, classes, assignments, also under a top-level `if` or
    `try`), and its `__all__`."""
    defined: set[str] = set()
    exported: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        nonlocal exported
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) \
                        and isinstance(node.value, (ast.List, ast.Tuple)):
                    exported = [e.value for e in node.value.elts]
            elif isinstance(node, (ast.If, ast.Try)):
                for part in (node.body, node.orelse, getattr(node, "finalbody", []),
                             *(h.body for h in getattr(node, "handlers", []))):
                    visit(part)

    visit(tree.body)
    return defined, exported


def _module_name(path: Path) -> str:
    """The dotted name of a module of the package: mixit_lab.training.rundir for training/rundir.py."""
    parts = ["mixit_lab", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_from(path: Path, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, relative imports resolved against `path`."""
    if not node.level:
        return node.module or ""
    base = _module_name(path).split(".")
    base = base if path.name == "__init__.py" else base[:-1]
    return ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))


def test_no_module_re_exports_a_name_it_does_not_define():
    """docs/architecture.md: a name is imported from the module that defines it. A module's `__all__` lists only its
    own names, and no `from module import name` (in the packages, the tests or the benchmarks) takes a name from a
    module that only imports it; a package's `__init__.py` (its public face) is the one place that gathers names."""
    modules = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    defined = {name: _module_names(ast.parse(path.read_text())) for name, path in modules.items()}
    offenders = [f"{modules[m].relative_to(ROOT)}: __all__ lists {n}" for m, (own, exported) in defined.items()
                 if modules[m].name != "__init__.py" for n in exported if n not in own]
    for path in [*modules.values(), *(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            source = _imported_from(path, node) if isinstance(node, ast.ImportFrom) else None
            if source not in modules or modules[source].name == "__init__.py":
                continue
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {alias.name} from {source}" for alias in node.names
                          if alias.name not in defined[source][0] and f"{source}.{alias.name}" not in modules]
    assert not offenders, "\n".join(offenders)


def _python_files() -> list[Path]:
    """Every Python file of the project: the package's folders, app.py, the tests, benchmarks, examples, docs' hooks."""
    roots = [*PACKAGES, "tests", "benchmarks", "examples", "docs"]
    return [ROOT / "app.py", *(p for root in roots for p in sorted((ROOT / root).rglob("*.py")))]


def test_every_import_names_the_one_package():
    """pyproject.toml installs one import package, mixit_lab; `import training` or `from models import ...` works in
    a checkout only by accident (the working directory on sys.path), finds a user's own `training` first, and would
    load a second copy of every module under the short name."""
    short = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else []
            short += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert not short, "\n".join(short)


def test_no_private_name_crosses_a_package():
    """A name with a leading underscore is its package's business: no module imports one from another package."""
    crossing = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ImportFrom):
                    continue
                source = _imported_from(path, node)
                if source.split(".")[:2] == ["mixit_lab", package]:
                    continue
                crossing += [f"{path.relative_to(ROOT)}:{node.lineno}: {a.name} from {source}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert not crossing, "\n".join(crossing)
