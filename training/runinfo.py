"""What a run directory's run.json says, as a typed record: `RunInfo` (read with `mixit_lab.training.rundir.read_run_info`).

    from mixit_lab.training.rundir import read_run_info
    info = read_run_info("runs/quick/algorithmic/addition__standard__d64_l2_h4__lr0.001__s0")
    info.task.name, info.task.params, info.task.import_path, info.task.data_fingerprint
    info.model.n_ctx, info.provenance.git_commit, info.train.steps
    info.check_data(task)                 # ValueError if the task's corpus or tokenizer changed since training

run.json holds the train config (TrainConfig fields), the model config, the task (its name, the import path of
its class, every parameter resolved, and for text tasks the fingerprint of its data) and the provenance of the
command that trained it (mixit_lab.training.provenance.provenance). `RunInfo.from_dict` is the one parser of that content;
`mixit_lab.training.rundir.read_run_info` the one function that opens the file. Unknown keys are refused, so a field
renamed in one place and not the other is found at once.

The train section is a TrainConfig (a key it does not know, or a bad value, is run.json's error); the section as the
file holds it is `info["train"]`. `mixit_lab.training.run.Run` adds the run's summary, metrics and analyses.

A RunInfo is also a read-only Mapping of run.json's sections as the file holds them (`info["train"]`,
`info.get("task")`): the transitional interface of readers not yet switched to the attributes (the trainer's
resume checks, the report, the explorer's display of the raw file). New code reads the attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator

from mixit_lab.models.config import ModelConfig

from .config import TrainConfig

__all__ = ["Provenance", "RunInfo", "TaskChanged", "TaskInfo"]

TASK_KEYS = ("name", "import_path", "data_fingerprint", "eval_fingerprint", "source_file", "source_sha256")  # the task section's own keys; every other is a parameter


class TaskChanged(ValueError):
    """A run's task, rebuilt now, is not the one it trained on (RunInfo.check_data)."""


@dataclass(frozen=True)
class TaskInfo:
    """The task a run trained on: name, every parameter (resolved: defaults included when run.json records
    them), the import path of its class, the fingerprint of its data (text tasks; None otherwise) and of its
    held-out rows (Task.eval_fingerprint; None in runs written before it was recorded)."""

    name: str
    params: Mapping[str, Any]
    import_path: str | None = None
    data_fingerprint: str | None = None
    eval_fingerprint: str | None = None
    source_file: str | None = None  # a task of one's own: its file, relative to the run directory
    source_sha256: str | None = None


@dataclass(frozen=True)
class Provenance:
    """Where and how a run was trained (mixit_lab.training.provenance.provenance); None where run.json does not say."""

    command: str | None = None
    git_commit: str | None = None
    git_dirty: bool | None = None
    versions: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    platform: str | None = None
    torch_threads: int | None = None


SECTIONS = ("train", "model", "task")
ALLOWED_KEYS = (*SECTIONS, *(f.name for f in dataclasses.fields(Provenance)))


@dataclass(frozen=True, eq=False)
class RunInfo(Mapping):
    """One run's run.json, parsed: `train` (a TrainConfig), `model` (None in a run.json written by
    hand without one), `task`, `provenance`; `path` is the file, named in every error."""

    path: Path
    _train: TrainConfig
    model: ModelConfig | None
    task: TaskInfo
    provenance: Provenance
    _raw: Mapping[str, Any] = dataclasses.field(repr=False)

    @classmethod
    def from_dict(cls, data: Any, path: str | Path) -> RunInfo:
        """The record of run.json's parsed content `data`; ValueError naming `path` and the bad key or value."""
        path = Path(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a JSON object, not {type(data).__name__}")
        unknown = sorted(set(data) - set(ALLOWED_KEYS))
        if unknown:
            raise ValueError(f"{path}: unknown keys {unknown}; allowed: {sorted(ALLOWED_KEYS)}")
        train = data.get("train")
        if not isinstance(train, dict) or not isinstance(train.get("task"), str):
            raise ValueError(f"{path}: no 'train' section naming the task")
        for key in ("task_params", "model_extra"):
            if not isinstance(train.get(key) or {}, dict):
                raise ValueError(f"{path}: train.{key}={train[key]!r} must be a mapping")
        try:
            model = ModelConfig.from_dict(data["model"]) if data.get("model") is not None else None
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: model: {e}") from None
        raw = _copied(data)
        raw["train"] = MappingProxyType(raw["train"])  # read-only, as the record
        try:
            train_config = TrainConfig.from_dict(_copied(raw["train"]))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: train: {e}") from None
        return cls(path=path, _train=train_config, model=model, task=_task_info(raw, path),
                   provenance=_provenance(raw, path), _raw=MappingProxyType(raw))

    @property
    def train(self) -> TrainConfig:
        """run.json's train section as a TrainConfig: a copy (records are shared by every reader of the file)."""
        return dataclasses.replace(self._train, **{f.name: _copied(getattr(self._train, f.name))
                                                   for f in dataclasses.fields(self._train)
                                                   if isinstance(getattr(self._train, f.name), (dict, list))})

    @property
    def run_dir(self) -> Path:
        """The run directory this run.json describes."""
        return self.path.parent

    def to_dict(self) -> dict[str, Any]:
        """run.json's content as the file holds it (a deep copy: plain, JSON-able data)."""
        return _copied(dict(self._raw))

    def check_data(self, task: Any) -> None:
        """TaskChanged (a ValueError: one line, naming run.json and what changed) if `task`, rebuilt from this record, is not the
        one the run trained on: its data (a text corpus, its tokenizer), or its held-out rows (the task's rule,
        generator or parameters changed since). The one comparison of data fingerprints; a run that recorded
        none passes."""
        saved = self.task.data_fingerprint
        if saved is not None and saved != getattr(task, "data_fingerprint", None):
            raise TaskChanged(f"{self.path}: the {self.task.name} data (corpus or tokenizer) differ from those the run "
                              "was trained on")
        saved = self.task.eval_fingerprint
        if saved is not None and saved != task.eval_fingerprint(self.train.eval_samples):
            raise TaskChanged(f"{self.path}: task {self.task.name!r} rebuilt here gives other held-out rows than the run "
                             "was evaluated on: its rule, generator or data changed since training")

    # the transitional Mapping interface: run.json's sections as the file holds them
    def __getitem__(self, key: str) -> Any:
        return self._raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunInfo) and self.path == other.path and self._raw == other._raw

    __hash__ = None  # type: ignore[assignment]  (holds mappings)


def _copied(value: Any) -> Any:
    """A copy of parsed JSON (dicts and lists copied all the way down, other values shared): what deepcopy gives for
    such data, several times faster (a runs table copies thousands of run.json files)."""
    if isinstance(value, (dict, MappingProxyType)):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


def _task_info(data: dict[str, Any], path: Path) -> TaskInfo:
    """The task section; a run.json without one (written by hand) gives the train section's name and parameters."""
    train = data["train"]
    section = data.get("task")
    if section is None:
        return TaskInfo(name=train["task"], params=MappingProxyType(dict(train.get("task_params") or {})))
    if not isinstance(section, dict):
        raise ValueError(f"{path}: task={section!r} must be a mapping")
    name = section.get("name", train["task"])
    for key in TASK_KEYS:
        if section.get(key) is not None and not isinstance(section[key], str):
            raise ValueError(f"{path}: task.{key}={section[key]!r} must be a string")
    params = {k: v for k, v in section.items() if k not in TASK_KEYS}
    return TaskInfo(name=name, params=MappingProxyType(params), import_path=section.get("import_path"),
                    data_fingerprint=section.get("data_fingerprint"), eval_fingerprint=section.get("eval_fingerprint"),
                    source_file=section.get("source_file"), source_sha256=section.get("source_sha256"))


def _provenance(data: dict[str, Any], path: Path) -> Provenance:
    """The provenance keys of run.json (each optional), checked for their types."""
    kinds = {"command": str, "git_commit": str, "git_dirty": bool, "versions": dict, "platform": str,
             "torch_threads": int}
    for key, kind in kinds.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{path}: {key}={value!r} must be a {kind.__name__}")
    fields = {k: data[k] for k in kinds if data.get(k) is not None}
    if "versions" in fields:
        fields["versions"] = MappingProxyType(fields["versions"])
    return Provenance(**fields)
