"""The trainer state a checkpoint carries beside the model, for an exact resume: the optimizer's state, the
training data stream's position, the step, and the loop's counters (trainer_state.safetensors / .json).
trainer_state.json records the SHA-256 of trainer_state.safetensors, checked on load: a damaged state is refused
(mixit_lab.models.CheckpointError naming the file), never resumed from."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors

from mixit_lab.models.checkpoint import CheckpointError
from mixit_lab.models.files import read_json, write_json, write_safetensors

from .rundir import STATE_JSON, STATE_TENSORS
from .tasks import TrainStream


def save_trainer_state(directory: Path, step: int, optimizer: torch.optim.Optimizer, stream: TrainStream,
                       extra: dict[str, Any]) -> None:
    """Write the optimizer, the data stream and `step` (plus `extra`, JSON values) into `directory`: tensors
    as safetensors ("optim.<param index>.<key>", "stream.<key>"), the rest as JSON."""
    opt = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for idx, state in opt["state"].items():
        for key, value in state.items():
            tensors[f"optim.{idx}.{key}"] = value.detach().cpu().contiguous()
    stream_state = stream.state_dict()
    stream_json = {}
    for key, value in stream_state.items():
        if isinstance(value, torch.Tensor):
            tensors[f"stream.{key}"] = value.cpu().contiguous()
        else:
            stream_json[key] = value
    write_safetensors(tensors, directory / STATE_TENSORS)
    write_json(
        directory / STATE_JSON,
        {"step": step, "param_groups": opt["param_groups"], "stream": stream_json,
         "state_sha256": hashlib.sha256((directory / STATE_TENSORS).read_bytes()).hexdigest(), **extra},
    )


def load_trainer_state(directory: Path, optimizer: torch.optim.Optimizer, stream: TrainStream) -> dict[str, Any]:
    """Load what save_trainer_state wrote into `optimizer` and `stream`; returns the JSON part (step, extra).
    CheckpointError (one line naming the file and what to do) if either file is damaged."""
    meta, tensors = read_trainer_state(directory)
    state: dict[int, dict[str, torch.Tensor]] = {}
    stream_state: dict[str, Any] = dict(meta["stream"])
    try:
        for name, value in tensors.items():
            kind, rest = name.split(".", 1)
            if kind == "optim":
                idx, key = rest.split(".", 1)
                state.setdefault(int(idx), {})[key] = value
            else:
                stream_state[rest] = value
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
        stream.load_state_dict(stream_state)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise _damaged(directory / STATE_TENSORS, f"it does not fit this run ({type(e).__name__}: {e})") from None
    return meta


def read_trainer_state(directory: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(trainer_state.json's content, trainer_state.safetensors' tensors) of `directory`, the tensors checked
    against the SHA-256 the JSON records (absent in states saved before it was); CheckpointError if damaged."""
    meta_path, tensors_path = directory / STATE_JSON, directory / STATE_TENSORS
    try:
        meta = read_json(meta_path)
    except (OSError, ValueError) as e:
        raise _damaged(meta_path, f"cannot read it ({type(e).__name__})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int) or not isinstance(meta.get("stream"), dict) \
            or not isinstance(meta.get("param_groups"), list):
        raise _damaged(meta_path, "it lacks step, param_groups or stream")
    try:
        data = tensors_path.read_bytes()
    except OSError as e:
        raise _damaged(tensors_path, f"cannot read it ({e.strerror or type(e).__name__})") from None
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, ValueError) as e:
        raise _damaged(tensors_path, f"not a readable safetensors file ({e}); it may be truncated") from None
    expected = meta.get("state_sha256")
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise _damaged(tensors_path, f"its contents do not match the SHA-256 recorded in {STATE_JSON}")
    return meta, tensors


def _damaged(path: Path, what: str) -> CheckpointError:
    """The one-line error for a damaged trainer state file: which file, what is wrong, what to do."""
    what = " ".join(what.split())  # one line, whatever the reader's message held
    return CheckpointError(f"{path}: the trainer state is damaged: {what}; delete the checkpoint folder "
                           f"{path.parent} to restart the run, or restore it from a copy")


def has_trainer_state(directory: Path) -> bool:
    """Whether `directory` (a run's checkpoint/) holds a trainer state to resume from."""
    return (directory / STATE_JSON).is_file()


def saved_step(directory: Path) -> int:
    """The step of the trainer state in `directory`."""
    return read_json(directory / STATE_JSON)["step"]
