"""The base of every task: the `Task` class, its batch format, and `TrainStream`, which draws training batches.

Every task turns a batch request into ``(tokens, mask)``:

* ``tokens``: int64 ``[n, task.seq_len]``, ids in ``[0, task.d_vocab)``;
* ``mask``: bool ``[n, task.seq_len]``, True at the *target* (answer) positions.

The model is a causal LM trained with next-token cross-entropy: the logits at
position ``t - 1`` predict ``tokens[:, t]``, and the loss is applied where
``mask[:, t]`` is True (so ``mask[:, 0]`` is always False and ``tokens[mask]``
are exactly the answer tokens). Every task has a dedicated pad token
``pad_id`` that is never a real token, so ``tokens != pad_id`` is a valid key
padding mask.

Generation is pure torch, vectorised over the batch, and driven only by the
``torch.Generator`` passed in: the same generator state gives identical tensors.

Held-out evaluation: ``task.eval_set()`` is a fixed set built from fixed seeds
(independent of any training seed). ``TrainStream`` draws training batches and
replaces every row equal to an eval row, so the training stream never yields an
eval example. Two tasks need no filtering: ``modadd`` (train and eval are a
disjoint split of all pairs, ``eval_disjoint = True``) and ``memorize`` (the eval
set *is* the training set, ``eval_is_train = True``).

Tuning: ``task.tuning_set(n, eval_n)`` is a second held-out set, the validation set on which
hyperparameters (a learning rate) are chosen, disjoint from ``eval_set(eval_n)`` so that what a run
is chosen on and what it reports never share a row. Drawn tasks draw it from a seed of its own
(``TUNE_SEED``) and ``TrainStream`` keeps it out of training as it keeps the eval rows; text tasks hold
out a split of their training documents (``tune_fraction``); for ``memorize`` it is the training set,
since what a memorization run reports is how much of that set it stores.

Formats follow the authors' code (princeton-pli/MixiT) where sensible; see each
class docstring.

The algorithmic tasks are in algorithmic.py, the text tasks (`lm`, `sentiment`) in text.py; the
registry (`TASKS`, `get_task`) is the package's __init__. A classification task (``objective = "classification"``) returns
``(tokens, mask, labels)`` instead: ``mask`` marks the real (non-pad) tokens and
``labels`` int64 ``[n]`` the class of each row.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import numbers
import warnings
from typing import Any, ClassVar, Iterator

import torch

from mixit_lab.models.tokenizer import task_tokenizer

from ..sampling import SAMPLINGS, check_sampling

# Fixed seeds of the held-out data; they never depend on a training seed.
EVAL_SEED = 0x5EED_E7A1  # streaming tasks: eval chunk c is sample(EVAL_CHUNK, Generator(EVAL_SEED + c))
SPLIT_SEED = 12345  # modadd train/eval split (the authors shuffle with random.seed(12345))
LABEL_SEED = 12345  # memorize labels
TUNE_SEED = 0x7E5E_D5E7  # the tuning set: chunk c is sample(EVAL_CHUNK, Generator(TUNE_SEED + c)), less eval rows
EVAL_CHUNK = 1000
DEFAULT_EVAL_SIZE = 4000  # the authors' eval_size
# The most held-out rows a run may evaluate on (`eval_samples`; `Task.max_eval_size`): every eval pass
# scores them all, and training is kept away from each of them. A larger fixed held-out set raises it; a smaller
# one is scored whole (mixit_lab.training.resolve.check_eval_size).
MAX_EVAL_SIZE = 65_536

Batch = tuple[torch.Tensor, ...]  # (tokens, mask), or (tokens, mask, labels) for classification tasks

# Tasks that preprocess data (text tasks: tokenizers, token arrays) cache it in this directory when set.
def _check_int(task: str, name: str, value: Any, lo: int, hi: int | None = None) -> int:
    """Return `value` if it is an int in [lo, hi], else raise a one-line ValueError."""
    allowed = f"{lo} <= {name}" + (f" <= {hi}" if hi is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{task}: {name}={value!r} is not an int; allowed: {allowed}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{task}: {name}={value} is out of range; allowed: {allowed}")
    return int(value)


def _geometric(n: int, g: torch.Generator, cap: int = 64) -> torch.Tensor:
    """`n` draws of R >= 1 with P(R >= r) = 2^-(r-1) (keep flipping a fair coin), capped."""
    u = 1.0 - torch.rand(n, generator=g, dtype=torch.float64)  # (0, 1]
    return (1 + torch.floor(-torch.log2(u))).clamp(max=cap).long()


def _uniform_below(bound: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """One uniform integer in [0, bound[i]) per entry (bound >= 1)."""
    u = torch.rand(bound.shape, generator=g, dtype=torch.float64)
    return torch.minimum((u * bound).long(), bound - 1)


# --------------------------------------------------------------------------- hashing
_HASH_MODS = (2**31 - 1, 2**31 - 19)  # two primes below 2^31
_HASH_BASES = (1_000_003, 911_382_323)
_hash_powers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def row_hash(tokens: torch.Tensor) -> torch.Tensor:
    """Hash each row of an int64 [n, L] tensor to one int64 (two polynomial hashes mod 31-bit primes).

    Equal rows always get equal hashes, so filtering on hashes never misses an eval
    row; a (very unlikely, ~n_eval / 2^62 per row) false match only costs a resample.
    """
    length = tokens.shape[1]
    if length not in _hash_powers:
        pows = []
        for base, mod in zip(_HASH_BASES, _HASH_MODS):
            pows.append(torch.tensor([pow(base, j, mod) for j in range(length)], dtype=torch.int64))
        _hash_powers[length] = (pows[0], pows[1])
    p1, p2 = _hash_powers[length]
    m1, m2 = _HASH_MODS
    t = tokens.long()
    if t.numel() and int(t.abs().max()) * length < 2**32:  # the plain sums stay below 2^63: no per-element mod needed
        h1 = (t * p1).sum(1) % m1
        h2 = (t * p2).sum(1) % m2
    else:
        h1 = (((t % m1) * p1) % m1).sum(1) % m1
        h2 = (((t % m2) * p2) % m2).sum(1) % m2
    return h1 * (2**31) + h2


# --------------------------------------------------------------------------- base class
class TaskError(ValueError):
    """A task's own code gave rows that break the batch format (check_batch): the user's input, not a bug here."""


def check_batch(task: "Task", batch: Any, n: int) -> None:
    """TaskError (one line, naming the task) unless `batch` has the batch format above for `n` rows: a tuple of
    tensors, tokens int64 and mask bool [n, seq_len], ids in the vocabulary, and (next-token tasks) an answer in
    every row, never at position 0. Every batch a task draws is checked: a few reductions, next to drawing it."""
    name = getattr(task, "name", type(task).__name__)
    if not isinstance(batch, tuple) or len(batch) < 2 or not all(isinstance(t, torch.Tensor) for t in batch):
        kinds = [type(t).__name__ for t in batch] if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise TaskError(f"{name}: _sample gave {type(batch).__name__} of {kinds}; expected a tuple (tokens, mask) "
                         "of tensors")
    tokens, mask, shape = batch[0], batch[1], (n, task.seq_len)
    if tokens.dtype != torch.int64 or tuple(tokens.shape) != shape:
        raise TaskError(f"{name}: _sample gave tokens {tokens.dtype} {tuple(tokens.shape)}; expected int64 {shape}")
    if mask.dtype != torch.bool or tuple(mask.shape) != shape:
        raise TaskError(f"{name}: _sample gave a mask {mask.dtype} {tuple(mask.shape)}; expected bool {shape}")
    lo, hi = (int(v) for v in tokens.aminmax())
    if lo < 0 or hi >= task.d_vocab:
        raise TaskError(f"{name}: _sample gave token id {lo if lo < 0 else hi}, outside 0..{task.d_vocab - 1} (the vocab)")
    if task.objective == "next_token" and (bool(mask[:, 0].any()) or not bool(mask.any(1).all())):
        raise TaskError(f"{name}: every row's mask needs an answer position, and never position 0")


def parameter_names(cls: type) -> list[str]:
    """A task class's parameters: its constructor's positional-or-keyword arguments (keyword-only ones, such
    as a text task's cache_dir, say where things go, not what the task is)."""
    return [p.name for p in inspect.signature(cls.__init__).parameters.values()
            if p.name != "self" and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]


class Task:
    """Base class: one subclass per task. Subclasses set the class attributes (`name`, `metric`, `layout`), set
    `vocab`, `seq_len` and `pad_id` (and each constructor parameter under its own name) in `__init__`, and
    implement `_sample`; docs/guides/tasks.md, "Your own task", and examples/my_task.py show one.

    Optional: `patching_pairs(n, seed) -> (clean [n, L], corrupted [n, L], position [n], answer_tokens [n, 2])`,
    rows that differ only where the answer comes from, the position whose logits predict the answer, and the
    clean and corrupted answer tokens; `mixit analyze` then patches every head (mixit_lab.analysis.patching.patch_heads).
    Retrieval and k-hop define theirs; a ValueError from it says why the task's settings allow none.
    """

    name: ClassVar[str]
    metric: ClassVar[str]  # "sequence": all scored tokens of a row must be right; "token": mean over scored tokens
    layout: ClassVar[str]  # one-line picture of a row
    eval_is_train: ClassVar[bool] = False  # eval_set() is the whole training set (memorisation)
    eval_disjoint: ClassVar[bool] = False  # sample() can never yield an eval row, by construction
    # "next_token": (tokens, mask), loss on the masked next tokens; "classification": (tokens, mask, labels).
    objective: ClassVar[str] = "next_token"
    needs_corpus: ClassVar[bool] = False  # built from a text corpus (text_file or dataset), outside the run directory
    default_classes: ClassVar[tuple[str, ...]] = ()  # a classifier's class labels when its `classes` is not given
    # The summary value a finished run is judged by: "eval_acc" (higher is better) or "eval_loss" (lower is
    # better; a language model's log-perplexity).
    headline: ClassVar[str] = "eval_acc"
    text_tokenizer: Any = None  # a tokenizers.Tokenizer for text tasks; attached to the model, saved with it

    vocab: list[str]
    seq_len: int
    pad_id: int

    @property
    def model_overrides(self) -> dict[str, Any]:
        """ModelConfig fields this task requires (e.g. causal=False, n_classes=2 for classification)."""
        return {}

    @property
    def data_fingerprint(self) -> str | None:
        """A hash of the data the task was built from (text tasks), recorded so a resume can check it."""
        return None

    def extra_eval_metrics(self, eval_loss: float) -> dict[str, float]:
        """Metrics derived from the mean eval loss that the trainer logs next to it (e.g. perplexity)."""
        return {}

    @classmethod
    def is_classifier(cls) -> bool:
        """Whether the task predicts one class per row (a classification head) rather than next tokens."""
        return cls.objective == "classification"

    @property
    def d_vocab(self) -> int:
        return len(self.vocab)

    @property
    def params(self) -> dict[str, Any]:
        """Constructor parameters (JSON-serialisable): `get_task(task.name, **task.params)` rebuilds the task."""
        return {p: getattr(self, p) for p in parameter_names(type(self))}

    @property
    def default_eval_size(self) -> int:
        return DEFAULT_EVAL_SIZE

    @property
    def max_eval_size(self) -> int:
        """The most held-out rows `eval_samples` may ask for: MAX_EVAL_SIZE, or a larger fixed held-out set's size
        (a smaller one is scored whole). The rule is mixit_lab.training.resolve.check_eval_size's."""
        return max(MAX_EVAL_SIZE, self.held_out_size or 0)

    @property
    def label_ids(self) -> list[int] | None:
        """The token ids an answer is drawn from when the task fixes a label set (memorize: its n label tokens),
        None when any token may be one. With `eval_is_train`, what mixit_lab.analysis.memory scores memorized bits over."""
        return None

    @property
    def held_out_size(self) -> int | None:
        """The size of a fixed, finite held-out set (None: rows are drawn). `eval_set(n)` with a larger n
        returns all of it: a run asking for more evaluates on all of it (mixit_lab.training.resolve.check_eval_size)."""
        return None

    def sample(self, n: int, generator: torch.Generator | None = None) -> Batch:
        """Draw `n` rows: (tokens int64 [n, seq_len], mask bool [n, seq_len])."""
        n = _check_int(self.name, "n", n, 0)
        if generator is None:
            generator = torch.default_generator
        if n == 0:  # empty tensors of the right shapes, without advancing `generator`
            return tuple(t[:0] for t in self._sample(1, torch.Generator().manual_seed(0)))
        batch = self._sample(n, generator)
        check_batch(self, batch, n)
        return batch

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        raise NotImplementedError

    def eval_fingerprint(self, n: int | None = None) -> str:
        """A hash of the held-out rows `eval_set(n)` gives (every tensor's dtype, shape and values): recorded by the
        trainer, so that a task whose rule, generator or data changed after training is noticed when rebuilt."""
        h = hashlib.sha256()
        for t in self.eval_set(n):
            t = t.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.numpy().tobytes())
        return h.hexdigest()[:24]

    def eval_set(self, n: int | None = None) -> Batch:
        """Fixed held-out set: the first `n` rows (default `default_eval_size`); smaller sets are prefixes."""
        n = self.default_eval_size if n is None else _check_int(self.name, "n", n, 1)
        cache = self.__dict__.setdefault("_eval_cache", [])
        have = cache[0][0].shape[0] if cache else 0
        if have < n:
            chunks = [cache[0]] if cache else []
            for c in range(have // EVAL_CHUNK, math.ceil(n / EVAL_CHUNK)):
                chunks.append(self.sample(EVAL_CHUNK, torch.Generator().manual_seed(EVAL_SEED + c)))
            cache[:] = [(torch.cat([t for t, _ in chunks]), torch.cat([m for _, m in chunks]))]
        tokens, mask = cache[0]
        return tokens[:n].clone(), mask[:n].clone()

    @property
    def tuning_disjoint(self) -> bool:
        """Whether `tuning_set` rows can never be drawn for training, by construction (a split of documents), so that
        TrainStream need not filter them; drawn tuning rows are filtered."""
        return self.eval_is_train

    def tuning_size(self) -> int | None:
        """How many tuning rows the task holds (None: drawn, as many as asked for). A text task without a tuning
        split holds none: ValueError from `tuning_set`."""
        return self.held_out_size if self.eval_is_train else None

    def tuning_set(self, n: int, eval_n: int | None = None) -> Batch:
        """`n` held-out rows to choose hyperparameters on (a validation set), none of them a row of
        `eval_set(eval_n)`: drawn as training rows are, from TUNE_SEED's chunks, in a fixed order. A memorization
        task (`eval_is_train`) returns its training set, the set whose storage it reports."""
        n = _check_int(self.name, "n", n, 1)
        if self.eval_is_train:
            return self.eval_set(n)
        eval_hashes = row_hash(self.eval_set(eval_n)[0]).unique()
        parts: list[Batch] = []
        have, chunk = 0, 0
        while have < n:
            if chunk >= TrainStream.MAX_ROUNDS:
                raise ValueError(f"{self.name}: found {have} of {n} tuning rows that are not eval rows after "
                                 f"{chunk * EVAL_CHUNK:,} draws; ask for fewer (tune_samples) or a smaller eval set")
            rows = self.sample(EVAL_CHUNK, torch.Generator().manual_seed(TUNE_SEED + chunk))
            keep = ~torch.isin(row_hash(rows[0]), eval_hashes)
            parts.append(tuple(t[keep] for t in rows))
            have += int(keep.sum())
            chunk += 1
        return tuple(torch.cat(ts)[:n] for ts in zip(*parts))

    def model_tokenizer(self):
        """The `tokenizers.Tokenizer` a model trained on this task carries (saved as tokenizer.json in its
        checkpoints): a text task's own, else a word-level one over `vocab` (mixit_lab.models.tokenizer.task_tokenizer)."""
        if self.text_tokenizer is not None:
            return self.text_tokenizer
        return task_tokenizer(self.vocab, self.pad_id)

    def decode(self, tokens_row: torch.Tensor | list[int]) -> str:
        """Human-readable row: the vocab strings of the non-pad tokens, space-separated."""
        ids = tokens_row.tolist() if isinstance(tokens_row, torch.Tensor) else list(tokens_row)
        return " ".join(self.vocab[i] for i in ids if i != self.pad_id)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"



def attach_tokenizer(model: Any, task: Task) -> None:
    """Give `model` its task's tokenizer, so that `to_tokens`, `to_str_tokens`, `to_string` (and TransformerLens
    tools built on them, such as `test_prompt`) speak the task's vocabulary. Text starts with <|endoftext|>
    for text tasks; algorithmic rows have no BOS."""
    model.set_tokenizer(task.model_tokenizer(), default_prepend_bos=task.text_tokenizer is not None)


# --------------------------------------------------------------------------- training stream
class TrainStream:
    """Endless, resumable stream of training batches that never yields an eval row.

    Batches come from `task.sample(batch_size, generator)` with a generator seeded by
    `seed`; rows equal to a row of `task.eval_set(eval_n)` (matched by `row_hash`) are
    redrawn until none collide. No filtering for tasks with `eval_disjoint` or
    `eval_is_train`. `eval_n` defaults to `task.default_eval_size`; evaluating on a
    prefix of that set (`task.eval_set(m)`, m <= eval_n) is therefore also safe.
    With `tune_n` (> 0) the rows of `task.tuning_set(tune_n, eval_n)` are kept out the same
    way, unless the task's tuning rows cannot be drawn anyway (`tuning_disjoint`).
    """

    MAX_ROUNDS = 1000
    WARN_FRACTION = 0.25  # warn once if more than this fraction of the first batch had to be redrawn
    SAMPLINGS = SAMPLINGS

    def __init__(self, task: Task, batch_size: int, seed: int, eval_n: int | None = None, sampling: str = "uniform",
                 tune_n: int = 0):
        self.task = task
        self.batch_size = _check_int("TrainStream", "batch_size", batch_size, 1)
        self.seed = _check_int("TrainStream", "seed", seed, 0)
        check_sampling(sampling, task)
        self.sampling = sampling
        # epochs: the whole (finite) training set, once; uniform: rows come from task.sample
        self._everything = task.eval_set(task.held_out_size) if sampling == "epochs" else None
        self.generator = torch.Generator().manual_seed(self.seed)
        self.step = 0  # batches yielded so far
        self.rows_replaced = 0  # rows redrawn because they matched an eval row
        self.eval_n = task.default_eval_size if eval_n is None else _check_int("TrainStream", "eval_n", eval_n, 1)
        self.tune_n = _check_int("TrainStream", "tune_n", tune_n, 0)
        held_out = [] if task.eval_disjoint or task.eval_is_train else [task.eval_set(self.eval_n)[0]]
        if self.tune_n and not task.tuning_disjoint:
            held_out.append(task.tuning_set(self.tune_n, eval_n)[0])
        self.filtering = bool(held_out)
        self._held_out_hashes = torch.cat([row_hash(t) for t in held_out]).unique() if held_out else None

    def next(self) -> Batch:
        batch = self._epoch_rows() if self.sampling == "epochs" else self.task.sample(self.batch_size, self.generator)
        if self.filtering:
            bad = torch.isin(row_hash(batch[0]), self._held_out_hashes).nonzero().squeeze(1)
            rounds = 0
            while bad.numel():
                rounds += 1
                if rounds > self.MAX_ROUNDS:
                    raise RuntimeError(
                        f"TrainStream: still drawing eval rows after {self.MAX_ROUNDS} rounds; "
                        f"the eval set ({self.eval_n} rows{f' and {self.tune_n} tuning rows' if self.tune_n else ''}) "
                        f"covers (almost) all of {self.task!r}: use a smaller --eval-samples (TrainStream's eval_n)"
                        + (" or --tune-samples" if self.tune_n else "")
                    )
                # Draw a few spare rows so that one round usually suffices, keep the first non-eval ones.
                new = self.task.sample(2 * bad.numel() + 8, self.generator)
                keep = ~torch.isin(row_hash(new[0]), self._held_out_hashes)
                new = [t[keep][: bad.numel()] for t in new]
                filled, bad = bad[: new[0].shape[0]], bad[new[0].shape[0] :]
                for tensor, replacement in zip(batch, new):
                    tensor[filled] = replacement
                self.rows_replaced += filled.numel()
            if self.step == 0 and self.rows_replaced > self.WARN_FRACTION * self.batch_size:
                warnings.warn(
                    f"TrainStream: {self.rows_replaced / self.batch_size:.0%} of the first batch matched the eval set "
                    f"of {self.task!r}; the training distribution is skewed away from it (consider a smaller --eval-samples)",
                    stacklevel=2,
                )
        self.step += 1
        return batch

    __next__ = next

    def _epoch_rows(self) -> Batch:
        """The next batch_size rows of a pass over the whole training set, each row once per epoch in an order of
        its own (epoch e's permutation seeded by the stream's seed and e), as the authors' Trainer samples keys.
        A function of the step alone, so a resumed stream goes on exactly."""
        everything = self._everything
        n_rows, start = everything[0].shape[0], self.step * self.batch_size
        rows = torch.arange(start, start + self.batch_size)
        index = torch.empty_like(rows)
        for epoch in (rows // n_rows).unique().tolist():
            order = torch.randperm(n_rows, generator=torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**63))
            here = rows // n_rows == epoch
            index[here] = order[rows[here] % n_rows]
        return tuple(t[index] for t in everything)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def state_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.name,
            "params": self.task.params,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "eval_n": self.eval_n,
            "tune_n": self.tune_n,
            "step": self.step,
            "rows_replaced": self.rows_replaced,
            "generator_state": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = {"task": self.task.name, "params": self.task.params, "batch_size": self.batch_size}
        mine["eval_n"] = self.eval_n
        mine["tune_n"] = self.tune_n
        state = {"tune_n": 0, **state}  # saved before the tuning set existed: none
        for key, value in mine.items():
            if state[key] != value:
                raise ValueError(f"TrainStream: saved {key}={state[key]!r} differs from this stream's {key}={value!r}")
        self.seed = state["seed"]
        self.step = state["step"]
        self.rows_replaced = state["rows_replaced"]
        self.generator.set_state(state["generator_state"])
