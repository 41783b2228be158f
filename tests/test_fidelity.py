"""Pin the construction of the variants to the authors' models (docs/fidelity.md), from outputs.

`reference_logits` is an independent, plain-torch forward written from the documented equations
(not from the model code in models/): every width multiplier, the temperature, the residual scales and
the readout. Each test compares a model's logits or patterns with it, so a change in any multiplier
at any width fails here, and not only at the base width (512) where every multiplier is 1.
"""

import json
import math

import pytest
import torch

from mixit_lab.models import ModelConfig, build_model, load_model
from mixit_lab.models.checkpoint import CONFIG_FILE

BASE = 512


def _randomize(model, seed: int = 0, scale: float = 0.3) -> None:
    """Every parameter (and bias buffer) to random values, so no term can hide behind a zero or a one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith(("mixing", "mixing_noise_std", "rotary_cos", "rotary_sin_signed")):
                continue
            leaf = name.rsplit(".", 1)[-1]
            trained = model.config.unembed_bias if leaf in ("b_U", "b_C") else model.config.bias
            if leaf.startswith("b_") and not trained:
                continue  # no such bias in this model: the buffer stays zero, as it would in training
            # Q and K at a tenth of the scale: at full scale shaped attention's scores reach ~800 at
            # d_model 128, a softmax so sharp that fp32 rounding alone moves logits past any tolerance.
            std = scale / 10 if leaf in ("W_Q", "W_K", "b_Q", "b_K") else scale
            t.copy_(torch.randn(t.shape, generator=g) * std + (1.0 if name.endswith(".w") else 0.0))


def _rms(x, w, eps):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w


def _rotate(x, t, d_head, base):
    inv = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    ang = torch.outer(torch.arange(t, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos().float(), torch.cat([ang, ang], -1).sin().float()
    x1, x2 = x[..., : d_head // 2], x[..., d_head // 2 :]
    return x * cos[:, None] + torch.cat([-x2, x1], -1) * sin[:, None]


def reference_logits(model, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits [batch, pos, vocab] and each layer's pattern [batch, head, q, k], computed from the equations.

    shaped variants (mixit, shaped): every linear output * sqrt(base / fan_in) (fan_in d_model; the
    down-projection sqrt(base_down / d_mlp)); leaky-ReLU slope 1 - 1/sqrt(d_model) times its gain;
    residual h = s h + sqrt(1 - s^2) f(h); shaped scores q.k * (base / d_model) / sqrt(d_head);
    readout sqrt(base / d_model) * (x @ W_U). Causal models only.
    """
    cfg, sd = model.config, {k: v.detach() for k, v in model.state_dict(keep_vars=False).items()}
    for name, buf in model.named_buffers():
        sd.setdefault(name, buf.detach())
    shaped = cfg.spec.shaped
    m = math.sqrt(BASE / cfg.d_model) if shaped else 1.0
    m_down = math.sqrt(cfg.base_width_down / cfg.d_mlp) if shaped else 1.0
    s = cfg.residual_scale if shaped else 1.0
    br = math.sqrt(1 - s * s) if shaped else 1.0
    b, t = tokens.shape
    E = cfg.d_head
    causal = torch.ones(t, t).tril()
    x = sd["embed.W_E"][tokens]
    if cfg.spec.positions == "learned":
        x = x + sd["pos_embed.W_pos"][:t]
    patterns = []
    for layer in range(cfg.n_layers):
        p = f"blocks.{layer}."
        h = _rms(x, sd[p + "ln1.w"], cfg.norm_eps)

        def proj(W, bias):  # [H, D, E] -> [b, t, H, E]
            return m * (torch.einsum("btd,hde->bthe", h, sd[p + W]) + sd[p + bias])

        v = proj("attn.W_V", "attn.b_V")
        if cfg.spec.attention == "mixing":
            A = sd[p + "attn.mixing"][:, :t, :t].expand(b, -1, -1, -1)
        else:
            q = _rotate(proj("attn.W_Q", "attn.b_Q"), t, E, cfg.rope_base)
            k = _rotate(proj("attn.W_K", "attn.b_K"), t, E, cfg.rope_base)
            scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(E)
            if cfg.spec.attention == "shaped":
                scores = scores * (BASE / cfg.d_model)
            A = scores.masked_fill(causal == 0, float("-inf")).softmax(-1)
            if cfg.spec.attention == "shaped":
                A = A + torch.eye(t) - causal / causal.sum(-1, keepdim=True)
        patterns.append(A)
        z = torch.einsum("bhqk,bkhe->bqhe", A, v)
        attn_out = m * (torch.einsum("bqhe,hed->bqd", z, sd[p + "attn.W_O"]) + sd[p + "attn.b_O"])
        x = s * x + br * attn_out
        h = _rms(x, sd[p + "ln2.w"], cfg.norm_eps)
        gate = m * (h @ sd[p + "mlp.W_gate"] + sd[p + "mlp.b_gate"])
        up = m * (h @ sd[p + "mlp.W_in"] + sd[p + "mlp.b_in"])
        if shaped:
            slope = 1 - 1 / math.sqrt(cfg.d_model)
            act = torch.where(gate > 0, gate, slope * gate) * math.sqrt(2 / (1 + slope**2))
        else:
            act = torch.nn.functional.silu(gate)
        x = s * x + br * m_down * ((act * up) @ sd[p + "mlp.W_out"] + sd[p + "mlp.b_out"])
    x = _rms(x, sd["ln_final.w"], cfg.norm_eps)
    return m * (x @ sd["unembed.W_U"] + sd["unembed.b_U"]), patterns


def _model(variant, d_model, **kw):
    cfg = ModelConfig(variant=variant, d_model=d_model, n_layers=2, n_heads=4, n_ctx=16, d_vocab=50, **kw)
    model = build_model(cfg)
    _randomize(model)
    return model


TOKENS = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("d_model", [32, 64, 128, 512])
@pytest.mark.parametrize("variant", ["standard", "mixit", "shaped"])
def test_logits_equal_the_documented_construction_at_every_width(variant, d_model):
    # Biases as the authors train them, except at one width: none at all, and one with a readout bias too.
    model = _model(variant, d_model, bias=d_model != 128, unembed_bias=d_model == 64)
    ref, ref_patterns = reference_logits(model, TOKENS)
    logits, cache = model.run_with_cache(TOKENS)
    torch.testing.assert_close(logits, ref, rtol=2e-4, atol=2e-4 * ref.abs().max().item())
    # The fused (SDPA) path must agree with the same construction, not only the hooked one.
    torch.testing.assert_close(model(TOKENS), ref, rtol=2e-4, atol=2e-4 * ref.abs().max().item())
    for layer, pattern in enumerate(ref_patterns):
        torch.testing.assert_close(cache["pattern", layer], pattern, rtol=1e-3, atol=2e-4)  # sharp softmaxes


def test_mixit_readout_is_width_scaled_at_d_model_64():
    model = _model("mixit", 64)
    resid = model(TOKENS, return_type=None)  # after ln_final
    expected = math.sqrt(512 / 64) * (resid @ model.unembed.W_U)
    torch.testing.assert_close(model(TOKENS), expected)
    plain = build_model(ModelConfig(**{**model.config.to_dict(), "scaled_readout": False}))
    plain.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(TOKENS), math.sqrt(8) * plain(TOKENS), rtol=1e-5, atol=1e-5)
    # Non-shaped variants have no multiplier to scale.
    assert ModelConfig(variant="standard", d_model=64, n_heads=4).readout_mult == 1.0


def test_shaped_pattern_uses_the_width_scaled_temperature():
    model = _model("shaped", 64)
    _, cache = model.run_with_cache(TOKENS)
    q, k = cache["rot_q", 0], cache["rot_k", 0]  # [batch, pos, head, d_head]
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k) * (512 / 64) / math.sqrt(16)
    C = torch.ones(16, 16).tril()
    expected = torch.eye(16) + scores.masked_fill(C == 0, float("-inf")).softmax(-1) - C / C.sum(-1, keepdim=True)
    torch.testing.assert_close(cache["pattern", 0], expected, rtol=1e-4, atol=1e-5)
    # tau0 divides the scores; the width factor can be switched off.
    assert ModelConfig(variant="shaped", d_model=64, n_heads=4, tau0=2.0).attn_scale == pytest.approx(8 / (2 * 4))
    assert ModelConfig(variant="shaped", d_model=64, n_heads=4, width_scaled_temperature=False).attn_scale == 0.25
    assert ModelConfig(variant="standard", d_model=64, n_heads=4).attn_scale == 0.25


def test_biases_are_trained_where_the_authors_train_them_and_the_layout_keeps_the_rest():
    model = build_model(ModelConfig(variant="standard", d_model=32, n_heads=4, d_vocab=32))
    biases = {n for n, _ in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("b_")}
    assert biases == {f"blocks.{l}.{m}.{b}" for l in range(2)
                      for m, bs in (("attn", ("b_Q", "b_K", "b_V", "b_O")), ("mlp", ("b_gate", "b_in", "b_out")))
                      for b in bs}
    assert model.unembed.b_U.shape == (32,) and model.unembed.b_U.abs().sum() == 0  # a zero buffer
    assert "unembed.b_U" not in model.state_dict()  # not saved
    none = build_model(ModelConfig(variant="standard", d_model=32, n_heads=4, bias=False))
    assert not any(n.rsplit(".", 1)[-1].startswith("b_") for n, _ in none.named_parameters())
    assert none.blocks[0].attn.b_Q.shape == (4, 8)
    readout = build_model(ModelConfig(variant="standard", d_model=32, n_heads=4, unembed_bias=True))
    assert "unembed.b_U" in {n for n, _ in readout.named_parameters()}


def test_depth_option_scales_branches_and_drops_the_identity():
    cfg = ModelConfig(variant="mixit", d_model=32, n_layers=8, n_heads=4, n_ctx=12, d_vocab=10,
                      depth_alpha=1.0, base_layers=2)
    model = build_model(cfg)
    assert (model.blocks[0].skip, model.blocks[0].branch) == (1.0, pytest.approx(2 / 8))
    A = model.blocks[0].attn.mixing
    assert torch.allclose(A[1:].sum(-1), torch.zeros(3, 12), atol=1e-5)  # centred noise only
    assert torch.allclose(model.blocks[0].attn.mixing_noise_std, torch.full((4,), 1 / math.sqrt(12)))
    assert torch.equal(A[0].diagonal(), torch.full((12,), 0.5)) and torch.equal(A[0][:, 0], torch.full((12,), 0.5))
    standard = build_model(ModelConfig(variant="standard", d_model=32, n_layers=4, n_heads=4, depth_alpha=0.5))
    assert standard.blocks[0].branch == pytest.approx(0.5) and standard.blocks[0].skip == 1.0
    # The default (0) leaves every variant as it was.
    assert build_model(ModelConfig(variant="mixit", d_model=32, n_heads=4)).blocks[0].skip == pytest.approx(math.sqrt(0.5))


def test_last_token_pooling_reads_the_last_real_token():
    cfg = ModelConfig(variant="mixit", d_model=32, n_layers=1, n_heads=4, n_ctx=12, d_vocab=10, n_classes=2,
                      causal=False)
    model = build_model(cfg)
    _randomize(model)
    tokens = torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 7:] = False
    resid = model.residual_stream(tokens, mask)
    expected = math.sqrt(512 / 32) * torch.stack([resid[0, 11], resid[1, 6]]) @ model.classifier.W_C
    torch.testing.assert_close(model.classify(tokens, mask), expected)
    mean = build_model(ModelConfig(**{**cfg.to_dict(), "pooling": "mean"}))
    mean.load_state_dict(model.state_dict())
    torch.testing.assert_close(mean.classify(tokens[:1]), math.sqrt(16) * resid[:1].mean(1) @ model.classifier.W_C)


def test_checkpoints_written_before_the_fidelity_fields_load_as_they_were_trained(tmp_path):
    """A format_version 1 config meant: trained biases, unscaled readout and temperature, mean pooling."""
    old = ModelConfig(variant="shaped", d_model=32, n_layers=1, n_heads=4, n_ctx=16, d_vocab=13, bias=True,
                      unembed_bias=True, scaled_readout=False, width_scaled_temperature=False, pooling="mean")
    model = build_model(old)
    _randomize(model)
    model.save_pretrained(tmp_path / "ckpt")
    cfg_file = tmp_path / "ckpt" / CONFIG_FILE
    data = json.loads(cfg_file.read_text())
    for key in ("bias", "unembed_bias", "scaled_readout", "width_scaled_temperature", "pooling", "tau0",
                "depth_alpha", "base_layers"):
        del data["model"][key]
    data["format_version"] = 1
    cfg_file.write_text(json.dumps(data))
    loaded = load_model(tmp_path / "ckpt")
    assert loaded.config == old
    tokens = torch.randint(0, 13, (2, 16))
    torch.testing.assert_close(loaded(tokens), model(tokens))
