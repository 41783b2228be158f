"""Model options that change nothing are refused, not recorded; grid files' model_extra is checked and adds up.

ModelConfig.unused_fields is checked against built models (a field it calls unused leaves the weights and the
logits bit-identical; one it calls used changes them), then the commands that refuse (mixit train, mixit sweep)
and the sweep's messages (duplicates named, a failed run's one-line reason, a folder of runs given as a run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from mixit_lab.models import VARIANTS, ModelConfig, build_model
from mixit_lab.models.config import FIELD_USE
from mixit_lab.models.model_extra import check_grid_models, check_model_extra, grid_extra

SMALL = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "2"]
# A value away from each FIELD_USE field's default that changes any model using the field (at d_model 16).
CHANGED = {"residual_scale": 0.5, "base_width": 64, "base_width_down": 4, "scaled_readout": False, "tau0": 3.0,
           "width_scaled_temperature": False, "sink_head": False, "qk_init_std": 0.3, "rope_base": 100.0}
MODELS = [(v, ()) for v in VARIANTS] + [("standard", ("shaped",)), ("standard", ("mixing",)),
                                          ("standard", ("learned",)), ("mixit", ("softmax",)), ("mixit", ("shaped",))]


def _mixit(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mixit_lab.cli", *argv], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"})


def _outputs(cfg: ModelConfig) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    model = build_model(cfg).eval()
    tokens = torch.randint(0, cfg.d_vocab, (2, cfg.n_ctx), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model.state_dict(), model(tokens)


@pytest.mark.parametrize("variant, attention", MODELS, ids=[f"{v}{'+' + a[0] if a else ''}" for v, a in MODELS])
def test_a_field_is_called_unused_exactly_when_it_changes_nothing(variant, attention, one_thread):
    base = dict(variant=variant, attention=list(attention), d_model=16, n_layers=1, n_heads=2, n_ctx=8, d_vocab=11)
    weights, logits = _outputs(ModelConfig(**base))
    for name, value in CHANGED.items():
        cfg = ModelConfig(**base, **{name: value})
        other_weights, other_logits = _outputs(cfg)
        same = weights.keys() == other_weights.keys() and all(torch.equal(weights[k], other_weights[k]) for k in weights)
        same = same and torch.equal(logits, other_logits)
        assert (name in cfg.unused_fields()) == same, (name, cfg.label, same)
        if same:
            with pytest.raises(ValueError, match=f"{name}=.* has no effect on variant {variant}.*it applies to"):
                cfg.check_fields_apply()


def test_depth_and_pooling_fields_apply_only_where_they_act():
    assert "base_layers" in ModelConfig(base_layers=3).unused_fields()
    assert "base_layers" not in ModelConfig(base_layers=3, depth_alpha=1.0).unused_fields()
    assert "residual_scale" in ModelConfig(variant="mixit", residual_scale=0.5, depth_alpha=1.0).unused_fields()
    assert "pooling" in ModelConfig(pooling="mean").unused_fields()
    assert "pooling" not in ModelConfig(pooling="mean", n_classes=2, causal=False).unused_fields()
    assert ModelConfig(variant="mixit", residual_scale=0.5, sink_head=False).unused_fields() == {}


def test_a_saved_config_with_a_field_that_changes_nothing_still_loads(tmp_path):
    """Runs recorded before the refusal (residual_scale on standard) load: only commands refuse."""
    from mixit_lab.models import load_model

    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, n_ctx=8, d_vocab=11, residual_scale=0.5)
    build_model(cfg).save_pretrained(tmp_path / "ckpt")
    assert load_model(tmp_path / "ckpt").config.residual_scale == 0.5


@pytest.mark.parametrize("value, said", [(float("inf"), "init_std=inf must be a finite number"),
                                         (float("nan"), "init_std=nan must be a finite number"),
                                         (0.0, "init_std=0.0 must be > 0")])
def test_init_std_must_be_a_finite_positive_number(value, said):
    with pytest.raises(ValueError, match=said):
        ModelConfig(init_std=value)


def test_extra_must_be_a_mapping():
    with pytest.raises(ValueError, match="extra=5 must be a mapping"):
        ModelConfig(extra=5)
    assert ModelConfig(extra={"note": "x"}).extra == {"note": "x"}


def test_model_extra_keys_are_checked_naming_the_key_and_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown keys \['qk_std'\]; allowed: .*qk_init_std"):
        check_model_extra({"qk_std": 0.1})
    with pytest.raises(ValueError, match=r"unknown keys \['d_model'\]"):  # set by the run, not model_extra
        check_model_extra({"d_model": 8})
    with pytest.raises(ValueError, match="model_extra=5 must be a mapping"):
        check_model_extra(5)


def test_a_variant_entrys_freeze_adds_to_model_extras():
    assert grid_extra({"freeze": "v", "bias": False}, {"freeze": ["o", "v"]}) == {"freeze": ["v", "o"], "bias": False}
    assert grid_extra({"freeze": "v"}, {"attention": "mixing"}) == {"freeze": "v", "attention": "mixing"}


def test_duplicate_runs_are_named():
    cfg = ModelConfig()
    with pytest.raises(ValueError, match="duplicate runs: a, b;"):
        check_grid_models([("a", cfg), ("b", cfg), ("a", cfg), ("b", cfg), ("c", cfg)])


def test_a_sweep_files_freeze_adds_up_and_repeats_count_once(tmp_path):
    from mixit_lab.training.sweep import build_grid

    grid = tmp_path / "g.yaml"
    grid.write_text("variants: [{standard: {freeze: 'o,o'}}]\ntasks: [addition]\ntrain: {model_extra: {freeze: 'v,v'}}\n")
    [(name, cfg)] = build_grid(grid)
    assert "+freeze-v-o__" in name and cfg.model_extra["freeze"] == ["v", "o"]
    grid.write_text("variants: [{standard: {freeze: 'v,v'}}, {standard: {freeze: v}}]\ntasks: [addition]\n")
    with pytest.raises(ValueError, match=r"duplicate runs: addition__standard\+freeze-v__"):
        build_grid(grid)


def test_a_sweep_field_no_model_uses_is_refused_but_one_some_use_is_kept(tmp_path):
    from mixit_lab.training.sweep import build_grid

    grid = tmp_path / "g.yaml"
    grid.write_text("variants: [standard, frozen_qk]\ntasks: [addition]\ntrain: {model_extra: {residual_scale: 0.5}}\n")
    with pytest.raises(ValueError, match="g.yaml: model_extra residual_scale=0.5 has no effect on any model"):
        build_grid(grid)
    grid.write_text("variants: [standard, mixit]\ntasks: [addition]\ntrain: {model_extra: {residual_scale: 0.5}}\n")
    assert len(build_grid(grid)) == 2


@pytest.mark.parametrize("preset", sorted(p.stem for p in (ROOT / "reproduce" / "presets").glob("*.yaml")))
def test_every_preset_and_example_grid_still_validates(preset):
    from mixit_lab.reproduce.corpora import TextChoice
    from mixit_lab.reproduce.pipeline import preset_runs
    from mixit_lab.reproduce.preset import load_preset
    from mixit_lab.reproduce.preset import TEXT_KINDS
    from mixit_lab.training.sweep import build_grid

    skipped = {kind: TextChoice(skipped=True) for kind in TEXT_KINDS}
    assert preset_runs(load_preset(preset), skipped)
    assert build_grid(ROOT / "examples" / "grid.yaml")


def test_the_help_examples_of_model_option_apply():
    base = dict(d_model=16, n_layers=1, n_heads=2)
    ModelConfig(**base, qk_init_std=0.044).check_fields_apply()
    ModelConfig(**base, variant="mixit", residual_scale=0.5).check_fields_apply()
    from mixit_lab.cli.main import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    text = next(a.help for a in train._actions if "--model-option" in a.option_strings)
    assert "residual_scale=0.5 with --variant mixit or shaped" in text


def test_a_failed_sweep_run_shows_its_one_line_reason(tmp_path):
    """init_std 1e30 is finite (accepted) and makes training non-finite at step 0: the run fails, and says why."""
    grid = tmp_path / "g.yaml"
    grid.write_text("variants: [standard]\ntasks: [addition]\ntrain: {model_extra: {init_std: 1.0e+30}}\n")
    done = _mixit(["sweep", str(grid), *SMALL, "--out", str(tmp_path / "s")], tmp_path)
    assert done.returncode == 1, done.stderr[-1500:]
    assert "addition__standard__d16_l1_h2__lr0.001__s0: error: TrainingDiverged: " in done.stdout, done.stdout
    import pandas as pd

    assert "non-finite" in pd.read_csv(tmp_path / "s" / "summary.csv")["message"][0]


def test_a_folder_of_runs_given_as_a_run_says_what_to_do(tmp_path):
    done = _mixit(["sweep", "--tasks", "addition", "--variants", "standard", *SMALL, "--out", "s"], tmp_path)
    assert done.returncode == 0, done.stderr[-1500:]
    for extra in ([], ["--resume"]):
        done = _mixit(["train", "--task", "addition", *SMALL, "--quiet", "--out", "s", *extra], tmp_path)
        line = done.stderr.strip()
        assert done.returncode == 2 and "\n" not in line, line
        assert "folder of runs (1): give one of them as --out (e.g. --out s/addition__standard" in line, line


def test_a_refused_non_finite_option_leaves_nothing_to_block_the_corrected_command(tmp_path):
    bad = _mixit(["train", "--task", "addition", *SMALL, "--quiet", "--out", "r", "--model-option", "init_std=1e400"],
                 tmp_path)
    assert bad.returncode == 2 and "init_std=inf must be a finite number" in bad.stderr, bad.stderr
    assert not (tmp_path / "r").exists()
    good = _mixit(["train", "--task", "addition", *SMALL, "--quiet", "--out", "r"], tmp_path)
    assert good.returncode == 0, good.stderr[-1500:]


def test_a_run_that_diverged_before_its_first_checkpoint_does_not_block_the_corrected_command(tmp_path):
    bad = _mixit(["train", "--task", "addition", *SMALL, "--quiet", "--out", "r", "--model-option", "init_std=1e30"],
                 tmp_path)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    # the one line names the options that set the first step (was: "non-finite gradient norm at step 0" alone)
    assert "at step 0, found at step 2; no checkpoint was written yet" in bad.stderr and "init_std=1e+30" in bad.stderr
    good = _mixit(["train", "--task", "addition", *SMALL, "--quiet", "--out", "r"], tmp_path)
    assert good.returncode == 0, good.stderr[-1500:]


def test_a_field_its_model_does_not_use_is_no_difference_between_two_runs(tmp_path):
    # Presets once recorded a shared residual_scale on standard runs; grids now leave it out. Either way the same
    # model: a run recorded with it resumes under a config without it, and a real change is still a difference.
    from mixit_lab.training import TrainConfig, train
    from mixit_lab.training.settings import settings_differences

    base = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=1, n_heads=2, steps=2,
                batch_size=8, eval_every=2, eval_samples=16, device="cpu")
    with_noop = TrainConfig(**base, model_extra={"residual_scale": 0.5, "qk_init_std": 0.1})
    train(with_noop, tmp_path / "run", progress=False)
    assert settings_differences(tmp_path / "run", TrainConfig(**base, model_extra={"qk_init_std": 0.1})) == []
    changed = settings_differences(tmp_path / "run", TrainConfig(**base, model_extra={"qk_init_std": 0.2}))
    assert [k for k, _, _ in changed] == ["model_extra"]
