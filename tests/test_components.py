"""mixit_lab.analysis.components: attribution that sums to the logit difference, and ablations that find the one
component a hand-built model answers with."""

import pytest
import torch

from mixit_lab.analysis.components import component_effects, logit_attribution
from mixit_lab.models import ModelConfig, build_model

pytestmark = pytest.mark.usefixtures("one_thread")

V = 6  # tokens 0..4 are answers, 5 is the filler
FILLER = V - 1


def copying_model(variant: str = "standard") -> torch.nn.Module:
    """One layer, one head, width V: attention averages the two first positions and copies the token
    identity; every MLP weight is zero, so only attention can carry the first token to position 1."""
    model = build_model(ModelConfig(variant=variant, d_model=V, n_layers=1, n_heads=1, n_ctx=3, d_vocab=V,
                                    d_mlp=8, seed=0))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.blocks[0].ln1, model.blocks[0].ln2, model.ln_final):
            norm.w.fill_(1.0)
        model.embed.W_E.copy_(torch.eye(V))
        attn = model.blocks[0].attn
        attn.W_V[0].copy_(torch.eye(V))
        attn.W_O[0].copy_(torch.eye(V))
        readout = 10 * torch.eye(V)
        readout[FILLER, FILLER] = -10
        model.unembed.W_U.copy_(readout / model.unembed.mult)
    return model


def copying_data(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [a, filler, a]: the answer at position 2 is the first token."""
    a = torch.randint(0, FILLER, (n,), generator=torch.Generator().manual_seed(seed))
    tokens = torch.stack([a, torch.full_like(a, FILLER), a], dim=1)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 2] = True
    return tokens, mask


def row(table, component, layer=-1, head=-1):
    return table[(table["component"] == component) & (table["layer"] == layer) & (table["head"] == head)].iloc[0]


def test_the_copying_head_is_found_by_attribution_and_by_ablation():
    model = copying_model()
    tokens, mask = copying_data()
    r = component_effects(model, tokens, mask, "sequence", heads=True)
    t = r.table
    assert r.baseline_accuracy == 1.0 and r.logit_diff > 0
    # The MLPs write nothing, so they get no part of the answer and ablating them changes nothing.
    assert row(t, "mlp", 0).dla == 0 and row(t, "all_mlp").mean_delta_accuracy == 0
    assert row(t, "all_mlp").resample_delta_loss == pytest.approx(0, abs=1e-6)
    # The attention layer (its one head) carries all of the answer over the runner-up (another answer
    # token: the filler's logit is negative); the filler's embedding reads 0 on both.
    assert row(t, "attn", 0).share == pytest.approx(1) and row(t, "embed").dla == pytest.approx(0, abs=1e-9) and row(t, "head", 0, 0).dla == pytest.approx(row(t, "attn", 0).dla)
    # Mean ablation leaves the average token: no better than a guess; resample copies another row's token.
    assert row(t, "attn", 0).mean_accuracy <= 0.5 and row(t, "all_attn").mean_delta_accuracy <= -0.5
    same = (tokens[:, 0] == tokens[torch.tensor(list(range(1, 40)) + [0]), 0]).float().mean()
    assert row(t, "attn", 0).resample_accuracy < 0.5 and row(t, "head", 0, 0).resample_accuracy < 0.5
    assert same < 0.5


@pytest.mark.parametrize("variant", ["standard", "mixit", "shaped", "frozen_qk"])
def test_attribution_sums_to_the_logit_difference(variant):
    model = build_model(ModelConfig(variant=variant, d_model=16, n_layers=3, n_heads=4, n_ctx=8, d_vocab=11,
                                    seed=1, init_std=0.3, unembed_bias=True))
    with torch.no_grad():
        model.unembed.b_U.normal_(0, 1.0)  # a nonzero unembedding bias has its own row
    tokens = torch.randint(0, 11, (24, 8), generator=torch.Generator().manual_seed(2))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 5:] = True
    table, total = logit_attribution(model, tokens, mask)
    # The total is the model's own answer-minus-runner-up logit difference.
    model.eval()
    logits = model(tokens)[:, 4:7].reshape(-1, 11).double()
    answer = tokens[:, 5:8].reshape(-1)
    other = logits.scatter(1, answer[:, None], float("-inf")).max(1).values
    assert total == pytest.approx((logits.gather(1, answer[:, None])[:, 0] - other).mean().item(), rel=1e-4)
    parts = table[table.component.isin(["embed", "pos_embed", "unembed_bias", "attn", "mlp"])]
    assert parts["dla"].sum() == pytest.approx(total, rel=1e-6, abs=1e-6)
    assert parts["share"].sum() == pytest.approx(1.0, abs=1e-6)
    assert ("pos_embed" in set(table.component)) == (variant == "mixit")  # learned positions only in MixiT
    # Without output biases b_O, each layer's heads make up the layer's part.
    with torch.no_grad():
        for block in model.blocks:
            block.attn.b_O.zero_()
    table, _ = logit_attribution(model, tokens, mask)
    for layer in range(3):
        heads = table[(table["component"] == "head") & (table["layer"] == layer)]["dla"]
        # float32 forward against float64 sums: the summation order (thread count) moves the 6th digit
        assert len(heads) == 4 and heads.sum() == pytest.approx(row(table, "attn", layer).dla, rel=2e-5, abs=1e-9)


def test_identical_rows_lose_nothing_and_a_seed_reproduces_the_table():
    model = build_model(ModelConfig(d_model=16, n_layers=2, n_heads=2, n_ctx=6, d_vocab=9, seed=3, init_std=0.3))
    tokens = torch.randint(0, 9, (1, 6), generator=torch.Generator().manual_seed(4)).repeat(16, 1)
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 3:] = True
    t = component_effects(model, tokens, mask, "token").table
    ablated = t[t.component.isin(["attn", "mlp", "all_attn", "all_mlp"])]
    # The mean of identical rows, and any other row, is the row itself: no ablation changes the output.
    assert ablated[["mean_delta_loss", "resample_delta_loss"]].abs().max().max() < 1e-5
    varied = torch.randint(0, 9, (32, 6), generator=torch.Generator().manual_seed(5))
    vmask = torch.zeros_like(varied, dtype=torch.bool)
    vmask[:, 3:] = True
    a, b = (component_effects(model, varied, vmask, "token", seed=7).table for _ in range(2))
    assert a.equals(b)
    c = component_effects(model, varied, vmask, "token", seed=8).table
    assert not a["resample_loss"].equals(c["resample_loss"])  # another derangement, other rows swapped in
    assert a["mean_loss"].equals(c["mean_loss"])


def test_memorized_bits_are_measured_under_each_ablation():
    from mixit_lab.training.tasks import get_task

    task = get_task("memorize", n=4, d=2, label_tokens="keys")
    model = build_model(ModelConfig(d_model=16, n_layers=2, n_heads=2, n_ctx=3, d_vocab=len(task.vocab), seed=0,
                                    init_std=0.5))
    tokens, mask = task.eval_set()
    r = component_effects(model, tokens, mask, task.metric, memorize_task=task)
    t = r.table
    measured = t[t.component.isin(["attn", "mlp", "all_attn", "all_mlp"])]
    assert measured["mean_bits"].notna().all() and t[t.component == "embed"]["mean_bits"].isna().all()
    assert (measured["mean_bits_lost"] == r.baseline_bits - measured["mean_bits"]).all()
    assert r.max_bits == pytest.approx(16 * 2.0) and 0 <= r.baseline_bits <= r.max_bits
    assert set(r.summary()["attn"]) >= {"share", "mean_delta_accuracy", "bits_lost"}


def test_bad_input_is_refused_in_one_line():
    model = copying_model()
    tokens, mask = copying_data()
    with pytest.raises(ValueError, match="metric='rows'"):
        component_effects(model, tokens, mask, "rows")
    with pytest.raises(ValueError, match="at least 2 rows"):
        component_effects(model, tokens[:1], mask[:1], "sequence")
    with pytest.raises(ValueError, match="no answer tokens"):
        component_effects(model, tokens, torch.zeros_like(mask), "sequence")


def test_who_does_the_work_reads_every_seed_and_the_figure_draws_it(tmp_path):
    """Across runs: medians over seeds of each run's components.csv, and the heatmap shows those numbers."""
    import numpy as np

    from mixit_lab.analysis.analyze import analyze_checkpoint
    from mixit_lab.analysis.component_map import who_does_the_work
    from mixit_lab.analysis.runs import load_runs, read_analysis_table
    from mixit_lab.figures import components as figure
    from mixit_lab.training import TrainConfig, train

    for variant in ("standard", "mixit"):
        for seed in (0, 1):
            cfg = TrainConfig(task="khop", task_params={"hops": 1, "length": 6, "alphabet": 3}, variant=variant,
                              d_model=16, n_layers=2, n_heads=2, seed=seed, steps=6, batch_size=16, eval_every=6,
                              eval_samples=32)
            run = tmp_path / "khop" / f"{variant}_s{seed}"
            train(cfg, run, progress=False)
            analyze_checkpoint(run, run / "analysis", {"n_seqs": 4, "seq_len": 4, "eval_samples": 24,
                                                        "ablation": "none"}, device="cpu")
    runs = load_runs(tmp_path)
    work = who_does_the_work(runs)
    assert len(work) == 4 and (work["seeds"] == 2).all() and (work["layer"] == -1).all()
    per_run = {}
    for r in runs.itertuples():
        t = read_analysis_table(r.path, "components")
        per_run.setdefault(r.variant, []).append(t)
    for variant, tables in per_run.items():
        drops = [-100 * t[t["component"] == "all_attn"]["mean_delta_accuracy"].item() for t in tables]
        shares = [t[t["component"] == "mlp"]["share"].sum() for t in tables]
        got = work[(work["variant"] == variant) & (work["component"] == "attention")].iloc[0]
        assert got["mean_drop"] == pytest.approx(np.median(drops))
        mlp = work[(work["variant"] == variant) & (work["component"] == "MLP")].iloc[0]
        assert mlp["share"] == pytest.approx(np.median(shares))
    layers = who_does_the_work(runs, per_layer=True)
    assert sorted(layers["layer"].unique()) == [0, 1]
    # the same setting's run in a second study (the quick preset's depth study trains Table 3's MixiT) counts once
    import shutil

    shutil.copytree(tmp_path / "khop" / "mixit_s0", tmp_path / "khop-again" / "mixit_s0")
    assert (who_does_the_work(load_runs(tmp_path))["seeds"] == 2).all()
    shutil.rmtree(tmp_path / "khop-again")

    fig = figure.plot(tmp_path)  # one row of panels per task setting, a heatmap row per variant
    panels = {ax.get_gid(): ax for ax in fig.axes if ax.get_gid()}
    drops = panels["mean_drop|khop (2L)"].images[0].get_array()  # [variant, layer x (attention, MLP)]
    expect = layers[(layers["variant"] == "standard")].set_index(["layer", "component"])["mean_drop"]
    assert drops.shape == (2, 4)  # standard, mixit; L0 attention, L0 MLP, L1 attention, L1 MLP
    assert drops[0, 0] == pytest.approx(expect[(0, "attention")]) and drops[0, 3] == pytest.approx(expect[(1, "MLP")])
