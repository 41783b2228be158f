"""model.generate, as TransformerLens's tutorials call it: greedy generation is the forward pass's argmax, token by
token, on every variant and a grid model; strings round-trip; sampling follows top_k / top_p; what would give
another model's numbers is refused in one line."""

from __future__ import annotations

import pytest
import torch

from mixit_lab.models import ModelConfig, build_model
from mixit_lab.models.lens import LensRefusal
from mixit_lab.training.tasks import TASKS, attach_tokenizer

MODELS = {
    "standard": {}, "frozen_qk": {}, "frozen_mlp": {}, "mixit": {}, "random": {}, "shaped": {},
    "grid": {"variant": "mixit", "attention": ["softmax", "mixing"]},
}


def _model(name: str, **overrides):
    kwargs = {"variant": name, **MODELS.get(name, {})}
    return build_model(ModelConfig(**{**kwargs, "d_model": 32, "n_layers": 2, "n_heads": 4, "n_ctx": 12,
                                      "d_vocab": 17, "seed": 3, "init_std": 0.3, **overrides})).eval()


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_generation_is_the_forward_passs_argmax_token_by_token(name):
    model = _model(name)
    prompt = torch.randint(0, 17, (3, 4), generator=torch.Generator().manual_seed(0))
    expected = prompt
    with torch.no_grad():
        for _ in range(6):
            expected = torch.cat([expected, model(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    got = model.generate(prompt, max_new_tokens=6, do_sample=False, verbose=False)
    assert torch.equal(got, expected)
    assert torch.equal(model.generate(prompt[0], max_new_tokens=6, temperature=0, verbose=False), expected[:1])


def test_a_string_prompt_gives_a_string_and_sampling_follows_its_settings():
    task = TASKS["retrieval"](pairs=2, num_values=8)
    model = build_model(ModelConfig(variant="standard", d_model=32, n_layers=2, n_heads=4, n_ctx=task.seq_len + 4,
                                    d_vocab=task.d_vocab, seed=0, init_std=0.3)).eval()
    attach_tokenizer(model, task)
    prompt = " ".join(task.vocab[i] for i in task.sample(1, torch.Generator().manual_seed(0))[0][0, :5].tolist())
    text = model.generate(prompt, max_new_tokens=3, do_sample=False, verbose=False)
    assert isinstance(text, str) and text.startswith(prompt) and len(text.split()) == len(prompt.split()) + 3
    tokens = model.generate(prompt, max_new_tokens=3, do_sample=False, return_type="tokens", verbose=False)
    assert model.to_string(tokens[0]) == text
    torch.manual_seed(1)
    first = model.generate(prompt, max_new_tokens=3, verbose=False)
    torch.manual_seed(1)
    assert model.generate(prompt, max_new_tokens=3, verbose=False) == first  # seeded: the same draw
    greedy = model.generate(prompt, max_new_tokens=3, do_sample=False, verbose=False)
    assert model.generate(prompt, max_new_tokens=3, top_k=1, verbose=False) == greedy
    assert model.generate(prompt, max_new_tokens=3, top_p=1e-9, verbose=False) == greedy


def test_a_row_that_meets_the_end_token_is_padded_with_it_and_the_others_go_on():
    model = _model("standard")
    prompt = torch.randint(0, 17, (3, 4), generator=torch.Generator().manual_seed(0))
    free = model.generate(prompt, max_new_tokens=5, do_sample=False, stop_at_eos=False, verbose=False)
    eos = int(free[0, 4])  # row 0's first new token ends it
    out = model.generate(prompt, max_new_tokens=5, do_sample=False, eos_token_id=eos, verbose=False)
    assert (out[0, 4:] == eos).all()
    for row in (1, 2):  # the others as without it, up to their own first end token
        ends = (free[row, 4:] == eos).nonzero()
        stop = 4 + (int(ends[0]) + 1 if len(ends) else 5)
        assert torch.equal(out[row, :stop], free[row, :stop])


@pytest.mark.parametrize("call, message", [
    (lambda m: m.generate(torch.zeros(1, 10, dtype=torch.long), max_new_tokens=5, verbose=False), "exceed n_ctx=12"),
    (lambda m: m.generate(torch.zeros(1, 2, dtype=torch.long), freq_penalty=1.0, verbose=False), "freq_penalty"),
    (lambda m: m.generate(["a", "b"], verbose=False), "a list of prompts"),
])
def test_what_would_give_another_models_numbers_is_refused(call, message):
    with pytest.raises(LensRefusal, match=message):
        call(_model("standard"))


def test_a_classifier_does_not_generate():
    model = build_model(ModelConfig(variant="standard", d_model=32, n_layers=2, n_heads=4, n_ctx=12, d_vocab=17,
                                    n_classes=2, causal=False))
    with pytest.raises(LensRefusal, match="causal language model"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), verbose=False)
