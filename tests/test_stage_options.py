"""The signal and speed stages' typed settings (mixit_lab.reproduce.stage_options): what a preset's `signal:` and
`speed:` blocks may say, their defaults, and the cache keys the stages write beside their tables."""

import dataclasses
import inspect
import json

import pandas as pd
import pytest

from mixit_lab.models import VARIANTS
from mixit_lab.reproduce.preset import Preset, load_preset
from mixit_lab.reproduce.stage_options import SignalOptions, SpeedOptions

NO_SINK = {"mixit, no sink": {"sink_head": False, "variant": "mixit"}}
# The keys the stages wrote for the shipped presets before their settings were typed: a study's cached signal.csv
# and speed.csv are valid only while these stay the same.
SIGNAL_KEYS = {
    "smoke": {"controls": NO_SINK, "d_vocab": 64, "depths": [1, 2, 4], "n_ctx": 16, "n_seqs": 4, "seeds": [0],
              "variants": ["random", "mixit"], "widths": [32]},
    "quick": {"controls": NO_SINK, "depths": [2, 4, 8, 16, 32], "n_seqs": 8, "seeds": [0, 1, 2],
              "variants": ["random", "mixit"], "widths": [128]},
    "paper": {"controls": NO_SINK, "depths": [2, 4, 8, 16, 32, 64], "n_seqs": 16, "seeds": [0, 1, 2, 3, 4],
              "variants": ["random", "mixit"], "widths": [512]},
}
SPEED_KEYS = {
    "smoke": {"batch_size": 8, "d_model": 32, "device": "cpu", "n_heads": 2, "n_layers": 1, "repeats": 1, "seq_len": 16,
              "steps": 2, "vocab": 64, "warmup": 1},
    "quick": {"batch_size": 32, "d_model": 256, "device": "cpu", "n_heads": 4, "n_layers": 4, "repeats": 3,
              "seq_len": 128, "steps": 4, "vocab": 512, "warmup": 1},
    "paper": {"batch_size": 32, "d_model": 512, "device": "auto", "n_heads": 8, "n_layers": 12, "repeats": 5,
              "seq_len": 256, "steps": 20, "vocab": 32000, "warmup": 5},
}


@pytest.mark.parametrize("name", sorted(SIGNAL_KEYS))
def test_the_shipped_presets_keep_their_cache_keys(name):
    from mixit_lab.training.benchmark import COLUMNS

    preset = load_preset(name)
    assert preset.signal.cache_key() == SIGNAL_KEYS[name]
    assert preset.speed.cache_key() == {**SPEED_KEYS[name], "variants": list(VARIANTS), "columns": COLUMNS}


def test_the_key_holds_what_the_file_wrote_and_what_differs_from_a_default():
    # n_seqs 16 is signal_propagation's default: written, it stays in the key (the paper preset's is so)
    assert SignalOptions.from_dict({"n_seqs": 16}).cache_key()["n_seqs"] == 16
    assert "n_seqs" not in SignalOptions.from_dict({}).cache_key()
    assert SignalOptions.from_dict({"n_seqs": 16}) == SignalOptions()  # the same settings all the same
    # a setting made in code, off its default, is never left out of the key
    assert SignalOptions(n_heads=8).cache_key()["n_heads"] == 8
    assert SpeedOptions(compile=True).cache_key()["compile"] is True and "compile" not in SpeedOptions().cache_key()
    # model fields sit flat in the key, as in the block
    assert SignalOptions.from_dict({"sink_head": False}).cache_key()["sink_head"] is False


def test_the_defaults_are_the_stages_and_their_functions():
    from mixit_lab.analysis.signal import signal_propagation
    from mixit_lab.training.benchmark import measure_throughput

    signal, speed = SignalOptions(), SpeedOptions()
    assert (signal.variants, signal.depths, signal.widths, signal.seeds) == (("random", "mixit"), (2, 4, 8, 16, 32),
                                                                              (128,), (0, 1, 2))
    assert (signal.model, signal.controls) == ({}, {})
    own = inspect.signature(signal_propagation).parameters
    assert {k: getattr(signal, k) for k in ("n_heads", "n_ctx", "d_vocab", "n_seqs", "device")} == \
        {k: own[k].default for k in ("n_heads", "n_ctx", "d_vocab", "n_seqs", "device")}
    assert speed.variants == tuple(VARIANTS) and (speed.steps, speed.warmup, speed.device) == (5, 2, "auto")
    params = inspect.signature(measure_throughput).parameters
    assert (speed.compile, speed.precision) == (params["compile"].default, params["precision"].default)
    assert set(SpeedOptions.settings()) == set(params)  # every parameter of the function, and nothing else
    assert set(SignalOptions.settings()) <= set(inspect.signature(signal_propagation).parameters)
    # a preset without the blocks runs the stages at these
    preset = Preset.from_dict({"studies": {"a": {"tasks": ["addition"]}}})
    assert preset.signal == signal and preset.speed == speed


def test_the_stages_call_their_functions_with_the_options(tmp_path, monkeypatch):
    import mixit_lab.analysis.signal
    import mixit_lab.training.benchmark
    from mixit_lab.reproduce.pipeline import signal_stage, speed_stage

    calls = []
    frame = pd.DataFrame({"variant": ["x"]})
    options = SignalOptions.from_dict({"depths": [2], "sink_head": False, "controls": {"c": {"variant": "mixit",
                                                                                            "residual_scale": 0.5}}})
    monkeypatch.setattr(mixit_lab.analysis.signal, "signal_propagation", lambda **kw: calls.append(kw) or frame)
    monkeypatch.setattr(mixit_lab.training.benchmark, "measure_throughput", lambda **kw: calls.append(kw) or frame)
    signal_stage(options, tmp_path, lambda _: None)
    base = {"variants": ["random", "mixit"], "depths": [2], "widths": [128], "seeds": [0, 1, 2], "n_heads": 4,
            "n_ctx": 64, "d_vocab": 512, "n_seqs": 16, "device": "cpu", "sink_head": False}
    assert calls == [base, {**base, "variants": ["mixit"], "residual_scale": 0.5}]  # the control over the block
    assert set(pd.read_csv(tmp_path / "signal" / "signal.csv")["variant"]) == {"x", "c"}
    calls.clear()
    speed_stage(SpeedOptions(), tmp_path, lambda _: None)
    assert calls == [{"variants": list(VARIANTS), "d_model": 256, "n_layers": 4, "n_heads": 4, "seq_len": 128,
                      "batch_size": 32, "vocab": 512, "steps": 5, "repeats": 3, "warmup": 2, "device": "auto",
                      "compile": False, "precision": "auto"}]


def test_the_options_are_frozen_and_read_back_from_plain_data():
    preset = load_preset("smoke")
    for options in (preset.signal, preset.speed):
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.seeds = (9,) if isinstance(options, SignalOptions) else options.steps
        again = type(options).from_dict(json.loads(json.dumps(options.to_dict())))
        assert again == options and again.cache_key() == options.cache_key()
    data = json.loads(json.dumps(preset.to_dict()))  # as reproduce.json records it
    assert data["signal"]["controls"] == NO_SINK and data["speed"]["variants"] == list(VARIANTS)
    assert Preset.from_dict(data) == preset
    assert SpeedOptions.from_dict({"variants": "all"}).variants == tuple(VARIANTS)


@pytest.mark.parametrize("stage, block, words", [
    ("signal", "{depht: [2]}", ["signal has unknown keys ['depht']", "allowed:", "'depths'", "'sink_head'"]),
    ("signal", "{controls: {x: {variant: mixit, sink_hed: false}}}",
     ["signal: controls: 'x' has unknown keys ['sink_hed']", "'sink_head'"]),
    ("signal", "{controls: {x: {variant: mixit, d_model: 8}}}", ["unknown keys ['d_model']"]),  # each row's own
    ("signal", "{controls: {x: {sink_head: false}}}", ["'x' must be a mapping naming a variant"]),
    ("signal", "{seeds: [-1]}", ["seeds=[-1] must be a list of integers >= 0"]),
    ("signal", "{widths: [30], n_heads: 4}", ["'random' at width 30", "divisible by n_heads=4"]),
    ("signal", "{sink_head: 1}", ["sink_head=1 must be True or False"]),
    ("signal", "[2, 4]", ["signal must be a mapping"]),
    ("speed", "{precison: fp32}", ["speed has unknown keys ['precison']", "'precision'"]),
    ("speed", "{precision: fp8}", ["precision='fp8' is not one of: auto"]),
    ("speed", "{steps: 0}", ["steps=0 must be a positive integer"]),
    ("speed", "{device: 0}", ["device=0 must be a string"]),
    ("speed", "{variants: [nope]}", ["['nope'] not among: all, standard"]),
    ("speed", "{variants: [[standard]]}", ["[['standard']] not among"]),
    ("signal", "{controls: {x: {variant: [mixit]}}}", ["'x': variant=['mixit'] is not one of"]),
])
def test_a_bad_block_is_one_line_naming_the_file_the_block_and_the_key(tmp_path, stage, block, words):
    path = tmp_path / "mine.yaml"
    path.write_text(f"studies: {{a: {{tasks: [addition]}}}}\n{stage}: {block}\n")
    with pytest.raises(ValueError) as refused:
        load_preset(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path}: {stage}"), message
    assert all(w in message for w in words), message


def test_warmup_may_be_zero_as_measure_throughput_allows():
    assert SpeedOptions.from_dict({"warmup": 0}).warmup == 0
