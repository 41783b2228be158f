"""The trainer state a checkpoint carries beside the model, for an exact resume: the optimizer's state, the
training data stream's position, the step, and the loop's counters (trainer_state.safetensors / .json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from models.files import write_safetensors

from .rundir import STATE_JSON, STATE_TENSORS, read_json, write_json
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
        {"step": step, "param_groups": opt["param_groups"], "stream": stream_json, **extra},
    )


def load_trainer_state(directory: Path, optimizer: torch.optim.Optimizer, stream: TrainStream) -> dict[str, Any]:
    """Load what save_trainer_state wrote into `optimizer` and `stream`; returns the JSON part (step, extra)."""
    meta = read_json(directory / STATE_JSON)
    tensors = load_file(str(directory / STATE_TENSORS))
    state: dict[int, dict[str, torch.Tensor]] = {}
    stream_state: dict[str, Any] = dict(meta["stream"])
    for name, value in tensors.items():
        kind, rest = name.split(".", 1)
        if kind == "optim":
            idx, key = rest.split(".", 1)
            state.setdefault(int(idx), {})[key] = value
        else:
            stream_state[rest] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    stream.load_state_dict(stream_state)
    return meta


def has_trainer_state(directory: Path) -> bool:
    """Whether `directory` (a run's checkpoint/) holds a trainer state to resume from."""
    return (directory / STATE_JSON).is_file()


def saved_step(directory: Path) -> int:
    """The step of the trainer state in `directory`."""
    return read_json(directory / STATE_JSON)["step"]
