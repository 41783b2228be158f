"""Tests of the text workloads (training/tasks/: corpora, hub, bpe, cache, text; models/tokenizer.py): corpora, tokenizers, cache, lm, sentiment.

Tests marked `needs_data` read the real corpora in `../shared/data` (next to the repository, or the
folder named by MIXIT_DATA) and skip, with the reason shown, when it is absent. Tests that need a
corpus but not a real one use the generated corpora of tests/corpora.py (`generated_corpora`).
"""

from __future__ import annotations

import itertools
import json
import math
import socket
import time
from collections import Counter
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import NEEDS_SHARED_DATA, SHARED_DATA
import torch
from transformer_lens.head_detector import detect_head

import mixit_lab.training.tasks.text as text
from mixit_lab.training.tasks import bpe, hub
from mixit_lab.training.tasks import corpora as text_corpora
import mixit_lab.training.loss as loss_mod
from mixit_lab.models import VARIANTS, ModelConfig, build_model, load_model
from mixit_lab.training import TrainConfig, get_task, train
from mixit_lab.cli.main import main
from mixit_lab.training.sweep import run_name


DATA = SHARED_DATA
needs_data = pytest.mark.skipif(DATA is None, reason=NEEDS_SHARED_DATA)
SHAKESPEARE = DATA / "tinyshakespeare" / "input.txt" if DATA else None
WIKITEXT = DATA / "wikitext-2" / "valid.txt" if DATA else None
YELP = DATA / "sentiment-sentences" / "yelp_labelled.txt" if DATA else None



def one_line_error(exc_info, *needles: str) -> str:
    message = str(exc_info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


# --------------------------------------------------------------------------- corpora
def test_split_documents_wikitext_blocks_and_lines():
    wiki = " \n = First = \n \n Intro text .\n \n = = Section = = \n More .\n = Second = \n Body .\n"
    docs = text_corpora.split_documents(wiki)
    assert len(docs) == 2  # section headings do not start documents
    assert docs[0].startswith(" = First = ") and "= = Section = =" in docs[0] and docs[1].startswith(" = Second = ")
    assert text_corpora.split_documents("para one\nstill one\n\npara two\n \npara three") == [
        "para one\nstill one", "para two", "para three"
    ]
    assert text_corpora.split_documents("line a\nline b\n\nline c") == ["line a\nline b", "line c"]
    assert text_corpora.split_documents("only\nlines\nhere\n") == ["only", "lines", "here"]


def test_held_out_split_is_deterministic_disjoint_and_sized():
    train_a, val_a = text_corpora._held_out(1000, 0.1)
    train_b, val_b = text_corpora._held_out(1000, 0.1)
    assert val_a == val_b and len(val_a) == 100 and not set(train_a) & set(val_a)
    assert sorted(train_a + val_a) == list(range(1000))
    assert val_a != list(range(900, 1000))  # spread over the corpus, not its tail
    train_c, val_c = text_corpora._held_out(2, 0.01)
    assert len(train_c) == len(val_c) == 1  # always at least one document on each side


# --------------------------------------------------------------------------- tokenizers
def test_byte_tokenizer_round_trips_any_text_and_ignores_special_strings():
    tok = bpe.byte_tokenizer()
    assert tok.get_vocab_size() == 258
    sample = "Ünïcödé 😀\ttabs\r\n<pad> and <|endoftext|> stay text"
    ids = tok.encode(sample).ids
    assert ids == [2 + b for b in sample.encode("utf-8")]  # id 2 + b is byte b; specials never from text
    assert tok.decode(ids) == sample
    assert bpe.train_bpe(["ab ab ab", "ab abc"], 300).encode("<pad>").ids != [1]


@needs_data
def test_bpe_round_trips_text_and_token_cache_is_reused(tmp_path, monkeypatch):
    params = dict(text_file=[str(SHAKESPEARE)], vocab_size=512, seq_len=64)
    task = get_task("lm", cache_dir=tmp_path / "cache", **params)
    tok = task.text_tokenizer
    assert tok.get_vocab_size() == 512 == task.d_vocab
    raw = SHAKESPEARE.read_text()
    for start in (0, 12345, 500_000):
        chunk = raw[start : start + 3000]
        assert tok.decode(tok.encode(chunk).ids) == chunk
    assert tok.decode(tok.encode("naïve — “quoted” 😀").ids) == "naïve — “quoted” 😀"
    stream = np.concatenate([task.train_tokens, task.val_tokens])
    assert 200_000 < len(stream) < 0.6 * len(raw)  # BPE compresses: well under one token per byte
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix != ".sha256")
    assert sum(n.startswith("tokenizer-") for n in cached) == 1 and sum(n.startswith("tokens-") for n in cached) == 2
    assert all((tmp_path / "cache" / f"{n}.sha256").is_file() for n in cached)  # each entry with its content hash

    def must_not_run(*args, **kwargs):
        raise AssertionError("tokenizer trained or corpus tokenized again despite the cache")

    monkeypatch.setattr(bpe, "train_bpe", must_not_run)
    monkeypatch.setattr(text, "encode_documents", must_not_run)
    again = get_task("lm", cache_dir=tmp_path / "cache", **params)
    assert np.array_equal(again.train_tokens, task.train_tokens) and np.array_equal(again.val_tokens, task.val_tokens)
    assert again.data_fingerprint == task.data_fingerprint
    with pytest.raises(AssertionError, match="despite the cache"):  # a different tokenizer is not served from it
        get_task("lm", cache_dir=tmp_path / "cache", **{**params, "vocab_size": 600})


def test_a_token_cache_entry_altered_within_the_vocabulary_is_rebuilt_not_trained_on(tmp_path, generated_corpora):
    params = dict(text_file=[str(generated_corpora["lm"])], vocab_size=300, seq_len=32)
    clean = get_task("lm", cache_dir=tmp_path / "cache", **params)
    entry = next((tmp_path / "cache").glob("tokens-*.npy"))
    altered = np.load(entry)
    altered[: altered.size // 2] = 7  # still valid ids: only the content hash can tell
    np.save(entry, altered)
    with pytest.warns(UserWarning, match="does not match its content hash"):
        again = get_task("lm", cache_dir=tmp_path / "cache", **params)
    assert np.array_equal(again.train_tokens, clean.train_tokens) and np.array_equal(again.val_tokens, clean.val_tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entry was rewritten: intact again
        get_task("lm", cache_dir=tmp_path / "cache", **params)


# --------------------------------------------------------------------------- language modeling
@needs_data
def test_lm_task_windows_and_eval_split(tmp_path):
    task = get_task("lm", cache_dir=tmp_path, text_file=[str(WIKITEXT)], tokenizer="byte", seq_len=32)
    tokens, mask = task.sample(5, torch.Generator().manual_seed(0))
    assert tokens.shape == (5, 32) and tokens.dtype == torch.int64 and not mask[:, 0].any() and mask[:, 1:].all()
    assert torch.equal(tokens, task.sample(5, torch.Generator().manual_seed(0))[0])
    ev, _ = task.eval_set()
    assert ev.shape == (task.default_eval_size, 32) and torch.equal(ev, task.eval_set()[0])
    # Validation and training documents are disjoint whole articles.
    corpus = text.load_text_corpus([str(WIKITEXT)], None, 0.1, None)
    assert len(corpus.validation) == 6 and len(corpus.train) == 54
    assert all(d.startswith(" = ") for d in corpus.train + corpus.validation)
    assert not set(corpus.train) & set(corpus.validation)
    assert task.extra_eval_metrics(2.0) == {"eval_log_perplexity": 2.0, "eval_perplexity": pytest.approx(math.exp(2.0))}


@needs_data
@pytest.mark.slow  # training to a quality bar
def test_standard_lm_beats_the_unigram_baseline_on_tiny_shakespeare(tmp_path, one_thread):
    cfg = TrainConfig(task="lm", task_params={"text_file": [str(SHAKESPEARE)], "tokenizer": "byte", "seq_len": 64},
                      variant="standard", d_model=64, n_layers=2, n_heads=4, steps=300, batch_size=16, lr=3e-3,
                      eval_every=300, eval_samples=200)
    summary = train(cfg, tmp_path / "run", progress=False)
    task = cfg.build_task(tmp_path / ".token_cache")
    counts = np.bincount(task.train_tokens, minlength=task.d_vocab) + 1.0  # add-one smoothing
    tokens, mask = task.eval_set(200)
    unigram = float(-np.log(counts / counts.sum())[tokens[mask].numpy()].mean())
    assert 3.0 < unigram < 3.7, unigram  # bytes of this English text: ~3.3 nats
    assert summary["eval_loss"] < unigram - 0.7, (summary["eval_loss"], unigram)
    assert summary["eval_perplexity"] == pytest.approx(math.exp(summary["eval_loss"]))


@needs_data
@pytest.mark.slow
def test_frozen_qk_and_mixit_train_on_wikitext2_through_the_cli(tmp_path, capsys, one_thread):
    out = tmp_path / "sweep"
    code = main(["sweep", "--tasks", "lm", "--variants", "frozen_qk", "mixit", "--text-file", str(WIKITEXT),
                 "--vocab-size", "512", "--seq-len", "32", "--d-model", "32", "--n-layers", "1", "--n-heads", "4",
                 "--steps", "20", "--batch-size", "16", "--eval-every", "10", "--eval-samples", "50", "--out", str(out)])
    assert code == 0, capsys.readouterr()
    table = pd.read_csv(out / "summary.csv")
    assert sorted(table["variant"]) == ["frozen_qk", "mixit"] and (table["status"] == "finished").all()
    assert list((out / ".token_cache").glob("tokenizer-*.json"))  # one tokenizer, shared by both runs
    for name in table["run"]:
        assert "/" not in name and "valid.txt" in name
        records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in records if "eval_loss" in r]
        assert [r["step"] for r in evals] == [10, 20]
        for r in evals:
            assert r["eval_log_perplexity"] == r["eval_loss"]
            assert r["eval_perplexity"] == pytest.approx(math.exp(r["eval_loss"]))
        assert evals[-1]["eval_perplexity"] < 512  # better than uniform over the vocabulary
        assert (out / name / "tokenizer.json").is_file() and (out / name / "checkpoint" / "tokenizer.json").is_file()
        model = load_model(out / name)
        assert model.to_string(model.to_tokens(" = Valkyria = ", prepend_bos=False)[0]) == " = Valkyria = "


def test_lm_resume_after_kill_matches_uninterrupted_run(tmp_path, monkeypatch, one_thread, generated_corpora):
    cfg = TrainConfig(task="lm", task_params={"text_file": [str(generated_corpora["lm"])], "tokenizer": "byte",
                                              "seq_len": 32},
                      variant="mixit", d_model=32, n_layers=1, n_heads=4, steps=20, batch_size=8, eval_every=10,
                      eval_samples=20)
    train(cfg, tmp_path / "full", progress=False)
    real, calls = loss_mod.masked_loss, {"n": 0}

    def dies_at_step_13(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 14:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", dies_at_step_13)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "killed", progress=False)
    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", real)
    assert train(cfg, tmp_path / "killed", resume=True, progress=False)["step"] == 20
    a, b = load_model(tmp_path / "full").state_dict(), load_model(tmp_path / "killed").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- sentiment
@needs_data
def test_sentiment_beats_the_majority_class_on_yelp_sentences(tmp_path, one_thread):
    cfg = TrainConfig(task="sentiment", task_params={"text_file": [str(YELP)], "vocab_size": 1024},
                      variant="standard", d_model=32, n_layers=2, n_heads=4, steps=150, batch_size=32, lr=2e-3,
                      eval_every=150)
    summary = train(cfg, tmp_path / "run", progress=False)
    task = get_task("sentiment", text_file=[str(YELP)], vocab_size=1024)
    _, _, labels = task.eval_set()
    assert len(labels) == 200 and set(task.train_labels.tolist()) == {0, 1}
    majority = max(Counter(labels.tolist()).values()) / len(labels)
    assert summary["eval_acc"] > majority + 0.1, (summary["eval_acc"], majority)
    model = load_model(tmp_path / "run")
    assert model.config.causal is False and model.config.n_classes == 2 and not hasattr(model, "unembed")
    probs = model.classify(["The food was great and the staff were lovely.", "Terrible, rude and cold."]).softmax(-1)
    assert probs.shape == (2, 2) and torch.allclose(probs.sum(-1), torch.ones(2))


def test_sentiment_stratified_split_and_csv(tmp_path):
    csv_file = tmp_path / "reviews.csv"
    rows = [f'"review, number {i}",{"pos" if i % 3 else "neg"}' for i in range(60)]
    csv_file.write_text("text,label\n" + "\n".join(rows) + "\n")
    task = get_task("sentiment", text_file=[str(csv_file)], classes=["neg", "pos"], tokenizer="byte", seq_len=32)
    tokens, mask, labels = task.eval_set()
    assert Counter(labels.tolist()) == {0: 4, 1: 8}  # 20% of each class: 20 neg, 40 pos
    assert torch.equal(mask, tokens != task.pad_id) and (tokens[:, 0] == 0).all()
    assert task.decode(tokens[0]).startswith("<|endoftext|>review, number ")
    assert task.model_overrides == {"causal": False, "n_classes": 2}


# --------------------------------------------------------------------------- errors
def test_hub_dataset_offline_fails_fast(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(hub.DatasetUnavailable) as info:
        get_task("lm", dataset="wikitext-2-raw-v1")
    one_line_error(info, "'wikitext-2-raw-v1'", "--text-file", "HF_HUB_OFFLINE")
    assert time.monotonic() - start < 3
    code = main(["train", "--task", "sentiment", "--dataset", "yelp_polarity", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "'yelp_polarity'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_hub_check_gives_up_on_a_hanging_connection(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    def hangs(*args, **kwargs):
        time.sleep(5)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hangs)
    start = time.monotonic()
    with pytest.raises(hub.DatasetUnavailable) as info:
        hub.check_hub_reachable("fineweb-edu", timeout=1.0)
    one_line_error(info, "'fineweb-edu'", "--text-file", "no answer within 1 s")
    assert time.monotonic() - start < 3


def test_hub_dataset_code_path_with_a_stand_in_loader(monkeypatch):
    """The Hub path, with `datasets.load_dataset` replaced by a stand-in returning the documented row layouts."""
    import datasets

    calls, revisions = [], []

    def load_dataset(repo, config, split, streaming, revision=None):
        calls.append((repo, config, split, streaming))
        revisions.append((repo, revision))
        if repo == "Salesforce/wikitext":  # one row per line, titles as " = Title = "
            n = 8 if split == "train" else 2
            return {"text": [line for i in range(n) for line in (" \n", f" = Article {split} {i} = \n", " \n",
                                                                      f" Body of article {i} . " * 20 + "\n")]}
        if repo == "fancyzhx/yelp_polarity":
            n = 40 if split == "train" else 10
            return {"text": [f"review {i} was {'good' if i % 2 else 'bad'}" for i in range(n)],
                    "label": [i % 2 for i in range(n)]}
        assert streaming and config == "sample-10BT"
        return ({"text": f"web page {i} " * 20} for i in itertools.count())  # endless: must be cut at max_docs

    monkeypatch.setattr(hub, "check_hub_reachable", lambda dataset, timeout=3.0: None)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    lm = get_task("lm", dataset="wikitext-2-raw-v1", tokenizer="byte", seq_len=32)
    assert calls == [("Salesforce/wikitext", "wikitext-2-raw-v1", "train", False),
                     ("Salesforce/wikitext", "wikitext-2-raw-v1", "validation", False)]
    assert lm.decode(lm.eval_set(1)[0][0]).startswith("<|endoftext|> = Article validation 0 = ")
    web = get_task("lm", dataset="fineweb-edu", tokenizer="byte", seq_len=32, max_docs=50)
    assert len(web.train_tokens) + len(web.val_tokens) == sum(len(f"web page {i} " * 20) + 1 for i in range(50))
    yelp = get_task("sentiment", dataset="yelp_polarity", tokenizer="byte", seq_len=32, max_docs=30)
    assert len(yelp.train_rows) == 30 and len(yelp.val_rows) == 10
    assert yelp.decode(yelp.train_rows[1]) == "<|endoftext|>review 1 was good" and yelp.train_labels[1] == 1
    with pytest.raises(text_corpora.TextDataError, match="labels \\['0', '1'\\] are not among the classes"):
        get_task("sentiment", dataset="yelp_polarity", tokenizer="byte", classes=["neg", "pos"])
    with pytest.raises(text_corpora.TextDataError, match="dataset='yelp_polarity' is not one of: wikitext-103"):
        get_task("lm", dataset="yelp_polarity")
    # WikiText is read at a pinned commit of its repository, so a later push cannot change the rows.
    assert {r for repo, r in revisions if repo == "Salesforce/wikitext"} == {hub.WIKITEXT_REVISION}


def _as_hub_rows(path: Path) -> list[str]:
    """A local WikiText file as the Hub stores it: one row per line with its newline, blank lines as ""."""
    return [line if line.strip() else "" for line in path.read_text(encoding="utf-8").splitlines(keepends=True)]


def _wikitext_pair(which: str, generated_corpora: dict, tmp_path: Path) -> tuple[Path, Path]:
    if which == "shared":
        if DATA is None:
            pytest.skip(NEEDS_SHARED_DATA)
        return DATA / "wikitext-2" / "valid.txt", DATA / "wikitext-2" / "test.txt"
    import corpora

    valid, test = tmp_path / "valid.txt", tmp_path / "test.txt"
    valid.write_text(generated_corpora["lm"].read_text(encoding="utf-8"), encoding="utf-8")
    test.write_text(corpora.wikitext_like(n_articles=30, seed=1), encoding="utf-8")
    return valid, test


@pytest.mark.parametrize("which", ["generated", "shared"])
def test_wikitext2_from_the_hub_is_the_local_corpus(monkeypatch, tmp_path, generated_corpora, which):
    """`wikitext-2-v1-valid-test` (the quick preset's Hub fallback) gives the documents, the held-out
    articles and so the tokens of ../shared/data/wikitext-2/{valid,test}.txt, read as local files."""
    import datasets

    valid, test = _wikitext_pair(which, generated_corpora, tmp_path)
    calls = []

    def load_dataset(repo, config, split, streaming, revision=None):
        calls.append((repo, config, split, streaming))
        return {"text": _as_hub_rows({"validation": valid, "test": test}[split])}

    monkeypatch.setattr(hub, "check_hub_reachable", lambda dataset, timeout=3.0: None)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    assert hub.rejoin_lines(_as_hub_rows(valid)) == valid.read_text(encoding="utf-8")
    from_hub = text.load_text_corpus(None, "wikitext-2-v1-valid-test", 0.1, None)
    local = text.load_text_corpus([str(valid), str(test)], None, 0.1, None)
    assert calls == [("Salesforce/wikitext", "wikitext-2-v1", split, False) for split in ("validation", "test")]
    assert from_hub.train == local.train and from_hub.validation == local.validation and len(from_hub.validation) >= 2
    if which == "shared":  # the v1 splits: 60 + 62 articles, with <unk> as in the local files
        assert len(local.train) + len(local.validation) == 122 and "<unk>" in local.train[0]
    assert text.load_text_corpus(None, "wikitext-2-v1-valid-test", 0.1, 10).train == \
        text.load_text_corpus([str(valid), str(test)], None, 0.1, 10).train  # --max-docs alike too
    params = dict(tokenizer="byte", seq_len=32)
    assert (get_task("lm", dataset="wikitext-2-v1-valid-test", **params).data_fingerprint
            == get_task("lm", text_file=[str(valid), str(test)], **params).data_fingerprint)


def test_yelp_sample_from_the_hub_is_fixed_small_and_cached(monkeypatch, tmp_path):
    """`yelp_polarity-1k` (the quick preset's Hub fallback): 500 reviews per class from the streamed test
    split only, chosen by a hash of the text (not by row order), split per class like a local file, and
    kept in the token cache so a sweep streams the split once."""
    import datasets

    reviews = [{"text": f"review {i}: {'great food' if i % 3 else 'cold food'} " * (1 + i % 4), "label": int(i % 3 > 0)}
               for i in range(2400)]  # 800 negative, 1,600 positive
    calls = []

    def load_dataset(repo, config, split, streaming, revision=None):
        calls.append((repo, config, split, streaming))
        return iter(list(reviews))

    monkeypatch.setattr(hub, "check_hub_reachable", lambda dataset, timeout=3.0: None)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    corpus = text.load_labelled_corpus(None, "yelp_polarity-1k", ["0", "1"], 0.2, None)
    assert calls == [("fancyzhx/yelp_polarity", None, "test", True)]  # never the 256 MB train split
    assert Counter(corpus.train_labels) == {0: 400, 1: 400} and Counter(corpus.val_labels) == {0: 100, 1: 100}
    assert not set(corpus.train_texts) & set(corpus.val_texts) and corpus.source == "yelp_polarity-1k"
    for text_, label in zip(corpus.train_texts + corpus.val_texts, corpus.train_labels + corpus.val_labels):
        assert ("great" in text_) == (label == 1)
    reviews.reverse()  # another row order: the same sample and split
    again = text.load_labelled_corpus(None, "yelp_polarity-1k", ["0", "1"], 0.2, None)
    assert (again.train_texts, again.val_texts) == (corpus.train_texts, corpus.val_texts)
    first = get_task("sentiment", cache_dir=tmp_path, dataset="yelp_polarity-1k", tokenizer="byte", seq_len=128)
    n_calls = len(calls)
    second = get_task("sentiment", cache_dir=tmp_path, dataset="yelp_polarity-1k", tokenizer="byte", seq_len=128)
    assert len(calls) == n_calls and first.data_fingerprint == second.data_fingerprint  # served from the cache
    assert len(first.train_rows) == 800 and len(first.val_rows) == 200
    reviews.append({"text": "neutral", "label": 2})
    with pytest.raises(text_corpora.TextDataError, match="labels \\['2'\\] are not among the classes"):
        text.load_labelled_corpus(None, "yelp_polarity-1k", ["0", "1"], 0.2, None)


def _write(path: Path, data: bytes | str) -> str:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize(
    "task, name, data, needle",
    [
        ("lm", "empty.txt", b"  \n\n", "file is empty"),
        ("lm", "latin1.txt", "caf\u00e9 au lait\n\nsecond".encode("latin-1"), "not UTF-8"),
        ("lm", "short.txt", b"one tiny paragraph\n\nand another", "fewer than one sequence"),
        ("lm", "single.txt", b"just one line", "need at least 2"),
        ("sentiment", "labels.txt", b"good\t1\nbad\t0\nmeh\t3\n", "label '3' is not one of the classes"),
        ("sentiment", "notab.txt", b"good\t1\nno tab here\n", "found no tab"),
        ("sentiment", "cols.csv", b"sentence,score\nok,1\n", "'text' and 'label' columns"),
        ("sentiment", "oneclass.txt", b"good\t1\nfine\t1\nnice\t1\n", "at least 2 examples"),
        ("sentiment", "empty.tsv", b"", "file is empty"),
    ],
)
def test_bad_text_input_is_a_one_line_error_naming_the_file(tmp_path, task, name, data, needle):
    path = _write(tmp_path / name, data)
    with pytest.raises(text_corpora.TextDataError) as info:
        get_task(task, text_file=[path], tokenizer="byte", seq_len=64)
    one_line_error(info, name, needle)


def test_bad_text_options_through_the_cli(tmp_path, capsys):
    bad = _write(tmp_path / "bad.txt", b"\xff\xfe not utf8\n\nmore")
    for argv, needle in [
        (["train", "--task", "lm", "--text-file", bad], "bad.txt: not UTF-8"),
        (["train", "--task", "lm", "--text-file", str(tmp_path / "missing.txt")], "missing.txt: no such file"),
        (["train", "--task", "lm"], "give text_file"),
        (["train", "--task", "lm", "--dataset", "imagenet"], "dataset='imagenet' is not one of"),
        (["train", "--task", "lm", "--text-file", bad, "--tokenizer", "word"], "tokenizer='word'"),
        (["train", "--task", "lm", "--text-file", bad, "--tokenizer", "byte", "--vocab-size", "512"], "vocab_size"),
        (["train", "--task", "addition", "--text-file", bad], "--text-file does not apply to task 'addition'"),
    ]:
        code = main(argv + ["--out", str(tmp_path / "run")])
        err = capsys.readouterr().err
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "run").exists()


def test_lm_refuses_bidirectional_attention(tmp_path, capsys, generated_corpora):
    code = main(["train", "--task", "lm", "--text-file", str(generated_corpora["lm"]), "--tokenizer", "byte", "--bidirectional",
                 "--out", str(tmp_path / "run")])
    assert code == 2 and "requires causal=True" in capsys.readouterr().err


def test_list_options_repeat_and_run_names_use_file_names(tmp_path, capsys):
    a = _write(tmp_path / "a.txt", ("word " * 50 + "\n\n") * 20)
    b = _write(tmp_path / "b.txt", ("other " * 50 + "\n\n") * 20)
    code = main(["sweep", "--tasks", "lm", "--variants", "standard", "--text-file", a, "--text-file", b,
                 "--tokenizer", "byte", "--seq-len", "16", "32", "--dry-run", "--out", str(tmp_path / "s")])
    names = capsys.readouterr().out.split()
    assert code == 0 and len(names) == 2  # one corpus (two files), two sequence lengths
    assert all("text_filea.txt+b.txt" in n and "/" not in n for n in names)
    cfg = TrainConfig(task="lm", task_params={"text_file": ["x/y/z.txt"], "seq_len": 8})
    assert run_name(cfg).startswith("lm_seq_len8_text_filez.txt__standard")


# --------------------------------------------------------------------------- models with text
def _text_model(variant: str = "standard", **kw):
    tok = bpe.byte_tokenizer()
    model = build_model(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=48, d_vocab=258, **kw))
    model.set_tokenizer(tok)
    return model


def test_text_model_tokenizer_api_checkpoint_and_detect_head(tmp_path):
    model = _text_model()
    tokens = model.to_tokens("To be, or not")
    assert tokens.shape == (1, 14) and tokens[0, 0] == 0 and tokens.dtype == torch.int64
    assert model.to_str_tokens("To be") == ["<|endoftext|>", "T", "o", " ", "b", "e"]
    assert model.to_str_tokens("To", prepend_bos=False) == ["T", "o"]
    assert model.to_string(tokens[0]) == "<|endoftext|>To be, or not"
    batch = model.to_tokens(["a", "abc"], prepend_bos=False)
    assert batch.tolist() == [[99, 1, 1], [99, 100, 101]]  # right-padded with <pad> (id 1)
    assert model.to_string(batch) == ["a<pad><pad>", "abc"]
    assert model.to_tokens("x" * 100).shape == (1, 48)  # truncated to n_ctx
    assert torch.equal(model("To be, or not"), model(tokens))
    scores = detect_head(model, "one two three four one two three four", "induction_head")
    assert scores.shape == (2, 4) and ((scores >= 0) & (scores <= 1)).all()  # every head scored
    model.save_pretrained(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()
    loaded = load_model(tmp_path / "ckpt")
    assert torch.equal(loaded.to_tokens("To be, or not"), tokens) and torch.equal(loaded(tokens), model.eval()(tokens))
    (tmp_path / "ckpt" / "tokenizer.json").write_text("{broken")
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_model(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="no tokenizer"):
        build_model(ModelConfig()).to_tokens("hi")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_classifier_ignores_padding_in_every_variant(variant):
    model = _text_model(variant, causal=False, n_classes=3, init_std=0.2).eval()
    texts = ["a short one", "a much longer sentence than the first"]
    tokens = model.to_tokens(texts)
    mask = tokens != 1
    logits = model.classify(tokens, mask)
    assert logits.shape == (2, 3)
    wider = torch.cat([tokens, torch.ones(2, 7, dtype=torch.long)], dim=1)  # more padding
    torch.testing.assert_close(model.classify(wider, wider != 1), logits, rtol=1e-4, atol=1e-5)
    alone = model.classify(model.to_tokens(texts[:1]))  # no padding at all
    torch.testing.assert_close(alone, logits[:1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.classify(texts), logits, rtol=1e-4, atol=1e-5)  # text builds its own mask
    with pytest.raises(ValueError, match="classifier has no next-token loss"):
        model(tokens, return_type="loss")
    names = {n for n, _ in model.named_parameters()}
    assert "classifier.W_C" in names and not any(n.startswith("unembed") for n in names)
    if variant == "random":
        trained = {n for n, p in model.named_parameters() if p.requires_grad}
        assert trained == {"embed.W_E", "classifier.W_C"}  # no classifier bias (unembed_bias=False)


def test_mixit_padding_restricts_and_recentres_the_fixed_matrix():
    model = _text_model("mixit", causal=False, n_classes=2, mixing_centre="own")  # the default's rows are cut, not re-centred
    tokens = torch.randint(2, 258, (1, 12))
    mask = torch.ones(1, 12, dtype=torch.bool)
    mask[0, 7:] = False
    _, cache = model.run_with_cache(tokens, attention_mask=mask)
    A = cache["pattern", 0][0]  # [head, q, k]
    full = model.blocks[0].attn.mixing[:, :12, :12]
    assert A[:, :7, 7:].abs().max() == 0  # nothing from padding
    torch.testing.assert_close(A[1:, :7, :7].sum(-1), torch.ones(3, 7))  # real rows still sum to one
    block = full[1:, :7, :7] - torch.eye(7)
    expected = torch.eye(7) + block - block.mean(-1, keepdim=True)  # the noise re-centred over the real keys
    torch.testing.assert_close(A[1:, :7, :7], expected)
    torch.testing.assert_close(A[0, :7, :7], full[0, :7, :7])  # the sink head is fixed weights, not re-centred
