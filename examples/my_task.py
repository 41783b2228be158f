"""A task of your own, as a template: reverse a sequence of digits.

    3 1 4 1 5 > [5 1 4 1 3]

Train it without touching the toolkit (from the repository root, so that `examples.my_task` imports):

    mixit train --task examples.my_task:ReverseTask --length 5 --steps 300 --out checkpoints/reverse
    mixit analyze checkpoints/reverse

or from Python: `register_task(ReverseTask)`, then `TrainConfig(task="reverse", ...)`. See
docs/guides/tasks.md, "Your own task".
"""

from __future__ import annotations

import torch

from mixit_lab.training.tasks import Task


class ReverseTask(Task):
    """Copy `length` random digits, then write them in reverse order after `>`; scored on the reversed part.

    Ids: `0`-`9` = 0-9 (`digits` of them are used), `>` = 10, `<pad>` = 11 (never in a row: every row has
    the same layout).
    """

    name = "reverse"  # what run.json, the runs table and `get_task("reverse")` call it
    metric = "sequence"  # a row counts as right only if every reversed digit is
    layout = "x_0 .. x_{L-1} > [x_{L-1} .. x_0]"  # one-line picture of a row; [..] = the scored answer

    def __init__(self, length: int = 6, digits: int = 10):
        # Every constructor parameter is stored under its own name: `task.params` (recorded in run.json)
        # reads them back, and `mixit train` offers them as options (--length, --digits).
        if not 1 <= length <= 64 or not 2 <= digits <= 10:
            raise ValueError(f"reverse: length={length}, digits={digits}; allowed: 1 <= length <= 64, 2 <= digits <= 10")
        self.length, self.digits = length, digits
        self.vocab = [str(i) for i in range(10)] + [">", "<pad>"]  # token strings: what to_str_tokens shows
        self.sep_id, self.pad_id = 10, 11
        self.seq_len = 2 * length + 1

    def _sample(self, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """n rows, drawn only from `g`: tokens int64 [n, seq_len] and mask bool [n, seq_len], True on the answer."""
        x = torch.randint(0, self.digits, (n, self.length), generator=g)
        sep = torch.full((n, 1), self.sep_id)
        tokens = torch.cat([x, sep, x.flip(1)], dim=1)
        mask = torch.zeros(n, self.seq_len, dtype=torch.bool)
        mask[:, self.length + 1 :] = True
        return tokens, mask

    # Optional: pairs for activation patching (`mixit analyze` then patches every head). The corrupted row
    # changes the first digit, so only the last answer token, which copies it, differs.
    def patching_pairs(self, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(clean [n, L], corrupted [n, L], position [n] whose logits predict the answer, answers [n, 2]:
        the clean and the corrupted answer token)."""
        g = torch.Generator().manual_seed(seed)
        clean, _ = self.sample(n, g)
        corrupted = clean.clone()
        other = (clean[:, 0] + torch.randint(1, self.digits, (n,), generator=g)) % self.digits  # never the same
        corrupted[:, 0] = corrupted[:, -1] = other
        position = torch.full((n,), self.seq_len - 2)
        return clean, corrupted, position, torch.stack([clean[:, 0], other], dim=1)
