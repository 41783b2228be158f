"""What changes when the model leaves the CPU: every variant's forward pass, a bf16 training run, a checkpoint
moved between devices and the activation cache, on each device this machine has (the CPU always; CUDA when
present, else those cases are skipped with the reason).

Marked `device`: `make gpu-check` (benchmarks/gpu_check.py) runs exactly these on a GPU machine, where they
need only torch and the project's own runtime dependencies.
"""

from __future__ import annotations

import json

import pytest
import torch

from mixit_lab.models import VARIANTS, ModelConfig, build_model, load_model
from mixit_lab.training.precision import resolve_precision
from mixit_lab.training.config import TrainConfig
from mixit_lab.training.trainer import train

pytestmark = pytest.mark.device

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
TINY = dict(task="retrieval", task_params={"pairs": 3, "num_values": 8}, d_model=32, n_layers=2, n_heads=4,
            steps=12, batch_size=16, lr=3e-3, eval_every=6, eval_samples=32, seed=0)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, computed in float64 on the CPU."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_on_the_device_matches_float64_on_the_cpu(variant, device):
    cfg = ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=24, seed=3)
    model = build_model(cfg).eval()
    tokens = torch.randint(0, 24, (4, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.double()(tokens)
        got = model.float().to(device)(tokens.to(device))
    assert got.device.type == device and got.dtype == torch.float32
    assert relative_error(got, want) < 1e-4  # float32 arithmetic; TF32 would land near 3e-4


@pytest.mark.parametrize("device", DEVICES)
def test_precision_auto_is_bf16_on_cuda_and_fp32_on_the_cpu(device):
    assert resolve_precision("auto", torch.device(device)) == ("bf16" if device == "cuda" else "fp32")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", ["standard", "mixit"])
def test_a_bf16_run_on_the_device_trains_and_its_checkpoint_opens_on_the_cpu(variant, device, tmp_path):
    summary = train(TrainConfig(**TINY, variant=variant, device=device, precision="bf16"), tmp_path / "run",
                    progress=False)
    assert summary["status"] == "finished" and summary["device"].startswith(device)
    assert summary["precision"] == "bf16" and summary["backend"] is None
    losses = [json.loads(line)["loss"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0]
    on_cpu, on_device = load_model(tmp_path / "run", "cpu").eval(), load_model(tmp_path / "run", device).eval()
    assert next(on_cpu.parameters()).device.type == "cpu"
    tokens = torch.randint(0, on_cpu.config.d_vocab, (4, on_cpu.config.n_ctx),
                           generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert relative_error(on_device(tokens.to(device)), on_cpu(tokens)) < 1e-4


@pytest.mark.parametrize("device", DEVICES)
def test_the_activation_cache_on_the_device_matches_the_cpu(device):
    model = build_model(ModelConfig(variant="standard", d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=24,
                                    seed=5)).eval()
    tokens = torch.randint(0, 24, (3, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        _, cpu_cache = model.run_with_cache(tokens)
        _, cache = model.to(device).run_with_cache(tokens.to(device))
    for name in ("blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post", "ln_final.hook_normalized"):
        assert cache[name].device.type == device
        assert relative_error(cache[name], cpu_cache[name]) < 1e-4, name
    resid = cache.decompose_resid(layer=2, return_labels=False).sum(0)  # the exact decomposition holds there too
    assert relative_error(resid, cache["blocks.1.hook_resid_post"]) < 1e-4
