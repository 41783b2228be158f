"""The text tasks, `lm` and `sentiment`, over the corpora (corpora.py, hub.py), tokenizers (bpe.py) and the
token cache (cache.py) of this package.

`lm`: random windows of `seq_len` training tokens, next-token loss on every position but the first;
evaluation on fixed non-overlapping windows of the validation split, with perplexity. `sentiment`:
`<|endoftext|>` + the sentence, right-padded; bidirectional attention, pooled residual stream,
classification head (`model_overrides`); accuracy on the held-out split, or on a test file of its own
(`test_file`, e.g. GLUE's SST-2 dev.tsv beside its train.tsv). Both can hold a tuning split out of their
training documents (`tune_fraction`: the validation set a learning rate is chosen on, `tuning_set`), and
`split_seed` draws other fixed splits. Both take the keyword `cache_dir`, where their tokenizer and token
arrays are cached (None: no cache); it is not a task parameter, so it is not recorded in run.json.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mixit_lab.models.tokenizer import pad_id

from .base import DEFAULT_EVAL_SIZE, Batch, Task, _check_int
from .bpe import DEFAULT_VOCAB_SIZE, MIN_BPE_VOCAB, TOKENIZERS, _tokenizer_hash, encode_documents, encode_rows, get_tokenizer
from .cache import CACHE_FORMAT, cached_array, digest as _digest
from .corpora import LabelledCorpus, TextCorpus, TextDataError, _describe, _hash_texts, _hold_out_documents
from .corpora import _hold_out_per_class, _rank, expand_paths, read_labelled_file, read_text_file, split_documents
from .corpora import with_tuning_split
from .hub import HUB_DATASETS, _load_hub_labelled, _load_hub_text


# --------------------------------------------------------------------------- corpora, local or from the Hub
def load_text_corpus(
    text_file: list[str] | None, dataset: str | None, val_fraction: float, max_docs: int | None, split_seed: int = 0
) -> TextCorpus:
    """Documents from local files (split by document) or a Hub dataset (its own splits when it has them)."""
    if dataset is not None:
        return _load_hub_text(dataset, val_fraction, max_docs, split_seed)
    files = expand_paths(text_file or [])
    docs = [doc for f in files for doc in split_documents(read_text_file(f))]
    return _hold_out_documents(_describe(files), docs, val_fraction, max_docs, split_seed)


def _read_labelled(files: list[Path], classes: list[str]) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    for f in files:
        t, y = read_labelled_file(f, classes)
        texts += t
        labels += y
    return texts, labels


def load_labelled_corpus(
    text_file: list[str] | None, dataset: str | None, classes: list[str], val_fraction: float, max_docs: int | None,
    cache: Path | None = None, test_file: list[str] | None = None, split_seed: int = 0,
) -> LabelledCorpus:
    """Labelled texts from local files (stratified split, or every text trained on and `test_file` held out) or a
    Hub dataset (its train/test splits)."""
    if dataset is not None:
        if test_file:
            raise TextDataError(f"dataset {dataset!r}: test_file applies to local files (text_file); the dataset "
                                "holds out its own split")
        return _load_hub_labelled(dataset, classes, val_fraction, max_docs, cache, split_seed)
    files = expand_paths(text_file or [])
    texts, labels = _read_labelled(files, classes)
    if not test_file:
        return _hold_out_per_class(_describe(files), classes, texts, labels, val_fraction, max_docs, split_seed)
    tests = expand_paths(test_file)
    val_texts, val_labels = _read_labelled(tests, classes)
    if max_docs is not None:
        texts, labels = texts[:max_docs], labels[:max_docs]
    return LabelledCorpus(f"{_describe(files)} (test: {_describe(tests)})", classes, texts, labels, val_texts, val_labels)


# --------------------------------------------------------------------------- tasks
class _TextTask(Task):
    """Shared parameter checks and tokenizer set-up of the text tasks."""

    eval_disjoint = True  # train and validation are disjoint by document (or row)
    needs_corpus = True

    def _check_common(self, text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs, tune_fraction,
                      split_seed) -> None:
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
        if isinstance(tune_fraction, bool) or not (isinstance(tune_fraction, (int, float)) and 0 <= tune_fraction < 1):
            raise ValueError(f"{name}: tune_fraction={tune_fraction!r} is out of range; allowed: 0 <= tune_fraction < 1 "
                             "(0: no tuning split)")
        self.tune_fraction = float(tune_fraction)
        self.split_seed = _check_int(name, "split_seed", split_seed, 0)

    def _setup_tokenizer(self, train_texts: list[str], train_hash: str) -> None:
        vocab_size = self.vocab_size or DEFAULT_VOCAB_SIZE
        self.text_tokenizer = get_tokenizer(self.tokenizer, vocab_size, train_texts, train_hash, self.cache_dir)
        self._tokenizer_hash = _tokenizer_hash(self.text_tokenizer)
        size = self.text_tokenizer.get_vocab_size()
        self.vocab = [self.text_tokenizer.id_to_token(i) for i in range(size)]
        self.pad_id = pad_id(self.text_tokenizer)

    @property
    def data_fingerprint(self) -> str:
        return self._fingerprint

    @property
    def tuning_disjoint(self) -> bool:
        return True  # the tuning split is documents (texts) that are never trained on

    def _no_tuning_split(self) -> ValueError:
        return ValueError(f"{self.name}: no tuning split to choose hyperparameters on; give tune_fraction (e.g. 0.1, "
                          "--tune-fraction) to hold some training documents out")

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
    to 100,000), `tune_fraction` (of the training documents, held out as the tuning split; 0: none) and
    `split_seed` (0: the split made before seeds existed; another draws other held-out documents).
    """

    name = "lm"
    metric = "token"
    headline = "eval_loss"  # judged by log-perplexity
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
        tune_fraction: float = 0.0,
        split_seed: int = 0,
        *,
        cache_dir: str | Path | None = None,
    ):
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._check_common(text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs, tune_fraction,
                           split_seed)
        corpus = with_tuning_split(load_text_corpus(self.text_file, self.dataset, self.val_fraction, self.max_docs,
                                                    self.split_seed), self.tune_fraction, self.split_seed)
        train_hash = _hash_texts(corpus.train)
        self._setup_tokenizer(corpus.train, train_hash)
        splits = {"training": corpus.train, "validation": corpus.validation, "tuning": corpus.tuning}
        hashes = {name: train_hash if name == "training" else _hash_texts(docs) for name, docs in splits.items()}
        arrays = {}
        for name, docs in splits.items():
            if name == "tuning" and not docs:
                arrays[name] = np.zeros(0, dtype=np.int64)
                continue
            arrays[name] = cached_array(self.cache_dir, _digest("lm", hashes[name], self._tokenizer_hash, CACHE_FORMAT),
                                        lambda d=docs: encode_documents(self.text_tokenizer, d))
            if len(arrays[name]) < self.seq_len:
                raise TextDataError(
                    f"{corpus.source}: the {name} split has {len(arrays[name])} tokens, fewer than one sequence "
                    f"(seq_len={self.seq_len}); give more text or a smaller --seq-len"
                )
        self.train_tokens, self.val_tokens, self.tune_tokens = arrays["training"], arrays["validation"], arrays["tuning"]
        tuning = (hashes["tuning"],) if corpus.tuning else ()  # no tuning split: the fingerprint of before it existed
        self._fingerprint = _digest(train_hash, hashes["validation"], self._tokenizer_hash, *tuning)
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

    @property
    def held_out_size(self) -> int:
        return self.eval_windows

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
        return self._spread_windows(self.val_tokens, n)

    def _spread_windows(self, array: np.ndarray, n: int) -> Batch:
        """`n` non-overlapping windows of `array`, evenly spread; at most all of them."""
        windows = len(array) // self.seq_len
        n = min(n, windows)
        index = np.arange(n, dtype=np.int64) * windows // n
        return self._windows(array, index * self.seq_len)

    def tuning_size(self) -> int:
        return len(self.tune_tokens) // self.seq_len

    def tuning_set(self, n: int, eval_n: int | None = None) -> Batch:
        """`n` non-overlapping windows of the tuning split (documents held out of training), evenly spread."""
        if not self.tuning_size():
            raise self._no_tuning_split()
        return self._spread_windows(self.tune_tokens, _check_int(self.name, "n", n, 1))

    def extra_eval_metrics(self, eval_loss: float) -> dict[str, float]:
        return {"eval_log_perplexity": eval_loss, "eval_perplexity": math.exp(min(eval_loss, 700.0))}


class SentimentClassification(_TextTask):
    """Sentence classification (`--task sentiment`): bidirectional attention, pooled, a class head.

    Rows are `<|endoftext|>` + the text's tokens, cut to `seq_len` and right-padded with `<pad>`;
    `sample` returns (tokens, mask of real tokens, labels) for rows drawn uniformly from the training
    split; `eval_set()` is the held-out split in a fixed shuffled order. Local files are split per class
    (`val_fraction` of each), and so is `yelp_polarity-1k` (a fixed 1,000-review sample); `yelp_polarity`
    uses its train/test splits. With `test_file` (labelled files of their own, e.g. SST-2's dev.tsv beside
    `text_file` train.tsv) every text of `text_file` is trained on and the test file is held out instead. `classes` lists the label values in the files (default "0" "1"); class i
    is the i-th. The model gets `causal=False` and `n_classes=len(classes)` (`model_overrides`); it
    reads the class from the last real token (ModelConfig.pooling "last", the authors' choice) or the
    mean over real tokens ("mean"). Metric: accuracy ("label").
    """

    name = "sentiment"
    metric = "label"
    objective = "classification"
    default_classes = ("0", "1")
    layout = "<|endoftext|> w_1 .. w_k <pad> ..  -> [label]   (read at the last real token, or their mean)"
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
        test_file: list[str] | None = None,
        tune_fraction: float = 0.0,
        split_seed: int = 0,
        *,
        cache_dir: str | Path | None = None,
    ):
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self._check_common(text_file, dataset, seq_len, tokenizer, vocab_size, val_fraction, max_docs, tune_fraction,
                           split_seed)
        self.test_file = [str(test_file)] if isinstance(test_file, (str, Path)) else (
            None if not test_file else [str(p) for p in test_file])
        classes = list(self.default_classes) if classes is None else [str(c) for c in classes]
        if len(classes) < 2 or len(set(classes)) != len(classes) or not all(c.strip() == c and c for c in classes):
            raise ValueError(f"{self.name}: classes={classes!r}; allowed: two or more distinct non-blank labels")
        self.classes = classes
        corpus = with_tuning_split(load_labelled_corpus(self.text_file, self.dataset, classes, self.val_fraction,
                                                        self.max_docs, self.cache_dir, self.test_file, self.split_seed),
                                   self.tune_fraction, self.split_seed)
        self._encode(corpus)
        self.source = corpus.source
        full = int(sum((rows[:, -1] != self.pad_id).sum() for rows in (self.train_rows, self.val_rows, self.tune_rows)))
        if full:
            total = len(self.train_rows) + len(self.val_rows) + len(self.tune_rows)
            warnings.warn(
                f"sentiment: {full} of {total} texts of {corpus.source} fill all seq_len={self.seq_len} positions and "
                "may be cut; raise --seq-len to keep long texts whole",
                stacklevel=2,
            )

    def _encode(self, corpus: LabelledCorpus) -> None:
        """The tokenizer (trained on the training texts) and each split's token rows and labels (cached)."""
        splits = {"train": (corpus.train_texts, corpus.train_labels), "val": (corpus.val_texts, corpus.val_labels),
                  "tune": (corpus.tune_texts, corpus.tune_labels)}
        hashes = {name: _hash_texts(texts) for name, (texts, _) in splits.items()}
        self._setup_tokenizer(corpus.train_texts, hashes["train"])
        tok, L = self.text_tokenizer, self.seq_len
        for name, (texts, labels) in splits.items():
            key = _digest("rows", hashes[name], self._tokenizer_hash, L, CACHE_FORMAT)
            array = cached_array(self.cache_dir, key, lambda t=texts: encode_rows(tok, t, L)) if texts else np.zeros((0, L))
            setattr(self, f"{name}_rows", torch.from_numpy(np.array(array, dtype=np.int64)).reshape(-1, L))
            setattr(self, f"{name}_labels", torch.tensor(labels, dtype=torch.int64))
        self._eval_order = torch.tensor(_rank(len(self.val_rows), "eval"), dtype=torch.int64)
        self._tune_order = torch.tensor(_rank(len(self.tune_rows), "tune"), dtype=torch.int64)
        tuning = (hashes["tune"],) if corpus.tune_texts else ()  # no tuning split: the fingerprint of before it existed
        self._fingerprint = _digest(hashes["train"], hashes["val"], self._tokenizer_hash, self.classes, *tuning)

    @property
    def model_overrides(self) -> dict[str, Any]:
        return {"causal": False, "n_classes": len(self.classes)}

    @property
    def default_eval_size(self) -> int:
        return min(len(self.val_rows), DEFAULT_EVAL_SIZE)

    @property
    def held_out_size(self) -> int:
        return len(self.val_rows)

    def _rows(self, rows: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> Batch:
        tokens = rows[index]
        return tokens, tokens != self.pad_id, labels[index]

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        return self._rows(self.train_rows, self.train_labels, torch.randint(0, len(self.train_rows), (n,), generator=g))

    def eval_set(self, n: int | None = None) -> Batch:
        """The first `n` held-out rows in a fixed shuffled order (all of them by default, up to 4,000)."""
        n = self.default_eval_size if n is None else _check_int(self.name, "n", n, 1)
        return self._rows(self.val_rows, self.val_labels, self._eval_order[:n])

    def tuning_size(self) -> int:
        return len(self.tune_rows)

    def tuning_set(self, n: int, eval_n: int | None = None) -> Batch:
        """The first `n` rows of the tuning split (texts held out of training) in a fixed shuffled order."""
        if not self.tuning_size():
            raise self._no_tuning_split()
        return self._rows(self.tune_rows, self.tune_labels, self._tune_order[:_check_int(self.name, "n", n, 1)])
