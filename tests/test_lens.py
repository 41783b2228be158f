"""TransformerLens's weight side on every variant: each utility x variant cell is exact or refused.

`TABLE` is the contract, and docs/guides/analysis.md shows it to users (a test keeps the two equal). Every
model has random biases and norm weights (zero and one at init would hide a missing term), and each check
compares what a utility gives with what the forward pass computed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch
from transformer_lens import FactoredMatrix, patching

from mixit_lab.models import ModelConfig, build_model
from mixit_lab.models.lens import QK_KINDS, LensRefusal

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "standard": {}, "frozen_qk": {}, "frozen_mlp": {}, "mixit": {}, "random": {}, "shaped": {},
    "grid": {"variant": "mixit", "attention": ["softmax", "mixing"]},  # a softmax layer under a mixing layer
}
OK, NO = "exact", "refused"
# utility -> the cells that are refused (every other cell is exact)
REFUSED = {
    "W_Q, W_K, b_Q, b_K": {"mixit", "grid"},
    "QK": {"standard", "frozen_qk", "frozen_mlp", "random", "shaped", "mixit", "grid"},
    "QK_at(query_pos, key_pos)": {"mixit", "grid"},
    "blocks[l].attn.QK, blocks[l].attn.OV (one layer)": {"standard", "frozen_qk", "frozen_mlp", "random", "shaped",
                                                          "mixit"},
    "all_composition_scores('Q' / 'K', positions)": {"mixit", "grid"},
    "W_pos": {"standard", "frozen_qk", "frozen_mlp", "random", "shaped"},
    "get_act_patch_direct_path": {"mixit", "shaped", "grid"},
}
UTILITIES = [
    "W_E, W_U, b_U (logits = ln_final(resid) @ W_U + b_U)",
    "W_pos",
    "W_V, W_O, b_V, b_O",
    "W_Q, W_K, b_Q, b_K",
    "W_gate, W_in, W_out, b_gate, b_in, b_out",
    "OV",
    "QK",
    "QK_at(query_pos, key_pos)",
    "blocks[l].attn.QK, blocks[l].attn.OV (one layer)",
    "all_composition_scores('V')",
    "all_composition_scores('Q' / 'K', positions)",
    "set_use_attn_result, hook_result, compute_head_results",
    "decompose_resid",
    "accumulated_resid",
    "stack_head_results",
    "stack_neuron_results",
    "get_full_resid_decomposition, accumulated_bias",
    "apply_ln_to_stack",
    "logit_attrs, tokens_to_residual_directions",
    "direct logit attribution (pos_slice=-1, apply_ln_to_stack, einsum)",
    "logit_lens",
    "process_weights_(fold_ln=True), then apply_ln_to_stack(stack) @ W_U",
    "stop_at_layer",
    "generate",
    "get_act_patch_direct_path",
]
TABLE = {u: {m: NO if m in REFUSED.get(u, ()) else OK for m in MODELS} for u in UTILITIES}
ATOL = 2e-5


def _model(name: str, bias: bool = True):
    """A 2-layer model of `name` with every parameter (biases and norm weights too) drawn at random."""
    kwargs = {"variant": name, **MODELS[name]} if name in MODELS and MODELS[name] else {"variant": name}
    model = build_model(ModelConfig(**kwargs, d_model=32, n_layers=2, n_heads=4, n_ctx=12, d_vocab=17, seed=3,
                                    init_std=0.15, bias=bias, unembed_bias=True))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(".w"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif ".b_" in pname or pname.startswith("unembed.b"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.fixture(scope="module")
def runs():
    """name -> (model, tokens, logits, cache) for every model of the table."""
    out = {}
    tokens = torch.randint(0, 17, (3, 12), generator=torch.Generator().manual_seed(1))
    for name in MODELS:
        model = _model(name)
        with torch.no_grad():
            logits, cache = model.run_with_cache(tokens)
        out[name] = (model, tokens, logits, cache)
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to float32 rounding: ATOL relative to the largest entry (the shaped variants' values reach ~10)."""
    torch.testing.assert_close(a, b, atol=ATOL * max(1.0, float(b.abs().max())), rtol=1e-4)


def _state(cache, layer: int, mlp_input: bool, n: int) -> torch.Tensor:
    if mlp_input:
        return cache[f"blocks.{layer}.hook_resid_mid"]
    return cache[f"blocks.{layer}.hook_resid_pre"] if layer < n else cache[f"blocks.{n - 1}.hook_resid_post"]


def _targets(n: int):
    return [(layer, mlp) for layer in range(n + 1) for mlp in (False, True) if not (mlp and layer == n)]


# ----------------------------------------------------------------------------- one check per utility
def check_readout(model, tokens, logits, cache):
    final = cache["blocks.1.hook_resid_post"]
    _close(model.ln_final(final) @ model.W_U + model.b_U, logits)
    _close(cache["hook_embed"], model.W_E[tokens])


def check_pos(model, tokens, logits, cache):
    W_pos = model.W_pos
    _close(cache["hook_pos_embed"], W_pos[None, : tokens.shape[1]].expand(tokens.shape[0], -1, -1))


def _ln1(model, cache, layer):
    return model.blocks[layer].ln1(cache[f"blocks.{layer}.hook_resid_pre"])


def check_vo(model, tokens, logits, cache):
    for layer in range(2):
        x = _ln1(model, cache, layer)
        _close(torch.einsum("bpd,hde->bphe", x, model.W_V[layer]) + model.b_V[layer], cache[f"blocks.{layer}.attn.hook_v"])
        z = cache[f"blocks.{layer}.attn.hook_z"]
        _close(torch.einsum("bphe,hed->bpd", z, model.W_O[layer]) + model.b_O[layer], cache[f"blocks.{layer}.hook_attn_out"])


def check_qk(model, tokens, logits, cache):
    W_Q, W_K, b_Q, b_K = model.W_Q, model.W_K, model.b_Q, model.b_K
    for layer in range(2):
        x = _ln1(model, cache, layer)
        _close(torch.einsum("bpd,hde->bphe", x, W_Q[layer]) + b_Q[layer], cache[f"blocks.{layer}.attn.hook_q"])
        _close(torch.einsum("bpd,hde->bphe", x, W_K[layer]) + b_K[layer], cache[f"blocks.{layer}.attn.hook_k"])


def check_mlp(model, tokens, logits, cache):
    for layer in range(2):
        x = model.blocks[layer].ln2(cache[f"blocks.{layer}.hook_resid_mid"])
        _close(x @ model.W_gate[layer] + model.b_gate[layer], cache[f"blocks.{layer}.mlp.hook_pre"])
        _close(x @ model.W_in[layer] + model.b_in[layer], cache[f"blocks.{layer}.mlp.hook_pre_linear"])
        post = cache[f"blocks.{layer}.mlp.hook_post"]
        _close(post @ model.W_out[layer] + model.b_out[layer], cache[f"blocks.{layer}.hook_mlp_out"])


def _unbiased(name: str):
    """The model of `name` without biases, run on the same tokens: the circuits are the bilinear maps."""
    model = _model(name, bias=False)
    tokens = torch.randint(0, 17, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    return model, cache


def check_ov(name):
    model, cache = _unbiased(name)
    ov = model.OV
    for layer in range(2):
        x = _ln1(model, cache, layer)  # [batch, pos, d_model]
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [batch, head, q, k]
        written = torch.einsum("bhqk,bkd,hde->bqhe", pattern, x, ov.AB[layer])  # each head's result
        _close(written.sum(2), cache[f"blocks.{layer}.hook_attn_out"])


def _scores_from(model, cache, layer, qk_at):
    x = _ln1(model, cache, layer)
    n = x.shape[1]
    scores = torch.empty(x.shape[0], model.cfg.n_heads, n, n)
    for q in range(n):
        for k in range(n):
            scores[:, :, q, k] = torch.einsum("bd,hde,be->bh", x[:, q], qk_at(q, k).AB[layer], x[:, k])
    return scores * model.blocks[layer].attn.scale


def check_qk_circuit(name):
    model, cache = _unbiased(name)
    qk = model.QK
    for layer in range(2):
        got = _scores_from(model, cache, layer, lambda q, k: qk)
        want = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        _close(torch.where(torch.isinf(want), 0.0, got), torch.where(torch.isinf(want), 0.0, want))


def check_qk_at(name):
    model, cache = _unbiased(name)
    for layer in range(2):
        got = _scores_from(model, cache, layer, model.QK_at)
        want = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        _close(torch.where(torch.isinf(want), 0.0, got), torch.where(torch.isinf(want), 0.0, want))


def check_layer_circuits(name):
    """Each layer's own QK (where it has queries and keys: a grid's softmax layer under a mixing one) gives the
    scores, and its OV is the stacked OV's layer; a mixing layer refuses QK, and so do rotary models."""
    model, cache = _unbiased(name)
    if not any(block.attn.kind in QK_KINDS for block in model.blocks):
        model.blocks[0].attn.QK  # no layer has queries and keys: the refusal is the cell
    for layer in range(2):
        attn = model.blocks[layer].attn
        torch.testing.assert_close(attn.OV.AB, model.OV.AB[layer])
        if attn.kind not in QK_KINDS:
            with pytest.raises(LensRefusal, match="no queries or keys"):
                attn.QK
            continue
        qk = attn.QK  # rotary: refused here
        got = _scores_from(model, cache, layer, lambda q, k: FactoredMatrix(qk.A[None].expand(2, -1, -1, -1),
                                                                            qk.B[None].expand(2, -1, -1, -1)))
        want = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        _close(torch.where(torch.isinf(want), 0.0, got), torch.where(torch.isinf(want), 0.0, want))


def check_composition_v(model, tokens, logits, cache):
    scores = model.all_composition_scores("V")
    assert scores.shape == (2, 4, 2, 4)
    assert (scores[:, :, 0] == 0).all() and (scores[1] == 0).all() and (scores[0, :, 1] > 0).all()
    w = model.blocks[1].ln1.w
    left = (model.W_V[0] @ model.W_O[0])  # [head, d_model, d_model]
    right = (w[:, None] * model.W_V[1]) @ model.W_O[1]
    for h1 in range(4):
        for h2 in range(4):
            want = (left[h1] @ right[h2]).norm() / left[h1].norm() / right[h2].norm()
            _close(scores[0, h1, 1, h2], want)


def check_composition_qk(model, tokens, logits, cache):
    q_pos, k_pos = 7, 4
    scores = model.all_composition_scores("Q", positions=(q_pos, k_pos))
    keys = model.all_composition_scores("K", positions=(q_pos, k_pos))
    assert (scores[1] == 0).all() and (keys[1] == 0).all()
    w = model.blocks[1].ln1.w
    qk = model.QK_at(q_pos, k_pos).AB[1]  # [head, d_model, d_model]
    left = model.W_V[0] @ model.W_O[0]
    for h1 in range(4):
        for h2 in range(4):
            right = w[:, None] * qk[h2] * w[None, :]
            want_q = (left[h1] @ right).norm() / left[h1].norm() / right.norm()
            want_k = (left[h1] @ right.T).norm() / left[h1].norm() / right.norm()
            _close(scores[0, h1, 1, h2], want_q)
            _close(keys[0, h1, 1, h2], want_k)


def check_result(model, tokens, logits, cache):
    cache.compute_head_results()
    for layer in range(2):
        summed = cache[f"blocks.{layer}.attn.hook_result"].sum(-2) + model.b_O[layer]
        _close(summed, cache[f"blocks.{layer}.hook_attn_out"])
    model.set_use_attn_result(True)
    try:
        with torch.no_grad():
            hooked_logits, hooked = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_result"))
    finally:
        model.set_use_attn_result(False)
    _close(hooked_logits, logits)
    for layer in range(2):
        _close(hooked[f"blocks.{layer}.attn.hook_result"], cache[f"blocks.{layer}.attn.hook_result"])


def check_decompose(model, tokens, logits, cache):
    for layer, mlp in _targets(2):
        stack, labels = cache.decompose_resid(layer, mlp_input=mlp, return_labels=True)
        assert len(labels) == stack.shape[0]
        _close(stack.sum(0), _state(cache, layer, mlp, 2))


def check_accumulated(model, tokens, logits, cache):
    stack = cache.accumulated_resid(incl_mid=True)
    _close(stack[-1], cache["blocks.1.hook_resid_post"])
    lens = cache.accumulated_resid(apply_ln=True)
    _close(lens[-1] @ model.W_U + model.b_U, logits)


def check_heads(model, tokens, logits, cache):
    for layer, mlp in _targets(2):
        heads = cache.stack_head_results(layer, incl_remainder=True, mlp_input=mlp)
        _close(heads.sum(0), _state(cache, layer, mlp, 2))
    # heads + b_O of the layer's attention are its whole write into the final stream
    heads = cache.stack_head_results(2)
    attn = cache.decompose_resid(2, mode="attn", incl_embeds=False)
    biases = torch.stack([model.residual_weight(2 * l, 4) * model.b_O[l] for l in range(2)])
    _close(heads.view(2, 4, *heads.shape[1:]).sum(1) + biases[:, None, None], attn)


def check_neurons(model, tokens, logits, cache):
    neurons = cache.stack_neuron_results(2)
    mlp = cache.decompose_resid(2, mode="mlp", incl_embeds=False)
    biases = torch.stack([model.residual_weight(2 * l + 1, 4) * model.b_out[l] for l in range(2)])
    _close(neurons.view(2, -1, *neurons.shape[1:]).sum(1) + biases[:, None, None], mlp)


def check_full(model, tokens, logits, cache):
    for layer, mlp in _targets(2):
        for expand in (True, False):
            stack = cache.get_full_resid_decomposition(layer, mlp_input=mlp, expand_neurons=expand)
            _close(stack.sum(0), _state(cache, layer, mlp, 2))


def check_apply_ln(model, tokens, logits, cache):
    stack = cache.decompose_resid(apply_ln=True)
    _close(stack.sum(0) * model.ln_final.w, model.ln_final(cache["blocks.1.hook_resid_post"]))
    mid = cache.decompose_resid(1, mlp_input=True, apply_ln=True)
    _close(mid.sum(0) * model.blocks[1].ln2.w, model.blocks[1].ln2(cache["blocks.1.hook_resid_mid"]))


def check_logit_attrs(model, tokens, logits, cache):
    answer, wrong = tokens[:, -1], (tokens[:, -1] + 1) % 17
    for stack in (cache.decompose_resid(), cache.get_full_resid_decomposition()):
        attrs = cache.logit_attrs(stack[:, :, -1], tokens=answer, pos_slice=-1)
        _close(attrs.sum(0) + model.b_U[answer], logits[torch.arange(3), -1, answer])
        diff = cache.logit_attrs(stack[:, :, -1], tokens=answer, incorrect_tokens=wrong, pos_slice=-1)
        want = logits[torch.arange(3), -1, answer] - logits[torch.arange(3), -1, wrong]
        _close(diff.sum(0) + model.b_U[answer] - model.b_U[wrong], want)


def check_tutorial_dla(model, tokens, logits, cache):
    """The tutorials' idiom: each row's logit-difference direction, the full stack at pos_slice=-1 through
    apply_ln_to_stack, an einsum over d_model; the components and b_U give each row's logit difference."""
    rows, answer, wrong = torch.arange(3), tokens[:, -1], (tokens[:, -1] + 1) % 17
    directions = model.tokens_to_residual_directions(answer) - model.tokens_to_residual_directions(wrong)
    stack = cache.apply_ln_to_stack(cache.get_full_resid_decomposition(pos_slice=-1), layer=-1, pos_slice=-1)
    per_component = torch.einsum("c b d, b d -> c b", stack, directions)
    want = logits[rows, -1, answer] - logits[rows, -1, wrong]
    _close(per_component.sum(0) + model.b_U[answer] - model.b_U[wrong], want)


def check_logit_lens(model, tokens, logits, cache):
    """cache.logit_lens(): the accumulated stream through the final norm and W_U; its last entry is the logits."""
    lens = cache.logit_lens(positions=-1)
    assert lens.labels[-1] == "final_post"
    _close(lens.values[-1], logits[:, -1])


def check_fold(model, tokens, logits, cache):
    """The norm weights folded into a copy (HookedTransformer's process_weights_): the same logits, and the stack
    through apply_ln_to_stack and W_U (with b_U) gives them, which the unfolded weights miss."""
    stack = cache.apply_ln_to_stack(cache.decompose_resid(), layer=-1)
    assert (stack.sum(0) @ model.W_U + model.b_U - logits).abs().max() > 1e-2  # unfolded: the idiom is off
    folded = copy.deepcopy(model)
    with pytest.warns(UserWarning, match="RMSNorm does not subtract the mean"):
        assert folded.process_weights_() is folded
    with torch.no_grad():
        folded_logits, folded_cache = folded.run_with_cache(tokens)
    _close(folded_logits, logits)
    stack = folded_cache.apply_ln_to_stack(folded_cache.decompose_resid(), layer=-1)
    _close(stack.sum(0) @ folded.W_U + folded.b_U, logits)
    assert all(bool((m.w == 1).all()) for name, m in folded.named_modules() if name.endswith(("ln1", "ln2", "ln_final")))


def check_stop(model, tokens, logits, cache):
    with torch.no_grad():
        for layer in range(2):
            _close(model(tokens, stop_at_layer=layer), cache[f"blocks.{layer}.hook_resid_pre"])
        _close(model(tokens, stop_at_layer=-1), cache["blocks.1.hook_resid_pre"])


def check_generate(model, tokens, logits, cache):
    """Greedy generation from the first 4 positions: the forward pass's argmax, token by token (tests/test_generate.py
    has the sampling, strings and refusals)."""
    expected = tokens[:, :4]
    with torch.no_grad():
        for _ in range(6):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(model.generate(tokens[:, :4], max_new_tokens=6, do_sample=False, verbose=False), expected)


def check_direct_path(model, tokens, logits, cache):
    corrupted = tokens.flip(0)
    with torch.no_grad():
        corrupted_logits, corrupted_cache = model.run_with_cache(corrupted)

    def metric(out):
        return out[:, -1].logsumexp(-1).mean()

    model.set_use_split_qkv_input(True)
    try:  # the split inputs change nothing by themselves
        with torch.no_grad():
            _close(model(tokens), logits)
    finally:
        model.set_use_split_qkv_input(False)
    with torch.no_grad():
        same = patching.get_act_patch_direct_path(model, corrupted, corrupted_cache, corrupted_cache, metric, 0, 1,
                                                  component="v", verbose=False)
        _close(same[1], torch.full((4,), metric(corrupted_logits).item()))
        patched = patching.get_act_patch_direct_path(model, corrupted, cache, corrupted_cache, metric, 0, 1,
                                                     component="v", verbose=False)
    assert (patched[0] == 0).all() and (patched[1] - same[1]).abs().min() > 1e-4


CHECKS = {
    "W_E, W_U, b_U (logits = ln_final(resid) @ W_U + b_U)": check_readout,
    "W_pos": check_pos,
    "W_V, W_O, b_V, b_O": check_vo,
    "W_Q, W_K, b_Q, b_K": check_qk,
    "W_gate, W_in, W_out, b_gate, b_in, b_out": check_mlp,
    "OV": check_ov,
    "QK": check_qk_circuit,
    "QK_at(query_pos, key_pos)": check_qk_at,
    "blocks[l].attn.QK, blocks[l].attn.OV (one layer)": check_layer_circuits,
    "all_composition_scores('V')": check_composition_v,
    "all_composition_scores('Q' / 'K', positions)": check_composition_qk,
    "set_use_attn_result, hook_result, compute_head_results": check_result,
    "decompose_resid": check_decompose,
    "accumulated_resid": check_accumulated,
    "stack_head_results": check_heads,
    "stack_neuron_results": check_neurons,
    "get_full_resid_decomposition, accumulated_bias": check_full,
    "apply_ln_to_stack": check_apply_ln,
    "logit_attrs, tokens_to_residual_directions": check_logit_attrs,
    "direct logit attribution (pos_slice=-1, apply_ln_to_stack, einsum)": check_tutorial_dla,
    "logit_lens": check_logit_lens,
    "process_weights_(fold_ln=True), then apply_ln_to_stack(stack) @ W_U": check_fold,
    "stop_at_layer": check_stop,
    "generate": check_generate,
    "get_act_patch_direct_path": check_direct_path,
}
BY_NAME = {check_ov, check_qk_circuit, check_qk_at, check_layer_circuits}  # checks that build their own (bias-free) model


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("utility", UTILITIES)
def test_utility_is_exact_or_refused(runs, utility, model_name):
    check = CHECKS[utility]
    args = (model_name,) if check in BY_NAME else runs[model_name]
    if TABLE[utility][model_name] == OK:
        check(*args)
    else:
        with pytest.raises(LensRefusal) as refusal:
            check(*args)
        message = str(refusal.value)
        assert "\n" not in message and len(message) < 300, message


def test_refusals_name_their_reason():
    mixit, standard = _model("mixit"), _model("standard")
    with pytest.raises(LensRefusal, match=r"layer\(s\) 0, 1 have mixing attention"):
        mixit.W_Q
    with pytest.raises(LensRefusal, match="rotary.*QK_at"):
        standard.QK
    with pytest.raises(LensRefusal, match="rotary"):
        standard.W_pos
    with pytest.raises(LensRefusal, match="positions=\\(query_pos, key_pos\\)"):
        standard.all_composition_scores("K")
    with pytest.raises(LensRefusal, match="hook_z @ W_O"):
        mixit.set_use_split_qkv_input(True)
    classifier = build_model(ModelConfig(d_model=32, n_layers=1, n_heads=4, n_ctx=8, d_vocab=9, n_classes=2))
    with pytest.raises(LensRefusal, match="classifier"):
        classifier.W_U


def test_residual_weights_are_the_shaped_blocks_scales():
    model = _model("shaped")
    skip, branch = model.blocks[0].skip, model.blocks[0].branch
    assert skip < 1 and branch < 1
    assert model.residual_weight(None, 4) == pytest.approx(skip**4)
    assert model.residual_weight(0, 4) == pytest.approx(branch * skip**3)
    assert model.residual_weight(3, 4) == pytest.approx(branch)
    with pytest.raises(ValueError, match="does not write"):
        model.residual_weight(2, 2)


def test_sliced_caches_keep_the_exact_decompositions(runs):
    model, tokens, logits, cache = runs["mixit"]
    one = cache.apply_slice_to_batch_dim(1)
    _close(one.decompose_resid().sum(0), cache["blocks.1.hook_resid_post"][1])


@pytest.mark.parametrize("model_name", list(MODELS))
def test_an_int_pos_slice_indexes_the_position_as_transformer_lens_does(runs, model_name):
    """pos_slice=-1 drops the position ([component, batch, d_model]), and the tutorials' direct logit attribution
    (stack at the last position, apply_ln_to_stack, einsum with each row's logit-difference direction) gives what the
    whole stack gives at that position. Keeping a length-1 position broadcast that einsum over the batch twice."""
    model, tokens, logits, cache = runs[model_name]
    batch, d_model = tokens.shape[0], model.cfg.d_model
    directions = torch.randn(batch, d_model, generator=torch.Generator().manual_seed(2))  # one per batch row
    stacks = {
        "stack_head_results": lambda **kw: cache.stack_head_results(layer=-1, **kw),
        "stack_neuron_results": lambda **kw: cache.stack_neuron_results(model.cfg.n_layers, **kw),
        "get_full_resid_decomposition": lambda **kw: cache.get_full_resid_decomposition(**kw),
        "decompose_resid": lambda **kw: cache.decompose_resid(**kw),
    }
    for name, stack in stacks.items():
        last, whole = stack(pos_slice=-1), stack()
        assert last.shape == (whole.shape[0], batch, d_model), name
        _close(last, whole[:, :, -1])
        scaled = cache.apply_ln_to_stack(last, layer=-1, pos_slice=-1)
        per_component = torch.einsum("c b d, b d -> c", scaled, directions) / batch
        reference = torch.einsum("c b d, b d -> c", cache.apply_ln_to_stack(whole, layer=-1)[:, :, -1], directions)
        _close(per_component, reference / batch)
    one = cache.get_neuron_results(0, neuron_slice=3, pos_slice=-1)
    assert one.shape == (batch, d_model)
    _close(one, cache.get_neuron_results(0)[:, -1, 3])


def _guide_table() -> dict[str, dict[str, str]]:
    text = (ROOT / "docs/guides/analysis.md").read_text()
    section = text.split("<!-- lens-table -->")[1]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")][1:]
    table = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].strip("`")] = {m: re.sub(r"[^a-z].*", "", c) for m, c in zip(header, cells[1:])}
    return table


def test_the_analysis_guide_shows_this_table():
    assert _guide_table() == TABLE
