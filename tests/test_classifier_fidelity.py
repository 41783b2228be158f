"""The classifier fields that reproduce the authors' sequence classifier, checked against their model file.

docs/fidelity.md lists four ways their `LlamaForSequenceClassification` (as `trainer_classifier.py` builds it) differs
from ours; each is a ModelConfig field with one value ours and the other theirs (each default is ours, except
mixing_centre, whose default is theirs since MixiT learns SST-2 only with their rows):

    mixing_centre="causal"   bidirectional MixiT rows centred with the causal count i + 1 (rows do not sum to 1);
                             ours: "own", rows that sum to 1
    attend_padding=True      no attention mask: padding is attended like any token
    zero_pad_token=<pad id>  the pad token's embedding row zero at init and never trained
    causal_softmax=True      softmax and shaped layers stay causal under causal=False (transformers 4.51.3)

With all four at theirs, our logits equal theirs (weights copied across), before and after one SGD step; with any
one of them back at ours, they differ. Their model runs in a second Python (their code needs transformers 4.51.3,
ours a newer one): their clone of princeton-pli/MixiT and that Python are found beside the repository (../MixiT,
../authors-env/bin/python, as benchmarks/bench_authors.py's example command) or named by $MIXIT_AUTHORS_REPO and
$MIXIT_AUTHORS_PYTHON; without them those tests skip, saying so. Nothing of their code is copied here: the worker
below imports their file and only builds, loads, runs and steps their model.
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
from mixit_lab.models import ModelConfig, build_model
from mixit_lab.models.attention.mixing import centre_mixing


def _authors() -> tuple[Path, Path] | None:
    """(their checkout, a Python with their dependencies), or None if either is missing."""
    repo = Path(os.environ.get("MIXIT_AUTHORS_REPO") or ROOT.parent / "MixiT")
    python = Path(os.environ.get("MIXIT_AUTHORS_PYTHON") or ROOT.parent / "authors-env" / "bin" / "python")
    return (repo, python) if (repo / "modeling_llama.py").is_file() and python.is_file() else None


AUTHORS = _authors()
NEEDS_AUTHORS = ("the authors' model not found: clone princeton-pli/MixiT to ../MixiT and make ../authors-env a "
                 "Python with torch and transformers==4.51.3 (or set $MIXIT_AUTHORS_REPO, $MIXIT_AUTHORS_PYTHON)")

# Run by their Python: argv[1] their checkout, argv[2] the cases (torch.save), argv[3] where to write the results.
WORKER = r'''
import sys
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
from modeling_llama import LlamaForSequenceClassification, MixingLlamaConfig

results = []
for case in torch.load(sys.argv[2]):
    torch.manual_seed(case["seed"])  # their mixing matrices come from the global generator
    model = LlamaForSequenceClassification(MixingLlamaConfig(**case["config"]))
    state = dict(case["state"])
    pad = case["config"]["pad_token_id"]
    state["model.embed_tokens.weight"][pad] = model.model.embed_tokens.weight.detach()[pad]  # as theirs built it
    model.load_state_dict(state)
    model.eval()
    out = {"pad_row": model.model.embed_tokens.weight.detach()[pad].clone(),
           "noise": [getattr(layer.self_attn, "mixing_noise", None) for layer in model.model.layers],
           "matrices": [getattr(layer.self_attn, "attn_weights", None) for layer in model.model.layers]}
    logits = model(input_ids=case["input_ids"]).logits  # no attention mask, as their pipeline
    out["logits"] = logits.detach().clone()
    F.cross_entropy(logits, case["labels"]).backward()
    torch.optim.SGD(model.parameters(), lr=case["lr"], weight_decay=case["weight_decay"]).step()
    with torch.no_grad():
        out["logits_after"] = model(input_ids=case["input_ids"]).logits.clone()
    out["pad_row_after"] = model.model.embed_tokens.weight.detach()[pad].clone()
    results.append(out)
torch.save(results, sys.argv[3])
'''

D, LAYERS, HEADS, T, VOCAB, CLASSES = 32, 2, 4, 12, 40, 3
PAD = VOCAB - 1  # their pad token is EOS; any id that is not a real token of the batch
LR, WEIGHT_DECAY = 0.05, 0.1
THEIRS = {  # per variant: the fields at their classifier's values
    "mixit": dict(mixing_centre="causal", attend_padding=True, zero_pad_token=PAD),
    "standard": dict(causal_softmax=True, attend_padding=True, zero_pad_token=PAD),
    "shaped": dict(causal_softmax=True, attend_padding=True, zero_pad_token=PAD),
}
OURS = {"mixing_centre": "own", "attend_padding": False, "zero_pad_token": None, "causal_softmax": False}
THEIR_ATTENTION = {"mixit": "mixing", "standard": "vanilla", "shaped": "shaped"}


def _tokens() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of their shape (every row n_ctx long, padded with the pad token): one row unpadded, two right-padded,
    one left-padded (their Llama tokenizer pads on the left). Returns tokens, mask (1 = real), labels."""
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, PAD, (4, T), generator=g)
    tokens[1, 8:] = tokens[3, 3:] = tokens[2, :3] = PAD
    return tokens, tokens != PAD, torch.randint(0, CLASSES, (4,), generator=g)


def _config(variant: str, **fields) -> ModelConfig:
    return ModelConfig(variant=variant, d_model=D, n_layers=LAYERS, n_heads=HEADS, n_ctx=T, d_vocab=VOCAB,
                       n_classes=CLASSES, causal=False, seed=0, **{**THEIRS[variant], **fields})


def _randomize(model) -> None:
    """Every trained tensor but the embedding (whose pad row the fields are about) to random values, so no term hides
    behind a zero or a one; Q and K at a tenth of the scale (sharp shaped softmaxes, as tests/test_fidelity.py)."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "embed.W_E":
                std = 0.03 if name.rsplit(".", 1)[-1] in ("W_Q", "W_K", "b_Q", "b_K") else 0.3
                p.copy_(torch.randn(p.shape, generator=g) * std + (1.0 if name.endswith(".w") else 0.0))


def _their_state(model) -> dict[str, torch.Tensor]:
    """Our weights under their names and layouts (nn.Linear weights are [out, in])."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    H, E = model.config.n_heads, model.config.d_head
    out = {"model.embed_tokens.weight": sd["embed.W_E"], "model.norm.weight": sd["ln_final.w"],
           "score.linear.weight": sd["classifier.W_C"].T.contiguous()}
    if "pos_embed.W_pos" in sd:
        out["model.wpe.weight"] = sd["pos_embed.W_pos"]
    for i in range(model.config.n_layers):
        ours, theirs = f"blocks.{i}.", f"model.layers.{i}."
        out[theirs + "input_layernorm.weight"] = sd[ours + "ln1.w"]
        out[theirs + "post_attention_layernorm.weight"] = sd[ours + "ln2.w"]
        for x in "QKV":
            if f"{ours}attn.W_{x}" in sd:
                W = sd[f"{ours}attn.W_{x}"]  # [head, d_model, d_head]
                out[f"{theirs}self_attn.{x.lower()}_proj.linear.weight"] = W.permute(0, 2, 1).reshape(H * E, -1)
                out[f"{theirs}self_attn.{x.lower()}_proj.linear.bias"] = sd[f"{ours}attn.b_{x}"].reshape(-1)
        out[theirs + "self_attn.o_proj.linear.weight"] = sd[ours + "attn.W_O"].reshape(H * E, -1).T.contiguous()
        out[theirs + "self_attn.o_proj.linear.bias"] = sd[ours + "attn.b_O"]
        for mine, their in (("gate", "gate_proj"), ("in", "up_proj"), ("out", "down_proj")):
            out[f"{theirs}mlp.{their}.linear.weight"] = sd[f"{ours}mlp.W_{mine}"].T.contiguous()
            out[f"{theirs}mlp.{their}.linear.bias"] = sd[f"{ours}mlp.b_{mine}"]
    return out


def _their_config(cfg: ModelConfig) -> dict:
    """MixingLlamaConfig's arguments as trainer_classifier.py passes them, at our sizes and width base."""
    return dict(hidden_size=cfg.d_model, num_hidden_layers=cfg.n_layers, intermediate_size=cfg.d_mlp,
                num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads, vocab_size=cfg.d_vocab,
                max_position_embeddings=cfg.n_ctx, max_seq_len=cfg.n_ctx, num_labels=cfg.n_classes,
                pad_token_id=PAD, is_causal=False, use_cache=False, skip_scaling=cfg.residual_scale,
                shaped_attention=THEIR_ATTENTION[cfg.variant], base_hidden_size=cfg.base_width,
                attn_implementation="sdpa" if cfg.variant == "standard" else "eager",
                do_rope=cfg.variant != "mixit", activation_cminus=-1, rms_norm_eps=cfg.norm_eps,
                attention_bias=True, mlp_bias=True)


def _base(variant: str):
    model = build_model(_config(variant))
    _randomize(model)
    return model


@pytest.fixture(scope="module")
def theirs(tmp_path_factory) -> dict[str, dict]:
    """Their classifier's results per variant, built from our randomized weights (their pad row as theirs built it)."""
    if AUTHORS is None:
        pytest.skip(NEEDS_AUTHORS)
    repo, python = AUTHORS
    tokens, _, labels = _tokens()
    cases = [dict(config=_their_config(_base(v).config), state=_their_state(_base(v)), seed=0, input_ids=tokens,
                  labels=labels, lr=LR, weight_decay=WEIGHT_DECAY) for v in THEIRS]
    folder = tmp_path_factory.mktemp("authors_classifier")
    torch.save(cases, folder / "cases.pt")
    done = subprocess.run([str(python), "-c", WORKER, str(repo), str(folder / "cases.pt"), str(folder / "out.pt")],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"})
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(zip(THEIRS, torch.load(folder / "out.pt")))


def _ours(variant: str, result: dict, **fields):
    """Our classifier with the base weights, `fields` on top of theirs; MixiT's matrices centred from their noise."""
    model = build_model(_config(variant, **fields))
    base = _base(variant)
    state = base.state_dict()
    state["embed.W_E"] = model.embed.W_E.detach().clone()  # the pad row as this config builds it
    for i, noise in enumerate(result["noise"]):
        if noise is not None:
            state[f"blocks.{i}.attn.mixing"] = centre_mixing(model.config, i, noise.double()).float()
    model.load_state_dict(state)
    return model


def _logits_and_step(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Class logits, then the logits after one SGD step on the batch (weight decay included)."""
    tokens, mask, labels = _tokens()
    logits = model.classify(tokens, mask)
    F.cross_entropy(logits, labels).backward()
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=WEIGHT_DECAY).step()
    with torch.no_grad():
        return logits.detach(), model.classify(tokens, mask)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item())


@pytest.mark.skipif(AUTHORS is None, reason=NEEDS_AUTHORS)
@pytest.mark.parametrize("variant", list(THEIRS))
def test_with_every_field_at_theirs_our_classifier_is_theirs(theirs, variant, one_thread):
    """Logits equal theirs before and after a training step; the pad row is zero at init and stays zero."""
    result = theirs[variant]
    model = _ours(variant, result)
    before, after = _logits_and_step(model)
    assert result["logits"].abs().max() > 0.1  # a real signal, not an all-zero readout
    torch.testing.assert_close(before, result["logits"], rtol=1e-4, atol=1e-4 * result["logits"].abs().max().item())
    torch.testing.assert_close(after, result["logits_after"], rtol=1e-4, atol=1e-4 * after.abs().max().item())
    assert not _close(before, after)  # the step moved the model
    assert (result["pad_row"] == 0).all() and (result["pad_row_after"] == 0).all()
    assert (model.embed.W_E[PAD] == 0).all() and (model.embed.W_E[:PAD] != 0).all()


@pytest.mark.skipif(AUTHORS is None, reason=NEEDS_AUTHORS)
@pytest.mark.parametrize("variant, field", [(v, f) for v in THEIRS for f in THEIRS[v]])
def test_any_one_field_at_ours_makes_the_classifier_differ(theirs, variant, field, one_thread):
    """With ours, MixiT refuses their left-padded row (its positions are absolute) where theirs attends the padding."""
    result = theirs[variant]
    ours = _ours(variant, result, **{field: OURS[field]})
    if variant == "mixit" and field == "attend_padding":
        with pytest.raises(ValueError, match="left padding"):
            _logits_and_step(ours)
        return
    before, _ = _logits_and_step(ours)
    assert not _close(before, result["logits"]), field


@pytest.mark.skipif(AUTHORS is None, reason=NEEDS_AUTHORS)
def test_their_bidirectional_mixing_is_centred_with_the_causal_count(theirs):
    """Our centring of their raw noise gives their matrices with mixing_centre="causal"; "own" gives rows that sum to 1,
    which theirs do not. Causal models centre alike either way."""
    cfg = _config("mixit")
    for layer, (noise, matrices) in enumerate(zip(theirs["mixit"]["noise"], theirs["mixit"]["matrices"])):
        torch.testing.assert_close(centre_mixing(cfg, layer, noise.double()).float(), matrices, rtol=0, atol=1e-6)
        own = centre_mixing(_config("mixit", mixing_centre="own"), layer, noise.double())
        torch.testing.assert_close(own[1:].sum(-1), torch.ones(HEADS - 1, T, dtype=torch.float64))
        assert (matrices[1:].sum(-1) - 1).abs().max() > 0.1
    causal = {c: centre_mixing(ModelConfig(variant="mixit", n_ctx=T, mixing_centre=c), 0, noise.double())
              for c in ("own", "causal")}
    assert torch.equal(causal["own"], causal["causal"])


# ----------------------------------------------------------------- the fields on our side alone (no reference needed)

def test_each_field_changes_the_classifier_only_where_it_applies(one_thread):
    """unused_fields calls a field unused exactly where it changes neither weights nor logits, on a padded batch run
    as training runs it (the mask only with a classifier); two layers, since one pooled last token sees the same keys
    causal or not."""
    tokens, mask, _ = _tokens()
    tokens, mask = tokens[[0, 1, 3]], mask[[0, 1, 3]]  # training pads on the right: without row 2, padded on the left
    changed = {"mixing_centre": "own", "attend_padding": True, "zero_pad_token": PAD, "causal_softmax": True}  # not defaults
    for variant in ("standard", "frozen_qk", "random", "mixit", "shaped"):
        for causal in (True, False):
            for n_classes in (None, CLASSES):
                base = dict(variant=variant, d_model=16, n_layers=2, n_heads=2, n_ctx=T, d_vocab=VOCAB, causal=causal,
                            n_classes=n_classes)
                ref = build_model(ModelConfig(**base)).eval()
                for name, value in changed.items():
                    cfg = ModelConfig(**base, **{name: value})
                    model = build_model(cfg).eval()
                    same = all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), model.state_dict().values()))
                    kw = {} if n_classes is None else {"attention_mask": mask}
                    with torch.no_grad():
                        same = same and torch.equal(ref(tokens, **kw), model(tokens, **kw))
                    assert (name in cfg.unused_fields()) == same, (name, variant, causal, n_classes)


@pytest.mark.parametrize("fields, said", [
    ({"mixing_centre": "theirs"}, "mixing_centre='theirs' is not one of: 'own', 'causal'"),
    ({"attend_padding": "yes"}, "attend_padding='yes' must be True or False"),
    ({"causal_softmax": 1}, "causal_softmax=1 must be True or False"),
    ({"zero_pad_token": VOCAB}, f"zero_pad_token={VOCAB} must be None .* or a token id in 0..{VOCAB - 1}"),
    ({"zero_pad_token": True}, "zero_pad_token=True must be None"),
])
def test_a_bad_value_is_one_error_naming_it_and_what_is_allowed(fields, said):
    with pytest.raises(ValueError, match=said):
        _config("mixit", **fields)


def test_refused_where_it_changes_nothing():
    with pytest.raises(ValueError, match="mixing_centre='own' has no effect on variant standard; it applies to "
                                         "variant mixit .*causal=False"):
        _config("standard", mixing_centre="own", causal_softmax=False).check_fields_apply()
    with pytest.raises(ValueError, match="causal_softmax=True has no effect on variant mixit"):
        _config("mixit", causal_softmax=True).check_fields_apply()
    with pytest.raises(ValueError, match="attend_padding=True has no effect .* it applies to classifiers"):
        ModelConfig(attend_padding=True).check_fields_apply()
    ModelConfig(zero_pad_token=3).check_fields_apply()  # every model has the embedding row


def test_the_zero_pad_row_is_held_through_weight_decay_and_counted_frozen(tmp_path):
    """AdamW's decoupled decay and a reload keep the row at zero; the parameter table counts it frozen."""
    from mixit_lab.models import load_model
    from mixit_lab.models.freeze import hold_frozen_slices

    model = build_model(_config("standard", zero_pad_token=5))
    tokens, mask, labels = _tokens()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    hold_frozen_slices(model, opt)
    for _ in range(2):
        F.cross_entropy(model.classify(tokens, mask), labels).backward()
        opt.step()
    assert (model.embed.W_E[5] == 0).all() and (model.embed.W_E[6] != 0).all()
    assert model.parameter_counts()["frozen"] == D
    model.save_pretrained(tmp_path / "ckpt")
    assert load_model(tmp_path / "ckpt").frozen_masks["embed.W_E"][5].all()


def test_defaults_are_ours_but_for_their_mixing_rows():
    """A config without the fields builds what ours with mixing_centre="causal" builds: their rows (which do not sum to
    1, centred with the causal count); mixing_centre="own" gives rows that sum to 1."""
    theirs_rows = ModelConfig(variant="mixit", causal=False, n_classes=2, n_ctx=T, **{**OURS, "mixing_centre": "causal"})
    plain = ModelConfig(variant="mixit", causal=False, n_classes=2, n_ctx=T)
    a, b = build_model(theirs_rows).state_dict(), build_model(plain).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a) and not build_model(plain).frozen_masks
    own = build_model(ModelConfig(variant="mixit", causal=False, n_classes=2, n_ctx=T, **OURS)).state_dict()
    assert math.isclose(float(own["blocks.0.attn.mixing"][1].sum(-1).mean()), 1.0, rel_tol=1e-5)
    assert not torch.allclose(b["blocks.0.attn.mixing"][1:].sum(-1), torch.ones(HEADS - 1, T), atol=1e-3)
