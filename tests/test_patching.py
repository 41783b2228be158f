"""analysis.patching: clean/corrupted pairs that differ only in the answer, and head patching through
TransformerLens's own patching function, checked against a hand-written patch."""

import pytest
import torch

from analysis.patching import head_patching, patching_pairs
from models import ModelConfig, build_model
from training.tasks import get_task


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
    with pytest.raises(ValueError, match="'addition' is not one of"):
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
    table = head_patching(model, task, n=16, seed=3)
    assert len(table) == 8 and model.training  # the model's mode is restored
    p = patching_pairs(task, n=16, seed=3)
    model.eval()
    _, cache = model.run_with_cache(p.clean)

    def diff(logits):
        at = logits[torch.arange(16), p.position]
        return (at[torch.arange(16), p.clean_answer] - at[torch.arange(16), p.corrupted_answer]).mean().item()

    clean, corrupted = diff(model(p.clean)), diff(model(p.corrupted))
    assert table.attrs["clean_logit_diff"] == pytest.approx(clean, rel=1e-5)
    layer, head = 1, 2

    def patch(z, hook):
        z = z.clone()
        z[:, :, head] = cache[hook.name][:, :, head]
        return z

    patched = diff(model.run_with_hooks(p.corrupted, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", patch)]))
    row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
    assert row["logit_diff"] == pytest.approx(patched, rel=1e-4, abs=1e-6)
    assert row["restored"] == pytest.approx((patched - corrupted) / (clean - corrupted), rel=1e-4, abs=1e-6)
