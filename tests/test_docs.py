"""The documentation site builds strictly, its command-line reference covers every flag, and the README
stays short and links only to pages that exist.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the nav, a Python object
that mkdocstrings cannot find, and a docstring it cannot read (mkdocs.yml); the build also runs the
notebook for its page (docs/hooks/mixit_docs.py), cached in .docs_cache/ between builds.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mixit_lab.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_MAX_LINES = 200


# Building the site takes most of a minute: `make test` builds it, the fast loop leaves it out.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_the_site_builds_strictly(site):
    for page in ("index.html", "getting-started/index.html", "reference/cli/index.html",
                 "reference/models/index.html", "guides/notebook/index.html", "promises/index.html"):
        assert (site / page).is_file(), page


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("mixit has no subcommands")


def _flags(help_text: str) -> set[str]:
    """The option strings `--help` shows (its usage and option list)."""
    return set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", help_text))


def test_the_cli_reference_lists_every_subcommand_and_flag_of_mixit_help(site):
    page = html.unescape((site / "reference" / "cli" / "index.html").read_text())
    parser = build_parser()
    commands = _subcommands(parser)
    assert set(commands) >= {"train", "sweep", "analyze", "figures", "reproduce", "app"}
    # each subcommand's section runs from its heading to the next one
    starts = {name: page.index(f'id="mixit-{name}"') for name in commands}
    ends = sorted(starts.values()) + [len(page)]
    for name, sub in commands.items():
        assert name in parser.format_help(), f"`mixit --help` does not list {name}"
        section = page[starts[name]:ends[ends.index(starts[name]) + 1]]
        shown = _flags(sub.format_help())
        option_strings = {s for a in sub._actions for s in a.option_strings}
        assert option_strings <= shown, f"mixit {name} --help hides {option_strings - shown}"
        missing = sorted(f for f in option_strings
                         if not re.search(rf"<code>[^<]*(?<![\w-]){re.escape(f)}(?![\w-])[^<]*</code>", section))
        assert not missing, f"the reference of mixit {name} lacks {missing}"
        for action in sub._actions:  # every default the parser has is on the page
            if action.option_strings and isinstance(action.default, (int, float, str)) \
                    and not isinstance(action.default, bool) and action.default != argparse.SUPPRESS:
                assert f"<code>{action.default}</code>" in section, f"mixit {name} {action.option_strings[0]}"
    for code in (0, 1, 2, 130):
        assert f"<td>{code}</td>" in page, f"exit code {code} is missing"


def test_the_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in local), "the README links into the documentation"
    for link in local:
        path = link.split("#")[0]
        assert (ROOT / path).exists(), f"README links to {link}, which does not exist"
