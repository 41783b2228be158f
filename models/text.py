"""TransformerLens's text methods (`to_tokens`, `to_string`, `to_str_tokens`, `generate`) and the tokenizer they
use, mixed into `Transformer` as `LensWeights` is.

A trained model carries its task's tokenizer (`model.tokenizer`, see models/tokenizer.py: a BPE for text, the
task's token strings for the algorithmic tasks), saved with the checkpoint; a bare one gets one with
`set_tokenizer`. The model's own attributes read here: `config` (d_vocab, n_ctx), `cfg` (default_prepend_bos,
device) and `tokenizer`.
"""

from __future__ import annotations

import torch

from . import tokenizer as tok
from .generate import generate


class TextMethods:
    """Text in and out of a model with a tokenizer: tokens from text, text from tokens, and sampling."""

    def set_tokenizer(self, tokenizer, default_prepend_bos: bool = True) -> None:
        """Attach a `tokenizers.Tokenizer` (see models/tokenizer.py); it is saved with the checkpoint."""
        if tokenizer.get_vocab_size() > self.config.d_vocab:
            raise ValueError(f"tokenizer has {tokenizer.get_vocab_size()} tokens but d_vocab={self.config.d_vocab}")
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer
        self.cfg.default_prepend_bos = default_prepend_bos

    def _require_tokenizer(self):
        """The model's tokenizer; ValueError saying how to get one when it has none."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer: trained runs carry their task's vocabulary "
                             "(mixit_lab.training.load_run(run_dir).model); a bare checkpoint can get one with set_tokenizer")
        return self.tokenizer

    def to_tokens(
        self, input: str | list[str], prepend_bos: bool | None = None, move_to_device: bool = True, truncate: bool = True
    ) -> torch.Tensor:
        """Text -> int64 tokens [batch, pos], as TransformerLens: a list is right-padded with <pad>.

        prepend_bos defaults to `cfg.default_prepend_bos` (True for text models: documents start with
        <|endoftext|>, as in training); truncate cuts to n_ctx tokens.
        """
        tokens, _ = self._encode(input, prepend_bos, truncate)
        return tokens.to(self.cfg.device) if move_to_device else tokens

    def generate(self, input: str | torch.Tensor = "", max_new_tokens: int = 10, **kwargs):
        """HookedTransformer.generate, with its arguments and return types (models/generate.py)."""
        return generate(self, input, max_new_tokens, **kwargs)

    def to_string(self, tokens: torch.Tensor | list[int]) -> str | list[str]:
        """Tokens [pos] -> a string, [batch, pos] -> a list of strings (special tokens written out)."""
        tokenizer = self._require_tokenizer()
        tokens = torch.as_tensor(tokens)
        if tokens.ndim == 2:
            return [tok.decode(tokenizer, row.tolist()) for row in tokens]
        if tokens.ndim > 2:
            raise ValueError(f"to_string expects tokens [pos] or [batch, pos], got shape {tuple(tokens.shape)}")
        return tok.decode(tokenizer, tokens.reshape(-1).tolist())

    def to_str_tokens(
        self, input: str | list | torch.Tensor, prepend_bos: bool | None = None
    ) -> list[str] | list[list[str]]:
        """Each token as a string: of a text (tokenized by `to_tokens`), a list of texts, or tokens [pos]."""
        tokenizer = self._require_tokenizer()
        if isinstance(input, list) and input and isinstance(input[0], str):
            return [self.to_str_tokens(text, prepend_bos) for text in input]
        if isinstance(input, str):
            ids = self.to_tokens(input, prepend_bos, move_to_device=False)[0].tolist()
        else:
            ids = torch.as_tensor(input).squeeze()
            if ids.ndim > 1:
                raise ValueError(f"to_str_tokens expects one sequence, got shape {tuple(ids.shape)}")
            ids = ids.reshape(-1).tolist()
        return tok.str_tokens(tokenizer, ids)

    def _encode(self, input, prepend_bos: bool | None, truncate: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Text -> (tokens int64 [batch, pos], lengths [batch]), prepend_bos defaulting to cfg.default_prepend_bos."""
        tokenizer = self._require_tokenizer()
        prepend_bos = self.cfg.default_prepend_bos if prepend_bos is None else prepend_bos
        return tok.encode(tokenizer, input, prepend_bos, self.config.n_ctx if truncate else None)
