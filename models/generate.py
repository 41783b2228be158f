"""`model.generate`: HookedTransformer's sampling loop for a causal model, as its tutorials call it.

    model.generate("ROMEO:", max_new_tokens=20, temperature=0)        # greedy; a string in, a string out
    model.generate(tokens, max_new_tokens=5, do_sample=True, top_k=10)  # tokens [batch, pos] in, tokens out

Each new token reads the logits at the last position of the whole sequence so far: the sequence is recomputed at
every step (no key-value cache), which gives the tokens a cache would. What would give
another model's numbers is refused in one line (`LensRefusal`): a classifier or a bidirectional model (no
next-token distribution), a sequence that would outgrow n_ctx (positions beyond it were never trained, and
MixiT's fixed matrices stop there), a frequency penalty (not offered), and left padding (rejected by the forward).
"""

from __future__ import annotations

from typing import Literal

import torch
from tqdm.auto import tqdm

from . import tokenizer as tok
from .lens import LensRefusal


def sample_next(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int | None,
                top_p: float | None) -> torch.Tensor:
    """One token per row from logits [batch, d_vocab]: the argmax (do_sample False, or temperature 0), else a draw
    from softmax(logits / temperature) restricted to the top_k tokens and the smallest set holding top_p of the mass."""
    if not do_sample or temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        ordered, order = logits.sort(dim=-1, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # the mass above each token
        ordered = ordered.masked_fill(before >= top_p, float("-inf"))  # the top token always stays
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, ordered)
    return torch.multinomial(logits.softmax(-1), 1)[:, 0]


@torch.no_grad()
def generate(model, input: str | torch.Tensor = "", max_new_tokens: int = 10, stop_at_eos: bool = True,
             eos_token_id: int | None = None, do_sample: bool = True, top_k: int | None = None,
             top_p: float | None = None, temperature: float = 1.0, freq_penalty: float = 0.0,
             use_past_kv_cache: bool = True, prepend_bos: bool | None = None,
             return_type: Literal["input", "str", "tokens"] = "input", verbose: bool = True) -> str | torch.Tensor:
    """HookedTransformer.generate's arguments and return types: a string in gives a string (the prompt and what
    follows) unless return_type="tokens"; tokens [batch, pos] (or [pos]) in give tokens [batch, pos + new].
    After a row meets the end-of-text token (stop_at_eos) it is padded with it; all rows done, the loop stops.
    `use_past_kv_cache` is accepted and changes nothing (see the module's docstring)."""
    cfg = model.config
    if cfg.n_classes or not cfg.causal:
        raise LensRefusal("generate needs a causal language model; this one is a classifier or bidirectional")
    if freq_penalty:
        raise LensRefusal(f"freq_penalty={freq_penalty}: not offered here (sample with temperature, top_k, top_p)")
    if return_type not in ("input", "str", "tokens"):
        raise ValueError(f"return_type={return_type!r}; allowed: input, str, tokens")
    if isinstance(input, (list, tuple)) and input and isinstance(input[0], str):
        raise LensRefusal("a list of prompts would be padded, and padding changes what follows: pass one at a time")
    as_text = isinstance(input, str)
    tokens = model.to_tokens(input, prepend_bos=prepend_bos) if as_text else torch.as_tensor(input)
    tokens = (tokens[None] if tokens.ndim == 1 else tokens).to(model.W_E.device)
    if tokens.shape[1] + max_new_tokens > cfg.n_ctx:
        raise LensRefusal(f"{tokens.shape[1]} tokens + max_new_tokens={max_new_tokens} exceed n_ctx={cfg.n_ctx}: "
                          "positions beyond it were never trained")
    if eos_token_id is None and stop_at_eos and model.tokenizer is not None:
        eos_token_id = tok.bos_id(model.tokenizer)  # <|endoftext|> ends a document as it begins the next
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    for _ in tqdm(range(max_new_tokens), disable=not verbose, desc="generate"):
        new = sample_next(model(tokens)[:, -1], do_sample, temperature, top_k, top_p)
        if stop_at_eos and eos_token_id is not None:
            new = new.masked_fill(done, eos_token_id)
            done |= new == eos_token_id
        tokens = torch.cat([tokens, new[:, None]], dim=1)
        if bool(done.all()):
            break
    if return_type == "str" or (return_type == "input" and as_text):
        text = model.to_string(tokens)
        return text[0] if as_text else text
    return tokens
