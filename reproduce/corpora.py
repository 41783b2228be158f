"""Which corpus a text study of a preset reads: the files given on the command line, else the real corpora beside
the project (../shared/data), else a small fixed Hugging Face dataset when the Hub can be reached, else the study is
skipped with a note saying why.

    from mixit_lab.reproduce.corpora import choose_text
    choice = choose_text("sst2", None)     # TextChoice(params={"text_file": [...train.tsv], "test_file": [...dev.tsv]})

A study names the corpus it needs with `text:` (mixit_lab.reproduce.preset.TEXT_KINDS): `lm` (WikiText-2), `sentiment` (1,000
Yelp review sentences) or `sst2` (SST-2 as GLUE distributes it: it trains on train.tsv and reports on dev.tsv).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # a source checkout's root, or the installed mixit_lab folder
DATA_ENV = "MIXIT_DATA"  # a corpora folder laid out as ../shared/data is, wherever it is

# Corpora tried, in order, when a study needs text and no file was given: local copies of the real
# corpora (the folder in $MIXIT_DATA, else ../shared/data beside the working directory or the checkout), then a small, fixed Hub dataset when the Hub can be reached
# (training/tasks/hub.py HUB_DATASETS). For lm the Hub dataset is the same text as the local files (WikiText-2
# validation + test, held out by article the same way); for sentiment it is another corpus of the same
# size: 1,000 Yelp reviews (500 per class) of yelp_polarity's test split instead of the 1,000 sentences; for sst2
# it is GLUE's sst2 (its train and validation splits are the files' train.tsv and dev.tsv).
# `local` maps task parameters to files below ../shared/data.
TEXT_SOURCES: dict[str, dict[str, Any]] = {
    "lm": {"local": {"text_file": ["wikitext-2/valid.txt", "wikitext-2/test.txt"]}, "hub": "wikitext-2-v1-valid-test",
           "option": "--text-file", "local_about": "WikiText-2 validation + test, held out by article",
           "hub_about": "WikiText-2 validation + test, held out by article as from the local files"},
    "sentiment": {"local": {"text_file": ["sentiment-sentences/yelp_labelled.txt"]}, "hub": "yelp_polarity-1k",
                  "option": "--sentiment-file", "local_about": "1,000 Yelp review sentences, UCI sentiment labelled "
                  "sentences",
                  "hub_about": "1,000 Yelp reviews, a fixed sample of 500 per class from yelp_polarity's test split"},
    "sst2": {"local": {"text_file": ["sst-2/train.tsv"], "test_file": ["sst-2/dev.tsv"]}, "hub": "sst2",
             "option": "--sst2-dir", "local_about": "SST-2 (GLUE): 67,349 training sentences and phrases, accuracy "
             "on the 872 sentences of dev.tsv",
             "hub_about": "GLUE's SST-2: its train split, accuracy on its validation split (dev.tsv)"},
}


@dataclass
class TextChoice:
    """Where a text study's data comes from: task parameters to add, or why the study is skipped."""

    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    skipped: bool = False


def _shared_data_dirs() -> list[Path]:
    """The local corpora folders, in order: $MIXIT_DATA, ../shared/data beside the working directory, and beside the
    source checkout (not beside an installed package: site-packages is no project's folder)."""
    bases = [Path.cwd()] + ([PACKAGE_ROOT] if (PACKAGE_ROOT / "pyproject.toml").is_file() else [])
    candidates = [Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else []
    seen, out = set(), []
    for candidate in [*candidates, *(base.parent / "shared" / "data" for base in bases)]:
        candidate = candidate.resolve()
        if candidate not in seen and candidate.is_dir():
            seen.add(candidate)
            out.append(candidate)
    return out


def _given(kind: str, files: list[str]) -> TextChoice:
    """The files given on the command line: the corpus's files, or for sst2 the folder holding train.tsv and dev.tsv."""
    missing = [f for f in files if not Path(f).exists()]
    if missing:
        raise ValueError(f"{kind} corpus: no such file or folder {missing[0]!r}")
    if kind != "sst2":
        return TextChoice({"text_file": [str(Path(f)) for f in files]}, f"{kind}: {', '.join(files)} (given)")
    folder = Path(files[0])
    params = {"text_file": [str(folder / "train.tsv")], "test_file": [str(folder / "dev.tsv")]}
    absent = [p for p in (*params["text_file"], *params["test_file"]) if not Path(p).is_file()]
    if len(files) != 1 or absent:
        raise ValueError(f"sst2 corpus: give one folder holding train.tsv and dev.tsv (GLUE's SST-2), not {files!r}")
    return TextChoice(params, f"sst2: {folder}/train.tsv, accuracy on {folder}/dev.tsv (given)")


def choose_text(kind: str, files: list[str] | None, hub_check: Callable[[str], None] | None = None) -> TextChoice:
    """Given files (--text-file / --sentiment-file / --sst2-dir), else $MIXIT_DATA or ../shared/data, else the Hub,
    else skip."""
    if files:
        return _given(kind, files)
    source = TEXT_SOURCES[kind]
    for data in _shared_data_dirs():
        paths = {param: [data / p for p in rel] for param, rel in source["local"].items()}
        if all(p.is_file() for ps in paths.values() for p in ps):
            label = f"${DATA_ENV}" if os.environ.get(DATA_ENV) and data == Path(os.environ[DATA_ENV]).resolve() \
                else "../shared/data"
            shown = ", ".join(f"{label}/{p}" for rel in source["local"].values() for p in rel)
            return TextChoice({param: [str(p) for p in ps] for param, ps in paths.items()},
                              f"{kind}: {shown} ({source['local_about']})")
    if hub_check is None:
        from mixit_lab.training.tasks.hub import check_hub_reachable as hub_check
    try:
        hub_check(source["hub"])
        return TextChoice({"dataset": source["hub"]},
                          f"{kind}: Hugging Face dataset {source['hub']} ({source['hub_about']})")
    except Exception as e:  # DatasetUnavailable, or anything else the check raises
        return TextChoice(
            note=f"{kind}: skipped: no corpus given ({source['option']}), none in ../shared/data, and the Hub is "
            f"unreachable ({str(e).split(';')[0]})",
            skipped=True,
        )
