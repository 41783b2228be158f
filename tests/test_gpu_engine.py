"""benchmarks/gpu_engine.py: its step without host reads computes the trainer's loss, and its dry form measures
every part on this CPU (the GPU measurements in docs/benchmarks.md come from the same code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_engine import weighted_loss  # noqa: E402

from mixit_lab.models import ModelConfig, build_model  # noqa: E402
from mixit_lab.training.loss import masked_loss  # noqa: E402
from mixit_lab.training.tasks import TASKS  # noqa: E402


@pytest.mark.parametrize("variant", ["standard", "mixit"])
def test_the_loss_with_fixed_shapes_is_the_trainers_masked_loss(variant):
    task = TASKS["retrieval"](pairs=4, num_values=16)
    model = build_model(ModelConfig(variant=variant, d_vocab=task.d_vocab, n_ctx=task.seq_len, d_model=32,
                                    n_layers=2, n_heads=4))
    tokens, mask = task.sample(16, torch.Generator().manual_seed(0))
    assert not bool(mask.all())  # some positions unscored: the weighting matters
    torch.testing.assert_close(weighted_loss(model, tokens, mask), masked_loss(model, tokens, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_dry_form_measures_every_part(tmp_path):
    out = tmp_path / "ge"
    done = subprocess.run([sys.executable, "benchmarks/gpu_engine.py", "--dry", "--out", str(out), "--parts", "steps",
                           "lm", "streams", "curve", "--ns", "1", "2", "--seconds", "0.5"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    steps = json.loads((out / "steps.json").read_text())
    assert len(steps) == 4 and all("error" not in r and r["trainer_ms"] > 0 and r["no_host_read_ms"] > 0 for r in steps)
    lm = json.loads((out / "lm.json").read_text())
    assert lm["flops_per_step"] > 0 and all(lm[k]["ms"] > 0 for k in lm if k.startswith(("micro", "one pass")))
    curve = json.loads((out / "curve.json").read_text())
    assert [r["n"] for r in curve] == [1, 2] and all(r["trainer_steps_per_s"] > 0 for r in curve)
    assert [r["n"] for r in json.loads((out / "streams.json").read_text())] == [1, 2]
