import math

import pandas as pd
import pytest
import torch

from mixit_lab.analysis.ablation import ablate_heads, head_ablation
from mixit_lab.analysis.attention import COLUMNS as ATTENTION_COLUMNS
from mixit_lab.analysis.attention import attention_stats, input_dependence, pattern_stats
from mixit_lab.analysis.heads import repeated_tokens
from mixit_lab.analysis.signal import signal_propagation, signal_propagation_model, token_similarity
from mixit_lab.models import build_model
from test_analysis_heads import induction_model


# ---------------------------------------------------------------- attention statistics
def test_input_dependence_is_exactly_zero_for_mixit_and_not_for_standard(tiny_cfg):
    tokens = torch.randint(0, 13, (12, 16), generator=torch.Generator().manual_seed(0))
    mixit = build_model(tiny_cfg("mixit"))
    assert torch.equal(input_dependence(mixit, tokens, batch_size=5), torch.zeros(2, 4, dtype=torch.float64))
    stats = attention_stats(mixit, tokens)
    assert (stats["input_dependence"] == 0).all() and (stats["source"] == "buffer").all()
    standard = build_model(tiny_cfg("standard"))
    assert (input_dependence(standard, tokens) > 0).all()
    assert (attention_stats(standard, tokens)["input_dependence"] > 0).all()


@pytest.mark.parametrize("causal", [True, False])
def test_mixit_statistics_from_buffers_match_the_model_patterns(tiny_cfg, causal):
    model = build_model(tiny_cfg("mixit", causal=causal))
    tokens = torch.randint(0, 13, (4, 12), generator=torch.Generator().manual_seed(1))
    from_buffers = attention_stats(model, tokens)
    from_model = attention_stats(model, tokens, from_buffers=False, batch_size=3)
    assert list(from_buffers.columns) == ATTENTION_COLUMNS and len(from_buffers) == 8
    numeric = [c for c in ATTENTION_COLUMNS if c != "source"]
    pd.testing.assert_frame_equal(from_buffers[numeric], from_model[numeric], atol=1e-5, rtol=0)
    assert (from_model["source"] == "pattern").all()


def test_pattern_statistics_of_known_patterns():
    T = 8
    i = torch.arange(T)
    uniform = torch.tril(torch.ones(T, T)) / (i + 1)[:, None]
    identity = torch.eye(T)
    first = torch.zeros(T, T)
    first[:, 0] = 1
    shaped = identity + 0.1 * (torch.eye(T) - torch.eye(T).roll(1, 0)).tril()  # negative just below the diagonal
    stats = pattern_stats(torch.stack([uniform, identity, first, shaped])[None])
    get = lambda name: stats[name][0]  # noqa: E731
    assert get("entropy_normalized")[0] == pytest.approx(1.0)
    assert get("entropy")[0] == pytest.approx(torch.log(i[1:] + 1.0).mean().item())
    assert get("entropy")[1] == 0 and get("entropy")[2] == 0
    assert get("diagonal_mass").tolist()[:3] == pytest.approx([(1 / (i[1:] + 1.0)).mean().item(), 1.0, 0.0])
    assert get("sink_mass")[2] == 1 and get("sink_mass")[1] == 0
    assert get("mean_distance")[1] == 0 and get("mean_distance")[2] == pytest.approx(i[1:].double().mean().item())
    assert get("effective_rank")[1] == pytest.approx(T) and get("effective_rank")[2] == pytest.approx(1.0)
    assert get("negative_mass")[:3].tolist() == [0, 0, 0]
    assert get("negative_mass")[3] > 0  # the signed pattern has negative entries


# ---------------------------------------------------------------- signal propagation
def test_token_similarity_definitions():
    same = torch.ones(1, 5, 4) * 2.0
    sim = token_similarity(same)
    assert sim["cosine"].item() == pytest.approx(1.0)
    assert sim["covariance"].item() == pytest.approx(4.0) and sim["variance"].item() == pytest.approx(4.0)
    orthogonal = torch.eye(4)[None] * 3.0
    sim = token_similarity(orthogonal)
    assert sim["cosine"].item() == pytest.approx(0.0) and sim["covariance"].item() == pytest.approx(0.0)
    assert sim["variance"].item() == pytest.approx(9.0 / 4)


def test_signal_propagation_shape_and_determinism():
    kw = dict(variants=("random", "standard", "mixit"), depths=(2, 3), widths=(32,), n_heads=2, n_ctx=12,
              d_vocab=40, n_seqs=3, seeds=(0, 1))
    df = signal_propagation(**kw)
    assert list(df.columns) == ["variant", "d_model", "depth", "layer", "cosine", "covariance", "variance",
                                "cosine_std", "covariance_std", "n_seeds"]
    assert len(df) == 3 * (3 + 4)
    assert sorted(df[df["variant"] == "mixit"]["layer"].tolist()) == [0, 0, 1, 1, 2, 2, 3]
    pd.testing.assert_frame_equal(df, signal_propagation(**kw))
    other = signal_propagation(**{**kw, "seeds": (2,)})
    assert not df["cosine"].equals(other["cosine"]) and (other["cosine_std"] == 0).all()
    # random and standard are the same network at initialisation (only training differs).
    numbers = ["cosine", "covariance", "variance"]
    pd.testing.assert_frame_equal(df[df["variant"] == "random"][numbers].reset_index(drop=True),
                                  df[df["variant"] == "standard"][numbers].reset_index(drop=True))
    with pytest.raises(ValueError, match="variants=\\['nope'\\]"):
        signal_propagation(variants=("nope",))


def test_signal_propagation_of_one_model_has_a_row_per_layer(tiny_cfg):
    df = signal_propagation_model(build_model(tiny_cfg("shaped", n_layers=3)), n_seqs=4)
    assert list(df.columns) == ["layer", "cosine", "covariance", "variance"] and df["layer"].tolist() == [0, 1, 2, 3]
    assert df["variance"].gt(0).all() and df["cosine"].abs().le(1).all()


# ---------------------------------------------------------------- head ablation
def test_ablating_the_induction_head_breaks_in_context_prediction():
    model = induction_model()
    tokens = repeated_tokens(32, 16, 16, seed=0)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 18:] = True  # second-half targets the induction head can predict (target 17 is split, see heads tests)
    base = ablate_heads(model, tokens, mask, "token", heads=[], method="zero")
    assert base["accuracy"] == 1.0 and base["loss"] < 0.01
    assert ablate_heads(model, tokens, mask, "token", heads=[(1, 0)], method="zero")["accuracy"] < 0.2
    assert ablate_heads(model, tokens, mask, "token", heads=[(0, 0)], method="mean")["accuracy"] < 0.5
    # L1H1 writes nothing (W_O = 0): ablating it changes nothing.
    assert ablate_heads(model, tokens, mask, "token", heads=[(1, 1)], method="zero") == base
    result = head_ablation(model, tokens, mask, "token", method="zero")
    df = result.frame()
    assert list(df.columns) == ["layer", "head", "loss", "accuracy", "delta_loss", "delta_accuracy", "rank"]
    assert df["rank"].tolist() == [1, 2, 3, 4]
    assert {(r.layer, r.head) for r in df.head(2).itertuples()} == {(0, 0), (1, 0)}
    assert result.baseline_accuracy == 1.0 and df["delta_loss"].iloc[-1] == 0
    with pytest.raises(ValueError, match="head \\(2, 0\\) does not exist"):
        ablate_heads(model, tokens, mask, "token", heads=[(2, 0)])
    with pytest.raises(ValueError, match="method='half'"):
        head_ablation(model, tokens, mask, "token", method="half")
    assert math.isfinite(df["delta_loss"].iloc[0])


def test_head_ablation_of_a_classifier_uses_the_labels(tiny_cfg):
    model = build_model(tiny_cfg("standard", n_classes=3, causal=False))
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 13, (20, 10), generator=g)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, 7:] = False  # padding
    labels = torch.randint(0, 3, (20,), generator=g)
    result = head_ablation(model, tokens, mask, "label", labels=labels)
    assert len(result.frame()) == 8 and result.n_examples == 20
    expected = torch.nn.functional.cross_entropy(model.classify(tokens, mask), labels).item()
    assert result.baseline_loss == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="pass the class labels"):
        head_ablation(model, tokens, mask, "label")
    with pytest.raises(ValueError, match="not a classifier"):
        head_ablation(build_model(tiny_cfg()), tokens, mask, "token", labels=labels)
