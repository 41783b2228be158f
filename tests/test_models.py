import hashlib
import json
import math

import pytest
import torch
from transformer_lens import ActivationCache
from transformer_lens.head_detector import (
    compute_head_attention_similarity_score,
    get_previous_token_head_detection_pattern,
)

from mixit_lab.models import VARIANTS, CheckpointError, ModelConfig, build_model, load_model

ALL = list(VARIANTS)


def test_registry_holds_exactly_the_study_variants():
    assert set(VARIANTS) == {"standard", "frozen_qk", "frozen_mlp", "mixit", "random", "shaped"}


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"variant": "mixitt"}, "mixitt"),
        ({"d_model": 30, "n_heads": 4}, "d_model=30"),
        ({"n_layers": 0}, "n_layers=0"),
        ({"d_vocab": -3}, "d_vocab=-3"),
        ({"init_std": 0.0}, "init_std=0.0"),
        ({"d_model": 12, "n_heads": 4}, "d_head=3"),
    ],
)
def test_bad_config_raises_value_error_naming_value(kw, needle):
    with pytest.raises(ValueError, match=needle.replace("=", "=")) as e:
        ModelConfig(**kw)
    assert "\n" not in str(e.value)
    if "variant" in kw:
        assert "standard" in str(e.value) and "mixit" in str(e.value)


@pytest.mark.parametrize("variant", ALL)
def test_variant_trains_only_its_trainable_tensors(variant, tiny_cfg):
    model = build_model(tiny_cfg(variant))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        tokens = torch.randint(0, 13, (4, 16), generator=g)
        loss = model(tokens, return_type="loss")
        assert torch.isfinite(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    spec = VARIANTS[variant]
    for name, p in model.named_parameters():
        if spec.is_frozen(name):
            assert not p.requires_grad and p.grad is None, name
            assert torch.equal(p, before[name]), f"frozen {name} changed"
        else:
            assert p.requires_grad
            assert not torch.equal(p, before[name]), f"trainable {name} did not change"


@pytest.mark.parametrize("bias", [False, True])
def test_freezing_rules_match_the_study(bias, tiny_cfg):
    def frozen(variant):
        return {n for n, p in build_model(tiny_cfg(variant, bias=bias)).named_parameters() if not p.requires_grad}

    def names(prefix, weights):
        return {f"blocks.{l}.{prefix}.{w}" for l in range(2) for w in weights if bias or w.startswith("W_")}

    assert frozen("standard") == set() and frozen("shaped") == set() and frozen("mixit") == set()
    assert frozen("frozen_qk") == names("attn", ("W_Q", "W_K", "b_Q", "b_K"))
    assert frozen("frozen_mlp") == names("mlp", ("W_gate", "b_gate", "W_in", "b_in", "W_out", "b_out"))
    random = build_model(tiny_cfg("random", bias=bias, unembed_bias=bias))
    random_trained = {n for n, p in random.named_parameters() if p.requires_grad}
    assert random_trained == {"embed.W_E", "unembed.W_U"} | ({"unembed.b_U"} if bias else set())
    mixit_names = {n for n, _ in build_model(tiny_cfg("mixit")).named_parameters()}
    assert "pos_embed.W_pos" in mixit_names and not any("W_Q" in n or "W_K" in n for n in mixit_names)


@pytest.mark.parametrize("bias", [False, True])
def test_parameter_counts_add_up(bias, tiny_cfg):
    model = build_model(tiny_cfg("frozen_qk", bias=bias))
    counts = model.parameter_counts()
    qk = 2 * 2 * (4 * 32 * 8 + bias * 4 * 8)  # layers x (W, b) for Q and K
    assert counts["frozen"] == qk
    assert counts["trainable"] + counts["frozen"] == counts["total"] == sum(p.numel() for p in model.parameters())
    table = {r["component"]: r for r in model.parameter_table()}
    assert table["qk"]["frozen"] == qk and table["qk"]["trainable"] == 0


def test_same_seed_same_weights_different_seed_differs(tiny_cfg):
    a, b = build_model(tiny_cfg("mixit")), build_model(tiny_cfg("mixit"))
    torch.manual_seed(123)  # global RNG must not matter
    c = build_model(tiny_cfg("mixit", seed=1))
    for (n, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        assert torch.equal(x, y), n
    assert not torch.equal(a.blocks[0].attn.mixing, c.blocks[0].attn.mixing)
    assert not torch.equal(a.embed.W_E, c.embed.W_E)


def test_init_statistics(tiny_cfg):
    model = build_model(tiny_cfg("standard", d_model=64, d_vocab=200))
    assert abs(model.embed.W_E.std().item() - 0.02) < 0.002
    assert abs(model.blocks[0].mlp.W_in.std().item() - 0.02) < 0.002
    assert torch.count_nonzero(model.blocks[0].attn.b_Q) == 0
    assert torch.all(model.blocks[0].ln1.w == 1)


# ---------------------------------------------------------------- mixit matrices
def test_mixit_patterns_fixed_causal_row_stochastic_with_sink():
    cfg = ModelConfig(variant="mixit", d_model=64, n_layers=2, n_heads=4, n_ctx=34, d_vocab=31, seed=0)
    model = build_model(cfg)
    t1 = torch.randint(0, 31, (3, 34), generator=torch.Generator().manual_seed(1))
    t2 = torch.randint(0, 31, (3, 34), generator=torch.Generator().manual_seed(2))
    _, c1 = model.run_with_cache(t1)
    _, c2 = model.run_with_cache(t2)
    for layer in range(2):
        p1, p2 = c1["pattern", layer], c2["pattern", layer]
        assert p1.shape == (3, 4, 34, 34)
        assert torch.equal(p1, p2), "mixit pattern depends on the input"
        assert torch.equal(p1[0], p1[2]), "mixit pattern differs across the batch"
        A = p1[0]
        assert torch.all(A.triu(1) == 0), "not causal"
        assert torch.allclose(A[1:].sum(-1), torch.ones(3, 34), atol=1e-5), "rows do not sum to 1"
        sink = 0.5 * torch.eye(34)
        sink[:, 0] = 0.5  # the authors' sink: row 0 is [0.5, 0, ...] (sums to 0.5), the others 1
        assert torch.equal(A[0], sink)
        assert not torch.equal(A[1], A[2])


def test_mixit_noise_scale_in_stated_range():
    T, d_model, H = 64, 64, 8
    cfg = ModelConfig(variant="mixit", d_model=d_model, n_layers=3, n_heads=H, n_ctx=T, d_vocab=10, seed=3)
    model = build_model(cfg)
    d_head = d_model // H
    lo, hi = 1 / math.sqrt(T * d_head), 1 / math.sqrt(T)
    rows = torch.arange(T, dtype=torch.float64)
    for block in model.blocks:
        scale = block.attn.mixing_noise_std
        assert torch.all(scale >= lo - 1e-7) and torch.all(scale < hi + 1e-7)
        A = block.attn.mixing.double()
        for h in range(1, H):
            # Off-diagonal entries are N_ij - mean_i: variance s^2 (1 - 1/(i+1)) in expectation.
            noise = (A[h] - torch.eye(T)).tril()
            expected_var = (scale[h].double() ** 2 * (1 - 1 / (rows + 1)) * (rows + 1)).sum()
            observed_var = (noise**2).sum()
            ratio = (observed_var / expected_var).item()
            assert 0.8 < ratio < 1.2, (h, ratio)
    spread = torch.cat([b.attn.mixing_noise_std[1:] for b in model.blocks])
    assert spread.max() - spread.min() > 0.3 * (hi - lo), "noise scales should spread over the range"


def test_mixit_bidirectional_matrix_is_full_and_centred():
    """Bidirectional rows see every key; "own" rows sum to 1, the default (the authors' "causal") rows are the same
    noise centred with the causal count i + 1 instead of 12."""
    own, causal = (build_model(ModelConfig(variant="mixit", d_model=32, n_layers=1, n_heads=4, n_ctx=12, d_vocab=10,
                                           causal=False, **kw)).blocks[0].attn.mixing
                   for kw in ({"mixing_centre": "own"}, {}))
    assert torch.count_nonzero(own[1].triu(1)) > 0
    assert torch.allclose(own[1:].sum(-1), torch.ones(3, 12), atol=1e-5)
    # own = I + N - sum/12, causal = I + N - sum/(i + 1): per row a constant shift, none in the last row (i + 1 = 12)
    shift = causal[1:] - own[1:]
    assert torch.allclose(shift, shift[..., :1].expand_as(shift), atol=1e-5)
    assert shift[:, :-1, 0].abs().min() > 0 and shift[:, -1].abs().max() < 1e-5


def test_mixit_uses_width_scaling_and_shaped_mlp(tiny_cfg):
    model = build_model(tiny_cfg("mixit", d_model=32))
    assert model.blocks[0].attn.out_mult == pytest.approx(math.sqrt(512 / 32))
    assert model.blocks[0].mlp.out_mult == pytest.approx(math.sqrt(1 / 128))
    assert model.blocks[0].skip == pytest.approx(math.sqrt(0.5))
    x = torch.linspace(-2, 2, 9)
    slope = 1 - 1 / math.sqrt(32)
    gain = math.sqrt(2 / (1 + slope**2))
    assert torch.allclose(model.blocks[0].mlp.act(x), torch.where(x > 0, x, slope * x) * gain)
    custom = build_model(tiny_cfg("mixit", d_model=32, base_width=32, base_width_down=128))
    assert custom.blocks[0].attn.out_mult == 1.0 and custom.blocks[0].mlp.out_mult == 1.0
    assert build_model(tiny_cfg("standard")).blocks[0].attn.out_mult == 1.0


# ---------------------------------------------------------------- attention paths
@pytest.mark.parametrize("variant", ["standard", "frozen_qk", "shaped", "mixit"])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_and_explicit_attention_agree(variant, causal, tiny_cfg):
    model = build_model(tiny_cfg(variant, causal=causal, init_std=0.2))
    tokens = torch.randint(0, 13, (5, 16), generator=torch.Generator().manual_seed(0))
    fused = model(tokens)
    explicit, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    assert len(cache) == 2
    # Shaped models' logits are width-scaled (x4 at d_model 32): absolute tolerance relative to their size.
    torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-5 * max(1.0, fused.abs().max().item()))


@pytest.mark.parametrize("variant", ["standard", "shaped"])
def test_fused_and_explicit_agree_with_padding(variant, tiny_cfg):
    model = build_model(tiny_cfg(variant, causal=False, init_std=0.2))
    tokens = torch.randint(0, 13, (3, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 16, dtype=torch.bool)
    mask[1, 10:] = False
    mask[2, 4:] = False
    fused = model(tokens, attention_mask=mask)
    explicit, cache = model.run_with_cache(tokens, attention_mask=mask)
    # The fused kernels (SDPA, F.rms_norm) round differently from the hooked path: close in fp32 (logits
    # reach ~14 here), equal to 1e-10 in fp64, where rounding is out of the way.
    torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-4)
    assert cache["pattern", 0][2, :, 0, 4:].abs().max() == 0  # no attention to padding
    model64 = model.to(torch.float64)
    torch.testing.assert_close(model64(tokens, attention_mask=mask),
                               model64.run_with_cache(tokens, attention_mask=mask)[0], rtol=1e-10, atol=1e-10)


def test_shaped_pattern_is_identity_plus_softmax_minus_mean(tiny_cfg):
    model = build_model(tiny_cfg("shaped"))
    tokens = torch.randint(0, 13, (2, 16))
    _, cache = model.run_with_cache(tokens)
    pattern, scores = cache["pattern", 0], cache["attn_scores", 0]
    C = torch.ones(16, 16).tril()
    C = C / C.sum(-1, keepdim=True)
    torch.testing.assert_close(pattern, torch.eye(16) + scores.softmax(-1) - C)
    assert torch.allclose(pattern.sum(-1), torch.ones_like(pattern.sum(-1)), atol=1e-5)


def test_transformerlens_hooks_and_tools(tiny_cfg):
    model = build_model(tiny_cfg("standard"))
    tokens = torch.randint(0, 13, (2, 16))
    logits, cache = model.run_with_cache(tokens)
    assert isinstance(cache, ActivationCache)
    b, p, h, e, d = 2, 16, 4, 8, 32
    expected = {
        "hook_embed": (b, p, d),
        "blocks.0.hook_resid_pre": (b, p, d),
        "blocks.0.hook_resid_mid": (b, p, d),
        "blocks.1.hook_resid_post": (b, p, d),
        "blocks.0.attn.hook_q": (b, p, h, e),
        "blocks.0.attn.hook_k": (b, p, h, e),
        "blocks.0.attn.hook_v": (b, p, h, e),
        "blocks.0.attn.hook_z": (b, p, h, e),
        "blocks.0.attn.hook_attn_scores": (b, h, p, p),
        "blocks.0.attn.hook_pattern": (b, h, p, p),
        "blocks.0.hook_attn_out": (b, p, d),
        "blocks.0.mlp.hook_pre": (b, p, 4 * d),
        "blocks.0.mlp.hook_post": (b, p, 4 * d),
        "blocks.0.hook_mlp_out": (b, p, d),
    }
    for name, shape in expected.items():
        assert tuple(cache[name].shape) == shape, name
    # ActivationCache helpers work with our names.
    assert torch.equal(cache["pattern", 1], cache["blocks.1.attn.hook_pattern"])
    assert cache.accumulated_resid().shape[0] == 3
    # run_with_hooks: ablating the attention output of every layer changes the logits.
    zero = lambda act, hook: torch.zeros_like(act)
    ablated = model.run_with_hooks(tokens, fwd_hooks=[(lambda n: n.endswith("hook_attn_out"), zero)])
    assert not torch.allclose(ablated, logits)
    # head_detector's similarity score accepts our patterns.
    det = get_previous_token_head_detection_pattern(tokens[:1])
    score = compute_head_attention_similarity_score(
        cache["pattern", 0][0, 0], det, exclude_bos=False, exclude_current_token=False, error_measure="mul"
    )
    assert 0.0 <= score <= 1.0
    assert model.cfg.n_layers == 2 and model.cfg.d_head == 8 and model.cfg.d_vocab == 13 and model.cfg.n_ctx == 16
    model.to(torch.float64)
    assert model.cfg.dtype == torch.float64


def test_sequence_longer_than_context_is_rejected(tiny_cfg):
    model = build_model(tiny_cfg("standard"))
    with pytest.raises(ValueError, match="n_ctx=16"):
        model(torch.zeros(1, 17, dtype=torch.long))


# ---------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("variant", ALL)
def test_checkpoint_round_trip_gives_identical_logits(variant, tiny_cfg, tmp_path):
    model = build_model(tiny_cfg(variant, seed=7))
    with torch.no_grad():  # make sure trained values (not just the init) are saved
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "ckpt")
    assert sorted(f.name for f in (tmp_path / "ckpt").iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_model(tmp_path / "ckpt")
    tokens = torch.randint(0, 13, (3, 16))
    assert torch.equal(model.eval()(tokens), loaded(tokens))
    assert loaded.config == model.config
    assert [p.requires_grad for p in loaded.parameters()] == [p.requires_grad for p in model.parameters()]


def test_save_replaces_atomically_and_leaves_no_temp_dirs(tiny_cfg, tmp_path):
    a, b = build_model(tiny_cfg(seed=0)), build_model(tiny_cfg(seed=1))
    a.save_pretrained(tmp_path / "ckpt")
    b.save_pretrained(tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert torch.equal(load_model(tmp_path / "ckpt").embed.W_E, b.embed.W_E)


def test_failed_save_keeps_previous_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    import mixit_lab.models.checkpoint as ck

    good = build_model(tiny_cfg(seed=0))
    good.save_pretrained(tmp_path / "ckpt")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ck, "write_safetensors", boom)
    with pytest.raises(OSError, match="disk full"):
        build_model(tiny_cfg(seed=1)).save_pretrained(tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]
    assert torch.equal(load_model(tmp_path / "ckpt").embed.W_E, good.embed.W_E)


def test_load_errors_name_the_file_and_problem(tiny_cfg, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_model(tmp_path / "nowhere")
    path = build_model(tiny_cfg()).save_pretrained(tmp_path / "ckpt")
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*truncated"):
        load_model(path)
    weights.unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(path)
    # Config that does not match the saved tensors.
    path = build_model(tiny_cfg()).save_pretrained(tmp_path / "ckpt2")
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"]["d_model"] = 64
    cfg["model"]["n_heads"] = 4
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config.json: d_model=64 \(saved as 32\): the config was edited"):
        load_model(path)
    weights = path / "model.safetensors"  # weights written before they named their model: the shapes still catch it
    from safetensors.torch import load_file, save_file
    save_file(load_file(weights), weights)
    cfg["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model.safetensors.*shape"):
        load_model(path)
    (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json"):
        load_model(path)
    cfg["model"]["variant"] = "bogus"
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="bogus"):
        load_model(path)


def test_a_config_edited_to_another_variant_is_refused_on_load(tiny_cfg, tmp_path):
    """standard and shaped have the same tensors, so only the weights' record of their model tells them apart."""
    path = build_model(tiny_cfg("standard")).save_pretrained(tmp_path / "ckpt")
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"]["variant"] = "shaped"
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"variant='shaped' \(saved as 'standard'\)"):
        load_model(path)
    cfg["model"]["variant"], cfg["model"]["extra"] = "standard", {"note": "free-form, may be edited"}
    (path / "config.json").write_text(json.dumps(cfg))
    assert load_model(path).config.variant == "standard"


def test_fused_path_used_when_no_hook_needs_the_pattern(tiny_cfg, monkeypatch):
    import torch.nn.functional as F

    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    import mixit_lab.models.attention.kernels as kernels

    monkeypatch.setitem(kernels.MATH_ATTENTION_MAX_LEN, torch.float32, 8)  # 16 positions: past the plain ops' limit
    model = build_model(tiny_cfg("frozen_qk"))
    tokens = torch.randint(0, 13, (2, 16))
    model(tokens)
    assert len(calls) == 2  # one per layer
    model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_pattern")
    assert len(calls) == 3  # layer 0 took the explicit path, layer 1 the fused one


def test_qk_init_std_scales_only_queries_and_keys(tiny_cfg):
    from mixit_lab.models import build_model

    base = build_model(tiny_cfg("frozen_qk", d_model=64, n_ctx=16))
    wide = build_model(tiny_cfg("frozen_qk", d_model=64, n_ctx=16, qk_init_std=0.125))
    a, b = base.blocks[0].attn, wide.blocks[0].attn
    assert torch.allclose(b.W_Q, a.W_Q * (0.125 / 0.02)) and torch.allclose(b.W_K, a.W_K * (0.125 / 0.02))
    assert torch.equal(a.W_V, b.W_V) and torch.equal(base.embed.W_E, wide.embed.W_E)
    # At std 0.02 the frozen attention is all but uniform; at 1/sqrt(d_model) it is not.
    tokens = torch.randint(0, 13, (4, 16), generator=torch.Generator().manual_seed(0))
    spread = []
    for model in (base, wide):
        _, cache = model.run_with_cache(tokens, names_filter="blocks.0.attn.hook_pattern")
        pattern = cache["blocks.0.attn.hook_pattern"][:, :, -1]  # last query: all 16 keys visible
        spread.append((pattern - 1 / 16).abs().max().item())
    assert spread[0] < 0.01 < spread[1]
    with pytest.raises(ValueError, match="qk_init_std=-1"):
        tiny_cfg(qk_init_std=-1.0)


def test_mixit_without_sink_head(tiny_cfg):
    """sink_head=False replaces only head 0 by a random mixing head; the sink is what collapses tokens with depth."""
    from mixit_lab.analysis.signal import signal_propagation_model
    from mixit_lab.models import build_model

    with_sink = build_model(tiny_cfg("mixit", n_layers=1))
    without = build_model(tiny_cfg("mixit", n_layers=1, sink_head=False))
    a, b = with_sink.blocks[0].attn.mixing, without.blocks[0].attn.mixing
    assert torch.equal(a[1:], b[1:]) and not torch.equal(a[0], b[0])
    assert torch.allclose(b[0].sum(-1), torch.ones(16)) and torch.equal(b[0], b[0].tril())
    assert b[0][:, 0].std() < 0.5  # no column of weight 0.5 on the first token
    deep = dict(d_model=64, n_layers=16, n_ctx=32, d_vocab=64)
    cos = [signal_propagation_model(build_model(tiny_cfg("mixit", sink_head=s, **deep)), n_seqs=4)["cosine"].iloc[-1]
           for s in (True, False)]
    assert cos[0] > 0.2 > 0.05 > abs(cos[1])
    with pytest.raises(ValueError, match="sink_head='no'"):
        tiny_cfg("mixit", sink_head="no")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("variant", ["standard", "shaped"])
def test_short_sequences_take_plain_attention_with_the_same_result(variant, precision, tiny_cfg, monkeypatch):
    """On CPU, sequences up to MATH_ATTENTION_MAX_LEN[dtype] skip the fused kernel (faster there); same function,
    in fp32 and under bf16 autocast, forward and backward."""
    import torch.nn.functional as F

    import mixit_lab.models.attention.kernels as kernels

    model = build_model(tiny_cfg(variant))
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    t = min(model.config.n_ctx, kernels.MATH_ATTENTION_MAX_LEN[dtype])
    tokens = torch.randint(0, 13, (3, t), generator=torch.Generator().manual_seed(0))
    calls = []
    real_sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real_sdpa(*a, **k))

    def run():
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(tokens, return_type="loss")
        loss.backward()
        return loss.detach().float(), model.blocks[0].attn.W_Q.grad.clone()

    plain = run()
    assert not calls
    monkeypatch.setitem(kernels.MATH_ATTENTION_MAX_LEN, dtype, 0)
    fused = run()
    assert calls
    tol = dict(rtol=2e-2, atol=2e-2) if precision == "bf16" else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain[0], fused[0], **tol)
    torch.testing.assert_close(plain[1], fused[1], **tol)


@pytest.mark.parametrize("layout", ["keys-outer", "keys-first", "keys-last"])
def test_softmax_over_keys_is_the_softmax_in_every_layout(layout):
    """The attention pattern is softmax over the last dimension of [batch, head, query, key] scores, whichever
    memory layout the scores come in (masked keys at -inf get weight 0)."""
    from mixit_lab.models.attention.kernels import softmax_over_keys

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 4, 9, 9, generator=g, dtype=torch.float64).masked_fill(torch.ones(9, 9).triu(1).bool(), float("-inf"))
    stored = {"keys-outer": scores.permute(3, 0, 1, 2).contiguous().permute(1, 2, 3, 0),
              "keys-first": scores.transpose(-1, -2).contiguous().transpose(-1, -2),
              "keys-last": scores.contiguous()}[layout]
    torch.testing.assert_close(softmax_over_keys(stored), torch.softmax(scores, dim=-1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("variant", ["standard", "shaped"])
def test_every_score_layout_computes_the_same_attention(variant, tiny_cfg, monkeypatch):
    """Short sequences take the scores keys-outermost (KEYS_OUTER_MAX_LEN), longer ones keys-first, then keys
    last: one function in all three, forward and backward, with padding and with from_pos (fp64: shaped
    models' gradients are large enough that fp32 rounding would hide a difference)."""
    import mixit_lab.models.attention.kernels as kernels

    model = build_model(tiny_cfg(variant, init_std=0.2)).double()
    tokens = torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(0))
    padding = torch.ones(3, 12, dtype=torch.bool)
    padding[1, 9:] = False

    def run(outer: int, first: int):
        monkeypatch.setattr(kernels, "KEYS_OUTER_MAX_LEN", outer)
        monkeypatch.setattr(kernels, "KEYS_FIRST_MAX_LEN", first)
        model.zero_grad()
        out = model(tokens, attention_mask=padding, from_pos=4)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    layouts = [run(64, 64), run(0, 64), run(0, 0)]  # keys-outer, keys-first, keys-last
    for out, grads in layouts[1:]:
        torch.testing.assert_close(out, layouts[0][0], rtol=1e-10, atol=1e-10)
        for a, b in zip(grads, layouts[0][1]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * max(1.0, b.abs().max().item()))


@pytest.mark.parametrize("padded", [False, True])
def test_mixing_is_each_heads_pattern_times_its_values(padded, tiny_cfg):
    """MixiT mixes each head's values by that head's fixed matrix, z[b, q, h] = sum_k A[h, q, k] v[b, k, h]; one
    matmul per head over the batch (no padding) or per sequence (padding, re-centred patterns)."""
    attn = build_model(tiny_cfg("mixit")).double().blocks[0].attn
    v = torch.randn(3, 12, 4, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = None
    if padded:
        mask = torch.ones(3, 12, dtype=torch.bool)
        mask[2, 7:] = False
    A = attn.mixing_pattern(12, mask)
    expected = torch.einsum("bhqk,bkhe->bqhe" if padded else "hqk,bkhe->bqhe", A, v)
    torch.testing.assert_close(attn._mix(v, mask), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(attn._mix(v, mask, start=5), expected[:, 5:], rtol=1e-12, atol=1e-12)


def test_identity_hooks_on_q_and_scores_change_nothing(tiny_cfg):
    """Unhooked, queries and keys are rotated as one tensor and the softmax runs keys-first; hooks on hook_q
    or hook_attn_scores (here ones that copy their input into a fresh layout) take the other code paths,
    which must compute the same function."""
    model = build_model(tiny_cfg("standard"))
    tokens = torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(0))
    plain = model(tokens)
    hooks = [("blocks.0.attn.hook_q", lambda x, hook: x.clone()),
             ("blocks.1.attn.hook_attn_scores", lambda x, hook: x.contiguous())]
    for hook in hooks:
        torch.testing.assert_close(model.run_with_hooks(tokens, fwd_hooks=[hook]), plain, rtol=1e-5, atol=1e-5)
    zeroed = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_q", lambda x, hook: torch.zeros_like(x))])
    assert not torch.allclose(zeroed, plain, atol=1e-4)  # and a hook that changes q does take effect


def test_frozen_qk_skips_the_weight_gradients_of_q_and_k(tiny_cfg):
    """Q, K and V are projected in one matmul, except where Q and K are frozen and V is not: then the
    backward pass must not compute W_Q's and W_K's weight gradients (frozen_qk's saving, finding 7)."""
    from torch.utils.flop_counter import FlopCounterMode

    tokens = torch.randint(0, 13, (4, 16), generator=torch.Generator().manual_seed(0))

    def step_flops(variant):
        model = build_model(tiny_cfg(variant))
        with FlopCounterMode(display=False) as counter:
            model(tokens, return_type="loss").backward()
        return counter.get_total_flops(), model.config

    standard, cfg = step_flops("standard")
    frozen_qk, _ = step_flops("frozen_qk")
    n_tokens = tokens.numel()
    skipped = cfg.n_layers * 2 * (2 * n_tokens * cfg.d_model * cfg.n_heads * cfg.d_head)  # dW = x^T dY for W_Q, W_K
    assert standard - frozen_qk == skipped


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("variant", ALL + ["learned"])
def test_from_pos_gives_the_later_positions_of_the_full_output(variant, causal, fused, tiny_cfg, monkeypatch):
    """model(tokens, from_pos=p) equals model(tokens)[:, p:], with and without padding, through the plain and
    the fused attention paths, and so do the gradients it sends back (the trainer's losses rely on it)."""
    import mixit_lab.models.attention.kernels as kernels

    if fused:
        monkeypatch.setitem(kernels.MATH_ATTENTION_MAX_LEN, torch.float32, 0)
    extra = {"attention": ("learned",)} if variant == "learned" else {}
    model = build_model(tiny_cfg("standard" if variant == "learned" else variant, causal=causal, init_std=0.2, **extra))
    tokens = torch.randint(0, 13, (3, 16), generator=torch.Generator().manual_seed(0))
    padding = torch.ones(3, 16, dtype=torch.bool)
    padding[1, 12:] = False
    for mask in (None, padding):
        full = model(tokens, attention_mask=mask)
        for p in (1, 5, 15):
            part = model(tokens, attention_mask=mask, from_pos=p)
            assert part.shape == (3, 16 - p, 13)
            # shaped models' logits are width-scaled: absolute tolerance relative to their size
            torch.testing.assert_close(part, full[:, p:], rtol=1e-4, atol=1e-5 * max(1.0, full.abs().max().item()))
    # Gradients in fp64, where rounding is out of the way (shaped models' reach 1e4 here).
    model = model.to(torch.float64)
    weights = [w for w in model.parameters() if w.requires_grad]
    grads_full = torch.autograd.grad(model(tokens)[:, 7:].square().sum(), weights)
    grads_part = torch.autograd.grad(model(tokens, from_pos=7).square().sum(), weights)
    for a, b in zip(grads_full, grads_part):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9 * max(1.0, a.abs().max().item()))


def test_from_pos_out_of_range_or_with_a_loss_is_rejected(tiny_cfg):
    model = build_model(tiny_cfg())
    tokens = torch.zeros(2, 6, dtype=torch.long)
    for bad in (-1, 6, 2.0):
        with pytest.raises(ValueError, match=rf"from_pos={bad!r} must be an integer in \[0, 5\]"):
            model(tokens, from_pos=bad)
    with pytest.raises(ValueError, match="from_pos=2 needs return_type 'logits' or None"):
        model(tokens, return_type="loss", from_pos=2)
    classifier = build_model(tiny_cfg(n_classes=2))
    with pytest.raises(ValueError, match="from_pos=2: a classifier's logits pool the whole sequence"):
        classifier(tokens, from_pos=2)
    assert classifier(tokens, return_type=None, from_pos=2).shape == (2, 4, 32)


# --------------------------------------------------------------------------- input checks: token ids and masks
@pytest.mark.parametrize("bad", [-1, 13, 40])
def test_token_ids_out_of_range_are_one_line_value_errors(tiny_cfg, bad):
    model = build_model(tiny_cfg())  # d_vocab 13
    tokens = torch.tensor([[1, 2, bad, 3]])
    for call in (lambda: model(tokens), lambda: model.residual_stream(tokens), lambda: model.run_with_cache(tokens)):
        with pytest.raises(ValueError, match=rf"^token id {bad} is out of range: allowed 0\.\.12 \(d_vocab=13\)$"):
            call()


@pytest.mark.parametrize("variant, n_classes", [("standard", None), ("mixit", None), ("shaped", 2)])
def test_int_and_float_0_1_masks_act_as_the_bool_mask(tiny_cfg, variant, n_classes):
    """TransformerLens builds int 0/1 attention masks; they (and float 0/1) mean what the bool mask means."""
    model = build_model(tiny_cfg(variant, n_classes=n_classes)).eval()
    tokens = torch.randint(0, 13, (3, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[0, 6:] = False  # right padding
    mask[1, :2 if variant != "mixit" else 0] = False  # left padding (refused where positions are absolute: mixit)
    mask[2, 3:] = False
    with torch.no_grad():
        expected = model(tokens, attention_mask=mask)
        for other in (mask.long(), mask.int(), mask.float(), mask.to(torch.uint8)):
            assert torch.equal(model(tokens, attention_mask=other), expected), other.dtype
        # one sequence [pos] and its mask [pos] are a batch of one
        torch.testing.assert_close(model(tokens[0], attention_mask=mask[0].long()), expected[:1])


def test_bad_attention_masks_are_one_line_value_errors(tiny_cfg):
    model = build_model(tiny_cfg())
    tokens = torch.zeros(3, 8, dtype=torch.long)
    with pytest.raises(ValueError, match=r"bool or hold only 0 and 1 .* got the value 2 \(dtype torch.int64\)"):
        model(tokens, attention_mask=torch.full((3, 8), 2))
    with pytest.raises(ValueError, match=r"got the value 0.5"):
        model(tokens, attention_mask=torch.full((3, 8), 0.5))
    # Shapes that used to broadcast inside attention: silently ([3, 1], [1, 8]) or into a matmul size mismatch
    # (one sequence [8] promoted to [1, 8] against a [3, 8] mask), or an IndexError (lengths [3]).
    for bad in (torch.ones(3, 1), torch.ones(1, 8), torch.ones(3), torch.ones(3, 9), torch.ones(3, 1, 1, 8)):
        with pytest.raises(ValueError, match=r"^attention_mask must be \[batch, pos\] = \[3, 8\], the tokens' shape"):
            model(tokens, attention_mask=bad.long())
    with pytest.raises(ValueError, match=r"= \[1, 8\], the tokens' shape \(bool, or 0/1\); got shape \[3, 8\]$"):
        model(tokens[0], attention_mask=torch.ones(3, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got shape \[3, 1\]"):
        model.residual_stream(tokens, torch.ones(3, 1, dtype=torch.bool))  # a bool mask is checked as well


def test_left_padding_is_refused_where_positions_are_absolute(tiny_cfg):
    """MixiT's learned W_pos and fixed matrices read a left-padded row's tokens at other positions: refused, naming
    the row. Right padding is fine; a rotary model takes left padding (its positions are relative)."""
    tokens = torch.randint(0, 13, (2, 8))
    left = torch.ones(2, 8, dtype=torch.bool)
    left[1, :3] = False
    right = left.flip(-1)
    mixit, standard = build_model(tiny_cfg("mixit")), build_model(tiny_cfg("standard"))
    for mask in (left, left.long()):
        with pytest.raises(ValueError, match="attention_mask row 1 has padding before a real token"):
            mixit(tokens, attention_mask=mask)
    mixit(tokens, attention_mask=right)
    standard(tokens, attention_mask=left)
    grid = build_model(tiny_cfg("standard", attention=["softmax", "mixing"]))  # rotary, but a mixing layer
    with pytest.raises(ValueError, match="left padding"):
        grid.run_with_cache(tokens, attention_mask=left)
