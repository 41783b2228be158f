"""Text corpora from local files: reading them, splitting them into documents, and holding out validation.

Local files or folders (`text_file`, any number) are split into documents and then into
train/validation *by document*, deterministically: WikiText article titles (` = Title = ` lines, not
` = = Section = = `) start documents; otherwise blank-line-separated blocks; otherwise single lines.
Labelled text is `sentence<TAB>label` lines (UCI's layout; GLUE's adds a header line `sentence<TAB>label`,
which is skipped) or a CSV with `text` and `label` columns, split per class (stratified). A tuning split
(the validation set a learning rate is chosen on) can be held out of the training documents or texts in
the same way (`with_tuning_split`); `split_seed` draws another fixed split. Every problem with the input
(missing, empty or non-UTF-8 file, a label outside the classes) is a `TextDataError` (a ValueError) whose
one-line message names the file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .base import SPLIT_SEED


class TextDataError(ValueError):
    """Unusable text input; the message is one line and names the file or dataset."""


class DatasetUnavailable(TextDataError):
    """A Hub dataset was asked for but the Hub cannot be reached (or offline mode is on)."""


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


def _salt(name: str, split_seed: int) -> str:
    """The salt of a split: split seed 0 is the split made before seeds existed (the same held-out texts)."""
    return name if split_seed == 0 else f"split{split_seed}:{name}"


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
    """Documents for language modeling, split by document: training, held out for evaluation, and (optionally)
    held out of the training documents for tuning."""

    source: str  # the files or dataset, for messages
    train: list[str]
    validation: list[str]
    tuning: list[str] = field(default_factory=list)


@dataclass
class LabelledCorpus:
    """Texts with class indices (positions in `classes`), split per class."""

    source: str
    classes: list[str]
    train_texts: list[str]
    train_labels: list[int]
    val_texts: list[str]  # held out for evaluation (what a run reports)
    val_labels: list[int]
    tune_texts: list[str] = field(default_factory=list)  # held out of the training texts for tuning
    tune_labels: list[int] = field(default_factory=list)


def _hold_out_documents(source: str, docs: list[str], val_fraction: float, max_docs: int | None,
                        split_seed: int = 0) -> TextCorpus:
    """The first `max_docs` documents, split into train/validation by document (deterministically)."""
    if max_docs is not None:
        docs = docs[:max_docs]
    if len(docs) < 2:
        raise TextDataError(f"{source}: found {len(docs)} document; need at least 2 to hold some out for validation")
    train, val = _held_out(len(docs), val_fraction, _salt("", split_seed))
    return TextCorpus(source, [docs[i] for i in train], [docs[i] for i in val])


def with_tuning_split(corpus: TextCorpus | LabelledCorpus, tune_fraction: float,
                      split_seed: int = 0) -> TextCorpus | LabelledCorpus:
    """The corpus with `tune_fraction` of its training documents (per class, for labelled texts) held out as the
    tuning split, deterministically; the corpus as it is for 0."""
    if not tune_fraction:
        return corpus
    if isinstance(corpus, TextCorpus):
        if len(corpus.train) < 2:
            raise TextDataError(f"{corpus.source}: {len(corpus.train)} training document; need at least 2 to hold "
                                "some out for tuning")
        train, tune = _held_out(len(corpus.train), tune_fraction, _salt("tune", split_seed))
        return replace(corpus, train=[corpus.train[i] for i in train], tuning=[corpus.train[i] for i in tune])
    texts, labels = corpus.train_texts, corpus.train_labels
    counts = [labels.count(c) for c in range(len(corpus.classes))]
    if min(counts) < 2:
        raise TextDataError(f"{corpus.source}: every class needs at least 2 training texts to hold some out for tuning")
    train, tune = _stratified(labels, len(corpus.classes), tune_fraction, _salt("tune", split_seed))
    return replace(corpus, train_texts=[texts[i] for i in train], train_labels=[labels[i] for i in train],
                   tune_texts=[texts[i] for i in tune], tune_labels=[labels[i] for i in tune])


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
        header = True  # GLUE's TSV files start with `sentence<TAB>label`; UCI's start with a sentence
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            if "\t" not in line:
                raise TextDataError(f"{path}:{number}: expected 'sentence<TAB>label', found no tab")
            sentence, label = line.rsplit("\t", 1)
            if header and label.strip() == "label" and "label" not in classes:
                header = False
                continue
            header = False
            add(f"{path}:{number}", sentence, label)
    if not texts:
        raise TextDataError(f"{path}: file is empty")
    return texts, labels


def _stratified(labels: list[int], n_classes: int, val_fraction: float, salt: str = "") -> tuple[list[int], list[int]]:
    """(train, validation) indices holding out ~val_fraction of every class, deterministically."""
    train, val = [], []
    for c in range(n_classes):
        members = [i for i, y in enumerate(labels) if y == c]
        if len(members) < 2:
            continue  # reported by the caller
        tr, va = _held_out(len(members), val_fraction, salt=f"{salt}class{c}")
        train += [members[i] for i in tr]
        val += [members[i] for i in va]
    return sorted(train), sorted(val)


def _hold_out_per_class(source: str, classes: list[str], texts: list[str], labels: list[int], val_fraction: float,
                        max_docs: int | None, split_seed: int = 0) -> LabelledCorpus:
    """The first `max_docs` texts, `val_fraction` of each class held out (deterministically)."""
    if max_docs is not None:
        texts, labels = texts[:max_docs], labels[:max_docs]
    counts = [labels.count(c) for c in range(len(classes))]
    if min(counts) < 2:
        few = [f"{cls!r}: {n}" for cls, n in zip(classes, counts) if n < 2]
        raise TextDataError(f"{source}: every class needs at least 2 examples to hold some out ({', '.join(few)})")
    train, val = _stratified(labels, len(classes), val_fraction, _salt("", split_seed))
    return LabelledCorpus(
        source, classes,
        [texts[i] for i in train], [labels[i] for i in train], [texts[i] for i in val], [labels[i] for i in val],
    )
