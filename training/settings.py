"""Whether a run directory holds the run a TrainConfig asks for: the settings that must agree for a resume (or for a
finished run to be reused) and the one-line refusal that lists every difference.

    from mixit_lab.training.settings import check_same_settings
    check_same_settings("runs/add3", cfg)   # SettingsChanged naming run.json and each difference; RunDamaged if unreadable
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mixit_lab.models import ModelConfig
from mixit_lab.models.checkpoint import CONFIG_FILE, RUN_CHECKPOINT_DIR, read_config

from .config import TrainConfig
from .rundir import RUN_FILE, RunDamaged, is_run_dir, read_run_info

class SettingsChanged(ValueError):
    """A run directory holds a run trained with other settings than those asked for."""


# how a run executes or what it keeps, not what it computes (micro-batches: the same gradient, up to float rounding)
IGNORED_SETTINGS = ("device", "compile", "cuda_graph", "keep_checkpoints", "micro_batch_size")


def settings_differences(run_dir: str | Path, cfg: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(setting, value in the run, value in cfg) for each setting in which cfg differs from the run in
    run_dir; none if it holds no run. Device and torch.compile may differ (resuming elsewhere is fine)."""
    if not is_run_dir(run_dir):
        return []
    try:
        info = read_run_info(run_dir)
    except ValueError as e:  # cut short, not JSON, ...: RunDamaged names the file and what to do
        raise RunDamaged(run_dir, e) from None
    wanted = cfg.to_dict()
    if plain(info["train"]) == plain(wanted):  # the usual case, said without building two models
        return []
    saved = _effective(info.train.to_dict())
    wanted = _effective(wanted)
    return [(k, saved[k], wanted[k]) for k in wanted if k not in IGNORED_SETTINGS and saved[k] != wanted[k]]


def model_differences(run_dir: str | Path, model: ModelConfig) -> list[tuple[str, Any, Any]]:
    """(field, value in the run's saved model, value in `model`) for each field in which the model a run directory
    saved differs from `model`, the one its settings build now; none without a saved model. Settings alone do not
    say everything: a default that changed since the run was trained (mixing_centre's, for one) changes the model
    the same settings build. Fields that change nothing in the model (ModelConfig.inert_fields) and the free-form
    `extra` are not compared."""
    checkpoint = Path(run_dir) / RUN_CHECKPOINT_DIR
    if not (checkpoint / CONFIG_FILE).is_file():
        return []
    try:
        saved_model = read_config(checkpoint)
    except (ValueError, OSError):
        return []  # damaged: loading it says so
    if saved_model == model:  # the usual case, said without listing every field
        return []
    saved = saved_model.to_dict()
    skip = {"extra", *model.inert_fields()}
    wanted = model.to_dict()
    return [(k, saved.get(k), v) for k, v in wanted.items() if k not in skip and saved.get(k) != v]


def plain(value: Any) -> Any:
    """`value` as JSON would read it back: tuples as lists (so that a config read from a record is the same)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _effective(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings without the model_extra fields their model does not use (residual_scale on standard): a run that
    recorded one, as presets once did, builds the same model as one that did not, and resumes under either."""
    extra = settings.get("model_extra") or {}
    try:
        unused = ModelConfig(variant=settings["variant"], d_model=settings["d_model"], n_layers=settings["n_layers"],
                             n_heads=settings["n_heads"], **extra).unused_fields()
    except (TypeError, ValueError):  # not a model on its own (a field the task sets): compare as recorded
        return settings
    return {**settings, "model_extra": {k: v for k, v in extra.items() if k not in unused}}


def check_same_settings(run_dir: str | Path, cfg: TrainConfig) -> None:
    """SettingsChanged, listing every difference, if run_dir holds a run trained with other settings."""
    diff = settings_differences(run_dir, cfg)
    if diff:
        listed = "; ".join(f"{k}={old!r} in the run, {k}={new!r} now" for k, old, new in diff)
        raise SettingsChanged(
            f"{Path(run_dir) / RUN_FILE}: cannot resume with a different config (differs in "
            f"{', '.join(k for k, _, _ in diff)}: {listed}); choose another --out or move the run away"
        )
