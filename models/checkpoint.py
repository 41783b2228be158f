"""Checkpoints: a directory with config.json and model.safetensors (and tokenizer.json for a model that carries
a tokenizer: every model `mixit_lab.training.train` saves, text or task vocabulary). No pickle, nothing executed on load.

Directories are written atomically (mixit_lab.models.files.atomic_directory): into a hidden temporary sibling
first, then swapped into place, so a crash never leaves a half-written checkpoint under the final
name and never loses the previous one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError

from .config import ModelConfig
from .files import atomic_directory, atomic_file, write_json, write_safetensors
from .tokenizer import TOKENIZER_FILE, tokenizer_from_json, tokenizer_to_json

if TYPE_CHECKING:  # torch is imported where weights are read, so that reading a config does not import it
    import torch

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
RUN_CHECKPOINT_DIR = "checkpoint"  # where a training run directory keeps its checkpoint (mixit_lab.training.rundir)
FORMAT = "mixit-lab/model"
# 2 added the config fields bias, unembed_bias, scaled_readout, width_scaled_temperature and pooling;
# a version-1 config means LEGACY_DEFAULTS for them.
FORMAT_VERSION = 2
METADATA_KEY = "mixit-lab"  # model.safetensors' metadata: {"format": FORMAT, "model": the config}, as JSON
# What a config written before these fields existed meant (checkpoint format_version 1): trained
# biases everywhere, an unscaled readout, shaped scores divided by sqrt(d_head) only, mean pooling.
LEGACY_DEFAULTS: dict[str, Any] = {
    "bias": True,
    "unembed_bias": True,
    "scaled_readout": False,
    "width_scaled_temperature": False,
    "pooling": "mean",
}


class CheckpointError(ValueError):
    """A checkpoint exists but cannot be used (truncated, corrupt, or not matching its config)."""


def write_model_files(model: torch.nn.Module, directory: Path) -> None:
    """Write model.safetensors, config.json (with the weights' SHA-256, checked on load) and (if the model has
    one) tokenizer.json into an existing directory."""
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    # The model the weights belong to, in the weights file too: config.json's hash covers the weights, not the
    # config, so an edited config.json (another variant, say) is caught on load by comparing the two. One metadata
    # key: safetensors writes several in an order that changes from process to process, and the bytes must not.
    record = json.dumps({"format": FORMAT, "model": model.config.to_dict()}, sort_keys=True)
    write_safetensors(state, directory / WEIGHTS_FILE, metadata={METADATA_KEY: record})
    write_json(
        directory / CONFIG_FILE,
        {"format": FORMAT, "format_version": FORMAT_VERSION, "model": model.config.to_dict(),
         "weights_sha256": hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()).hexdigest()},
    )
    if getattr(model, "tokenizer", None) is not None:
        with atomic_file(directory / TOKENIZER_FILE) as fh:
            fh.write(tokenizer_to_json(model.tokenizer))


def save_model(model: torch.nn.Module, path: str | Path) -> Path:
    """Save `model` (a mixit_lab.models.Transformer) to directory `path`, replacing it atomically."""
    with atomic_directory(path) as tmp:
        write_model_files(model, tmp)
    return Path(path)


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint directory for `path`: itself, or `path/checkpoint` for a training run directory."""
    path = Path(path)
    if not (path / CONFIG_FILE).exists() and (path / RUN_CHECKPOINT_DIR).is_dir():
        return path / RUN_CHECKPOINT_DIR  # a run directory (its errors then name checkpoint/config.json)
    return path


def read_config(path: str | Path) -> ModelConfig:
    """Read the ModelConfig of a checkpoint directory, with errors naming the file."""
    path = resolve_checkpoint(path)
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {path}")
    cfg_file = path / CONFIG_FILE
    if not cfg_file.is_file():
        raise FileNotFoundError(f"checkpoint is missing {cfg_file}")
    return _parse_config(cfg_file, cfg_file.read_bytes())


def _parse_config(cfg_file: Path, raw: bytes) -> ModelConfig:
    """The ModelConfig in config.json's bytes `raw`; CheckpointError naming `cfg_file` if they are not one."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_file}: not valid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("model"), dict):
        raise CheckpointError(f"{cfg_file}: not a {FORMAT} config (missing 'format' or 'model')")
    if data.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{cfg_file}: format_version {data['format_version']} is newer than this library supports ({FORMAT_VERSION})"
        )
    model = data["model"]
    if data.get("format_version", 1) < 2:
        # Written before the fidelity fields existed: keep the model it was trained as.
        model = {**LEGACY_DEFAULTS, **model}
    try:
        return ModelConfig.from_dict(model)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{cfg_file}: {e}") from None


def read_weights(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor], Any]:
    """(config, state dict, tokenizer or None) of a checkpoint directory (or a run directory), unchecked
    against a model; errors name the offending file."""
    from safetensors.torch import load as load_safetensors

    path = resolve_checkpoint(path)
    config, data, recorded = _read_one_generation(path)
    weights = path / WEIGHTS_FILE
    try:
        state = load_safetensors(data)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights}: cannot read safetensors file ({e}); it may be truncated") from None
    expected = recorded.get("weights_sha256")  # absent before it was stored
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise CheckpointError(f"{weights}: contents do not match the SHA-256 recorded in {CONFIG_FILE}; "
                              "the file is corrupt (restore it, or retrain)")
    _check_config_matches_weights(path, config, _weights_metadata(data).get(METADATA_KEY))
    tokenizer = None
    tokenizer_file = path / TOKENIZER_FILE
    if tokenizer_file.is_file():
        try:
            tokenizer = tokenizer_from_json(tokenizer_file.read_text(encoding="utf-8"), str(tokenizer_file))
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(str(e) if str(tokenizer_file) in str(e) else f"{tokenizer_file}: {e}") from None
    return config, state, tokenizer


def _read_one_generation(path: Path, tries: int = 5) -> tuple[ModelConfig, bytes, dict[str, Any]]:
    """(config, the weights' bytes, config.json's fields) of one generation of a checkpoint that a trainer may be
    swapping for the next one meanwhile: config.json is read before and after the weights, and the read is tried
    again while the two differ (or the directory is between its two renames), so a config and weights from two
    generations are never compared as if they were one, and a reader never calls a live checkpoint corrupt."""
    cfg_file, weights = path / CONFIG_FILE, path / WEIGHTS_FILE
    for attempt in range(tries):
        try:
            before = cfg_file.read_bytes()
            config = _parse_config(cfg_file, before)
            if not weights.is_file():
                raise FileNotFoundError(f"checkpoint is missing {weights}")
            data = weights.read_bytes()
            if cfg_file.read_bytes() == before:
                return config, data, json.loads(before)
        except FileNotFoundError:
            if attempt == tries - 1 or not path.parent.is_dir():
                raise
        time.sleep(0.05 * (attempt + 1))  # the swap's second rename, or the next generation's write, is under way
    return config, data, json.loads(cfg_file.read_bytes())  # still changing: the hash check below says what it is


def _weights_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors file's header ({} if it has none)."""
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]).get("__metadata__") or {}


def _check_config_matches_weights(path: Path, config: ModelConfig, saved: str | None) -> None:
    """CheckpointError naming each field in which the model config.json describes differs from the one the weights
    were saved with (recorded in their metadata since it was stored; the free-form `extra` aside)."""
    if saved is None:
        return
    model, saved_model = json.loads(json.dumps(config.to_dict())), json.loads(saved)["model"]
    changed = sorted(k for k in set(model) | set(saved_model) if k != "extra" and model.get(k) != saved_model.get(k))
    if changed:
        listed = ", ".join(f"{k}={model.get(k)!r} (saved as {saved_model.get(k)!r})" for k in changed)
        raise CheckpointError(f"{path / CONFIG_FILE}: {listed}: the config was edited after the weights were "
                              "saved; restore it")


def check_state(path: str | Path, state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """CheckpointError naming the weights file unless `state` has exactly the names and shapes of `expected`."""
    weights = resolve_checkpoint(path) / WEIGHTS_FILE
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{weights}: tensors do not match {CONFIG_FILE} (missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise CheckpointError(
                f"{weights}: tensor {key} has shape {tuple(tensor.shape)}, config expects {tuple(expected[key].shape)}"
            )
