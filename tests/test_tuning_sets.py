"""The tuning set (a validation set a learning rate is chosen on): apart from the eval rows, never trained on, and
scored by the trainer; text tasks hold it out of their training documents; GLUE's TSV layout and a test file of
its own for sentiment (SST-2)."""

import json

import pytest
import torch

from mixit_lab.cli.main import main
from conftest import NEEDS_SHARED_DATA, SHARED_DATA
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.tasks import TrainStream, get_task
from mixit_lab.training.tasks.base import row_hash
from mixit_lab.training.tasks.corpora import TextDataError


def _hashes(tokens: torch.Tensor) -> torch.Tensor:
    return row_hash(tokens).unique()


@pytest.mark.parametrize("name, params, eval_n", [("addition", {"digits": 2}, 200), ("dyck", {"max_pairs": 4}, 256),
                                                  ("retrieval", {"pairs": 4, "num_values": 8}, 512)])
def test_drawn_tuning_rows_are_never_eval_rows_and_never_trained_on(name, params, eval_n):
    task = get_task(name, **params)
    tune, evals = task.tuning_set(300, eval_n), task.eval_set(eval_n)
    assert tune[0].shape[0] == 300
    assert not torch.isin(row_hash(tune[0]), _hashes(evals[0])).any()
    assert torch.equal(task.tuning_set(300, eval_n)[0], tune[0])  # a fixed set, whatever the training seed
    stream = TrainStream(task, 256, seed=3, eval_n=eval_n, tune_n=300)
    trained = torch.cat([stream.next()[0] for _ in range(40)])
    assert not torch.isin(row_hash(trained), _hashes(tune[0])).any()
    assert not torch.isin(row_hash(trained), _hashes(evals[0])).any()
    # without tune_n the stream does draw tuning rows: the filter above is what keeps them out
    if name != "retrieval":
        plain = TrainStream(task, 256, seed=3, eval_n=eval_n)
        assert torch.isin(row_hash(torch.cat([plain.next()[0] for _ in range(40)])), _hashes(tune[0])).any()


def test_modadd_tunes_on_training_pairs_kept_out_of_training_and_memorize_on_its_training_set():
    task = get_task("modadd", p=23)
    tune = task.tuning_set(26)
    train_pairs = set((task.train_pairs // 23 * 1000 + task.train_pairs % 23).tolist())
    assert {int(a) * 1000 + int(b) for a, b, _ in tune[0].tolist()} <= train_pairs  # drawn as training rows are
    stream = TrainStream(task, 512, seed=0, tune_n=26)
    assert not torch.isin(row_hash(torch.cat([stream.next()[0] for _ in range(10)])), _hashes(tune[0])).any()
    memorize = get_task("memorize", n=8, d=2)
    assert torch.equal(memorize.tuning_set(64)[0], memorize.eval_set(64)[0])  # what it reports is storing that set


def test_the_trainer_scores_the_tuning_set_and_a_resume_keeps_it(tmp_path):
    cfg = TrainConfig(task="addition", task_params={"digits": 2}, d_model=32, n_layers=1, n_heads=4, batch_size=32,
                      steps=20, eval_every=10, eval_samples=200, tune_samples=100, log_every=5)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert 0 <= summary["tune_acc"] <= 1 and summary["tune_loss"] > 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "tune_acc" in r] == [10, 20]
    with pytest.raises(ValueError, match="tune_n"):  # the stream of a run trained with other tuning rows is refused
        TrainStream(get_task("addition", digits=2), 32, seed=0, eval_n=200).load_state_dict(
            {**TrainStream(get_task("addition", digits=2), 32, seed=0, eval_n=200, tune_n=100).state_dict()})
    old = TrainStream(get_task("addition", digits=2), 32, seed=0, eval_n=200).state_dict()
    del old["tune_n"]  # a checkpoint saved before the tuning set existed holds none
    TrainStream(get_task("addition", digits=2), 32, seed=0, eval_n=200).load_state_dict(old)


def test_text_tasks_hold_their_tuning_split_out_of_the_training_documents(generated_corpora, tmp_path):
    lm = get_task("lm", text_file=[str(generated_corpora["lm"])], seq_len=16, vocab_size=300, tune_fraction=0.2)
    plain = get_task("lm", text_file=[str(generated_corpora["lm"])], seq_len=16, vocab_size=300)
    assert lm.tuning_size() > 0 and plain.tuning_size() == 0
    assert len(lm.train_tokens) < len(plain.train_tokens)  # the tuning documents left the training split
    assert lm.data_fingerprint != plain.data_fingerprint
    windows = lm.tuning_set(8)[0]
    assert windows.shape == (8, 16) and not torch.equal(windows, lm.eval_set(8)[0])
    with pytest.raises(ValueError, match="no tuning split.*tune_fraction"):
        plain.tuning_set(8)
    s = get_task("sentiment", text_file=[str(generated_corpora["sentiment"])], tune_fraction=0.25, seq_len=40,
                 vocab_size=300)
    assert len(s.tune_rows) == 40 and len(s.train_rows) == 120 and len(s.val_rows) == 40  # of 200: 20% test, then 25%
    assert s.tuning_set(10)[2].tolist().count(1) in range(3, 8)  # stratified: both classes
    other = get_task("sentiment", text_file=[str(generated_corpora["sentiment"])], tune_fraction=0.25, seq_len=40,
                     vocab_size=300, split_seed=1)
    assert not torch.equal(other.val_labels, s.val_labels) or not torch.equal(other.val_rows, s.val_rows)
    with pytest.raises(ValueError, match="tune_fraction=1.5"):
        get_task("lm", text_file=[str(generated_corpora["lm"])], tune_fraction=1.5)


def _glue(path, rows):
    path.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows))
    return path


def test_glue_tsv_files_skip_their_header_and_a_test_file_is_what_sentiment_reports(tmp_path):
    from corpora import labelled_sentences

    lines = [line.rsplit("\t", 1) for line in labelled_sentences(60).strip().split("\n")]
    train_file = _glue(tmp_path / "train.tsv", lines[:100])
    dev_file = _glue(tmp_path / "dev.tsv", lines[100:])
    task = get_task("sentiment", text_file=[str(train_file)], test_file=[str(dev_file)], seq_len=40, vocab_size=300,
                    tune_fraction=0.1)
    assert len(task.val_rows) == 20 and len(task.train_rows) + len(task.tune_rows) == 100
    assert "test: " in task.source
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\na fine film\t1\nawful\tmaybe\n")
    with pytest.raises(TextDataError, match=r"bad.tsv:3: label 'maybe' is not one of the classes"):
        get_task("sentiment", text_file=[str(bad)], seq_len=8, vocab_size=300)


def test_mixit_train_refuses_tuning_rows_a_text_task_does_not_hold(generated_corpora, tmp_path, capsys):
    code = main(["train", "--task", "lm", "--text-file", str(generated_corpora["lm"]), "--tune-samples", "8",
                 "--steps", "2", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "tune_samples=8: task 'lm' holds out no tuning rows" in err and "--tune-fraction" in err


@pytest.mark.skipif(SHARED_DATA is None, reason=NEEDS_SHARED_DATA)
def test_mixit_train_on_sst2_reports_on_its_dev_file(tmp_path, capsys):
    sst2 = SHARED_DATA / "sst-2"
    out = tmp_path / "run"
    assert main(["train", "--task", "sentiment", "--text-file", str(sst2 / "train.tsv"), "--test-file",
                 str(sst2 / "dev.tsv"), "--tune-fraction", "0.05", "--tune-samples", "256", "--max-docs", "4000",
                 "--vocab-size", "512", "--seq-len", "48", "--d-model", "16", "--n-layers", "1", "--steps", "3",
                 "--batch-size", "16", "--eval-every", "3", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["tune_acc"] is not None
    task = get_task("sentiment", text_file=[str(sst2 / "train.tsv")], test_file=[str(sst2 / "dev.tsv")],
                    max_docs=4000, vocab_size=512, seq_len=48, tune_fraction=0.05, cache_dir=tmp_path / ".token_cache")
    assert task.default_eval_size == 872  # GLUE's dev.tsv: every sentence, its header skipped
    assert main(["train", "--task", "sentiment", "--text-file", str(sst2 / "train.tsv"), "--max-docs", "2000",
                 "--vocab-size", "512", "--d-model", "16", "--n-layers", "1", "--steps", "2", "--batch-size", "8",
                 "--out", str(tmp_path / "plain"), "--quiet"]) == 0
