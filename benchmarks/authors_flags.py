"""Our variants and schedule as the flags of the authors' scripts (princeton-pli/MixiT): what
benchmarks/authors_reference.py and benchmarks/authors_classifier.py pass them.
"""

from __future__ import annotations

# our variant -> (their shaped_attention, weight_frozen, freeze_attention, freeze_mlp)
VARIANTS = {
    "standard": ("vanilla", 0, False, False),
    "frozen_qk": ("vanilla", 0, True, False),
    "frozen_mlp": ("vanilla", 0, False, True),
    "mixit": ("mixing", 0, False, False),
    "shaped": ("shaped", 0, False, False),
    "random": ("vanilla", 1, False, False),
    "mixit_weight_frozen": ("mixing", 1, False, False),
}


def warmup_flag(run: dict) -> list[str]:
    """Our warmup as their flag; none at their default schedule, where their utils.py sets max(4% of the steps, 500)."""
    return [] if run.get("schedule") == "authors" else [f"--warmup_steps={run['warmup_steps']}"]

# Their scripts' own warmup when --warmup_steps is not given (the module globals: depth.py L50, modadd_exp.py L144,
# hdmemorize_exp.py L49); trainer_classifier.py and trainer.py take utils.py's rule, max(4% of the steps, 500).
THEIR_WARMUP = {"depth.py": 300, "modadd_exp.py": 50, "hdmemorize_exp.py": 500}


def their_default_warmup(script: str, steps: int) -> int:
    """The warmup their script uses at its default schedule for a run of `steps` optimizer steps."""
    return THEIR_WARMUP.get(script, max(int(0.04 * steps), 500))
