"""Hugging Face Hub datasets by name (`HUB_DATASETS`): a reachability check that answers within seconds,
and loading a dataset's rows as a corpus (held out like local files when it has no split of its own).

When the Hub cannot be reached (or offline mode is on), asking for a dataset is a one-line
`DatasetUnavailable` that suggests `--text-file`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .cache import CACHE_FORMAT, cached_json, digest as _digest
from .corpora import LabelledCorpus, TextCorpus, TextDataError, _hold_out_documents, _hold_out_per_class, split_documents

HUB_TIMEOUT_S = 3.0
STREAMED_DEFAULT_DOCS = 100_000  # documents taken from a streamed dataset when max_docs is not given


class DatasetUnavailable(TextDataError):
    """A Hub dataset was asked for but the Hub cannot be reached (or offline mode is on)."""


@dataclass(frozen=True)
class HubDataset:
    """A Hugging Face dataset by name: where it is, and how its rows become a corpus.

    `splits` are read and pooled (their documents, or labelled texts, in order). With a `held_out`
    split, that split is the validation set; without one, the pooled documents are held out by
    document (lm) or per class (sentiment) exactly like local files. `lines`: rows are the lines of
    text files (WikiText: one row per line, blank lines as ""), rejoined into the files' text and
    split into articles like a local file. `per_class`: keep a fixed sample of that many texts per
    class, the ones whose text has the smallest SHA-256 (so the sample does not depend on row order).
    """

    repo: str
    config: str | None
    kind: str  # "text" (for lm) or "labelled" (for sentiment)
    splits: tuple[str, ...]
    held_out: str | None  # None: hold out like local files
    streamed: bool = False
    lines: bool = False
    per_class: int | None = None
    revision: str | None = None  # the dataset repository's commit: the same rows whatever is pushed later
    text_column: str = "text"  # the column holding a labelled row's text (GLUE's: "sentence")


# Salesforce/wikitext at the commit other projects pin too. yelp_polarity and fineweb-edu are not pinned yet:
# their commits could not be looked up where this was written (no Hub access); pass --text-file for a fixed corpus.
WIKITEXT_REVISION = "b08601e04326c79dfdd32d625aee71d232d685c3"


HUB_DATASETS: dict[str, HubDataset] = {
    "wikitext-103-raw-v1": HubDataset("Salesforce/wikitext", "wikitext-103-raw-v1", "text", ("train",), "validation",
                                      lines=True, revision=WIKITEXT_REVISION),
    "wikitext-2-raw-v1": HubDataset("Salesforce/wikitext", "wikitext-2-raw-v1", "text", ("train",), "validation",
                                    lines=True, revision=WIKITEXT_REVISION),
    # WikiText-2 as in ../shared/data/wikitext-2 (valid.txt + test.txt: the v1 splits, with <unk>), held out by
    # article like those files: the same documents and the same validation articles (the quick preset's fallback).
    "wikitext-2-v1-valid-test": HubDataset("Salesforce/wikitext", "wikitext-2-v1", "text", ("validation", "test"), None,
                                           lines=True, revision=WIKITEXT_REVISION),
    "fineweb-edu": HubDataset("HuggingFaceFW/fineweb-edu", "sample-10BT", "text", ("train",), None, streamed=True),
    "yelp_polarity": HubDataset("fancyzhx/yelp_polarity", None, "labelled", ("train",), "test"),
    # 1,000 reviews (500 per class) of yelp_polarity's test split (17.7 MB, streamed; the 256 MB train split is
    # never fetched), split per class like a local file (the quick preset's fallback).
    "yelp_polarity-1k": HubDataset("fancyzhx/yelp_polarity", None, "labelled", ("test",), None, streamed=True,
                                   per_class=500),
    # SST-2 as GLUE distributes it (../shared/data/sst-2: train.tsv, dev.tsv = its validation split).
    "sst2": HubDataset("nyu-mll/glue", "sst2", "labelled", ("train",), "validation", text_column="sentence"),
}


# --------------------------------------------------------------------------- Hugging Face datasets
def _offline_reason() -> str | None:
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    return None


def _hub_address() -> tuple[str, int]:
    from huggingface_hub import constants

    url = urlparse(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)
    return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


def _can_connect(address: tuple[str, int], timeout: float) -> str | None:
    """None if a TCP connection to `address` opens within `timeout` seconds, else why not.

    Runs in a daemon thread so that a slow name lookup (which ignores socket timeouts) cannot stall us.
    """
    outcome: dict[str, str | None] = {}

    def probe() -> None:
        try:
            socket.create_connection(address, timeout=timeout).close()
            outcome["error"] = None
        except OSError as e:
            outcome["error"] = type(e).__name__ + (f": {e.strerror or e}" if str(e) else "")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome.get("error", f"no answer within {timeout:g} s")


def check_hub_reachable(dataset: str, timeout: float = HUB_TIMEOUT_S) -> None:
    """Raise DatasetUnavailable (within about `timeout` seconds) unless the Hub can be reached."""
    reason = _offline_reason() or _can_connect(_hub_address(), timeout)
    if reason:
        raise DatasetUnavailable(
            f"dataset {dataset!r} must be downloaded from the Hugging Face Hub, which cannot be reached "
            f"({reason}); pass local files instead with --text-file PATH"
        )


def _hub_spec(dataset: str, kind: str) -> HubDataset:
    names = [n for n, spec in HUB_DATASETS.items() if spec.kind == kind]
    if dataset not in names:
        raise TextDataError(f"dataset={dataset!r} is not one of: {', '.join(names)} (or use --text-file)")
    return HUB_DATASETS[dataset]


def _hub_load(dataset: str, spec: HubDataset, split: str):
    check_hub_reachable(dataset)
    import datasets

    try:
        return datasets.load_dataset(spec.repo, spec.config, split=split, streaming=spec.streamed,
                                     revision=spec.revision)
    except Exception as e:  # network, missing split, ...: one line naming the dataset
        raise TextDataError(f"dataset {dataset!r}: loading {spec.repo} failed ({type(e).__name__}: {e})") from None


def _column(rows: Any, name: str, streamed: bool):
    """One column of a loaded split: indexed on a (non-streamed) Dataset, row by row when streamed."""
    return (row[name] for row in rows) if streamed else rows[name]


def rejoin_lines(lines: Any) -> str:
    """The text of a file stored one row per line (WikiText on the Hub: each row a line with its newline,
    blank lines as ""): blank lines come back as WikiText's " \\n", so the text is the original file's."""
    return "".join(line if line else " \n" for line in lines)


def _hub_documents(dataset: str, spec: HubDataset, split: str, max_docs: int | None) -> list[str]:
    rows = _hub_load(dataset, spec, split)
    if spec.lines:
        return split_documents(rejoin_lines(_column(rows, "text", spec.streamed)))
    texts = _column(rows, "text", spec.streamed)
    if spec.streamed:
        texts = itertools.islice(texts, max_docs or STREAMED_DEFAULT_DOCS)
    return [t for t in texts if t.strip()]


def _load_hub_text(dataset: str, val_fraction: float, max_docs: int | None, split_seed: int = 0) -> TextCorpus:
    spec = _hub_spec(dataset, "text")
    docs = [doc for split in spec.splits for doc in _hub_documents(dataset, spec, split, max_docs)]
    if spec.held_out is None:  # like local files: the same documents give the same split
        return _hold_out_documents(dataset, docs, val_fraction, max_docs, split_seed)
    return TextCorpus(dataset, docs[:max_docs] if max_docs else docs, _hub_documents(dataset, spec, spec.held_out, None))


def _hub_labelled(dataset: str, spec: HubDataset, split: str, classes: list[str],
                  cache: Path | None = None) -> tuple[list[str], list[int]]:
    """(texts, class indices) of one split, or its fixed per-class sample (cached in `cache` like token arrays)."""

    def load() -> dict[str, list]:
        rows = _hub_load(dataset, spec, split)
        column = spec.text_column
        pairs = ((r[column], r["label"]) for r in rows) if spec.streamed else zip(rows[column], rows["label"])
        texts, labels, bad = [], [], set()
        for text, label in pairs:
            if str(label) in classes:
                texts.append(text)
                labels.append(classes.index(str(label)))
            else:
                bad.add(str(label))
        if bad:
            raise TextDataError(
                f"dataset {dataset!r}: labels {sorted(bad)} are not among the classes {classes} (set --classes)")
        if spec.per_class is not None:
            texts, labels = sample_per_class(texts, labels, len(classes), spec.per_class)
        return {"texts": texts, "labels": labels}

    if spec.per_class is None:
        data = load()
    else:
        data = cached_json(cache, _digest(dataset, spec, split, classes, CACHE_FORMAT), load)
    return data["texts"], data["labels"]


def sample_per_class(texts: list[str], labels: list[int], n_classes: int, per_class: int) -> tuple[list[str], list[int]]:
    """A fixed sample: the `per_class` texts of each class with the smallest SHA-256 of their text, in that
    order (classes interleaved by hash). The same texts give the same sample in any row order."""
    keyed = sorted((hashlib.sha256(t.encode("utf-8")).digest(), t, y) for t, y in zip(texts, labels))
    taken, kept = [0] * n_classes, []
    for _, text, label in keyed:
        if taken[label] < per_class:
            taken[label] += 1
            kept.append((text, label))
    return [t for t, _ in kept], [y for _, y in kept]


def _load_hub_labelled(dataset: str, classes: list[str], val_fraction: float, max_docs: int | None,
                       cache: Path | None = None, split_seed: int = 0) -> LabelledCorpus:
    spec = _hub_spec(dataset, "labelled")
    texts, labels = [], []
    for split in spec.splits:
        t, y = _hub_labelled(dataset, spec, split, classes, cache)
        texts += t
        labels += y
    if spec.held_out is None:  # like local files: split per class
        return _hold_out_per_class(dataset, classes, texts, labels, val_fraction, max_docs, split_seed)
    val_texts, val_labels = _hub_labelled(dataset, spec, spec.held_out, classes, cache)
    if max_docs:
        texts, labels = texts[:max_docs], labels[:max_docs]
    return LabelledCorpus(dataset, classes, texts, labels, val_texts, val_labels)
