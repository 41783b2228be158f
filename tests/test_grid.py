"""The trainability / attention grid: per-layer frozen components and per-layer attention kinds.

The six named variants must be exactly what they were before the grid existed (pinned init hashes),
and each is the grid expression it is documented as (same init, same trainable set, same training).
"""

import hashlib
import json

import pytest
import torch

from mixit_lab.cli.main import main
from mixit_lab.models import ModelConfig, build_model, load_model
from mixit_lab.models.grid import grid_label, grid_name
from mixit_lab.training.resolve import resolve
from mixit_lab.training.sweep import build_grid, variant_entry

SHAPE = dict(d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=20, seed=3)

# sha256 of the initial state dict (names and bytes) and of the trainable parameter names, computed
# before the grid was added: the named variants' checkpoints must not change.
PINNED = {
    "standard": ("726affa3af0e1b96", "9714c171647d"),
    "frozen_qk": ("726affa3af0e1b96", "cdb71712bf94"),
    "frozen_mlp": ("726affa3af0e1b96", "1b0cf2576bb4"),
    "mixit": ("ca62582b46af679f", "1583899bc58b"),
    "random": ("726affa3af0e1b96", "77776334c972"),
    "shaped": ("726affa3af0e1b96", "9714c171647d"),
}

# Each named variant as a grid model.
AS_GRID = {
    "frozen_qk": ("standard", {"freeze": "qk"}),
    "frozen_mlp": ("standard", {"freeze": "mlp"}),
    "random": ("standard", {"freeze": "qk,v,o,mlp,norms"}),
    "mixit": ("mixit", {"attention": "mixing"}),
    "shaped": ("shaped", {"attention": ["shaped", "shaped"]}),
}


def fingerprint(model) -> tuple[str, str]:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().contiguous().numpy().tobytes())
    trained = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    return h.hexdigest()[:16], hashlib.sha256(",".join(trained).encode()).hexdigest()[:12]


@pytest.mark.parametrize("variant", list(PINNED))
def test_named_variants_are_unchanged(variant):
    assert fingerprint(build_model(ModelConfig(variant=variant, **SHAPE))) == PINNED[variant]


def _train_steps(cfg: ModelConfig, steps: int = 5) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        tokens = torch.randint(0, cfg.d_vocab, (4, cfg.n_ctx), generator=g)
        loss = model(tokens, return_type="loss")
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("named", list(AS_GRID))
def test_named_variant_equals_its_grid_expression(named, one_thread):
    base, grid = AS_GRID[named]
    named_cfg, grid_cfg = ModelConfig(variant=named, **SHAPE), ModelConfig(variant=base, **SHAPE, **grid)
    assert grid_cfg.is_grid and not named_cfg.is_grid
    m1, m2 = build_model(named_cfg), build_model(grid_cfg)
    assert fingerprint(m1)[0] == fingerprint(m2)[0]
    assert {n for n, p in m1.named_parameters() if p.requires_grad} == {n for n, p in m2.named_parameters() if p.requires_grad}
    after1, after2 = _train_steps(named_cfg), _train_steps(grid_cfg)
    assert after1.keys() == after2.keys()
    for key in after1:
        assert torch.equal(after1[key], after2[key]), key


def test_per_layer_freeze_keeps_only_that_layer(one_thread):
    cfg = ModelConfig(variant="standard", **SHAPE, freeze=["v@1", "o@0", "norms"])
    frozen = {n for n, p in build_model(cfg).named_parameters() if not p.requires_grad}
    assert frozen == {"blocks.1.attn.W_V", "blocks.1.attn.b_V", "blocks.0.attn.W_O", "blocks.0.attn.b_O",
                      "blocks.0.ln1.w", "blocks.0.ln2.w", "blocks.1.ln1.w", "blocks.1.ln2.w", "ln_final.w"}
    before = build_model(cfg).state_dict()
    after = _train_steps(cfg)
    for name in before:
        if name.endswith(("rotary_cos", "rotary_sin")):
            continue
        assert torch.equal(before[name], after[name]) == (name in frozen), name


def test_hybrid_mixit_has_softmax_in_the_chosen_layer():
    cfg = ModelConfig(variant="mixit", **SHAPE, attention="mixing,softmax")
    model = build_model(cfg)
    assert [b.attn.kind for b in model.blocks] == ["mixing", "softmax"]
    assert hasattr(model.blocks[0].attn, "mixing") and not hasattr(model.blocks[0].attn, "W_Q")
    assert model.blocks[1].attn.W_Q.requires_grad and not hasattr(model.blocks[1].attn, "mixing")
    # The mixing layer is MixiT's own: the same fixed matrices as the named variant's layer 0.
    assert torch.equal(model.blocks[0].attn.mixing, build_model(ModelConfig(variant="mixit", **SHAPE)).blocks[0].attn.mixing)
    # MixiT has learned positions, so its softmax layer has no rotary tables.
    assert not model.blocks[1].attn.rotary
    tokens = torch.randint(0, 20, (2, 16))
    _, cache = model.run_with_cache(tokens)
    pattern = cache["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (2, 4, 16, 16)
    assert not torch.allclose(pattern[0], pattern[1])  # input-dependent, unlike layer 0


def test_hybrid_softmax_layer_undoes_the_width_multipliers_of_q_and_k():
    """In a mixit model W_Q and W_K carry sqrt(base/d_model) each; the softmax layer divides q.k by
    base/d_model, so its logits at init are on a standard model's scale rather than 8x larger."""
    shape = dict(d_model=64, n_layers=2, n_heads=4, n_ctx=19, d_vocab=50, seed=0, qk_init_std=0.125)
    hybrid = build_model(ModelConfig(variant="mixit", attention="mixing,softmax", **shape))
    tokens = torch.randint(0, 50, (16, 19), generator=torch.Generator().manual_seed(0))
    _, cache = hybrid.run_with_cache(tokens)
    q, k = cache["blocks.1.attn.hook_q"], cache["blocks.1.attn.hook_k"]  # [batch, pos, head, d_head]
    scores = cache["blocks.1.attn.hook_attn_scores"]
    expected = torch.einsum("bqhe,bkhe->bhqk", q, k) * (64 / 512) / 4  # d_model / base_width / sqrt(d_head)
    causal = torch.ones(19, 19, dtype=torch.bool).tril()
    torch.testing.assert_close(scores[..., causal], expected[..., causal], rtol=1e-5, atol=1e-5)

    _, std_cache = build_model(ModelConfig(variant="standard", **shape)).run_with_cache(tokens)
    spread = scores[..., causal].std() / std_cache["blocks.1.attn.hook_attn_scores"][..., causal].std()
    assert 0.5 < spread < 2, spread  # without the division: about 8


def test_learned_attention_is_causal_row_normalised_and_trained(one_thread):
    cfg = ModelConfig(variant="mixit", **SHAPE, attention="learned")
    model = build_model(cfg)
    A = model.blocks[0].attn.mixing_pattern(16)
    fixed = build_model(ModelConfig(variant="mixit", **SHAPE)).blocks[0].attn.mixing_pattern(16)
    # At init: MixiT's matrices, except the sink head's first row (MixiT's sums to 0.5, ours to 1).
    assert torch.allclose(A[1:], fixed[1:], atol=1e-6) and torch.allclose(A[0, 1:], fixed[0, 1:], atol=1e-6)
    after = _train_steps(cfg, steps=3)
    assert not torch.equal(after["blocks.0.attn.A_learned"], model.state_dict()["blocks.0.attn.A_learned"])
    model.load_state_dict(after)
    A = model.blocks[0].attn.mixing_pattern(16).detach()
    assert torch.allclose(A.sum(-1), torch.ones(4, 16), atol=1e-5)
    assert torch.equal(A.triu(1), torch.zeros_like(A))
    # Input-independent: every sequence gets the same pattern.
    _, cache = model.run_with_cache(torch.randint(0, 20, (2, 16)))
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert torch.allclose(pattern[0], pattern[1]) and torch.allclose(pattern[0], A)
    # Frozen as a component, it keeps its init.
    frozen = ModelConfig(variant="mixit", **SHAPE, attention="learned", freeze="mix")
    assert torch.equal(_train_steps(frozen, steps=2)["blocks.1.attn.A_learned"],
                       build_model(frozen).state_dict()["blocks.1.attn.A_learned"])


@pytest.mark.parametrize("bad, needle", [
    ({"freeze": "qq"}, "'qq' is not one of"),
    ({"freeze": "embed@0"}, "can be frozen in one layer"),
    ({"freeze": "qk@2"}, "layer '2' is not one of 0..1"),
    ({"attention": "softmax,mixing,softmax"}, "3 entries"),
    ({"attention": "linear"}, "'linear' is not one of"),
    ({"freeze": 3}, "comma-separated string or a list"),
])
def test_bad_grid_settings_name_the_value(bad, needle):
    with pytest.raises(ValueError, match=needle):
        ModelConfig(variant="standard", **SHAPE, **bad)


@pytest.mark.parametrize("variant", ["standard", "frozen_qk", "mixit", "random", "shaped"])
@pytest.mark.parametrize("extra", [{}, {"attention": "learned"}, {"attention": "mixing,softmax", "bias": False},
                                   {"n_classes": 3, "unembed_bias": True}])
def test_parameter_names_are_the_built_models(variant, extra):
    """What freeze entries are checked against is what a built model has."""
    cfg = ModelConfig(variant=variant, **SHAPE, **extra)
    assert sorted(cfg.parameter_names()) == sorted(name for name, _ in build_model(cfg).named_parameters())


@pytest.mark.parametrize("variant, extra, needle", [
    ("standard", {"freeze": "mix"}, "'mix' does not apply: this model has no such parameters"),
    ("standard", {"freeze": "pos"}, "'pos' does not apply"),
    ("mixit", {"freeze": "qk"}, "'qk' does not apply"),
    ("mixit", {"attention": "mixing,softmax", "freeze": "qk@0"}, "'qk@0' does not apply"),
    ("frozen_mlp", {"freeze": "mlp"}, "variant frozen_mlp already keeps it"),
    ("random", {"freeze": "embed,pos,unembed"}, "'pos' does not apply"),
    ("random", {"freeze": "embed,unembed"}, "nothing left to train"),
    ("standard", {"freeze": "embed,qk,v,o,mlp,norms,unembed"}, "nothing left to train"),
])
def test_a_freeze_that_changes_nothing_or_everything_is_refused(variant, extra, needle):
    with pytest.raises(ValueError, match=needle) as refused:
        ModelConfig(variant=variant, **SHAPE, **extra)
    assert "\n" not in str(refused.value)
    if "does not apply" in needle:
        assert "allowed for this model:" in str(refused.value)


def test_labels_and_run_names():
    assert grid_label("mixit") == grid_name("mixit") == "mixit"
    assert grid_label("mixit", attention="mixing,softmax") == "mixit [attention mixing,softmax]"
    assert grid_label("standard", freeze=["v", "o@1"]) == "standard [freeze v,o@1]"
    assert grid_name("standard", freeze=["v", "o@1"], attention="learned") == "standard+freeze-v-oat1+attn-learned"


def test_sweep_variant_entries_expand_to_grid_runs(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("variants: [mixit, {mixit: {attention: [mixing, softmax]}}, {standard: {freeze: 'v,o'}}]\n"
                    "tasks: [{retrieval: {pairs: 2}}]\nsizes: [{d_model: 32, n_layers: 2, n_heads: 4}]\n"
                    "train: {model_extra: {qk_init_std: 0.1}}\n")
    runs = build_grid(grid)
    names = [name for name, _ in runs]
    assert [n.split("__")[1] for n in names] == ["mixit", "mixit+attn-mixing-softmax", "standard+freeze-v-o"]
    extras = [cfg.model_extra for _, cfg in runs]
    assert extras[0] == {}  # mixit has no W_Q, W_K: a shared setting its model does not use is not recorded
    assert extras[1] == {"qk_init_std": 0.1, "attention": ["mixing", "softmax"]}  # its softmax layer uses it
    assert resolve(runs[2][1], device=False).model.freeze == ["v", "o"]
    with pytest.raises(ValueError, match="unknown grid keys"):
        variant_entry({"mixit": {"layers": 2}})
    with pytest.raises(ValueError, match="'nope' is not one of"):
        variant_entry({"nope": {"freeze": "v"}})


def test_cli_trains_saves_loads_and_lists_a_grid_model(tmp_path, one_thread, capsys):
    out = tmp_path / "runs" / "hybrid"
    code = main(["train", "--task", "retrieval", "--pairs", "4", "--variant", "mixit", "--attention", "mixing,softmax",
                 "--freeze", "v@0", "--steps", "6", "--eval-every", "3", "--batch-size", "8", "--d-model", "32",
                 "--n-layers", "2", "--n-heads", "4", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    model = load_model(out / "checkpoint")
    assert model.config.attention == ["mixing", "softmax"] and model.config.freeze == ["v@0"]
    assert not model.blocks[0].attn.W_V.requires_grad and model.blocks[1].attn.W_V.requires_grad
    run = json.loads((out / "run.json").read_text())
    assert run["model"]["attention"] == ["mixing", "softmax"]

    from mixit_lab.analysis.explore_model import head_kinds
    from mixit_lab.analysis.runs import load_runs

    assert head_kinds(model)[0][1] == "fixed (input-independent)" and head_kinds(model)[1][0] == "softmax"
    runs = load_runs(tmp_path / "runs")
    assert runs["variant"].tolist() == ["mixit [freeze v@0; attention mixing,softmax]"]

    code = main(["train", "--task", "retrieval", "--variant", "mixit", "--attention", "mixing,softmax,softmax",
                 "--out", str(tmp_path / "bad"), "--quiet"])
    err = capsys.readouterr().err
    assert code != 0 and "3 entries" in err and len(err.strip().splitlines()) == 1
