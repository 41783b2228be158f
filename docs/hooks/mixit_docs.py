"""MkDocs hooks (mkdocs.yml `hooks:`) that fill two pages from the code at build time, so they cannot drift:

- `<!-- cli-reference -->` becomes the reference of every `mixit` subcommand: its usage, every flag with its
  default, choices and help, read from `mixit_lab.cli.main.build_parser()`, and the exit codes of `mixit_lab.cli.common`.
- `<!-- notebook: PATH -->` becomes the notebook at PATH (relative to the repository), executed headless
  on its own tiny model and converted to Markdown with its printed tables and plots. The executed copy is
  cached in `.docs_cache/` (keyed by the notebook and the Python sources it imports), so a rebuild of
  unchanged code does not run it again.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLI_MARKER = "<!-- cli-reference -->"
NOTEBOOK_MARKER = re.compile(r"<!-- notebook: (\S+) -->")
CACHE = ROOT / ".docs_cache"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return NOTEBOOK_MARKER.sub(lambda m: notebook_markdown(ROOT / m[1]), markdown)


# ---- the command line -------------------------------------------------------------------------------

def exit_codes() -> list[tuple[int, str, str]]:
    """(code, name, meaning) for every EXIT_* constant of cli/common.py, the meaning from its comment."""
    from mixit_lab.cli import common

    source = Path(common.__file__).read_text()
    out = []
    for name in dir(common):
        if name.startswith("EXIT_"):
            comment = re.search(rf"^{name} = \d+\s*#\s*(.*)$", source, re.M)
            out.append((getattr(common, name), name, comment[1] if comment else "done"))
    return sorted(out)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of `parser`, in the order `mixit --help` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices.items())
    return {}


def _cell(text: str) -> str:
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction)):
        return "off" if isinstance(action, argparse._StoreTrueAction) else "—"
    default = action.default
    if default is None or default == argparse.SUPPRESS:
        return "—"
    if isinstance(default, (list, tuple)):
        if not default:
            return "—"
        default = " ".join(map(str, default))
    return f"`{default}`"


def _argument(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    formatter = parser._get_formatter()
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    else:
        name = formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
    return name


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""
    text = re.sub(r"\s*\(?default: [^)]*\)?$", "", text)  # `--help` appends the default; the table has its own column
    choices = action.choices
    # choices a metavar hides, unless the help already names them all
    if choices is not None and action.metavar is not None and not all(
            re.search(rf"\b{re.escape(str(c))}\b", text) for c in choices):
        text = (text + "; " if text else "") + "one of " + ", ".join(map(str, choices))
    return text


def _arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    lines = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
        if not actions:
            continue
        lines += [f"*{group.title}*", "", "| argument | default | meaning |", "|---|---|---|"]
        for action in actions:
            lines.append(f"| `{_cell(_argument(action, parser))}` | {_default(action)} | {_cell(_help(action, parser))} |")
        lines.append("")
    return lines


def cli_reference() -> str:
    from mixit_lab.cli.main import build_parser

    parser = build_parser()
    lines = [
        "## Exit codes",
        "",
        "Every subcommand ends with one of these statuses (`cli/common.py`):",
        "",
        "| status | name | meaning |",
        "|---|---|---|",
        *[f"| {code} | `{name}` | {_cell(meaning)} |" for code, name, meaning in exit_codes()],
        "",
        "## `mixit`",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
        _cell(parser.description or ""),
        "",
    ]
    commands = subcommands(parser)
    helps = {a.dest: a.help for p in parser._actions if isinstance(p, argparse._SubParsersAction)
             for a in p._choices_actions}
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`mixit {name}`](#mixit-{name}) | {_cell(helps.get(name) or '')} |" for name in commands]
    lines.append("")
    for name, sub in commands.items():
        lines += [f"## `mixit {name}`", "", _cell(sub.description or helps.get(name) or ""), ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        lines += _arguments_table(sub)
        lines += [f"Exit codes: {', '.join(str(code) for code, _, _ in exit_codes())} "
                  "([above](#exit-codes)).", ""]
    return "\n".join(lines)


# ---- the notebook ------------------------------------------------------------------------------------

def _sources_digest(notebook: Path) -> str:
    digest = hashlib.sha256(notebook.read_bytes())
    for package in ("models", "training", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def executed_notebook(notebook: Path):
    """The notebook run headless in a temporary folder (it trains its own tiny model there), cached."""
    import nbformat
    from nbclient import NotebookClient

    cached = CACHE / f"{notebook.stem}-{_sources_digest(notebook)}.ipynb"
    if cached.exists():
        return nbformat.read(cached, as_version=4)
    nb = nbformat.read(notebook, as_version=4)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "TMPDIR", "MIXIT_CHECKPOINT")}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.environ.update(env, TMPDIR=tmp)
            os.environ.pop("MIXIT_CHECKPOINT", None)  # the notebook trains its own model
            NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    CACHE.mkdir(exist_ok=True)
    for old in CACHE.glob(f"{notebook.stem}-*.ipynb"):
        old.unlink()
    nbformat.write(nb, cached)
    return nb


def notebook_markdown(notebook: Path) -> str:
    """The executed notebook as Markdown: its cells, printed text, tables, and plots inlined as PNG."""
    from nbconvert import MarkdownExporter

    body, resources = MarkdownExporter().from_notebook_node(executed_notebook(notebook))
    for name, data in resources.get("outputs", {}).items():
        kind = "svg+xml" if name.endswith(".svg") else "png"
        body = body.replace(f"({name})", f"(data:image/{kind};base64,{base64.b64encode(data).decode()})")
    # the notebook's own headings sit below the page's title (outside code blocks)
    lines, fenced = [], False
    for line in body.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        lines.append("#" + line if not fenced and re.match(r"#{1,5} ", line) else line)
    return "\n".join(lines)
