"""Options made from a dataclass's fields (mixit_lab.cli.options), and TrainConfig's through mixit train, tune and sweep.

The helper on a small dataclass (flag, type, default, switch, several values, the values back); then the one table
of TrainConfig options (mixit_lab.cli.train.TRAIN_OPTIONS): each option's default follows its field's, and each
value given reaches the TrainConfig that mixit train builds and the runs of a sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from mixit_lab.cli.options import add_field_options, field_values, option_flag
from mixit_lab.training.config import TrainConfig


@dataclass
class Settings:
    batch_size: int = 8
    rate: float = 0.5
    limit: int | None = None
    name: str = "a"
    fast: bool = False
    table: dict = dataclasses.field(default_factory=dict)


def _parser(table: dict, many: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_field_options(parser, Settings, table, many=many)
    return parser


def test_an_option_takes_its_flag_type_and_default_from_the_field():
    parser = _parser({"batch_size": {}, "rate": {}, "limit": {"metavar": "N"}, "name": {"choices": ("a", "b")},
                      "fast": {"help": "go"}})
    assert vars(parser.parse_args([])) == {"batch_size": 8, "rate": 0.5, "limit": None, "name": "a", "fast": False}
    args = parser.parse_args(["--batch-size", "3", "--rate", "2e-1", "--limit", "5", "--name", "b", "--fast"])
    assert vars(args) == {"batch_size": 3, "rate": 0.2, "limit": 5, "name": "b", "fast": True}
    assert "--limit N" in parser.format_help() and "go" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--name", "c"])  # choices
    with pytest.raises(SystemExit):
        parser.parse_args(["--limit", "many"])  # `int | None` parses an int


def test_a_field_in_many_takes_several_values_its_default_a_one_element_list():
    parser = _parser({"batch_size": {}, "rate": {}}, many=("rate",))
    assert vars(parser.parse_args([])) == {"batch_size": 8, "rate": [0.5]}
    assert parser.parse_args(["--rate", "1", "2"]).rate == [1.0, 2.0]


def test_a_field_an_option_cannot_take_is_refused_naming_it():
    with pytest.raises(TypeError, match="Settings.table"):
        _parser({"table": {}})


def test_field_values_reads_back_the_fields_the_parser_has():
    args = _parser({"batch_size": {}, "name": {}}).parse_args(["--batch-size", "2"])
    assert field_values(args, ["batch_size", "name", "rate"]) == {"batch_size": 2, "name": "a"}
    assert option_flag("micro_batch_size") == "--micro-batch-size"


# --------------------------------------------------------------------------- TrainConfig's options
def _options(command: str) -> dict[str, argparse.Action]:
    from mixit_lab.cli.main import build_parser

    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return {a.dest: a for a in sub._actions if a.option_strings}


def _changed(value: object) -> object:
    """A default other than `value`, of its type (a string: one no choice allows, which argparse does not check)."""
    return {int: lambda v: v + 1, float: lambda v: v * 3, str: lambda v: v + "-changed",
            type(None): lambda v: 7}[type(value)](value)


@pytest.mark.parametrize("command", ["train", "tune", "sweep"])
def test_every_training_option_follows_its_fields_default(monkeypatch, command):
    """No option restates a default: change the field's and the option's changes with it (a sweep's size options:
    a one-element list of it; mixit tune's --tune-samples is its own, 512)."""
    from mixit_lab.cli.train import SWEPT, TRAIN_OPTIONS

    fields = TrainConfig.__dataclass_fields__
    for name in TRAIN_OPTIONS:
        if not isinstance(fields[name].default, bool):
            monkeypatch.setattr(fields[name], "default", _changed(fields[name].default))
    options = _options(command)
    expected = {name: fields[name].default for name in TRAIN_OPTIONS if command != "tune" or name != "lr"}
    if command == "tune":
        expected["tune_samples"] = 512
    if command == "sweep":
        expected.update({name: [fields[name].default] for name in SWEPT})
    assert {name: options[name].default for name in expected} == expected
    assert command != "tune" or "lr" not in options  # mixit tune tries several: --lrs


VALUES = {  # a value other than the default for every option TRAIN_OPTIONS makes
    "d_model": 32, "n_layers": 1, "n_heads": 2, "lr": 3e-3, "steps": 40, "batch_size": 8, "sampling": "epochs",
    "micro_batch_size": 4, "schedule": "authors", "warmup_steps": 3, "weight_decay": 0.05, "grad_clip": 0.5,
    "eval_every": 10, "eval_samples": 64, "tune_samples": 16, "checkpoint_every": 20, "device": "cpu",
    "compile": True, "cuda_graph": True, "keep_checkpoints": 2, "precision": "fp32",
}


def _argv(values: dict) -> list[str]:
    argv = []
    for name, value in values.items():
        argv += [option_flag(name)] if value is True else [option_flag(name), str(value)]
    return argv


def test_every_training_option_reaches_the_config_mixit_train_builds(tmp_path, monkeypatch):
    import mixit_lab.cli.train
    from mixit_lab.cli.main import main
    from mixit_lab.cli.train import TRAIN_OPTIONS

    assert set(VALUES) == set(TRAIN_OPTIONS), "give each option a value here"
    assert all(VALUES[name] != getattr(TrainConfig(), name) for name in VALUES)
    built = []
    monkeypatch.setattr(mixit_lab.cli.train, "resolve", lambda *a, **k: None)  # the options' round trip only
    monkeypatch.setattr(mixit_lab.cli.train, "train", lambda cfg, *a, **k: built.append(cfg) or
                        {"status": "finished", "step": cfg.steps})
    argv = ["train", "--task", "memorize", "--out", str(tmp_path / "r"), "--quiet", *_argv(VALUES)]
    assert main(argv) == 0
    assert {name: getattr(built[0], name) for name in VALUES} == VALUES


def test_a_sweeps_training_options_reach_every_run_and_override_its_grid_file(tmp_path):
    from mixit_lab.cli.main import build_parser
    from mixit_lab.cli.train import SWEPT, _grid_overrides
    from mixit_lab.training.sweep import build_grid

    grid = tmp_path / "grid.yaml"
    grid.write_text("variants: [standard]\ntasks: [memorize]\nlrs: [0.01]\ntrain: {steps: 5, eval_every: 5}\n")
    given = {name: value for name, value in VALUES.items() if name not in SWEPT and name != "eval_every"}
    argv = ["sweep", str(grid), "--d-model", "32", "64", "--n-heads", "2", *_argv(given)]
    args = build_parser("sweep").parse_args(argv)
    runs = build_grid(grid, _grid_overrides(args, argv))
    assert sorted(cfg.d_model for _, cfg in runs) == [32, 64]
    for _, cfg in runs:
        assert {name: getattr(cfg, name) for name in given} == given
        assert (cfg.n_heads, cfg.n_layers, cfg.lr, cfg.eval_every) == (2, TrainConfig().n_layers, 0.01, 5)
