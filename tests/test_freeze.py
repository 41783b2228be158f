"""Freezing that does what it says: per-layer norms without ln_final, Q apart from K, single heads, one canonical
spec per model, and one-line errors for bad specs (models/freeze_spec.py FreezeEntry, models/freeze.py)."""

import dataclasses
import json
import re
import warnings

import pytest
import torch
from safetensors.torch import load_file

import mixit_lab.training.loss as loss_mod
from mixit_lab.cli.main import main
from mixit_lab.models import ModelConfig, build_model, load_model
from mixit_lab.models.grid import grid_label, grid_name
from mixit_lab.training import TrainConfig, train
from mixit_lab.training.resolve import resolve

SHAPE = dict(d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=20, seed=3)
# A tiny run of the real trainer: AdamW with weight decay 0.1, warmup, clipping, checkpoints every 5 steps.
TINY = dict(task="addition", task_params={"digits": 2}, d_model=32, n_layers=2, n_heads=4, batch_size=16, lr=1e-2,
            eval_every=5, eval_samples=50, log_every=5)


def frozen_names(cfg: ModelConfig) -> set[str]:
    return {n for n, p in build_model(cfg).named_parameters() if not p.requires_grad}


def test_norms_at_a_layer_is_that_layers_norms_only():
    at0 = ModelConfig(**SHAPE, freeze="norms@0")
    assert [at0.is_frozen(n) for n in ("blocks.0.ln1.w", "blocks.0.ln2.w", "blocks.1.ln1.w", "ln_final.w")] == \
        [True, True, False, False]
    # Plain "norms" keeps its old meaning (every norm, ln_final too): checkpoints saved with it build the same model.
    assert frozen_names(ModelConfig(**SHAPE, freeze="norms")) == \
        {"blocks.0.ln1.w", "blocks.0.ln2.w", "blocks.1.ln1.w", "blocks.1.ln2.w", "ln_final.w"}
    assert frozen_names(ModelConfig(**SHAPE, freeze="ln_final")) == {"ln_final.w"}


def test_cli_freeze_norms_at_0_trains_ln_final(tmp_path, one_thread, capsys):
    out = tmp_path / "r"
    code = main(["train", "--task", "addition", "--digits", "2", "--freeze", "norms@0", "--steps", "6",
                 "--eval-every", "6", "--batch-size", "16", "--lr", "1e-2", "--d-model", "32", "--n-layers", "2",
                 "--n-heads", "4", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    trained = load_model(out / "checkpoint")
    init = build_model(trained.config).state_dict()
    after = trained.state_dict()
    for name in ("blocks.0.ln1.w", "blocks.0.ln2.w"):
        assert torch.equal(after[name], init[name]), name
    for name in ("ln_final.w", "blocks.1.ln1.w"):
        assert not torch.equal(after[name], init[name]), name


def test_q_and_k_freeze_apart(one_thread):
    assert frozen_names(ModelConfig(**SHAPE, freeze="q")) == \
        {"blocks.0.attn.W_Q", "blocks.0.attn.b_Q", "blocks.1.attn.W_Q", "blocks.1.attn.b_Q"}
    assert frozen_names(ModelConfig(**SHAPE, freeze="k@1")) == {"blocks.1.attn.W_K", "blocks.1.attn.b_K"}
    model = build_model(ModelConfig(**SHAPE, freeze="q@0"))
    init = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        loss = model(torch.randint(0, 20, (4, 16), generator=torch.Generator().manual_seed(0)), return_type="loss")
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = model.state_dict()
    assert torch.equal(after["blocks.0.attn.W_Q"], init["blocks.0.attn.W_Q"])
    assert not torch.equal(after["blocks.0.attn.W_K"], init["blocks.0.attn.W_K"])
    assert not torch.equal(after["blocks.1.attn.W_Q"], init["blocks.1.attn.W_Q"])


def test_a_frozen_heads_gradient_is_zero_and_its_slice_counts_as_frozen():
    cfg = ModelConfig(**SHAPE, freeze="v@0.h1,o@1.h2")
    model = build_model(cfg)
    assert set(model.frozen_masks) == {"blocks.0.attn.W_V", "blocks.0.attn.b_V", "blocks.1.attn.W_O"}
    model(torch.randint(0, 20, (4, 16)), return_type="loss").backward()
    W_V, W_O = model.blocks[0].attn.W_V, model.blocks[1].attn.W_O
    assert W_V.requires_grad and not W_V.grad[1].any() and W_V.grad[0].abs().sum() > 0
    assert not W_O.grad[2].any() and W_O.grad[3].abs().sum() > 0
    assert model.blocks[1].attn.b_O.grad.abs().sum() > 0  # b_O is shared by the heads: a head freeze leaves it
    d_head = 32 // 4
    frozen = 32 * d_head + d_head + d_head * 32  # W_V[1], b_V[1], W_O[2]
    assert model.parameter_counts()["frozen"] == frozen
    by_component = {r["component"]: r["frozen"] for r in model.parameter_table()}
    assert by_component["v"] + by_component["o"] == frozen


def _weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoint" / "model.safetensors"))


HEADS = "v@0.h1,o@1.h2,qk@1.h0"
SLICES = [("blocks.0.attn.W_V", 1), ("blocks.0.attn.b_V", 1), ("blocks.1.attn.W_O", 2), ("blocks.1.attn.W_Q", 0),
          ("blocks.1.attn.b_K", 0)]


def test_a_frozen_head_stays_bit_identical_through_training(tmp_path, one_thread):
    cfg = TrainConfig(**TINY, steps=10, model_extra={"freeze": HEADS})
    summary = train(cfg, tmp_path / "r", progress=False)
    init, after = build_model(resolve(cfg, device=False).model).state_dict(), _weights(tmp_path / "r")
    for name, head in SLICES:
        assert torch.equal(after[name][head], init[name][head]), name  # weight decay and Adam did not move it
        others = [h for h in range(4) if h != head]
        assert not torch.equal(after[name][others], init[name][others]), name  # the rest of the tensor trained
    assert not torch.equal(after["blocks.1.attn.b_O"], init["blocks.1.attn.b_O"])
    assert summary["params_frozen"] == build_model(resolve(cfg, device=False).model).parameter_counts()["frozen"] > 0


def test_a_frozen_head_survives_a_resume(tmp_path, one_thread, monkeypatch):
    cfg = TrainConfig(**TINY, steps=10, model_extra={"freeze": HEADS})
    train(cfg, tmp_path / "full", progress=False)
    real_loss, calls = loss_mod.masked_loss, {"n": 0}

    def dies_at_step_7(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt  # killed after the checkpoint at step 5
        return real_loss(*args, **kwargs)

    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", dies_at_step_7)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "killed", progress=False)
    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", real_loss)
    train(cfg, tmp_path / "killed", resume=True, progress=False)
    full, resumed = _weights(tmp_path / "full"), _weights(tmp_path / "killed")
    init = build_model(resolve(cfg, device=False).model).state_dict()
    for name in full:
        assert torch.equal(full[name], resumed[name]), name
    for name, head in SLICES:
        assert torch.equal(resumed[name][head], init[name][head]), name


@pytest.mark.parametrize("given, canonical", [
    ("v,v@0", ["v"]),
    ("v@0,v@0.h1,v@0", ["v@0"]),
    ("o,v", ["v", "o"]),  # COMPONENTS' order, whatever the order given
    ("q@1,k@1", ["qk@1"]),
    ("k@0.h2,q@0.h2", ["qk@0.h2"]),
    ("qk,q@1", ["qk"]),
    ("q,qk@1", ["q", "k@1"]),
    ("norms,ln_final,norms@1", ["norms"]),
    ("ln_final,norms@1,norms@0", ["norms@0", "norms@1", "ln_final"]),
    ("mlp@01", ["mlp@1"]),
])
def test_freeze_lists_are_canonical(given, canonical):
    cfg = ModelConfig(**SHAPE, freeze=given)
    assert cfg.freeze == canonical
    assert cfg.label == grid_label("standard", given) == f"standard [freeze {','.join(canonical)}]"
    name = grid_name("standard", given)
    assert name == grid_name("standard", canonical) and re.fullmatch(r"standard\+freeze-[A-Za-z0-9_-]+", name), name


def test_head_specs_in_run_names():
    assert grid_name("standard", "qk@1.h2,v@0") == "standard+freeze-qkat1h2-vat0"
    assert grid_label("standard", "qk@1.h2,v@0") == "standard [freeze qk@1.h2,v@0]"


def test_a_saved_norms_config_builds_the_model_it_was_trained_as():
    legacy = {**ModelConfig(**SHAPE).to_dict(), "freeze": ["norms", "v"]}
    cfg = ModelConfig.from_dict(legacy)
    assert cfg.freeze == ["v", "norms"] and cfg.is_frozen("ln_final.w")


@pytest.mark.parametrize("bad, needles", [
    ("qq", ["'qq' is not one of", "ln_final"]),
    ("v@", ["'v@'", "not a layer number", "v@LAYER"]),
    ("v@x", ["'x' after '@'"]),
    ("v@2", ["layer '2' is not one of 0..1"]),
    ("v@0.h4", ["head 'h4' is not one of h0..h3"]),
    ("v@0.2", ["head '2' is not h followed by a head number"]),
    ("mlp@0.h1", ["'mlp@0.h1'", "only qk, q, k, v, o, mix can be frozen in one head"]),
    ("ln_final@0", ["only qk, q, k, v, o, mix, mlp, norms can be frozen in one layer"]),
    ("v.h1", ["a head needs a layer", "v@0.h1"]),
    ("mix@0.h1", ["'mix@0.h1' does not apply", "allowed for this model:"]),
])
def test_bad_freeze_specs_are_one_line_naming_the_value(bad, needles):
    with pytest.raises(ValueError) as refused:
        ModelConfig(**SHAPE, freeze=["v", bad])
    message = str(refused.value)
    assert "\n" not in message and all(n in message for n in needles), message


def test_freezing_every_head_of_a_parameter_freezes_it():
    cfg = ModelConfig(**SHAPE, freeze="v@0.h0,v@0.h1,v@0.h2,v@0.h3")
    assert frozen_names(cfg) == {"blocks.0.attn.W_V", "blocks.0.attn.b_V"} and not build_model(cfg).frozen_masks


def test_frozen_qk_at_the_small_init_is_warned_about_as_uniform(tmp_path):
    """At width 64 the default 0.02 init gives scores of std 0.03: frozen, every head attends about uniformly. 1/sqrt(d_model)
    gives std 1 and no warning, nor does a qk_init_std set on purpose or a model whose W_Q/W_K train."""
    from mixit_lab.models.freeze import frozen_score_std

    uniform = ModelConfig(variant="frozen_qk", d_model=64, n_layers=1, n_heads=4, n_ctx=12, d_vocab=20)
    assert frozen_score_std(uniform) == pytest.approx(64 * 0.02**2)
    assert frozen_score_std(dataclasses.replace(uniform, qk_init_std=0.125)) == pytest.approx(1.0)
    assert frozen_score_std(dataclasses.replace(uniform, variant="standard")) is None
    assert frozen_score_std(dataclasses.replace(uniform, variant="standard", freeze=["q", "k@0"])) is not None
    cfg = TrainConfig(task="retrieval", task_params={"pairs": 2}, variant="frozen_qk", d_model=64, n_layers=1,
                      n_heads=4, steps=2, batch_size=8, eval_every=2, eval_samples=16)
    with pytest.warns(UserWarning, match=r"qk_init_std=0.02 \(the default\) give attention scores of std about 0.026"):
        train(cfg, tmp_path / "a", progress=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="frozen W_Q")
        train(dataclasses.replace(cfg, model_extra={"qk_init_std": 0.125}), tmp_path / "b", progress=False)
        train(dataclasses.replace(cfg, model_extra={"qk_init_std": 0.02}), tmp_path / "c", progress=False)  # chosen
