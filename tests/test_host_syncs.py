"""The training loop reads no tensor value between its reads at logs, kept models and checkpoints.

On a GPU every such read (`.item()`, `bool(t)`, `float(t)`, `.tolist()`, `.nonzero()`) waits for all queued kernels,
so a step that makes one leaves the GPU idle while Python queues the next. The count is taken here, on the CPU, of
the reads the package's own code makes (torch's internals, such as AdamW's step counter on the host, are not
device reads), step by step through a real `train()`. The data stream is left out: it draws and checks its batches
in host memory (training/tasks), before they move to the device, so its reads wait for no kernel.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import torch

import mixit_lab
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.tasks import TrainStream
from mixit_lab.training.trainer import RunLoop

PACKAGE = str(Path(mixit_lab.__file__).parent)
READS = ("item", "tolist", "nonzero", "__bool__", "__int__", "__float__", "__index__")


PAUSED: list[bool] = []  # non-empty while the data stream draws a batch


@contextmanager
def counted_reads() -> Iterator[Counter]:
    """Count the tensor reads made from the package's code: {(read, file:line): n}."""
    counts: Counter = Counter()

    def counting(name: str, original):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_code
            if caller.co_filename.startswith(PACKAGE) and not PAUSED:
                counts[(name, f"{Path(caller.co_filename).name}:{sys._getframe(1).f_lineno}")] += 1
            return original(self, *args, **kwargs)
        return read

    originals = {name: getattr(torch.Tensor, name) for name in READS}
    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, counting(name, original))
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def reads_per_step(monkeypatch, cfg: TrainConfig, out: Path) -> list[Counter]:
    """Train `cfg` and return, for each optimizer step, the reads made while it ran (its log and saves included)."""
    per_step: list[Counter] = []
    one_step = RunLoop._one_step

    def counted(loop: RunLoop) -> None:
        with counted_reads() as counts:
            one_step(loop)
        per_step.append(counts)

    def drawn_on_the_host(stream: TrainStream):
        PAUSED.append(True)
        try:
            return next_batch(stream)
        finally:
            PAUSED.pop()

    next_batch = TrainStream.next
    monkeypatch.setattr(RunLoop, "_one_step", counted)
    monkeypatch.setattr(TrainStream, "next", drawn_on_the_host)
    train(cfg, out, progress=False)
    return per_step


CASES = {
    "addition, standard": dict(task="addition", task_params={"digits": 2}, variant="standard"),
    "retrieval, mixit": dict(task="retrieval", task_params={"pairs": 2, "num_values": 8}, variant="mixit"),
    "addition, micro-batches": dict(task="addition", task_params={"digits": 2}, micro_batch_size=8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_step_between_reads_reads_a_tensor(monkeypatch, tmp_path, one_thread, case):
    cfg = TrainConfig(**CASES[case], d_model=16, n_layers=1, n_heads=2, batch_size=16, lr=1e-3, steps=8,
                      log_every=4, eval_every=8, eval_samples=32, device="cpu")
    per_step = reads_per_step(monkeypatch, cfg, tmp_path / "run")
    assert len(per_step) == 8
    quiet = [s for s in range(8) if (s + 1) % 4]  # steps 1-3 and 5-7: no log, no evaluation, no checkpoint
    assert all(not per_step[s] for s in quiet), {s + 1: dict(per_step[s]) for s in quiet if per_step[s]}
    # the log at step 4 reads what the steps left on the device: the counter sees reads where there are some
    assert sum(per_step[3].values()) >= 1


def test_a_classifier_step_reads_no_tensor(monkeypatch, tmp_path, one_thread, generated_corpora):
    cfg = TrainConfig(task="sentiment", task_params={"text_file": [str(generated_corpora["sentiment"])],
                                                     "tokenizer": "byte", "seq_len": 32},
                      variant="mixit", d_model=16, n_layers=1, n_heads=2, batch_size=8, lr=1e-3, steps=4,
                      log_every=4, eval_every=4, eval_samples=16, device="cpu")
    per_step = reads_per_step(monkeypatch, cfg, tmp_path / "run")
    assert [sum(c.values()) for c in per_step[:3]] == [0, 0, 0], [dict(c) for c in per_step[:3]]


def test_token_values_are_still_checked_outside_training(tiny_cfg):
    from mixit_lab.models import build_model

    model = build_model(tiny_cfg())
    bad = torch.tensor([[0, model.config.d_vocab]])
    with pytest.raises(ValueError, match="out of range"):
        model(bad)
    with model.trusted_inputs():
        assert model._values_trusted
    assert not model._values_trusted  # the block ends: user inputs are checked again
    with pytest.raises(ValueError, match="out of range"):
        model(bad)
