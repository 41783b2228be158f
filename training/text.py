"""Text workloads: corpora, tokenizers, the token cache, and the `lm` and `sentiment` tasks.

Read top to bottom:

* **Corpora.** Local files or folders (`text_file`, any number), split into documents and then
  into train/validation *by document*, deterministically: WikiText article titles (` = Title = `
  lines, not ` = = Section = = `) start documents; otherwise blank-line-separated blocks; otherwise
  single lines. Labelled text is `sentence<TAB>label` lines or a CSV with `text` and `label` columns,
  split per class (stratified). Hugging Face datasets by name (`HUB_DATASETS`) when the Hub can be
  reached; otherwise a one-line error within seconds that suggests `--text-file`. A dataset without a
  held-out split of its own (`wikitext-2-v1-valid-test`, `yelp_polarity-1k`, `fineweb-edu`) is held
  out like local files.
* **Tokenizers.** Byte-level BPE trained with `tokenizers` on the training split only, or plain bytes
  (256 + 2 special tokens). Both are byte-level, so every text round-trips exactly. The tokenizer is
  attached to the model and saved with its checkpoint (models/tokenizer.py).
* **Cache.** Inside a `task_data_cache(dir)` block (the trainer opens one at `<run dir>/../.token_cache`,
  shared by the runs of a sweep) the trained tokenizer is cached by (training text, kind, vocab size)
  and token arrays by (text, tokenizer), as `.json` / `.npy` files written atomically.
* **Tasks.** `lm`: random windows of `seq_len` training tokens, next-token loss on every position but
  the first; evaluation on fixed non-overlapping windows of the validation split, with perplexity.
  `sentiment`: `<|endoftext|>` + the sentence, right-padded; bidirectional attention, mean-pooled
  residual stream, classification head (`model_overrides`); accuracy on the held-out split.

Every problem with the input (missing, empty or non-UTF-8 file, a label outside the classes, too
little text for one sequence) is a `TextDataError` (a ValueError) whose one-line message names the file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import socket
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

import numpy as np
import tokenizers
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from models.tokenizer import SPECIAL_TOKENS, bos_id, pad_id, tokenizer_from_json, tokenizer_to_json

from .tasks import DEFAULT_EVAL_SIZE, SPLIT_SEED, Batch, Task, _check_int, data_cache_dir

__all__ = [
    "HUB_DATASETS",
    "TextDataError",
    "DatasetUnavailable",
    "TextCorpus",
    "LabelledCorpus",
    "split_documents",
    "load_text_corpus",
    "load_labelled_corpus",
    "check_hub_reachable",
    "byte_tokenizer",
    "train_bpe",
    "LanguageModeling",
    "SentimentClassification",
]

TOKENIZERS = ("bpe", "byte")
DEFAULT_VOCAB_SIZE = 4096  # BPE
MIN_BPE_VOCAB = 256 + len(SPECIAL_TOKENS) + 1  # at least one merge
HUB_TIMEOUT_S = 3.0
STREAMED_DEFAULT_DOCS = 100_000  # documents taken from a streamed dataset when max_docs is not given
CACHE_FORMAT = 1  # bump when the cached arrays change meaning


class TextDataError(ValueError):
    """Unusable text input; the message is one line and names the file or dataset."""


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


HUB_DATASETS: dict[str, HubDataset] = {
    "wikitext-103-raw-v1": HubDataset("Salesforce/wikitext", "wikitext-103-raw-v1", "text", ("train",), "validation",
                                      lines=True),
    "wikitext-2-raw-v1": HubDataset("Salesforce/wikitext", "wikitext-2-raw-v1", "text", ("train",), "validation",
                                    lines=True),
    # WikiText-2 as in ../shared/data/wikitext-2 (valid.txt + test.txt: the v1 splits, with <unk>), held out by
    # article like those files: the same documents and the same validation articles (the quick preset's fallback).
    "wikitext-2-v1-valid-test": HubDataset("Salesforce/wikitext", "wikitext-2-v1", "text", ("validation", "test"), None,
                                           lines=True),
    "fineweb-edu": HubDataset("HuggingFaceFW/fineweb-edu", "sample-10BT", "text", ("train",), None, streamed=True),
    "yelp_polarity": HubDataset("fancyzhx/yelp_polarity", None, "labelled", ("train",), "test"),
    # 1,000 reviews (500 per class) of yelp_polarity's test split (17.7 MB, streamed; the 256 MB train split is
    # never fetched), split per class like a local file (the quick preset's fallback).
    "yelp_polarity-1k": HubDataset("fancyzhx/yelp_polarity", None, "labelled", ("test",), None, streamed=True,
                                   per_class=500),
}


# --------------------------------------------------------------------------- reading local files
def expand_paths(paths: list[str]) -> list[Path]:
    """Files named by `paths`; a folder stands for every non-hidden file below it, in sorted order."""
    files: list[Path] = []
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(path).parts)
            )
            if not found:
                raise TextDataError(f"{path}: folder holds no files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TextDataError(f"{path}: no such file or folder")
    return files


def read_text_file(path: Path) -> str:
    """The UTF-8 text of `path` (BOM dropped, newlines normalised); empty or non-UTF-8 files are errors."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TextDataError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); convert the file to UTF-8"
        ) from None
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise TextDataError(f"{path}: file is empty")
    return text


_WIKITEXT_TITLE = re.compile(r"^ = [^=](?:.*[^=])? = $")  # " = Title = ", not " = = Section = = "
_BLANK_LINES = re.compile(r"\n[ \t]*\n")


def split_documents(text: str) -> list[str]:
    """Documents of a text: WikiText articles, else blank-line-separated blocks, else lines (blank ones dropped)."""
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if _WIKITEXT_TITLE.match(line)]
    if starts:
        bounds = ([0] if starts[0] > 0 else []) + starts + [len(lines)]
        docs = ["\n".join(lines[a:b]).strip("\n") for a, b in zip(bounds, bounds[1:])]
    else:
        docs = [block.strip("\n") for block in _BLANK_LINES.split(text)]
        if sum(1 for d in docs if d.strip()) < 2:
            docs = lines
    return [d for d in docs if d.strip()]


def _rank(n: int, salt: str = "") -> list[int]:
    """A fixed pseudo-random order of range(n), the same on every machine and library version."""
    return sorted(range(n), key=lambda i: hashlib.sha256(f"{SPLIT_SEED}:{salt}:{i}".encode()).digest())


def _held_out(n: int, val_fraction: float, salt: str = "") -> tuple[list[int], list[int]]:
    """Deterministic split of range(n) into (train, validation) indices, validation ~ val_fraction of n."""
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    val = set(_rank(n, salt)[:n_val])
    return [i for i in range(n) if i not in val], sorted(val)


def _describe(files: list[Path]) -> str:
    names = [str(f) for f in files]
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])} and {len(names) - 3} more files"


def _hash_texts(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        data = t.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@dataclass
class TextCorpus:
    """Documents for language modeling, split by document."""

    source: str  # the files or dataset, for messages
    train: list[str]
    validation: list[str]


@dataclass
class LabelledCorpus:
    """Texts with class indices (positions in `classes`), split per class."""

    source: str
    classes: list[str]
    train_texts: list[str]
    train_labels: list[int]
    val_texts: list[str]
    val_labels: list[int]


def load_text_corpus(
    text_file: list[str] | None, dataset: str | None, val_fraction: float, max_docs: int | None
) -> TextCorpus:
    """Documents from local files (split by document) or a Hub dataset (its own splits when it has them)."""
    if dataset is not None:
        return _load_hub_text(dataset, val_fraction, max_docs)
    files = expand_paths(text_file or [])
    docs = [doc for f in files for doc in split_documents(read_text_file(f))]
    return _hold_out_documents(_describe(files), docs, val_fraction, max_docs)


def _hold_out_documents(source: str, docs: list[str], val_fraction: float, max_docs: int | None) -> TextCorpus:
    """The first `max_docs` documents, split into train/validation by document (deterministically)."""
    if max_docs is not None:
        docs = docs[:max_docs]
    if len(docs) < 2:
        raise TextDataError(f"{source}: found {len(docs)} document; need at least 2 to hold some out for validation")
    train, val = _held_out(len(docs), val_fraction)
    return TextCorpus(source, [docs[i] for i in train], [docs[i] for i in val])


def read_labelled_file(path: Path, classes: list[str]) -> tuple[list[str], list[int]]:
    """(texts, class indices) of a `sentence<TAB>label` file or a CSV with `text` and `label` columns."""
    text = read_text_file(path)
    texts, labels = [], []

    def add(where: str, sentence: str, label: str) -> None:
        label = label.strip()
        if label not in classes:
            raise TextDataError(
                f"{where}: label {label!r} is not one of the classes {classes} (set them with --classes)"
            )
        texts.append(sentence)
        labels.append(classes.index(label))

    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
            raise TextDataError(f"{path}: a CSV needs 'text' and 'label' columns, found {reader.fieldnames}")
        for row in reader:
            add(f"{path}:{reader.line_num}", row["text"] or "", row["label"] or "")
    else:
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            if "\t" not in line:
                raise TextDataError(f"{path}:{number}: expected 'sentence<TAB>label', found no tab")
            sentence, label = line.rsplit("\t", 1)
            add(f"{path}:{number}", sentence, label)
    if not texts:
        raise TextDataError(f"{path}: file is empty")
    return texts, labels


def _stratified(labels: list[int], n_classes: int, val_fraction: float) -> tuple[list[int], list[int]]:
    """(train, validation) indices holding out ~val_fraction of every class, deterministically."""
    train, val = [], []
    for c in range(n_classes):
        members = [i for i, y in enumerate(labels) if y == c]
        if len(members) < 2:
            continue  # reported by the caller
        tr, va = _held_out(len(members), val_fraction, salt=f"class{c}")
        train += [members[i] for i in tr]
        val += [members[i] for i in va]
    return sorted(train), sorted(val)


def load_labelled_corpus(
    text_file: list[str] | None, dataset: str | None, classes: list[str], val_fraction: float, max_docs: int | None
) -> LabelledCorpus:
    """Labelled texts from local files (stratified split) or a Hub dataset (its train/test splits)."""
    if dataset is not None:
        return _load_hub_labelled(dataset, classes, val_fraction, max_docs)
    files = expand_paths(text_file or [])
    texts, labels = [], []
    for f in files:
        t, y = read_labelled_file(f, classes)
        texts += t
        labels += y
    return _hold_out_per_class(_describe(files), classes, texts, labels, val_fraction, max_docs)


def _hold_out_per_class(source: str, classes: list[str], texts: list[str], labels: list[int], val_fraction: float,
                        max_docs: int | None) -> LabelledCorpus:
    """The first `max_docs` texts, `val_fraction` of each class held out (deterministically)."""
    if max_docs is not None:
        texts, labels = texts[:max_docs], labels[:max_docs]
    counts = [labels.count(c) for c in range(len(classes))]
    if min(counts) < 2:
        few = [f"{cls!r}: {n}" for cls, n in zip(classes, counts) if n < 2]
        raise TextDataError(f"{source}: every class needs at least 2 examples to hold some out ({', '.join(few)})")
    train, val = _stratified(labels, len(classes), val_fraction)
    return LabelledCorpus(
        source, classes,
        [texts[i] for i in train], [labels[i] for i in train], [texts[i] for i in val], [labels[i] for i in val],
    )


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
        return datasets.load_dataset(spec.repo, spec.config, split=split, streaming=spec.streamed)
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


def _load_hub_text(dataset: str, val_fraction: float, max_docs: int | None) -> TextCorpus:
    spec = _hub_spec(dataset, "text")
    docs = [doc for split in spec.splits for doc in _hub_documents(dataset, spec, split, max_docs)]
    if spec.held_out is None:  # like local files: the same documents give the same split
        return _hold_out_documents(dataset, docs, val_fraction, max_docs)
    return TextCorpus(dataset, docs[:max_docs] if max_docs else docs, _hub_documents(dataset, spec, spec.held_out, None))


def _hub_labelled(dataset: str, spec: HubDataset, split: str, classes: list[str]) -> tuple[list[str], list[int]]:
    """(texts, class indices) of one split, or its fixed per-class sample (cached like token arrays)."""
    cache = data_cache_dir() if spec.per_class is not None else None
    path = None if cache is None else cache / f"hub-{_digest(dataset, spec, split, classes, CACHE_FORMAT)}.json"
    if path is not None and path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            return saved["texts"], saved["labels"]
        except (ValueError, KeyError, OSError):
            pass  # unreadable cache entry: load again and overwrite it
    rows = _hub_load(dataset, spec, split)
    pairs = ((r["text"], r["label"]) for r in rows) if spec.streamed else zip(rows["text"], rows["label"])
    texts, labels, bad = [], [], set()
    for text, label in pairs:
        if str(label) in classes:
            texts.append(text)
            labels.append(classes.index(str(label)))
        else:
            bad.add(str(label))
    if bad:
        raise TextDataError(f"dataset {dataset!r}: labels {sorted(bad)} are not among the classes {classes} (set --classes)")
    if spec.per_class is not None:
        texts, labels = sample_per_class(texts, labels, len(classes), spec.per_class)
    if path is not None:
        _atomic_write(path, lambda fh: json.dump({"texts": texts, "labels": labels}, fh), "w")
    return texts, labels


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


def _load_hub_labelled(dataset: str, classes: list[str], val_fraction: float, max_docs: int | None) -> LabelledCorpus:
    spec = _hub_spec(dataset, "labelled")
    texts, labels = [], []
    for split in spec.splits:
        t, y = _hub_labelled(dataset, spec, split, classes)
        texts += t
        labels += y
    if spec.held_out is None:  # like local files: split per class
        return _hold_out_per_class(dataset, classes, texts, labels, val_fraction, max_docs)
    val_texts, val_labels = _hub_labelled(dataset, spec, spec.held_out, classes)
    if max_docs:
        texts, labels = texts[:max_docs], labels[:max_docs]
    return LabelledCorpus(dataset, classes, texts, labels, val_texts, val_labels)


# --------------------------------------------------------------------------- tokenizers
def _byte_chars() -> list[str]:
    """The printable character that byte-level tokenizers use for each byte value 0..255 (GPT-2's map)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), 256))
    chars, shifted = [], 0
    for b in range(256):
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + shifted))
            shifted += 1
    return chars


def _byte_level(tokenizer: Tokenizer) -> Tokenizer:
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def byte_tokenizer() -> Tokenizer:
    """Bytes as tokens: ids 0, 1 are <|endoftext|>, <pad>; id 2 + b is byte b."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({ch: len(SPECIAL_TOKENS) + b for b, ch in enumerate(_byte_chars())})
    tokenizer = _byte_level(Tokenizer(models.BPE(vocab=vocab, merges=[])))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer_from_json(tokenizer.to_str())


def train_bpe(documents: list[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer of at most `vocab_size` tokens (ids 0, 1 special) trained on `documents`.

    Merges need a pair seen at least twice, so a small corpus can give fewer than `vocab_size` tokens.
    """
    tokenizer = _byte_level(Tokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tokenizer_from_json(tokenizer.to_str())


# --------------------------------------------------------------------------- cache
def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


def _atomic_write(path: Path, write: Callable[[Any], None], mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cached_tokenizer(key: str, build: Callable[[], Tokenizer]) -> Tokenizer:
    cache = data_cache_dir()
    path = None if cache is None else cache / f"tokenizer-{key}.json"
    if path is not None and path.is_file():
        try:
            return tokenizer_from_json(path.read_text(encoding="utf-8"), str(path))
        except (ValueError, UnicodeDecodeError):
            pass  # unreadable cache entry: rebuild and overwrite it
    tokenizer = build()
    if path is not None:
        _atomic_write(path, lambda fh: fh.write(tokenizer_to_json(tokenizer)), "w")
    return tokenizer


def _cached_array(key: str, build: Callable[[], np.ndarray]) -> np.ndarray:
    cache = data_cache_dir()
    path = None if cache is None else cache / f"tokens-{key}.npy"
    if path is not None and path.is_file():
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError):
            pass
    array = build()
    if path is not None:
        _atomic_write(path, lambda fh: np.save(fh, array, allow_pickle=False), "wb")
    return array


def get_tokenizer(kind: str, vocab_size: int, train_texts: list[str], train_hash: str) -> Tokenizer:
    """The tokenizer for a corpus: cached by (training text, kind, vocab size, library version)."""
    if kind == "byte":
        return byte_tokenizer()
    key = _digest("bpe", vocab_size, tokenizers.__version__, train_hash, CACHE_FORMAT)
    return _cached_tokenizer(key, lambda: train_bpe(train_texts, vocab_size))


def _token_dtype(tokenizer: Tokenizer) -> type:
    return np.uint16 if tokenizer.get_vocab_size() <= 2**16 else np.int32


def _encode_all(tokenizer: Tokenizer, texts: list[str], chunk: int = 2048) -> list[list[int]]:
    out: list[list[int]] = []
    for start in range(0, len(texts), chunk):
        out += [e.ids for e in tokenizer.encode_batch_fast(texts[start : start + chunk], add_special_tokens=False)]
    return out


def encode_documents(tokenizer: Tokenizer, documents: list[str]) -> np.ndarray:
    """One token stream: every document preceded by <|endoftext|> (1-D uint16, or int32 for big vocabularies)."""
    bos, dtype = bos_id(tokenizer), _token_dtype(tokenizer)
    parts = [np.asarray([bos] + ids, dtype=dtype) for ids in _encode_all(tokenizer, documents)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def encode_rows(tokenizer: Tokenizer, texts: list[str], seq_len: int) -> np.ndarray:
    """[n, seq_len] rows: <|endoftext|> + the text's tokens, cut to seq_len, right-padded with <pad>."""
    rows = np.full((len(texts), seq_len), pad_id(tokenizer), dtype=_token_dtype(tokenizer))
    bos = bos_id(tokenizer)
    for i, ids in enumerate(_encode_all(tokenizer, texts)):
        row = ([bos] + ids)[:seq_len]
        rows[i, : len(row)] = row
    return rows


def _tokenizer_hash(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(tokenizer_to_json(tokenizer).encode()).hexdigest()


# --------------------------------------------------------------------------- tasks
class _TextTask(Task):
    """Shared parameter checks and tokenizer set-up of the text tasks."""

    eval_disjoint = True  # train and validation are disjoint by document (or row)

    def _check_common(self, text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs) -> None:
        name = self.name
        if isinstance(text_file, (str, Path)):
            text_file = [text_file]
        self.text_file = None if text_file is None else [str(p) for p in text_file]
        self.dataset = dataset
        if (not self.text_file) == (dataset is None):
            raise TextDataError(
                f"{name}: give text_file (--text-file PATH, repeatable) or dataset (--dataset NAME), exactly one; "
                f"datasets: {', '.join(n for n, s in HUB_DATASETS.items() if s.kind == self._dataset_kind)}"
            )
        self.seq_len = _check_int(name, "seq_len", seq_len, 2, 1 << 20)
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"{name}: tokenizer={tokenizer!r} is not one of: {', '.join(TOKENIZERS)}")
        self.tokenizer = tokenizer
        if vocab_size is not None and tokenizer == "byte":
            raise ValueError(f"{name}: vocab_size={vocab_size} applies to tokenizer='bpe' only; allowed: none for 'byte'")
        self.vocab_size = None if vocab_size is None else _check_int(name, "vocab_size", vocab_size, MIN_BPE_VOCAB, 1 << 20)
        if not (isinstance(val_fraction, (int, float)) and 0 < val_fraction < 1):
            raise ValueError(f"{name}: val_fraction={val_fraction!r} is out of range; allowed: 0 < val_fraction < 1")
        self.val_fraction = float(val_fraction)
        self.max_docs = None if max_docs is None else _check_int(name, "max_docs", max_docs, 2)

    def _setup_tokenizer(self, train_texts: list[str], train_hash: str) -> None:
        vocab_size = self.vocab_size or DEFAULT_VOCAB_SIZE
        self.text_tokenizer = get_tokenizer(self.tokenizer, vocab_size, train_texts, train_hash)
        self._tokenizer_hash = _tokenizer_hash(self.text_tokenizer)
        size = self.text_tokenizer.get_vocab_size()
        self.vocab = [self.text_tokenizer.id_to_token(i) for i in range(size)]
        self.pad_id = pad_id(self.text_tokenizer)

    @property
    def data_fingerprint(self) -> str:
        return self._fingerprint

    def decode(self, tokens_row: torch.Tensor | list[int]) -> str:
        """The text of a row (padding dropped, <|endoftext|> written out)."""
        ids = tokens_row.tolist() if isinstance(tokens_row, torch.Tensor) else list(tokens_row)
        return self.text_tokenizer.decode([i for i in ids if i != self.pad_id], skip_special_tokens=False)


class LanguageModeling(_TextTask):
    """Next-token prediction on real text (`--task lm`).

    The training split's documents, tokenized once, form one stream (each document preceded by
    `<|endoftext|>`); `sample` draws windows of `seq_len` tokens at uniformly random offsets, scored on
    every position but the first. `eval_set()` is the validation split cut into non-overlapping
    windows (at most `DEFAULT_EVAL_SIZE`, spread evenly over the split); the trainer adds log perplexity
    (= eval_loss, nats per token) and perplexity to its eval records.
    Parameters: `text_file` (files or folders) or `dataset` (a name in HUB_DATASETS), `seq_len`,
    `tokenizer` ("bpe" or "byte"), `vocab_size` (BPE, default 4096), `val_fraction` (local files, and
    datasets held out like them), `max_docs` (use only the first documents; streamed datasets default
    to 100,000).
    """

    name = "lm"
    metric = "token"
    layout = "t_0 [t_1 .. t_{L-1}]   (L = seq_len consecutive tokens of the training text)"
    _dataset_kind = "text"

    def __init__(
        self,
        text_file: list[str] | None = None,
        dataset: str | None = None,
        seq_len: int = 128,
        tokenizer: str = "bpe",
        vocab_size: int | None = None,
        val_fraction: float = 0.1,
        max_docs: int | None = None,
    ):
        self._check_common(text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs)
        corpus = load_text_corpus(self.text_file, self.dataset, self.val_fraction, self.max_docs)
        train_hash, val_hash = _hash_texts(corpus.train), _hash_texts(corpus.validation)
        self._setup_tokenizer(corpus.train, train_hash)
        tok = self.text_tokenizer
        self.train_tokens = _cached_array(
            _digest("lm", train_hash, self._tokenizer_hash, CACHE_FORMAT), lambda: encode_documents(tok, corpus.train)
        )
        self.val_tokens = _cached_array(
            _digest("lm", val_hash, self._tokenizer_hash, CACHE_FORMAT), lambda: encode_documents(tok, corpus.validation)
        )
        for split, array in (("training", self.train_tokens), ("validation", self.val_tokens)):
            if len(array) < self.seq_len:
                raise TextDataError(
                    f"{corpus.source}: the {split} split has {len(array)} tokens, fewer than one sequence "
                    f"(seq_len={self.seq_len}); give more text or a smaller --seq-len"
                )
        self._fingerprint = _digest(train_hash, val_hash, self._tokenizer_hash)
        self.source = corpus.source

    @property
    def model_overrides(self) -> dict[str, Any]:
        return {"causal": True}  # bidirectional attention would see the next token

    @property
    def eval_windows(self) -> int:
        return len(self.val_tokens) // self.seq_len

    @property
    def default_eval_size(self) -> int:
        return min(self.eval_windows, DEFAULT_EVAL_SIZE)

    def _windows(self, array: np.ndarray, starts: np.ndarray) -> Batch:
        tokens = torch.from_numpy(array[starts[:, None] + np.arange(self.seq_len)].astype(np.int64))
        mask = torch.ones(tokens.shape, dtype=torch.bool)
        mask[:, 0] = False
        return tokens, mask

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        starts = torch.randint(0, len(self.train_tokens) - self.seq_len + 1, (n,), generator=g)
        return self._windows(self.train_tokens, starts.numpy())

    def eval_set(self, n: int | None = None) -> Batch:
        """`n` (default `default_eval_size`) non-overlapping validation windows, evenly spread; at most all of them."""
        n = self.default_eval_size if n is None else _check_int(self.name, "n", n, 1)
        n = min(n, self.eval_windows)
        index = np.arange(n, dtype=np.int64) * self.eval_windows // n
        return self._windows(self.val_tokens, index * self.seq_len)

    def extra_eval_metrics(self, eval_loss: float) -> dict[str, float]:
        return {"eval_log_perplexity": eval_loss, "eval_perplexity": math.exp(min(eval_loss, 700.0))}


class SentimentClassification(_TextTask):
    """Sentence classification (`--task sentiment`): bidirectional attention, mean-pooled, a class head.

    Rows are `<|endoftext|>` + the text's tokens, cut to `seq_len` and right-padded with `<pad>`;
    `sample` returns (tokens, mask of real tokens, labels) for rows drawn uniformly from the training
    split; `eval_set()` is the held-out split in a fixed shuffled order. Local files are split per class
    (`val_fraction` of each), and so is `yelp_polarity-1k` (a fixed 1,000-review sample); `yelp_polarity`
    uses its train/test splits. `classes` lists the label values in the files (default "0" "1"); class i
    is the i-th. The model gets `causal=False` and
    `n_classes=len(classes)` (`model_overrides`). Metric: accuracy ("label").
    """

    name = "sentiment"
    metric = "label"
    objective = "classification"
    layout = "<|endoftext|> w_1 .. w_k <pad> ..  -> [label]   (mean over the real tokens)"
    _dataset_kind = "labelled"

    def __init__(
        self,
        text_file: list[str] | None = None,
        dataset: str | None = None,
        classes: list[str] | None = None,
        seq_len: int = 64,
        tokenizer: str = "bpe",
        vocab_size: int | None = None,
        val_fraction: float = 0.2,
        max_docs: int | None = None,
    ):
        self._check_common(text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs)
        classes = ["0", "1"] if classes is None else [str(c) for c in classes]
        if len(classes) < 2 or len(set(classes)) != len(classes) or not all(c.strip() == c and c for c in classes):
            raise ValueError(f"{self.name}: classes={classes!r}; allowed: two or more distinct non-blank labels")
        self.classes = classes
        corpus = load_labelled_corpus(self.text_file, self.dataset, classes, self.val_fraction, self.max_docs)
        train_hash, val_hash = _hash_texts(corpus.train_texts), _hash_texts(corpus.val_texts)
        self._setup_tokenizer(corpus.train_texts, train_hash)
        tok, L = self.text_tokenizer, self.seq_len
        rows = {}
        for split, texts, digest in (("train", corpus.train_texts, train_hash), ("val", corpus.val_texts, val_hash)):
            key = _digest("rows", digest, self._tokenizer_hash, L, CACHE_FORMAT)
            rows[split] = torch.from_numpy(np.array(_cached_array(key, lambda t=texts: encode_rows(tok, t, L)), dtype=np.int64))
        self.train_rows, self.val_rows = rows["train"], rows["val"]
        self.train_labels = torch.tensor(corpus.train_labels, dtype=torch.int64)
        self.val_labels = torch.tensor(corpus.val_labels, dtype=torch.int64)
        self._eval_order = torch.tensor(_rank(len(self.val_rows), "eval"), dtype=torch.int64)
        self._fingerprint = _digest(train_hash, val_hash, self._tokenizer_hash, classes)
        self.source = corpus.source
        full = int((self.train_rows[:, -1] != self.pad_id).sum() + (self.val_rows[:, -1] != self.pad_id).sum())
        if full:
            warnings.warn(
                f"sentiment: {full} of {len(self.train_rows) + len(self.val_rows)} texts of {corpus.source} fill all "
                f"seq_len={L} positions and may be cut; raise --seq-len to keep long texts whole",
                stacklevel=2,
            )

    @property
    def model_overrides(self) -> dict[str, Any]:
        return {"causal": False, "n_classes": len(self.classes)}

    @property
    def default_eval_size(self) -> int:
        return min(len(self.val_rows), DEFAULT_EVAL_SIZE)

    def _rows(self, rows: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> Batch:
        tokens = rows[index]
        return tokens, tokens != self.pad_id, labels[index]

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        return self._rows(self.train_rows, self.train_labels, torch.randint(0, len(self.train_rows), (n,), generator=g))

    def eval_set(self, n: int | None = None) -> Batch:
        """The first `n` held-out rows in a fixed shuffled order (all of them by default, up to 4,000)."""
        n = self.default_eval_size if n is None else _check_int(self.name, "n", n, 1)
        return self._rows(self.val_rows, self.val_labels, self._eval_order[:n])
