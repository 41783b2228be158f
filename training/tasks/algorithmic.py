"""The paper's algorithmic tasks: decimal addition, Dyck balance, key-value retrieval, k-hop induction,
modular addition and memorization. Formats follow the authors' code (princeton-pli/MixiT) where
sensible; see each class docstring.
"""

from __future__ import annotations

import torch

from .base import DEFAULT_EVAL_SIZE, EVAL_SEED, LABEL_SEED, SPLIT_SEED, Batch, Task, _check_int, _geometric, _uniform_below


# --------------------------------------------------------------------------- addition
class Addition(Task):
    """Multi-digit addition with reversed digits (Zhong & Andreas 2024; MixiT `task_additionstream.py`).

    `a` and `b` are uniform in [0, 10^digits) ("up to `digits` digits"), written
    least-significant digit first and zero-padded to `digits` digits; the sum is
    written least-significant first, zero-padded to digits+1 digits, with its own
    10 output-digit tokens (`s0`..`s9`), then `<stop>`. Scored: the digits+1 sum
    digits and `<stop>`. Every row has the same layout, so `<pad>` never occurs.
    Ids: `0`-`9` = 0-9, `+` = 10, `=` = 11, `<pad>` = 12, `s0`-`s9` = 13-22, `<stop>` = 23.
    """

    name = "addition"
    metric = "sequence"
    layout = "a_0 .. a_{d-1} + b_0 .. b_{d-1} = [s_0 .. s_d <stop>]   (digits least-significant first)"
    MAX_DIGITS = 100

    def __init__(self, digits: int = 10):
        self.digits = _check_int(self.name, "digits", digits, 1, self.MAX_DIGITS)
        self.vocab = [str(i) for i in range(10)] + ["+", "=", "<pad>"] + [f"s{i}" for i in range(10)] + ["<stop>"]
        self.plus_id, self.eq_id, self.pad_id, self.out0_id, self.stop_id = 10, 11, 12, 13, 23
        self.seq_len = 3 * self.digits + 4

    @property
    def default_eval_size(self) -> int:
        # Hold out at most ~5% of the 10^(2d) problems so tiny instances keep a training set.
        return min(DEFAULT_EVAL_SIZE, max(1, 10 ** (2 * self.digits) // 20))

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        d = self.digits
        a = torch.randint(0, 10, (n, d), generator=g)
        b = torch.randint(0, 10, (n, d), generator=g)
        s = torch.empty(n, d + 1, dtype=torch.int64)
        carry = torch.zeros(n, dtype=torch.int64)
        for j in range(d):  # loop over digit positions, vectorised over the batch
            col = a[:, j] + b[:, j] + carry
            s[:, j] = col % 10
            carry = col // 10
        s[:, d] = carry
        plus = torch.full((n, 1), self.plus_id)
        eq = torch.full((n, 1), self.eq_id)
        stop = torch.full((n, 1), self.stop_id)
        tokens = torch.cat([a, plus, b, eq, s + self.out0_id, stop], dim=1)
        mask = torch.zeros(n, self.seq_len, dtype=torch.bool)
        mask[:, 2 * d + 2 :] = True
        return tokens, mask


# --------------------------------------------------------------------------- dyck
class Dyck(Task):
    """Is a parenthesis string balanced? (MixiT `task_dyckstream.py`.)

    Mixture as in the authors' code: 1/3 random strings of length U{1..2*max_pairs};
    2/3 uniformly random balanced strings with U{1..max_pairs} pairs (uniform Dyck
    words via the cycle lemma, where the authors use a recursive sampler), half of
    which are kept clean; the rest get mutation mode U{0..3}: bit 1 = a geometric
    number of random swaps, bit 2 = a geometric number of random flips (doubled
    with probability 2/3). About half of the rows end up balanced.
    Row: the string, `?`, then the answer `)` (balanced) or `(` (not), right-padded
    with `<pad>`; the answer sits right after `?` (position len+1), marked by the mask.
    Ids: `<pad>` = 0, `(` = 1, `)` = 2, `?` = 3 (the authors' ids).
    """

    name = "dyck"
    metric = "sequence"
    layout = "c_1 .. c_L ? [)|(] <pad> ..   (L <= 2*max_pairs; `)` = balanced)"
    MAX_PAIRS = 1000
    PAD, OPEN, CLOSE, QUERY = 0, 1, 2, 3
    _STEP = torch.tensor([0, 1, -1, 0])  # depth change per token id

    def __init__(self, max_pairs: int = 40):
        self.max_pairs = _check_int(self.name, "max_pairs", max_pairs, 1, self.MAX_PAIRS)
        self.vocab = ["<pad>", "(", ")", "?"]
        self.pad_id = self.PAD
        self.seq_len = 2 * self.max_pairs + 2

    @property
    def default_eval_size(self) -> int:
        distinct = 2 ** (2 * self.max_pairs + 1) - 2  # strings of length 1..2*max_pairs
        return min(DEFAULT_EVAL_SIZE, max(1, distinct // 20))

    def decode(self, tokens_row: torch.Tensor | list[int]) -> str:
        ids = tokens_row.tolist() if isinstance(tokens_row, torch.Tensor) else list(tokens_row)
        return "".join(self.vocab[i] for i in ids if i != self.pad_id)

    def _dyck_words(self, pairs: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        """Uniform balanced strings with `pairs[i]` pairs, as ids 1/2, pad 0, width 2*max_pairs."""
        n, width = pairs.shape[0], 2 * self.max_pairs
        cols = torch.arange(width + 1)
        length = (2 * pairs + 1)[:, None]  # t opens + (t+1) closes
        valid = cols < length
        keys = torch.rand(n, width + 1, generator=g).masked_fill_(~valid, 2.0)
        order = keys.argsort(dim=1)  # valid positions in random order first
        is_open = torch.zeros(n, width + 1, dtype=torch.bool).scatter_(1, order, cols.expand(n, -1) < pairs[:, None])
        step = (2 * is_open.long() - 1).masked_fill_(~valid, 0)  # +1 = `(`, -1 = `)`
        prefix = step.cumsum(1).masked_fill_(~valid, width + 2)
        first_min = prefix.argmin(dim=1)  # first position where the prefix sum is minimal
        # Cycle lemma: rotating to start right after it gives a Dyck word followed by one extra `)`.
        idx = first_min[:, None] + 1 + cols[:width]
        idx = torch.where(idx >= length, idx - length, idx)  # mod length
        word = step.gather(1, idx)
        chars = torch.where(word > 0, self.OPEN, self.CLOSE)
        return chars.masked_fill(cols[:width] >= 2 * pairs[:, None], self.PAD)

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        width = 2 * self.max_pairs
        cols = torch.arange(width)
        is_random = torch.randint(0, 3, (n,), generator=g) == 0
        length = torch.randint(1, width + 1, (n,), generator=g)
        chars = torch.randint(self.OPEN, self.CLOSE + 1, (n, width), generator=g)
        dyck_rows = (~is_random).nonzero().squeeze(1)
        if dyck_rows.numel():
            pairs = torch.randint(1, self.max_pairs + 1, (dyck_rows.numel(),), generator=g)
            chars[dyck_rows] = self._dyck_words(pairs, g)
            length[dyck_rows] = 2 * pairs
        chars = chars.masked_fill(cols >= length[:, None], self.PAD)

        mutate = torch.randint(0, 4, (n,), generator=g)
        keep_clean = ~is_random & (torch.randint(0, 2, (n,), generator=g) == 1)
        mutate = mutate.masked_fill(keep_clean, 0)
        n_swaps = torch.where((mutate & 1) > 0, _geometric(n, g), 0)
        n_flips = _geometric(n, g) * torch.where(torch.randint(0, 3, (n,), generator=g) > 0, 2, 1)
        n_flips = torch.where((mutate & 2) > 0, n_flips, 0)

        # Swaps (c[p] <-> c[q], only when p < q) do not commute: apply them in order, on the rows that have any.
        rows = n_swaps.nonzero().squeeze(1)
        if rows.numel():
            most = int(n_swaps.max())
            sub, bound = chars[rows], length[rows, None].expand(-1, most)
            p_all, q_all = _uniform_below(bound, g), _uniform_below(bound, g)
            act_all = (torch.arange(most) < n_swaps[rows, None]) & (p_all < q_all)
            for r in range(most):
                p, q, act = p_all[:, r : r + 1], q_all[:, r : r + 1], act_all[:, r : r + 1]
                cp, cq = sub.gather(1, p), sub.gather(1, q)
                sub.scatter_(1, p, torch.where(act, cq, cp))
                sub.scatter_(1, q, torch.where(act, cp, cq))
            chars[rows] = sub
        # Flips commute, so apply them all at once: a position flipped an odd number of times changes.
        most = int(n_flips.max())
        flip_at = _uniform_below(length[:, None].expand(n, most), g)
        active = torch.arange(most) < n_flips[:, None]
        times = torch.zeros(n, width, dtype=torch.int64).scatter_add_(1, flip_at, active.long())
        chars = torch.where((times & 1) > 0, self.OPEN + self.CLOSE - chars, chars)

        depth = self._STEP[chars].cumsum(1)
        balanced = (depth.min(1).values >= 0) & (depth[:, -1] == 0)
        tokens = torch.cat([chars, torch.full((n, 2), self.PAD)], dim=1)
        tokens.scatter_(1, length[:, None], self.QUERY)
        answer = torch.where(balanced, self.CLOSE, self.OPEN)
        tokens.scatter_(1, (length + 1)[:, None], answer[:, None])
        mask = torch.zeros(n, self.seq_len, dtype=torch.bool).scatter_(1, (length + 1)[:, None], True)
        return tokens, mask


# --------------------------------------------------------------------------- retrieval
class Retrieval(Task):
    """Associative recall (MixiT `task_condattendstream.py`).

    Each row holds k ~ U{1..pairs} key/value pairs: distinct keys drawn from
    `num_keys` key tokens (`k*`), values uniform over `num_values` value tokens
    (`v*`, repeats allowed); then a query token `q<j>` for one of the present keys
    (queries are a separate token set, as in the authors' code), then that key's
    value. Right-padded with `<pad>`; the answer is at position 2k+1.
    Ids: `<pad>` = 0, `v0..` = 1..num_values, then `k0..`, then `q0..`.
    Defaults follow the authors: 30 pairs, keys = pairs (`range(max_len)`), 255 values.
    """

    name = "retrieval"
    metric = "sequence"
    layout = "k v k v .. (k pairs, 1 <= k <= pairs) q [v] <pad> .."
    MAX_PAIRS = 1000

    def __init__(self, pairs: int = 30, num_keys: int | None = None, num_values: int = 255):
        self.pairs = _check_int(self.name, "pairs", pairs, 1, self.MAX_PAIRS)
        num_keys = self.pairs if num_keys is None else num_keys
        self.num_keys = _check_int(self.name, "num_keys", num_keys, self.pairs, 100_000)
        self.num_values = _check_int(self.name, "num_values", num_values, 1, 100_000)
        self.pad_id = 0
        self.value0_id = 1
        self.key0_id = 1 + self.num_values
        self.query0_id = self.key0_id + self.num_keys
        self.vocab = (
            ["<pad>"]
            + [f"v{i}" for i in range(self.num_values)]
            + [f"k{i}" for i in range(self.num_keys)]
            + [f"q{i}" for i in range(self.num_keys)]
        )
        self.seq_len = 2 * self.pairs + 2

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        m = self.pairs
        keys = torch.rand(n, self.num_keys, generator=g).argsort(dim=1)[:, :m]  # distinct keys per row
        values = torch.randint(0, self.num_values, (n, m), generator=g)
        k = torch.randint(1, m + 1, (n,), generator=g)
        which = _uniform_below(k, g)[:, None]
        query, answer = keys.gather(1, which), values.gather(1, which)
        body = torch.stack([keys + self.key0_id, values + self.value0_id], dim=2).reshape(n, 2 * m)
        body = body.masked_fill(torch.arange(2 * m) >= 2 * k[:, None], self.pad_id)
        tokens = torch.cat([body, torch.full((n, 2), self.pad_id)], dim=1)
        tokens.scatter_(1, 2 * k[:, None], query + self.query0_id)
        tokens.scatter_(1, 2 * k[:, None] + 1, answer + self.value0_id)
        mask = torch.zeros(n, self.seq_len, dtype=torch.bool).scatter_(1, 2 * k[:, None] + 1, True)
        return tokens, mask

    def patching_pairs(self, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`n` rows and their corrupted copies (Task's patching protocol): the value of the queried pair is another
        value, in the pair and at the answer; position is the query's, answers the clean and corrupted values."""
        g = torch.Generator().manual_seed(seed)
        tokens, mask = self.sample(n, g)
        rows = torch.arange(n)
        answer_at = mask.float().argmax(1)  # the scored value, right after the query
        position = answer_at - 1
        query_key = tokens[rows, position] - self.query0_id
        keys = tokens[:, 0 : 2 * self.pairs : 2] - self.key0_id  # pad rows give negative keys
        pair = (keys == query_key[:, None]).float().argmax(1)
        clean_answer = tokens[rows, 2 * pair + 1]
        shift = torch.randint(1, self.num_values, (n,), generator=g)  # another value: never the same
        corrupted_answer = (clean_answer - self.value0_id + shift) % self.num_values + self.value0_id
        corrupted = tokens.clone()
        corrupted[rows, 2 * pair + 1] = corrupted_answer
        corrupted[rows, answer_at] = corrupted_answer
        return tokens, corrupted, position, torch.stack([clean_answer, corrupted_answer], dim=1)


# --------------------------------------------------------------------------- k-hop
class KHop(Task):
    """k-hop induction heads (Sanford, Hsu & Telgarsky 2024, "Transformers, parallel computation, and log depth").

    X = x_0 .. x_{N-1} (N = `length`) over `alphabet` letters, with no two equal
    neighbours (as in the reference code chsanford/hop-induction-heads). With
    find(i) = the largest j <= i such that x_{j-1} == x_i (move to the token right
    after the previous occurrence of x_i), hop_k(X)_i = x_{find^k(i)}, or the null
    token `~` if some hop does not exist.
    Row: X, the separator `|`, then y_0 .. y_{N-1} with y_i = hop_k(X)_i, all N scored
    (metric "token"). y_i is predicted from the position holding `|` (i = 0) or y_{i-1},
    so earlier answers are visible (teacher forcing), as in any causal LM output.
    Ids: letters `a`.. = 0..alphabet-1, `~` = alphabet, `|` = alphabet+1, `<pad>` = alphabet+2 (unused).
    Defaults: k = 16 hops, N = 96, alphabet 4 (Sanford et al. use N = 100, 4 letters, up to
    16 hops): seq_len 193, and about half of the targets are non-null (each hop moves back
    ~3 positions on average, so the first ~48 positions are mostly `~`).
    """

    name = "khop"
    metric = "token"
    layout = "x_0 .. x_{N-1} | [y_0 .. y_{N-1}]   (y_i = hop_k(X)_i or ~)"

    def __init__(self, hops: int = 16, length: int = 96, alphabet: int = 4):
        self.hops = _check_int(self.name, "hops", hops, 1, 1024)
        self.length = _check_int(self.name, "length", length, 2, 4096)
        self.alphabet = _check_int(self.name, "alphabet", alphabet, 2, 26)
        if self.hops >= self.length:  # each hop moves at least one position back
            raise ValueError(f"khop: hops={self.hops} with length={self.length}: every answer would be the null token "
                             f"(each hop moves back at least one position); use hops < length")
        self.null_id, self.sep_id, self.pad_id = self.alphabet, self.alphabet + 1, self.alphabet + 2
        self.vocab = [chr(ord("a") + i) for i in range(self.alphabet)] + ["~", "|", "<pad>"]
        self.seq_len = 2 * self.length + 1

    def hop_sources(self, x: torch.Tensor, hops: int | None = None) -> torch.Tensor:
        """find^hops(i) for letter ids x [n, N]: int64 [n, N], the position in X whose letter is hop_hops(X)_i, or -1.

        -1 where some hop does not exist (the target is null). `hops` defaults to the task's k; any
        sequence is accepted (neighbours may repeat). With hops = 1, source i is the position right
        after the previous occurrence of x_i: where an induction head must look to answer y_i.
        """
        hops = self.hops if hops is None else _check_int(self.name, "hops", hops, 1, 1024)
        n, length = x.shape
        pos = torch.arange(length)
        # Sort positions by (letter, position): consecutive entries of one letter are consecutive occurrences.
        order = (x * length + pos).argsort(dim=1)
        letter = x.gather(1, order)
        prev_sorted = torch.where(letter[:, 1:] == letter[:, :-1], order[:, :-1], -1)
        prev_sorted = torch.cat([torch.full((n, 1), -1), prev_sorted], dim=1)
        prev = torch.empty_like(order).scatter_(1, order, prev_sorted)  # previous occurrence of x_i, or -1
        # find(i) = prev(i) + 1; a missing hop goes to an extra column `length` that maps to itself (null).
        find = torch.cat([torch.where(prev >= 0, prev + 1, length), torch.full((n, 1), length)], dim=1)
        # find^hops by repeated squaring: O(log hops) gathers.
        cur, power, k = torch.arange(length + 1).expand(n, -1), find, hops
        while k:
            if k & 1:
                cur = power.gather(1, cur)
            k >>= 1
            if k:
                power = power.gather(1, power)
        cur = cur[:, :length]
        return torch.where(cur < length, cur, -1)

    def hop_targets(self, x: torch.Tensor) -> torch.Tensor:
        """hop_k(X) for letter ids x [n, N] (any sequence, neighbours may repeat): [n, N], null where undefined."""
        src = self.hop_sources(x)
        return torch.where(src >= 0, x.gather(1, src.clamp_min(0)), self.null_id)

    def answer_sources(self, tokens: torch.Tensor, hops: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each answer can be read from: (queries int64 [N], sources int64 [n, N, 2]) for rows [n, seq_len].

        queries[i] = N + i is the position that predicts y_i (it holds `|` or y_{i-1}). The answer
        is the letter x_s at s = find^hops(i) (`hop_sources`), and two positions carry it:

            sources[r, i, 0] = s        the letter itself in X (X sits at positions 0..N-1 of a row);
            sources[r, i, 1] = N + s    its aligned position in the answer part, the one that predicts
                                        y_s: to answer y_s a model must bring x_s there, so an
                                        induction lookup can read x_s at either place.

        Both are -1 where y_i is null; N + s <= N + i, so a causal query sees both. `hops` defaults
        to the task's k, so s is the last hop's landing position; only with hops = 1 is reading it
        a single induction lookup (a model solving k > 1 hops may get there through other positions).
        """
        if tokens.ndim != 2 or tokens.shape[1] != self.seq_len:
            raise ValueError(f"{self.name}: tokens must be [n, {self.seq_len}]; got {tuple(tokens.shape)}")
        queries = torch.arange(self.length, 2 * self.length)
        src = self.hop_sources(tokens[:, : self.length].cpu(), hops)
        return queries, torch.stack([src, torch.where(src >= 0, src + self.length, -1)], dim=-1)

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        first = torch.randint(0, self.alphabet, (n, 1), generator=g)
        steps = torch.randint(1, self.alphabet, (n, self.length - 1), generator=g)  # never 0: no equal neighbours
        x = torch.cat([first, steps], dim=1).cumsum(1) % self.alphabet
        tokens = torch.cat([x, torch.full((n, 1), self.sep_id), self.hop_targets(x)], dim=1)
        mask = torch.zeros(n, self.seq_len, dtype=torch.bool)
        mask[:, self.length + 1 :] = True
        return tokens, mask

    def patching_pairs(self, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows and their corrupted copies (Task's patching protocol), 1 hop only: the letter at the source of each
        row's last non-null answer becomes another letter (not its neighbours, so the previous occurrence stays);
        rows without a non-null answer are dropped. ValueError when the settings leave nothing to corrupt."""
        if self.hops != 1:
            raise ValueError(f"patching: k-hop with hops={self.hops}; only 1 hop is a single lookup to corrupt")
        if self.alphabet < 4:
            raise ValueError(f"patching: khop alphabet={self.alphabet} leaves no replacement letter; allowed: alphabet >= 4")
        g = torch.Generator().manual_seed(seed)
        tokens, _ = self.sample(n, g)
        N = self.length
        x = tokens[:, :N]
        sources = self.hop_sources(x)  # [n, N]
        has = sources >= 0
        keep = has.any(1)
        if not keep.any():
            raise ValueError(f"patching: no k-hop row of {n} has a non-null answer (length {N}, alphabet {self.alphabet})")
        tokens, x, sources, has = tokens[keep], x[keep], sources[keep], has[keep]
        rows = torch.arange(int(keep.sum()))
        i = (has.float() * torch.arange(1, N + 1)).argmax(1)
        s = sources[rows, i]
        x2 = x.clone()
        forbidden = torch.stack([x[rows, s], x[rows, s - 1], x[rows, (s + 1).clamp(max=N - 1)]], 1)
        for r in rows.tolist():
            choices = [c for c in range(self.alphabet) if c not in forbidden[r].tolist()]
            x2[r, s[r]] = choices[int(torch.randint(len(choices), (1,), generator=g))]
        corrupted = torch.cat([x2, torch.full((len(rows), 1), self.sep_id), self.hop_targets(x2)], dim=1)
        return tokens, corrupted, N + i, torch.stack([x[rows, s], x2[rows, s]], dim=1)


# --------------------------------------------------------------------------- modular addition
class ModAdd(Task):
    """Modular addition a + b mod p (MixiT `modadd_exp.py`).

    Row: `a b c` with c = (a + b) mod p; numbers are their own ids (0..p-1, shared
    by operands and answer as in the authors' code, no `=`), `<pad>` = p (unused).
    All p^2 pairs are split once, by a fixed seed, into 95% train / 5% eval;
    `sample` draws uniformly (with replacement) from the train pairs only and
    `eval_set()` is the 5% (so `eval_disjoint = True`).
    """

    name = "modadd"
    metric = "sequence"
    layout = "a b [c]   (c = (a + b) mod p)"
    eval_disjoint = True
    TRAIN_FRACTION = 0.95
    MAX_P = 4096

    def __init__(self, p: int = 599):
        self.p = _check_int(self.name, "p", p, 2, self.MAX_P)
        self.vocab = [str(i) for i in range(self.p)] + ["<pad>"]
        self.pad_id = self.p
        self.seq_len = 3
        perm = torch.randperm(self.p**2, generator=torch.Generator().manual_seed(SPLIT_SEED))
        n_train = int(self.p**2 * self.TRAIN_FRACTION)
        self.train_pairs, self.eval_pairs = perm[:n_train], perm[n_train:]  # pair index = a * p + b

    @property
    def default_eval_size(self) -> int:
        return self.eval_pairs.numel()

    @property
    def held_out_size(self) -> int:
        return self.eval_pairs.numel()

    def _rows(self, pair_index: torch.Tensor) -> Batch:
        a, b = pair_index // self.p, pair_index % self.p
        tokens = torch.stack([a, b, (a + b) % self.p], dim=1)
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, 2] = True
        return tokens, mask

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        pick = torch.randint(0, self.train_pairs.numel(), (n,), generator=g)
        return self._rows(self.train_pairs[pick])

    def eval_set(self, n: int | None = None) -> Batch:
        """The held-out 5% of pairs in a fixed order (first `n` if given)."""
        n = self.default_eval_size if n is None else _check_int(self.name, "n", n, 1)
        return self._rows(self.eval_pairs[:n])


# --------------------------------------------------------------------------- memorization
class Memorize(Task):
    """Memorise random labels of all key tuples (MixiT `hdmemorize_exp.py`).

    Keys are all n^d tuples (k_0 .. k_{d-1}), k_j in [0, n); position j has its own
    slice of n tokens (`x<j>_<v>` = id j*n + v, as in the authors' code). Each tuple
    has a fixed random label in [0, n) (fixed seed, independent of training), written
    with `label_tokens="own"` as its own n label tokens (`y<v>` = d*n + v, `<pad>` = (d+1)*n),
    or with `label_tokens="keys"` as the tokens of position 0's slice (`x0_<v>` = v, `<pad>` =
    d*n), the authors' layout. The label tokens do not change what is stored, but they
    change the vocabulary and so the embedding and readout: "keys" has n*d + 1 tokens
    instead of (d+1)*n + 1, about a fifth fewer trainable parameters at width 16, n = 128,
    which is what bits per trainable parameter divide by. `sample` draws tuples uniformly
    with replacement from the full set; `eval_set()` is the full set, each key once in a
    fixed shuffled order (`eval_is_train = True`).
    Defaults n=512, d=2 are the authors' (`hdmemorize_512_2_1.0`): 262,144 keys; `label_tokens`
    defaults to "own" so that runs trained before the option existed keep their vocabulary.
    """

    name = "memorize"
    metric = "sequence"
    layout = "x0_k0 x1_k1 .. x{d-1}_k{d-1} [y_label]"
    eval_is_train = True
    MAX_KEYS = 10**6

    LABELS = ("own", "keys")

    def __init__(self, n: int = 512, d: int = 2, label_tokens: str = "own"):
        self.n = _check_int(self.name, "n", n, 2, self.MAX_KEYS)
        self.d = _check_int(self.name, "d", d, 1, 20)
        if label_tokens not in self.LABELS:
            raise ValueError(f"memorize: label_tokens={label_tokens!r} is not one of: {', '.join(self.LABELS)}")
        self.label_tokens = label_tokens
        if self.n**self.d > self.MAX_KEYS:
            raise ValueError(
                f"memorize: n**d = {self.n}**{self.d} = {self.n**self.d} keys is too many; "
                f"allowed: n**d <= {self.MAX_KEYS}"
            )
        self.num_keys = self.n**self.d
        keys = [f"x{j}_{v}" for j in range(self.d) for v in range(self.n)]
        if label_tokens == "keys":  # the authors' layout: label v is the token of key value v at position 0
            self.label0_id, self.pad_id = 0, self.d * self.n
            self.vocab = keys + ["<pad>"]
        else:
            self.label0_id, self.pad_id = self.d * self.n, (self.d + 1) * self.n
            self.vocab = keys + [f"y{v}" for v in range(self.n)] + ["<pad>"]
        self.seq_len = self.d + 1
        self.labels = torch.randint(0, self.n, (self.num_keys,), generator=torch.Generator().manual_seed(LABEL_SEED))

    @property
    def default_eval_size(self) -> int:
        return self.num_keys

    @property
    def held_out_size(self) -> int:
        return self.num_keys

    @property
    def label_ids(self) -> list[int]:
        """The n label tokens (`y<v>`, or position 0's key tokens with label_tokens="keys")."""
        return list(range(self.label0_id, self.label0_id + self.n))

    def _rows(self, key_index: torch.Tensor) -> Batch:
        place = self.n ** torch.arange(self.d)  # position j holds digit j of the key index in base n
        digits = (key_index[:, None] // place) % self.n
        keys = digits + self.n * torch.arange(self.d)
        tokens = torch.cat([keys, (self.labels[key_index] + self.label0_id)[:, None]], dim=1)
        mask = torch.zeros(tokens.shape, dtype=torch.bool)
        mask[:, -1] = True
        return tokens, mask

    def _sample(self, n: int, g: torch.Generator) -> Batch:
        return self._rows(torch.randint(0, self.num_keys, (n,), generator=g))

    def eval_set(self, n: int | None = None) -> Batch:
        """All n^d keys, each once, in a fixed shuffled order (first `n` if given: a fixed random subset)."""
        n = self.num_keys if n is None else _check_int(self.name, "n", n, 1)
        order = torch.randperm(self.num_keys, generator=torch.Generator().manual_seed(EVAL_SEED))
        return self._rows(order[:n])
