"""The language-model step's parts that a CPU can check: the loss in chunks (training/loss.py) gives the plain loss
and gradients without holding the fp32 logits of all rows, is taken only past CHUNKED_LOSS_MIN_BYTES (which no CPU
preset reaches, so their numbers stay the plain path's), and leaves a short run's losses and scores unchanged; the
trainer's AdamW is the fused kernel on CPU and CUDA."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import mixit_lab.training.loss as loss_mod
from mixit_lab.models import ModelConfig, build_model
from mixit_lab.training import TrainConfig, evaluate, train
from mixit_lab.training.optim import build_optimizer
from mixit_lab.training.tasks import get_task

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 97


def force_chunks(monkeypatch, rows: int, d_vocab: int) -> None:
    """Every loss in chunks of `rows` rows, however small its logits."""
    monkeypatch.setattr(loss_mod, "CHUNKED_LOSS_MIN_BYTES", 0)
    monkeypatch.setattr(loss_mod, "LOSS_CHUNK_BYTES", rows * d_vocab * 4)


def loss_grads_saved(model, tokens: torch.Tensor, mask: torch.Tensor, reduction: str, bf16: bool):
    """masked_loss, the parameters' gradients, and the shapes of the tensors the autograd graph saved outside any
    checkpoint (what the backward pass keeps alive)."""
    model.zero_grad(set_to_none=True)
    saved: list[tuple[int, ...]] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            loss = loss_mod.masked_loss(model, tokens, mask, reduction)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, saved


def lm_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens [8, 16] and a mask scoring about two thirds of the positions (position 0 never)."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (8, 16), generator=g)
    mask = torch.rand(8, 16, generator=g) < 0.7
    mask[:, 0] = False
    return tokens, mask


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("unembed_bias", [False, True])
@pytest.mark.parametrize("variant", ["standard", "mixit"])  # mixit: a readout multiplier (4 at width 32)
def test_the_chunked_loss_is_the_plain_loss_and_gradients_without_all_rows_logits(variant, unembed_bias, bf16,
                                                                                 monkeypatch):
    model = build_model(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=VOCAB,
                                    unembed_bias=unembed_bias, init_std=0.2))
    if unembed_bias:  # a bias that is not zero, so its gradient and its part in the logits count
        torch.nn.init.normal_(model.unembed.b_U, std=0.5)
    tokens, mask = lm_batch()
    n = int(mask[:, 1:].sum())
    tol = 2e-2 if bf16 else 1e-5
    for reduction in ("mean", "sum"):
        monkeypatch.undo()
        plain, plain_grads, plain_saved = loss_grads_saved(model, tokens, mask, reduction, bf16)
        assert (n, VOCAB) in plain_saved  # the plain path keeps every row's logits for the backward pass
        force_chunks(monkeypatch, 7, VOCAB)  # n is not a multiple of 7: a shorter last chunk
        assert loss_mod.loss_chunk_rows(n, VOCAB) == 7
        chunked, grads, saved = loss_grads_saved(model, tokens, mask, reduction, bf16)
        assert not [s for s in saved if s[-1] == VOCAB], saved  # no logits (nor W_U) outside the recomputed chunks
        assert relative(chunked, plain) < tol / 10
        assert grads.keys() == plain_grads.keys() and ("unembed.b_U" in grads) == unembed_bias
        worst = max(grads, key=lambda k: relative(grads[k], plain_grads[k]))
        assert relative(grads[worst], plain_grads[worst]) < tol, worst


def test_hooks_still_act_on_the_chunked_loss(monkeypatch):
    """With a hook attached every position runs, as without chunks, and the hook's edit reaches the loss."""
    model = build_model(ModelConfig(d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=VOCAB, init_std=0.2))
    tokens, mask = lm_batch()
    ablate = [("blocks.1.attn.hook_z", lambda z, hook: torch.zeros_like(z))]
    with torch.no_grad(), model.hooks(fwd_hooks=ablate):
        plain = loss_mod.masked_loss(model, tokens, mask)
        force_chunks(monkeypatch, 5, VOCAB)
        chunked = loss_mod.masked_loss(model, tokens, mask)
    torch.testing.assert_close(chunked, plain, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        assert abs(float(chunked) - float(loss_mod.masked_loss(model, tokens, mask))) > 1e-4  # the ablation counted


def test_evaluate_in_chunks_gives_the_same_scores(monkeypatch):
    """Per-token and per-row (sequence) accuracy and the loss, the logits taken a few rows at a time."""
    task = get_task("addition", digits=3)
    tokens, mask = task.sample(64, torch.Generator().manual_seed(1))[:2]
    model = build_model(ModelConfig(d_model=32, n_layers=1, n_heads=4, n_ctx=task.seq_len, d_vocab=task.d_vocab,
                                    init_std=0.5))
    plain = {m: evaluate(model, tokens, mask, m, batch_size=40) for m in ("token", "sequence")}
    force_chunks(monkeypatch, 9, task.d_vocab)
    for metric, want in plain.items():
        got = evaluate(model, tokens, mask, metric, batch_size=40)
        assert got["eval_acc"] == want["eval_acc"] and got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-6)
    assert 0 < plain["token"]["eval_acc"] < 1  # some right, some wrong: the scatter to rows is exercised


def test_no_cpu_presets_pass_reaches_the_threshold_but_the_paper_lms_batch_in_one_pass_does():
    """Every run of the presets trained on a CPU (quick, smoke, scale, beyond), training and evaluation passes alike,
    scores fewer logits than CHUNKED_LOSS_MIN_BYTES (their numbers are the plain path's to the digit); the paper
    preset's LM batch in one pass is past it, its micro-batches of 128 rows are not."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from paper_cost import study_runs

    from mixit_lab.reproduce.preset import load_preset

    def largest_pass(name: str, one_pass: bool = False) -> int:
        """The fp32 bytes of the largest pass's logits, at the vocabulary's upper bound (vocab_size + specials)."""
        most = 0
        for runs in study_runs(load_preset(name)).values():
            for cfg, mcfg in runs:
                if mcfg.n_classes is None:
                    train_rows = cfg.batch_size if one_pass else cfg.micro_batch_size or cfg.batch_size
                    rows = max(train_rows, min(cfg.eval_batch_size, cfg.eval_samples or cfg.eval_batch_size))
                    most = max(most, rows * (mcfg.n_ctx - 1) * mcfg.d_vocab * 4)
        return most

    for name in ("quick", "smoke", "scale", "beyond"):
        assert largest_pass(name) <= loss_mod.CHUNKED_LOSS_MIN_BYTES, name
    assert largest_pass("paper") <= loss_mod.CHUNKED_LOSS_MIN_BYTES < largest_pass("paper", one_pass=True)


@pytest.mark.parametrize("micro_batch_size", [None, 4])
def test_a_short_lm_run_with_the_loss_in_chunks_has_the_plain_runs_losses(micro_batch_size, tmp_path, monkeypatch,
                                                                         generated_corpora, one_thread):
    cfg = TrainConfig(task="lm", task_params={"text_file": [str(generated_corpora["lm"])], "tokenizer": "byte",
                                              "seq_len": 32},
                      d_model=32, n_layers=1, n_heads=4, steps=8, batch_size=8, micro_batch_size=micro_batch_size,
                      log_every=2, eval_every=4, eval_samples=16, precision="fp32", lr=3e-3)
    train(cfg, tmp_path / "plain", progress=False)
    chunks = []
    real = loss_mod.chunked_cross_entropy
    monkeypatch.setattr(loss_mod, "chunked_cross_entropy", lambda *a, **k: chunks.append(a[1].shape[0]) or real(*a, **k))
    d_vocab = json.loads((tmp_path / "plain" / "run.json").read_text())["model"]["d_vocab"]
    force_chunks(monkeypatch, 50, d_vocab)  # 8 or 4 rows x 31 positions: 5 or 3 chunks a pass
    train(cfg, tmp_path / "chunked", progress=False)
    assert len(chunks) == 8 * (8 // (micro_batch_size or 8)) and chunks[0] == (micro_batch_size or 8) * 31
    logs = [[json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
            for run in ("plain", "chunked")]
    assert [r["step"] for r in logs[0]] == [r["step"] for r in logs[1]] == [2, 4, 6, 8]
    assert [r["step"] for r in logs[0] if "eval_loss" in r] == [r["step"] for r in logs[1] if "eval_loss" in r] == [4, 8]
    for want, got in zip(*logs):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        if "eval_loss" in want:
            assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-5) and got["eval_acc"] == want["eval_acc"]


def test_the_trainers_adamw_is_the_fused_kernel_on_cpu_and_cuda():
    model = build_model(ModelConfig(d_model=16, n_layers=1, n_heads=2, n_ctx=8, d_vocab=20))
    for device, fused in (("cpu", True), ("cuda", True), ("mps", False)):
        opt = build_optimizer(model, 1e-3, 0.01, (0.9, 0.95), torch.device(device))
        assert [(g["fused"], g["foreach"]) for g in opt.param_groups] == [(fused, False)] * 2, device
        assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]


@pytest.mark.parametrize("variant", ["standard", "frozen_qk", "shaped"])
def test_the_lm_loss_asks_sdpa_for_causal_attention_with_no_mask(variant, monkeypatch):
    """What lets CUDA run attention with SDPA's flash kernel, which takes no attn_mask: the LM's loss scores every
    position from the first on, so each layer calls SDPA with is_causal=True and attn_mask=None (only a loss that
    starts later, memorization's say, gives its last layer an explicit mask). Forced onto SDPA here, as on CUDA."""
    import torch.nn.functional as F

    from mixit_lab.models.attention import kernels

    monkeypatch.setattr(kernels, "MATH_ATTENTION_MAX_LEN", {torch.float32: 0, torch.bfloat16: 0})
    calls, real = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append((k["attn_mask"], k["is_causal"])) or real(*a, **k))
    model = build_model(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=VOCAB))
    tokens = lm_batch()[0]
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 0] = False  # the LM task's mask: every token but the first is scored
    with torch.autocast("cpu", torch.bfloat16):
        loss_mod.masked_loss(model, tokens, mask).backward()
    assert calls == [(None, True)] * 2
    calls.clear()
    mask[:, :8] = False  # scored from position 8 on: the last layer's queries start there
    loss_mod.masked_loss(model, tokens, mask)
    assert calls[0] == (None, True) and calls[1][0] is not None and calls[1][1] is False
