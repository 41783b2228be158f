"""The code in the README and the documentation stays true: every ```python block runs, and every `mixit`
command in a ```bash block parses with the real parser (mixit_lab.cli.main.build_parser()).

Python blocks of one page run in order in one namespace, in a temporary folder that holds a tiny k-hop run
at `checkpoints/khop1-standard` (the run the analysis guide trains first), so they need no GPU, no corpus
and no ../shared. A block that cannot run here (it needs a trained text model, or minutes) is marked with
`<!-- skip-test: reason -->` on the line before it. Shell commands are parsed, not run, except sweeps
with `--dry-run`, which only list their runs. `make TARGET` lines must name a target of the Makefile.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mixit_lab.cli.common import CLIError
from mixit_lab.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
SKIP = re.compile(r"<!--\s*skip-test:\s*(.+?)\s*-->\s*$")


def blocks(page: Path, languages: tuple[str, ...]) -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason) of every fenced block of `page` in one of `languages`."""
    text = page.read_text()
    out = []
    for match in FENCE.finditer(text):
        if match[1] not in languages:
            continue
        before = [line for line in text[:match.start()].splitlines() if line.strip()]
        skip = SKIP.search(before[-1]) if before else None
        out.append((text.count("\n", 0, match.start()) + 1, match[2], skip[1] if skip else None))
    return out


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


PYTHON_PAGES = [p for p in PAGES if blocks(p, ("python",))]
SHELL_PAGES = [p for p in PAGES if blocks(p, ("bash", "sh", "shell", "console"))]


def test_the_documentation_has_snippets_to_check():
    assert ROOT / "README.md" in PYTHON_PAGES and ROOT / "README.md" in SHELL_PAGES
    skipped = [(p, line) for p in PAGES for line, _, reason in blocks(p, ("python",)) if reason]
    assert len(skipped) <= 3, f"keep skipped snippets few: {skipped}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder with the tiny run the analysis guide's Python reads (a 2-layer 1-hop k-hop model)."""
    from mixit_lab.training import TrainConfig, train

    work = tmp_path_factory.mktemp("snippets")
    cfg = TrainConfig(task="khop", task_params={"hops": 1, "length": 16, "alphabet": 8}, d_model=32, n_layers=2,
                      n_heads=4, steps=30, batch_size=32, eval_every=30, eval_samples=256, device="cpu")
    train(cfg, work / "checkpoints" / "khop1-standard", progress=False)
    return work


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=_id)
def test_python_snippets_run(page, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    namespace: dict = {"__name__": "__doc_snippet__"}
    for line, code, skip in blocks(page, ("python",)):
        if skip:
            continue
        try:
            exec(compile(code, f"{_id(page)}:{line}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"the Python block at {_id(page)}:{line} fails: {type(e).__name__}: {e}") from e


def commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments dropped, split at ; && || |."""
    code = code.replace("\\\n", " ")
    out = []
    for line in code.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in lexer:
            if token in (";", "&&", "||", "|", "&"):
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    return [c for c in out if c]


def mixit_argv(command: list[str]) -> list[str] | None:
    """The arguments of a `mixit ...` or `torchrun ... -m mixit_lab.cli ...` command, else None."""
    while command and re.match(r"^[A-Za-z_]\w*=", command[0]):  # VAR=value before the command
        command = command[1:]
    if not command:
        return None
    if command[0] == "mixit" or command[0].endswith("/mixit"):
        return command[1:]
    if command[0] == "torchrun" and "-m" in command and command[command.index("-m") + 1] == "mixit_lab.cli":
        return command[command.index("-m") + 2:]
    return None


@pytest.mark.parametrize("page", SHELL_PAGES, ids=_id)
def test_shell_commands_parse(page, tmp_path, monkeypatch, capsys):
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    checked = 0
    for line, code, skip in blocks(page, ("bash", "sh", "shell", "console")):
        if skip:
            continue
        for command in commands(code):
            where = f"{_id(page)}:{line}: {shlex.join(command)}"
            if command[0] == "make":
                assert set(command[1:]) <= targets, f"{where}: no such make target"
                continue
            argv = mixit_argv(command)
            if argv is None:
                continue
            checked += 1
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as e:  # --help prints and exits 0
                assert e.code == 0, f"{where}: exit {e.code}"
                continue
            except CLIError as e:
                raise AssertionError(f"{where}: {e}") from None
            if args.command == "sweep" and args.dry_run:  # listing the runs is quick: do it, into a scratch folder
                monkeypatch.chdir(ROOT)  # a grid file is named relative to the repository
                out = tmp_path / "sweep"
                assert main([*argv, "--out", str(out)]) == 0, f"{where}: --dry-run failed"
                assert not out.exists() or not any(out.iterdir()), f"{where}: --dry-run wrote runs"
    capsys.readouterr()
    assert checked or page == ROOT / "README.md" or "make" in Path(page).read_text(), f"{_id(page)}: no command"
