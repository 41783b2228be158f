import math

import pytest
import torch

from mixit_lab.analysis.memory import COLUMNS, bits_from_logits, capacity_sweep, memorized_bits
from mixit_lab.models import build_model, load_model
from mixit_lab.training import TrainConfig, get_task, train


pytestmark = pytest.mark.usefixtures("one_thread")


def test_bits_from_logits_exact_values():
    labels = torch.tensor([0, 1, 2, 3])
    certain = torch.nn.functional.one_hot(labels, 4).double() * 1000
    assert bits_from_logits(certain, labels) == {"examples": 4, "labels": 4, "accuracy": 1.0, "bits": 8.0, "max_bits": 8.0}
    assert bits_from_logits(torch.zeros(4, 4), labels)["bits"] == 0.0  # chance: nothing memorized
    # p(y|x) = 1/2 on a 4-way label: log2 4 + log2 1/2 = 1 bit; below chance counts 0, not negative.
    half = torch.log(torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]) + 1e-30)
    result = bits_from_logits(half, torch.tensor([0, 3]))
    assert result["bits"] == pytest.approx(1.0) and result["accuracy"] == 0.5
    with pytest.raises(ValueError, match="labels must lie in \\[0, 4\\)"):
        bits_from_logits(certain, torch.tensor([0, 1, 2, 4]))


def test_model_that_memorized_a_mapping_stores_n_log2_y_bits(tmp_path):
    task = get_task("memorize", n=4, d=2)  # 16 keys, 4 labels: 32 bits
    cfg = TrainConfig(task="memorize", task_params={"n": 4, "d": 2}, d_model=32, n_layers=1, n_heads=2, steps=500,
                      batch_size=64, lr=1e-2, weight_decay=0.0, eval_every=500)
    train(cfg, tmp_path / "run", progress=False)
    model = load_model(tmp_path / "run")
    row = memorized_bits(model, task).iloc[0]
    assert list(row.index) == COLUMNS
    n_keys, log2_y = 16, math.log2(4)
    assert row["accuracy"] == 1.0 and row["examples"] == n_keys and row["labels"] == 4
    assert row["bits"] == pytest.approx(n_keys * log2_y, rel=1e-3)
    counts = model.parameter_counts()
    assert row["params_trainable"] == counts["trainable"]
    assert row["bits_per_trainable_param"] == pytest.approx(n_keys * log2_y / counts["trainable"], rel=1e-3)
    # The same data given as tokens / mask / label ids gives the same answer.
    tokens, mask = task.eval_set()
    labels = range(task.label0_id, task.label0_id + task.n)
    same = memorized_bits(model, tokens=tokens, mask=mask, label_ids=list(labels), batch_size=5).iloc[0]
    assert same["bits"] == pytest.approx(row["bits"], abs=1e-9)
    # An untrained model memorized (almost) nothing.
    assert memorized_bits(build_model(model.config), task).iloc[0]["bits"] < 2


def test_memorized_bits_refuses_other_tasks(tiny_cfg):
    model = build_model(tiny_cfg(d_vocab=24, n_ctx=13))
    with pytest.raises(ValueError, match="task 'addition' is not a memorization task"):
        memorized_bits(model, get_task("addition", digits=3))
    with pytest.raises(ValueError, match="needs a memorize task, or both tokens and mask"):
        memorized_bits(model)


def test_memorized_bits_decides_by_the_task_class_not_its_name(tiny_cfg):
    """A memorization task is one whose class says `eval_is_train`, whatever its name; its label set is its
    `label_ids`. (Was: the name "memorize" decided, so a task of your own was refused and an impostor accepted.)"""
    from mixit_lab.training.tasks.algorithmic import Addition, Memorize

    class MyMemorize(Memorize):
        name = "my_memorize"

    class NamedMemorize(Addition):
        name = "memorize"

    mine = MyMemorize(n=4, d=2, label_tokens="keys")
    assert mine.label_ids == [0, 1, 2, 3]
    model = build_model(tiny_cfg(d_vocab=mine.d_vocab, n_ctx=mine.seq_len))
    row = memorized_bits(model, mine).iloc[0]
    assert row["examples"] == 16 and row["labels"] == 4
    with pytest.raises(ValueError, match="task 'memorize' is not a memorization task"):
        memorized_bits(build_model(tiny_cfg(d_vocab=24, n_ctx=13)), NamedMemorize(digits=3))
    assert get_task("addition", digits=2).label_ids is None  # no label set: the whole vocabulary


def test_capacity_sweep_trains_each_size_once(tmp_path):
    kw = dict(d=2, d_model=16, n_layers=1, n_heads=2, steps=20, batch_size=16, lr=1e-2)
    df = capacity_sweep("standard", [3, 2], tmp_path, **kw)
    assert df["n"].tolist() == [2, 3] and df["max_bits"].tolist() == pytest.approx([4.0, 9 * math.log2(3)])
    assert (df["bits"] <= df["max_bits"] + 1e-9).all()
    assert set(df.attrs) == {"plateau_bits", "plateau_n", "plateau_bits_per_trainable_param", "saturated"}
    assert df.attrs["plateau_bits"] == df["bits"].max()
    stamp = (tmp_path / "n3_d2" / "summary.json").stat().st_mtime_ns
    again = capacity_sweep("standard", [2, 3], tmp_path, **kw)  # finished runs are reused, not retrained
    assert (tmp_path / "n3_d2" / "summary.json").stat().st_mtime_ns == stamp
    assert again["bits"].tolist() == df["bits"].tolist()
