"""mixit_lab.analysis.patching: clean/corrupted pairs that differ only in the answer, and head patching through
TransformerLens's own patching function, checked against a hand-written patch."""

import warnings

import pandas as pd
import pytest
import torch

from mixit_lab.analysis.patching import (
    CALLABLE_ATOL, COLUMNS, LOGIT_DIFF_ATOL, HeadPatching, PatchingWarning, head_patching, patch_heads, patching_pairs,
    warn_if_near_equal,
)
from mixit_lab.models import ModelConfig, build_model
from mixit_lab.training.tasks import get_task


def test_retrieval_pairs_change_only_the_queried_value():
    task = get_task("retrieval", pairs=4, num_values=8)
    p = patching_pairs(task, n=32, seed=1)
    rows = torch.arange(32)
    assert (p.clean[rows, p.position] >= task.query0_id).all()  # the position holds the query
    assert (p.clean[rows, p.position + 1] == p.clean_answer).all()
    assert (p.corrupted_answer != p.clean_answer).all()
    diff = (p.clean != p.corrupted).sum(1)
    assert (diff == 2).all()  # the queried pair's value and the answer slot
    assert (p.corrupted[rows, p.position + 1] == p.corrupted_answer).all()


def test_khop_pairs_change_the_source_letter_and_the_answer_follows():
    task = get_task("khop", hops=1, length=12, alphabet=4)
    p = patching_pairs(task, n=32, seed=2)
    N = task.length
    x, x2 = p.clean[:, :N], p.corrupted[:, :N]
    assert ((x != x2).sum(1) == 1).all()  # one letter of X changed
    i = p.position - N
    rows = torch.arange(len(i))
    assert (task.hop_targets(x)[rows, i] == p.clean_answer).all()
    assert (task.hop_targets(x2)[rows, i] == p.corrupted_answer).all()
    assert (p.clean_answer != p.corrupted_answer).all()
    assert torch.equal(p.corrupted[:, N + 1:], task.hop_targets(x2))  # the answer part is consistent


def test_other_tasks_and_hops_are_refused():
    with pytest.raises(ValueError, match="'addition' has no patching_pairs method"):
        patching_pairs(get_task("addition", digits=2))
    with pytest.raises(ValueError, match="alphabet=3"):
        patching_pairs(get_task("khop", hops=1, length=8, alphabet=3))
    with pytest.raises(ValueError, match="hops=2"):
        patching_pairs(get_task("khop", hops=2, length=8, alphabet=4))


@pytest.mark.parametrize("variant", ["standard", "mixit"])
def test_head_patching_equals_a_hand_written_patch(variant):
    task = get_task("retrieval", pairs=3, num_values=8)
    model = build_model(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=task.seq_len,
                                    d_vocab=len(task.vocab), seed=0, init_std=0.2))
    result = head_patching(model, task, n=16, seed=3)
    table = result.frame()
    assert isinstance(result, HeadPatching) and len(table) == 8 and model.training  # the model's mode is restored
    p = patching_pairs(task, n=16, seed=3)
    model.eval()
    _, cache = model.run_with_cache(p.clean)

    def diff(logits):
        at = logits[torch.arange(16), p.position]
        return (at[torch.arange(16), p.clean_answer] - at[torch.arange(16), p.corrupted_answer]).mean().item()

    clean, corrupted = diff(model(p.clean)), diff(model(p.corrupted))
    assert result.clean == pytest.approx(clean, rel=1e-5) and result.corrupted == pytest.approx(corrupted, rel=1e-5)
    layer, head = 1, 2

    def patch(z, hook):
        z = z.clone()
        z[:, :, head] = cache[hook.name][:, :, head]
        return z

    patched = diff(model.run_with_hooks(p.corrupted, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", patch)]))
    row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
    assert row["logit_diff"] == pytest.approx(patched, rel=1e-4, abs=1e-6)
    assert row["restored"] == pytest.approx((patched - corrupted) / (clean - corrupted), rel=1e-4, abs=1e-6)


# --------------------------------------------------------------------------- any pair, any metric, a run path
def _retrieval_model(variant: str = "standard", init_std: float = 0.2):
    task = get_task("retrieval", pairs=3, num_values=8)
    model = build_model(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=task.seq_len,
                                    d_vocab=len(task.vocab), seed=0, init_std=init_std))
    return model, task


def _run_dir(tmp_path, model, task, name: str = "run"):
    """A run directory as `mixit train` leaves it, as far as analyses read it: run.json + checkpoint/."""
    import json

    from mixit_lab.training import TrainConfig

    run = tmp_path / name
    model.save_pretrained(run / "checkpoint")
    cfg = TrainConfig(task=task.name, task_params=task.params, d_model=32, n_layers=2, n_heads=4)
    (run / "run.json").write_text(json.dumps({"train": cfg.to_dict()}))
    return run


def test_patch_heads_with_answer_tokens_is_head_patching():
    model, task = _retrieval_model()
    p = patching_pairs(task, n=16, seed=3)
    answers = torch.stack([p.clean_answer, p.corrupted_answer], dim=1)
    general = patch_heads(model, p.clean, p.corrupted, answer_tokens=answers, position=p.position)
    specific = head_patching(model, task, n=16, seed=3)
    assert list(general.frame().columns) == COLUMNS
    pd.testing.assert_frame_equal(general.frame(), specific.frame())
    assert (general.clean, general.corrupted, general.metric) == (specific.clean, specific.corrupted, "logit_diff")


def test_patch_heads_takes_any_metric_callable_and_matches_a_hand_written_patch():
    model, _ = _retrieval_model("mixit")
    g = torch.Generator().manual_seed(0)
    clean = torch.randint(0, model.cfg.d_vocab, (8, model.cfg.n_ctx), generator=g)
    corrupted = clean.clone()
    corrupted[:, 2] = (clean[:, 2] + 1) % model.cfg.d_vocab

    def token_3_logprob(logits: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_vocab] -> scalar
        return logits[:, -1].log_softmax(-1)[:, 3].mean()

    result = patch_heads(model, clean, corrupted, metric=token_3_logprob, rtol=0)  # log-probs: no zero
    table = result.frame()
    assert list(table.columns) == ["layer", "head", "restored", "metric"] and len(table) == 8
    assert table.attrs["metric"] == "token_3_logprob" and table.attrs["n_pairs"] == 8
    model.eval()
    _, cache = model.run_with_cache(clean)
    assert result.clean == pytest.approx(token_3_logprob(model(clean)).item(), rel=1e-5)

    def patch(z, hook):
        z = z.clone()
        z[:, :, 1] = cache[hook.name][:, :, 1]
        return z

    with torch.no_grad():
        patched = token_3_logprob(model.run_with_hooks(corrupted, fwd_hooks=[("blocks.0.attn.hook_z", patch)])).item()
    row = table[(table["layer"] == 0) & (table["head"] == 1)].iloc[0]
    assert row["metric"] == pytest.approx(patched, rel=1e-4, abs=1e-6)
    assert row["restored"] == pytest.approx((patched - result.corrupted) / (result.clean - result.corrupted),
                                            rel=1e-3, abs=1e-5)


def test_patch_heads_rejects_bad_inputs():
    model, _ = _retrieval_model()
    t = torch.zeros(4, 6, dtype=torch.long)
    answers = torch.zeros(4, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"clean_tokens \(4, 6\) and corrupted_tokens \(4, 5\)"):
        patch_heads(model, t, t[:, :5], answer_tokens=answers)
    with pytest.raises(ValueError, match="either metric"):
        patch_heads(model, t, t)
    with pytest.raises(ValueError, match=r"answer_tokens must be \[batch, 2\] = \[4, 2\]"):
        patch_heads(model, t, t, answer_tokens=answers[:, :1])
    with pytest.raises(ValueError, match="answer_tokens must lie in"):
        patch_heads(model, t, t, answer_tokens=answers + model.cfg.d_vocab)
    with pytest.raises(ValueError, match="position must be"):
        patch_heads(model, t, t, answer_tokens=answers, position=6)
    with pytest.raises(ValueError, match="scalar tensor"):
        patch_heads(model, t, t, metric=lambda logits: logits[:, -1, 0])


def test_near_equal_threshold():
    """Within 10% of the larger magnitude, or within atol: the notebook's untrained case (-0.00 vs -0.01) warns."""
    with pytest.warns(PatchingWarning, match=r"clean metric -0.003 and corrupted metric -0.012 nearly coincide"):
        assert warn_if_near_equal(-0.003, -0.012, LOGIT_DIFF_ATOL)
    with pytest.warns(PatchingWarning):
        assert warn_if_near_equal(10.0, 9.5, 0.0)  # a 5% change: restored would amplify noise 20-fold
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_near_equal(1.2, -0.5, LOGIT_DIFF_ATOL)
        assert not warn_if_near_equal(0.30, 0.25, CALLABLE_ATOL)  # a callable's small scale is its own


def test_patching_warns_when_clean_and_corrupted_coincide():
    model, task = _retrieval_model(init_std=1e-4)  # an untrained model: both logit differences ~ 0
    with pytest.warns(PatchingWarning, match="nearly coincide") as record:
        result = head_patching(model, task, n=8)
    assert len(record) == 1 and record[0].filename == __file__  # one line, pointing at the caller
    assert "\n" not in str(record[0].message)
    assert abs(result.clean) < 0.1 and abs(result.corrupted) < 0.1
    t = torch.zeros(2, 5, dtype=torch.long)
    with pytest.warns(PatchingWarning):  # a callable metric that cannot tell the two apart
        constant = patch_heads(model, t, t + 1, metric=lambda logits: logits.sum() * 0 + 1.0)
    assert constant.frame()["restored"].isna().all()


@pytest.mark.filterwarnings("ignore::mixit_lab.analysis.patching.PatchingWarning")  # an untrained model
def test_head_patching_takes_a_run_directory(tmp_path):
    model, task = _retrieval_model()
    run = _run_dir(tmp_path, model, task)
    expected = head_patching(model, task, n=8, seed=1).frame()
    for path in (run, str(run), run / "checkpoint"):
        pd.testing.assert_frame_equal(head_patching(path, n=8, seed=1).frame(), expected)
    bare = model.save_pretrained(tmp_path / "bare")
    with pytest.raises(ValueError, match="bare checkpoint"):
        head_patching(bare, n=8)
    pd.testing.assert_frame_equal(head_patching(bare, task, n=8, seed=1).frame(), expected)
