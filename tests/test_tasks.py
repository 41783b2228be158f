"""Tests of the task registry (training/tasks/): format conventions, labels, held-out guarantee, errors."""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch

from mixit_lab.training.tasks import ALGORITHMIC_TASKS, BUILTIN_TASKS, TASKS, Task, TrainStream, get_task, row_hash

# Small and default configurations of every task, used by the generic tests.
CONFIGS = [
    ("addition", {}),
    ("addition", {"digits": 1}),
    ("addition", {"digits": 25}),
    ("dyck", {}),
    ("dyck", {"max_pairs": 1}),
    ("dyck", {"max_pairs": 5}),
    ("retrieval", {}),
    ("retrieval", {"pairs": 1}),
    ("retrieval", {"pairs": 5, "num_keys": 20, "num_values": 7}),
    ("khop", {}),
    ("khop", {"hops": 1, "length": 8, "alphabet": 2}),
    ("khop", {"hops": 3, "length": 20, "alphabet": 5}),
    ("modadd", {}),
    ("modadd", {"p": 2}),
    ("modadd", {"p": 23}),
    ("memorize", {}),
    ("memorize", {"n": 2, "d": 1}),
    ("memorize", {"n": 10, "d": 4}),
]
IDS = [f"{name}-{'-'.join(f'{k}{v}' for k, v in params.items()) or 'default'}" for name, params in CONFIGS]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rows(tokens: torch.Tensor) -> set[tuple[int, ...]]:
    return {tuple(r) for r in tokens.tolist()}


# --------------------------------------------------------------------------- generic conventions
def test_registry_holds_the_six_algorithmic_tasks_and_the_text_tasks():
    assert set(ALGORITHMIC_TASKS) == {"addition", "dyck", "retrieval", "khop", "modadd", "memorize"}
    assert set(BUILTIN_TASKS) == set(ALGORITHMIC_TASKS) | {"lm", "sentiment"}  # text tasks: tests/test_text.py
    assert set(BUILTIN_TASKS) <= set(TASKS)  # register_task may have added others (tests/test_custom_task.py)
    for name in ALGORITHMIC_TASKS:
        cls = TASKS[name]
        assert issubclass(cls, Task) and cls.name == name
        assert cls.metric in {"sequence", "token"}
        assert isinstance(cls.layout, str) and cls.layout and cls.__doc__
    assert TASKS["khop"].metric == "token"
    assert TASKS["memorize"].eval_is_train and not TASKS["memorize"].eval_disjoint
    assert TASKS["modadd"].eval_disjoint and not TASKS["modadd"].eval_is_train


@pytest.mark.parametrize("name,params", CONFIGS, ids=IDS)
def test_batch_format(name, params):
    task = get_task(name, **params)
    tokens, mask = task.sample(257, generator=gen(0))
    assert tokens.dtype == torch.int64 and mask.dtype == torch.bool
    assert tokens.shape == mask.shape == (257, task.seq_len)
    assert not mask[:, 0].any()
    assert mask.any(dim=1).all(), "every row has at least one target"
    assert tokens.min() >= 0 and tokens.max() < task.d_vocab
    assert task.d_vocab == len(task.vocab) == len(set(task.vocab))
    assert all(isinstance(s, str) and s.isprintable() and s for s in task.vocab)
    assert 0 <= task.pad_id < task.d_vocab
    # Pads only ever follow the last target (right padding), so targets are never pads.
    pos = torch.arange(task.seq_len)
    last_target = torch.where(mask, pos, -1).max(dim=1).values
    assert not ((tokens == task.pad_id) & (pos <= last_target[:, None])).any()
    assert isinstance(task.decode(tokens[0]), str) and task.decode(tokens[0])
    empty_tokens, empty_mask = task.sample(0, gen(0))
    assert empty_tokens.shape == (0, task.seq_len) and empty_mask.shape == (0, task.seq_len)


@pytest.mark.parametrize("name,params", CONFIGS, ids=IDS)
def test_determinism_and_seeds(name, params):
    task = get_task(name, **params)
    t1, m1 = task.sample(300, gen(123))
    t2, m2 = task.sample(300, gen(123))
    assert torch.equal(t1, t2) and torch.equal(m1, m2)
    t3, _ = task.sample(300, gen(124))
    assert not torch.equal(t1, t3)
    # A generator carries on: two consecutive batches differ.
    g = gen(5)
    assert not torch.equal(task.sample(300, g)[0], task.sample(300, g)[0])


@pytest.mark.parametrize("name,params", CONFIGS, ids=IDS)
def test_round_trip_through_params(name, params):
    task = get_task(name, **params)
    assert task.name == name
    params_json = json.loads(json.dumps(task.params))
    for key, value in params.items():
        assert params_json[key] == value
    rebuilt = get_task(task.name, **params_json)
    assert type(rebuilt) is type(task) and rebuilt.params == task.params
    assert rebuilt.vocab == task.vocab and rebuilt.seq_len == task.seq_len and rebuilt.pad_id == task.pad_id
    assert torch.equal(rebuilt.sample(64, gen(3))[0], task.sample(64, gen(3))[0])
    assert name in repr(task) or type(task).__name__ in repr(task)


@pytest.mark.parametrize("name,params", CONFIGS, ids=IDS)
def test_eval_set_is_fixed(name, params):
    torch.manual_seed(1)
    tokens_a, mask_a = get_task(name, **params).eval_set()
    torch.manual_seed(2)  # the global seed must not matter
    task = get_task(name, **params)
    tokens_b, mask_b = task.eval_set()
    assert torch.equal(tokens_a, tokens_b) and torch.equal(mask_a, mask_b)
    assert tokens_a.shape == (task.default_eval_size, task.seq_len) and mask_a.dtype == torch.bool
    assert not mask_a[:, 0].any() and tokens_a.max() < task.d_vocab
    small, small_mask = task.eval_set(1)
    assert torch.equal(small, tokens_a[:1]) and torch.equal(small_mask, mask_a[:1])


def test_eval_set_prefixes_and_defaults():
    task = get_task("addition", digits=6)
    assert task.default_eval_size == 4000
    big, _ = task.eval_set(2500)
    assert torch.equal(task.eval_set(1200)[0], big[:1200])  # smaller sets are prefixes of larger ones
    assert torch.equal(task.eval_set()[0][:2500], big)
    assert get_task("addition", digits=1).default_eval_size == 5  # <= 5% of the 100 problems
    assert get_task("modadd", p=23).eval_set()[0].shape[0] == 23 * 23 - int(23 * 23 * 0.95)
    assert get_task("memorize", n=3, d=2).eval_set()[0].shape[0] == 9


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize("digits", [1, 3, 10, 25])
def test_addition_labels(digits):
    task = get_task("addition", digits=digits)
    tokens, mask = task.sample(300, gen(digits))
    for row in tokens:
        parts = task.decode(row).split()
        plus, eq = parts.index("+"), parts.index("=")
        a_digits, b_digits, s_parts = parts[:plus], parts[plus + 1 : eq], parts[eq + 1 :]
        assert len(a_digits) == len(b_digits) == digits and s_parts[-1] == "<stop>"
        assert all(p.startswith("s") for p in s_parts[:-1]) and len(s_parts) == digits + 2
        a = int("".join(reversed(a_digits)))
        b = int("".join(reversed(b_digits)))
        s = int("".join(reversed([p[1:] for p in s_parts[:-1]])))
        assert a + b == s
    # Targets are exactly the digits+1 output digits and the stop token, drawn from their own ids.
    expected = torch.zeros(task.seq_len, dtype=torch.bool)
    expected[2 * digits + 2 :] = True
    assert torch.equal(mask, expected.expand_as(mask))
    answer_ids = {task.vocab.index(f"s{i}") for i in range(10)} | {task.vocab.index("<stop>")}
    assert set(tokens[mask].tolist()) <= answer_ids
    assert set(tokens[:, :digits].flatten().tolist()) <= set(range(10))
    assert not answer_ids & set(range(10))


def test_addition_carries_through_every_digit():
    task = get_task("addition", digits=12)
    tokens, _ = task.sample(20000, gen(0))
    # The final carry digit is sometimes 1 and sometimes 0; operands use leading zeros ("up to n digits").
    top = tokens[:, -2] - task.vocab.index("s0")
    assert set(top.tolist()) == {0, 1}
    assert (tokens[:, task.digits - 1] == 0).any()


def _balanced(s: str) -> bool:
    stack = []
    for c in s:
        if c == "(":
            stack.append(c)
        else:
            if not stack:
                return False
            stack.pop()
    return not stack


@pytest.mark.parametrize("max_pairs", [1, 6, 40])
def test_dyck_labels(max_pairs):
    task = get_task("dyck", max_pairs=max_pairs)
    tokens, mask = task.sample(3000, gen(max_pairs))
    assert (mask.sum(1) == 1).all()
    answers = []
    for row, m in zip(tokens, mask):
        text = task.decode(row)
        body, answer = text[:-2], text[-1]
        assert text[-2] == "?" and set(body) <= {"(", ")"} and 1 <= len(body) <= 2 * max_pairs
        assert m.nonzero().item() == len(body) + 1  # the mask marks the token right after `?`
        assert answer == (")" if _balanced(body) else "(")
        answers.append(answer)
    frac = answers.count(")") / len(answers)
    assert 0.3 < frac < 0.7, frac
    lengths = (tokens == task.vocab.index("?")).float().argmax(1)
    assert lengths.max() == 2 * max_pairs


def test_dyck_balanced_words_are_uniform():
    task = get_task("dyck", max_pairs=4)
    words = task._dyck_words(torch.full((10000,), 3), gen(0))
    texts = ["".join(task.vocab[i] for i in w if i) for w in words.tolist()]
    assert all(len(t) == 6 and _balanced(t) for t in texts)
    counts = {t: texts.count(t) for t in set(texts)}
    assert len(counts) == 5  # Catalan(3)
    assert all(abs(c / 10000 - 0.2) < 0.03 for c in counts.values()), counts


@pytest.mark.parametrize("params", [{}, {"pairs": 3}, {"pairs": 5, "num_keys": 20, "num_values": 7}])
def test_retrieval_labels(params):
    task = get_task("retrieval", **params)
    tokens, mask = task.sample(2000, gen(1))
    assert (mask.sum(1) == 1).all()
    n_pairs = []
    for row, m in zip(tokens, mask):
        parts = task.decode(row).split()
        *body, query, answer = parts
        assert len(body) % 2 == 0
        keys, values = body[0::2], body[1::2]
        assert all(k.startswith("k") for k in keys) and all(v.startswith("v") for v in values)
        assert len(set(keys)) == len(keys) and all(int(k[1:]) < task.num_keys for k in keys)
        assert query.startswith("q") and answer.startswith("v")
        assert answer == dict(zip(keys, values))["k" + query[1:]]
        assert m.nonzero().item() == len(body) + 1
        n_pairs.append(len(keys))
    assert min(n_pairs) == 1 and max(n_pairs) == task.pairs  # the number of pairs varies over 1..pairs


def khop_reference(x: list[int], hops: int, null: int) -> list[int]:
    """Literal hop_k: find(i) = max{j <= i : x[j-1] == x[i]} (j >= 1), iterated `hops` times; null if some hop fails."""

    def find(i: int) -> int | None:
        candidates = [j for j in range(1, i + 1) if x[j - 1] == x[i]]
        return max(candidates) if candidates else None

    out = []
    for i in range(len(x)):
        pos: int | None = i
        for _ in range(hops):
            pos = find(pos)
            if pos is None:
                break
        out.append(null if pos is None else x[pos])
    return out


def test_khop_reference_on_hand_examples():
    a, b, c, null = 0, 1, 2, 9
    assert khop_reference([a, b, c, a, b], 1, null) == [null, null, null, b, c]
    assert khop_reference([a, b, a, b, a], 1, null) == [null, null, b, a, b]
    assert khop_reference([a, b, a, b, a], 2, null) == [null, null, null, b, a]
    assert khop_reference([a, a, b], 5, null) == [null, a, null]  # x[0] == x[1]: find(1) = 1 forever


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"hops": 1, "length": 8, "alphabet": 2},
        {"hops": 2, "length": 30, "alphabet": 3},
        {"hops": 5, "length": 40, "alphabet": 4},
        {"hops": 13, "length": 60, "alphabet": 3},
    ],
)
def test_khop_targets_match_reference(params):
    task = get_task("khop", **params)
    tokens, mask = task.sample(60, gen(2))
    n = task.length
    assert (tokens[:, n] == task.vocab.index("|")).all()
    expected_mask = torch.zeros(task.seq_len, dtype=torch.bool)
    expected_mask[n + 1 :] = True
    assert torch.equal(mask, expected_mask.expand_as(mask))
    x = tokens[:, :n]
    assert (x < task.alphabet).all() and (x[:, 1:] != x[:, :-1]).all()  # no equal neighbours
    for row in tokens.tolist():
        assert row[n + 1 :] == khop_reference(row[:n], task.hops, task.null_id)
    # The vectorised hop also matches on arbitrary sequences (equal neighbours allowed).
    free = torch.randint(0, task.alphabet, (40, n), generator=gen(9))
    vec = task.hop_targets(free).tolist()
    for row, got in zip(free.tolist(), vec):
        assert got == khop_reference(row, task.hops, task.null_id)


def test_khop_answer_sources_point_at_the_answer():
    a, b, c = 0, 1, 2
    task = get_task("khop", hops=1, length=5, alphabet=3)
    x = torch.tensor([[a, b, c, a, b], [a, b, a, b, a]])
    # One hop: the position right after the previous occurrence of x_i.
    assert task.hop_sources(x).tolist() == [[-1, -1, -1, 1, 2], [-1, -1, 1, 2, 3]]
    # Two hops: the last hop's landing position; [a, b, a, b, a] -> [~, ~, ~, b, a] as in the reference.
    assert task.hop_sources(x, hops=2).tolist() == [[-1, -1, -1, -1, -1], [-1, -1, -1, 1, 2]]
    tokens = torch.cat([x, torch.full((2, 1), task.sep_id), task.hop_targets(x)], dim=1)
    queries, sources = task.answer_sources(tokens)
    assert queries.tolist() == [5, 6, 7, 8, 9]  # y_i is predicted at position N + i
    # The answer's letter in X, and its aligned position N + s in the answer part.
    assert sources[0].tolist() == [[-1, -1], [-1, -1], [-1, -1], [1, 6], [2, 7]]
    assert torch.equal(sources[..., 0], task.hop_sources(x))
    with pytest.raises(ValueError, match="tokens must be"):
        task.answer_sources(x)


@pytest.mark.parametrize("params", [{"hops": 1, "length": 16, "alphabet": 6}, {"hops": 3, "length": 30, "alphabet": 4}])
def test_khop_sources_hold_the_targets(params):
    task = get_task("khop", **params)
    tokens, mask = task.sample(50, gen(4))
    queries, sources = task.answer_sources(tokens)
    targets = tokens[:, queries + 1]  # the token each query predicts
    letter, aligned = sources.unbind(-1)
    has = letter >= 0
    assert torch.equal(has, targets != task.null_id) and torch.equal(has, aligned >= 0)
    assert torch.equal(tokens.gather(1, letter.clamp_min(0))[has], targets[has])
    assert (letter[has] < task.length).all() and mask[:, queries + 1].all()
    # The aligned position is the query of y_s (it predicts the answer for the letter's position),
    # always visible from the query of y_i.
    assert torch.equal(aligned[has], queries[letter[has]]) and (aligned <= queries).all()


def test_khop_defaults_are_informative():
    task = get_task("khop")
    assert 100 <= task.seq_len <= 200
    tokens, mask = task.sample(500, gen(0))
    nonnull = (tokens[mask] != task.null_id).float().mean().item()
    assert 0.3 < nonnull < 0.7


@pytest.mark.parametrize("p", [2, 23, 599])
def test_modadd_labels_and_split(p):
    task = get_task("modadd", p=p)
    tokens, mask = task.sample(20000, gen(0))
    assert torch.equal(tokens[:, 2], (tokens[:, 0] + tokens[:, 1]) % p)
    assert mask[:, 2].all() and not mask[:, :2].any()
    eval_tokens, _ = task.eval_set()
    assert torch.equal(eval_tokens[:, 2], (eval_tokens[:, 0] + eval_tokens[:, 1]) % p)
    train_pairs = {(r[0], r[1]) for r in tokens.tolist()}
    eval_pairs = {(r[0], r[1]) for r in eval_tokens.tolist()}
    assert len(eval_pairs) == len(eval_tokens) == p * p - int(p * p * 0.95)
    assert not train_pairs & eval_pairs
    if p <= 23:  # sampling covers every training pair
        assert len(train_pairs) + len(eval_pairs) == p * p
    # The split does not depend on the global seed.
    torch.manual_seed(99)
    assert torch.equal(get_task("modadd", p=p).eval_set()[0], eval_tokens)


@pytest.mark.parametrize("params", [{}, {"n": 3, "d": 2}, {"n": 10, "d": 4}])
def test_memorize_labels(params):
    task = get_task("memorize", **params)
    n, d = task.n, task.d
    eval_tokens, eval_mask = task.eval_set()
    assert eval_tokens.shape == (n**d, d + 1) and eval_mask[:, -1].all() and not eval_mask[:, :-1].any()
    keys = eval_tokens[:, :d]
    for j in range(d):
        assert (keys[:, j] >= j * n).all() and (keys[:, j] < (j + 1) * n).all()
    assert torch.unique(keys, dim=0).shape[0] == n**d  # every tuple exactly once
    labels = eval_tokens[:, -1] - d * n
    assert (labels >= 0).all() and (labels < n).all()
    assert torch.bincount(labels, minlength=n).min() > 0 or n**d < 5 * n  # labels are spread over [0, n)

    def key_index(t: torch.Tensor) -> torch.Tensor:
        return ((t[:, :d] - n * torch.arange(d)) * n ** torch.arange(d)).sum(1)

    assert torch.equal(key_index(eval_tokens).sort().values, torch.arange(n**d))
    by_key = torch.empty_like(eval_tokens)
    by_key[key_index(eval_tokens)] = eval_tokens
    for seed in (0, 1):
        tokens, _ = task.sample(5000, gen(seed))
        assert torch.equal(tokens, by_key[key_index(tokens)])  # same key -> same label, every call
    torch.manual_seed(7)
    assert torch.equal(get_task("memorize", **params).eval_set()[0], eval_tokens)


def test_memorize_labels_are_random():
    labels = get_task("memorize", n=10, d=4).eval_set()[0][:, -1]
    counts = torch.bincount(labels - 40, minlength=10).float()
    assert ((counts / 10000 - 0.1).abs() < 0.02).all()


# --------------------------------------------------------------------------- held-out guarantee
def test_row_hash():
    data = torch.randint(0, 1000, (5000, 40), generator=gen(0))
    data[100] = data[7]
    h = row_hash(data)
    assert h.dtype == torch.int64 and h[100] == h[7]
    assert torch.unique(h).numel() == torch.unique(data, dim=0).shape[0]
    assert row_hash(data.flip(1))[0] != h[0]


@pytest.mark.parametrize("high,length", [(50, 30), (2**40, 5000)])  # small ids; ids large enough for the exact-mod path
def test_row_hash_matches_python_polynomial_hash(high, length):
    data = torch.randint(0, high, (4, length), generator=gen(1))

    def poly(row, base, mod):
        return sum(t * pow(base, j, mod) for j, t in enumerate(row)) % mod

    expected = [poly(r, 1_000_003, 2**31 - 1) * 2**31 + poly(r, 911_382_323, 2**31 - 19) for r in data.tolist()]
    assert row_hash(data).tolist() == expected


@pytest.mark.filterwarnings("ignore:TrainStream")
@pytest.mark.parametrize(
    "name,params,eval_n",
    [("addition", {"digits": 1}, 30), ("dyck", {"max_pairs": 2}, 10), ("dyck", {"max_pairs": 4}, None)],
)
def test_train_stream_never_yields_eval_rows(name, params, eval_n):
    task = get_task(name, **params)
    eval_rows = rows(task.eval_set(eval_n)[0])
    # Without filtering these tiny tasks hit the eval set all the time, so the check below can fail.
    raw, _ = task.sample(2000, gen(0))
    assert rows(raw) & eval_rows
    stream = TrainStream(task, batch_size=500, seed=0, eval_n=eval_n)
    for _ in range(10):
        tokens, mask = stream.next()
        assert tokens.shape == (500, task.seq_len) and not mask[:, 0].any()
        assert not rows(tokens) & eval_rows
    assert stream.rows_replaced > 0 and stream.step == 10


def test_train_stream_without_filtering():
    modadd = get_task("modadd", p=23)
    stream = TrainStream(modadd, batch_size=4000, seed=0)
    assert not stream.filtering
    tokens, _ = next(iter(stream))
    assert not rows(tokens) & rows(modadd.eval_set()[0])
    memorize = get_task("memorize", n=5, d=2)
    stream = TrainStream(memorize, batch_size=1000, seed=0)
    assert not stream.filtering
    assert rows(next(stream)[0]) <= rows(memorize.eval_set()[0])  # memorisation: eval set == training set


def test_train_stream_warns_when_eval_set_covers_much_of_the_distribution(recwarn):
    TrainStream(get_task("addition"), batch_size=1000, seed=0).next()
    assert not [w for w in recwarn if "TrainStream" in str(w.message)]
    with pytest.warns(UserWarning, match="matched the eval set"):
        TrainStream(get_task("dyck", max_pairs=10), batch_size=1000, seed=0).next()


@pytest.mark.filterwarnings("ignore:TrainStream")
def test_train_stream_eval_covering_everything_raises():
    stream = TrainStream(get_task("addition", digits=1), batch_size=64, seed=0, eval_n=4000)
    with pytest.raises(RuntimeError, match="eval_n"):
        stream.next()


@pytest.mark.filterwarnings("ignore:TrainStream")
@pytest.mark.parametrize(
    "name,params", [("addition", {"digits": 1}), ("dyck", {"max_pairs": 3}), ("khop", {}), ("memorize", {"n": 4, "d": 2})]
)
def test_train_stream_resumes_exactly(name, params):
    task = get_task(name, **params)
    stream = TrainStream(task, batch_size=128, seed=7)
    for _ in range(3):
        stream.next()
    buffer = io.BytesIO()
    torch.save(stream.state_dict(), buffer)
    expected = [stream.next() for _ in range(3)]

    buffer.seek(0)
    resumed = TrainStream(get_task(name, **params), batch_size=128, seed=12345)
    resumed.load_state_dict(torch.load(buffer))
    assert resumed.step == 3 and resumed.seed == 7
    for tokens, mask in expected:
        got_tokens, got_mask = resumed.next()
        assert torch.equal(got_tokens, tokens) and torch.equal(got_mask, mask)
    # A fresh stream with another seed gives other batches (so the equality above is meaningful).
    other = TrainStream(task, batch_size=128, seed=8)
    assert not torch.equal(other.next()[0], TrainStream(task, batch_size=128, seed=7).next()[0])


def test_train_stream_rejects_mismatched_state():
    state = TrainStream(get_task("addition", digits=3), batch_size=16, seed=0).state_dict()
    with pytest.raises(ValueError, match="batch_size"):
        TrainStream(get_task("addition", digits=3), batch_size=32, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="params"):
        TrainStream(get_task("addition", digits=4), batch_size=16, seed=0).load_state_dict(state)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "name,params,needle",
    [
        ("nope", {}, "'nope'"),
        ("addition", {"digits": 0}, "digits=0"),
        ("addition", {"digits": 101}, "digits=101"),
        ("addition", {"digits": 2.5}, "2.5"),
        ("addition", {"digits": True}, "True"),
        ("addition", {"digitz": 3}, "'digitz'"),
        ("dyck", {"max_pairs": 0}, "max_pairs=0"),
        ("retrieval", {"pairs": 0}, "pairs=0"),
        ("retrieval", {"pairs": 40, "num_keys": 30}, "num_keys=30"),
        ("retrieval", {"num_values": 0}, "num_values=0"),
        ("khop", {"hops": 0}, "hops=0"),
        ("khop", {"length": 1}, "length=1"),
        ("khop", {"alphabet": 1}, "alphabet=1"),
        ("modadd", {"p": 1}, "p=1"),
        ("modadd", {"modulus": 7}, "'modulus'"),
        ("memorize", {"n": 1000, "d": 3}, "1000000000"),
        ("memorize", {"n": 1}, "n=1"),
        ("memorize", {"d": 0}, "d=0"),
    ],
)
def test_bad_names_and_params_raise(name, params, needle):
    with pytest.raises(ValueError) as info:
        get_task(name, **params)
    message = str(info.value)
    assert needle in message and "allowed" in message and "\n" not in message


def test_unknown_name_lists_allowed_names():
    with pytest.raises(ValueError, match="addition.*dyck.*khop.*memorize.*modadd.*retrieval"):
        get_task("additon")


def test_bad_sample_size_raises():
    with pytest.raises(ValueError, match="n=-1"):
        get_task("addition").sample(-1, gen(0))


def test_numpy_integers_are_accepted_and_stored_as_int():
    np = pytest.importorskip("numpy")
    task = get_task("addition", digits=np.int64(3))
    assert task.params == {"digits": 3} and type(task.params["digits"]) is int
    json.dumps(task.params)


def test_facts_of_a_task_are_attributes_of_its_class():
    from mixit_lab.training.tasks import parameter_names

    assert TASKS["sentiment"].needs_corpus and TASKS["lm"].needs_corpus and not TASKS["addition"].needs_corpus
    assert TASKS["sentiment"].is_classifier() and not TASKS["lm"].is_classifier()
    assert TASKS["sentiment"].default_classes == ("0", "1") and TASKS["khop"].default_classes == ()
    assert ALGORITHMIC_TASKS == ("addition", "dyck", "retrieval", "khop", "modadd", "memorize")
    assert "cache_dir" not in parameter_names(TASKS["lm"])  # where data are cached is not what the task is


def test_memorize_labels_as_the_authors_write_them():
    # The authors' hdmemorize task writes label v as the token of key value v at position 0 (vocabulary n*d);
    # ours by default gives labels their own tokens. Same keys, same labels, another vocabulary.
    own, keys = get_task("memorize", n=8, d=2), get_task("memorize", n=8, d=2, label_tokens="keys")
    (t_own, m_own), (t_keys, m_keys) = own.eval_set(), keys.eval_set()
    assert torch.equal(t_own[:, :2], t_keys[:, :2]) and torch.equal(m_own, m_keys)
    assert torch.equal(t_own[:, 2] - own.label0_id, t_keys[:, 2]) and int(t_keys[:, 2].max()) < 8
    assert (own.d_vocab, keys.d_vocab) == (8 * 3 + 1, 8 * 2 + 1) and keys.pad_id == 16
    with pytest.raises(ValueError, match="label_tokens='mine' is not one of: own, keys"):
        get_task("memorize", n=8, label_tokens="mine")


def test_memorized_bits_reads_the_label_tokens_of_either_layout():
    from mixit_lab.analysis.memory import memorized_bits
    from mixit_lab.models import ModelConfig, build_model

    for labels in ("own", "keys"):
        task = get_task("memorize", n=4, d=2, label_tokens=labels)
        model = build_model(ModelConfig(d_model=16, n_layers=1, n_heads=2, n_ctx=task.seq_len, d_vocab=task.d_vocab))
        result = memorized_bits(model, task).iloc[0]
        assert result["labels"] == 4 and result["examples"] == 16, labels


# --------------------------------------------------------------------------- tasks of one's own
@pytest.fixture
def registry():
    """TASKS as it was before the test: registrations made in a test do not leak into the others."""
    saved = dict(TASKS)
    yield TASKS
    TASKS.clear()
    TASKS.update(saved)


def _task_class(**attrs):
    """A small valid task (copy the first token), with `attrs` overriding its class attributes."""

    class Copy(Task):
        name, metric, layout = "copy-test", "sequence", "x [x]"

        def __init__(self, width: int = 3):
            self.width, self.vocab, self.pad_id, self.seq_len = width, ["<pad>"] + [f"t{i}" for i in range(width)], 0, 2

        def _sample(self, n, g):
            x = torch.randint(1, self.width + 1, (n, 1), generator=g)
            return torch.cat([x, x], 1), torch.tensor([[False, True]]).expand(n, 2).clone()

    for key, value in attrs.items():
        setattr(Copy, key, value)
    return Copy


def test_a_registered_task_is_built_by_name_and_checked(registry):
    from mixit_lab.training.tasks import register_task, task_import_path

    cls = register_task(_task_class())
    assert registry["copy-test"] is cls and register_task(cls) is cls  # registering again is harmless
    task = get_task("copy-test", width=5)
    assert task.params == {"width": 5} and task.sample(4, gen(0))[0].shape == (4, 2)
    assert task_import_path(cls) == f"{__name__}:_task_class.<locals>.Copy"
    with pytest.raises(ValueError, match=r"copy-test: unknown parameter\(s\) 'depth'; allowed: width"):
        get_task("copy-test", depth=2)


@pytest.mark.parametrize("attrs,error", [
    ({"name": "addition"}, "task name 'addition' is a built-in task"),
    ({"name": "has space"}, "name='has space'; a task needs a class attribute `name`"),
    ({"metric": "bleu"}, "metric='bleu'; allowed: sequence, token"),
    ({"layout": None}, "a task needs a class attribute `layout`"),
    ({"_sample": Task._sample}, r"a task needs a method `_sample\(self, n, g\)`"),
])
def test_register_task_refuses_an_incomplete_class_in_one_line(registry, attrs, error):
    from mixit_lab.training.tasks import register_task

    with pytest.raises(ValueError, match=error) as info:
        register_task(_task_class(**attrs))
    assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match="is not a subclass of mixit_lab.training.tasks.Task"):
        register_task(dict)


def test_register_task_refuses_a_second_class_under_a_taken_name(registry):
    from mixit_lab.training.tasks import register_task

    register_task(_task_class())
    other = _task_class()
    other.__qualname__ = "Other"
    with pytest.raises(ValueError, match="task name 'copy-test' is already registered by .*Copy"):
        register_task(other)


def test_a_task_that_breaks_the_batch_format_is_refused_when_built(registry):
    from mixit_lab.training.tasks import register_task

    def bad_shape(self, n, g):
        return torch.zeros(n, 3, dtype=torch.int64), torch.zeros(n, 3, dtype=torch.bool)

    register_task(_task_class(_sample=bad_shape))
    with pytest.raises(ValueError, match=r"copy-test: _sample gave tokens torch.int64 \(2, 3\); expected int64 \(2, 2\)"):
        get_task("copy-test")


def test_import_paths_name_a_module_or_a_file(tmp_path, monkeypatch):
    from mixit_lab.training.tasks import TaskImportError, load_task_class, task_import_path

    (tmp_path / "mytasks.py").write_text(
        "from mixit_lab.training.tasks import Task\n"
        "import torch\n"
        "class Echo(Task):\n"
        "    name, metric, layout = 'echo', 'token', 'x [x]'\n"
        "    def __init__(self):\n"
        "        self.vocab, self.pad_id, self.seq_len = ['<pad>', 'a'], 0, 2\n"
        "    def _sample(self, n, g):\n"
        "        return torch.ones(n, 2, dtype=torch.int64), torch.tensor([[False, True]]).repeat(n, 1)\n"
    )
    monkeypatch.chdir(tmp_path)  # a module path is looked up in the current directory first
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])  # as under the `mixit` script
    monkeypatch.setitem(sys.modules, "mytasks", None)  # restored (removed) afterwards ...
    del sys.modules["mytasks"]  # ... and importable now
    by_module = load_task_class("mytasks:Echo")
    assert task_import_path(by_module) == "mytasks:Echo" and get_task("mytasks:Echo").name == "echo"
    by_file = load_task_class(str(tmp_path / "mytasks.py") + ":Echo")
    assert task_import_path(by_file) == f"{tmp_path / 'mytasks.py'}:Echo"
    assert load_task_class("mytasks.py:Echo") is by_file  # a file is imported once
    for spec, error in [("nosuchmodule:Echo", "cannot import task module 'nosuchmodule' \\(ModuleNotFoundError"),
                        ("mytasks:Nope", "module 'mytasks' has no 'Nope'"),
                        ("mytasks:torch", "names a module, not a subclass of mixit_lab.training.tasks.Task"),
                        ("missing.py:Echo", "cannot import task file 'missing.py': no such file"),
                        ("mytasks:", "is not an import path")]:
        with pytest.raises(TaskImportError, match=error):
            load_task_class(spec)


@pytest.mark.parametrize("name", ALGORITHMIC_TASKS)
def test_every_algorithmic_task_has_a_tokenizer_over_its_vocabulary(name):
    from mixit_lab.models.tokenizer import decode, encode, is_task_tokenizer, str_tokens

    task = get_task(name)
    tokenizer = task.model_tokenizer()
    assert is_task_tokenizer(tokenizer) and tokenizer.get_vocab_size() == task.d_vocab
    row = task.eval_set(1)[0][0].tolist()
    assert str_tokens(tokenizer, row) == [task.vocab[i] for i in row]
    tokens, lengths = encode(tokenizer, [decode(tokenizer, row), task.vocab[row[0]]], prepend_bos=True, max_len=None)
    assert tokens[0].tolist() == row and lengths.tolist() == [len(row), 1]  # no BOS: tasks have none
    assert tokens[1, 1:].eq(task.pad_id).all()  # padded with the task's own pad token
    with pytest.raises(ValueError, match="'@@' is not a token of this model's task"):
        encode(tokenizer, "@@", prepend_bos=False, max_len=None)


def test_a_vocabulary_that_cannot_be_typed_is_refused():
    from mixit_lab.models.tokenizer import task_tokenizer

    with pytest.raises(ValueError, match="vocab holds 'a' twice \\(ids 0 and 2\\)"):
        task_tokenizer(["a", "b", "a"], pad=1)
    with pytest.raises(ValueError, match="vocab holds 'a b'; each token string must be non-empty text without spaces"):
        task_tokenizer(["a b", "c"], pad=1)
