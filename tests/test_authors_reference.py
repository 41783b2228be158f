"""benchmarks/authors_reference.py: our preset studies translated into the authors' command lines.

Pure translation only: nothing is trained and the authors' repository is not needed. The specific checks use
a small preset of their own (so that edits to the shipped presets do not move them); one test translates
every study of the shipped `quick` preset."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import authors_classifier as ac  # noqa: E402
import authors_reference as ar  # noqa: E402
from mixit_lab.reproduce.preset import Preset, load_preset  # noqa: E402
from mixit_lab.reproduce.stage_options import SignalOptions  # noqa: E402

SIZE = {"d_model": 64, "n_layers": 2, "n_heads": 4}
PRESET = {
    "name": "t",
    "train": {"batch_size": 128, "steps": 1500, "weight_decay": 0.01, "model_extra": {"qk_init_std": 0.125}},
    "studies": {
        "algorithmic": {"variants": ["standard"], "tasks": [{"dyck": {"max_pairs": 8}}], "sizes": [SIZE],
                        "seeds": [0, 1, 2], "lrs": [0.003], "train": {"steps": 1000}},
        "algorithmic-mixit": {"variants": ["mixit"], "tasks": [{"dyck": {"max_pairs": 8}}],
                              "sizes": [dict(SIZE, n_heads=16)], "lrs": [0.003], "train": {"steps": 1000}},
        "retrieval": {"variants": ["standard", "frozen_qk", "frozen_mlp", "mixit"],
                      "tasks": [{"retrieval": {"pairs": 8, "num_values": 32}}], "sizes": [SIZE], "lrs": [0.003],
                      "train": {"steps": 1000, "warmup_steps": 150}},
        "modadd": {"variants": ["standard", "mixit"], "tasks": [{"modadd": {"p": 47}}], "sizes": [SIZE],
                   "lrs": [0.003], "train": {"steps": 2000}},
        "memorize": {"variants": ["standard", "frozen_qk", "frozen_mlp", "mixit"],
                     "tasks": [{"memorize": {"n": 96, "d": 2, "label_tokens": "keys"}}],
                     "sizes": [{"d_model": 16, "n_layers": 2, "n_heads": 4}], "lrs": [0.003],
                     "train": {"steps": 4000, "batch_size": 512}},
        "depth": {"variants": ["mixit"], "tasks": [{"addition": {"digits": 2}}],
                  "sizes": [dict(SIZE, n_heads=16), dict(SIZE, n_layers=6, n_heads=16)], "seeds": [0, 1],
                  "lrs": [0.003], "train": {"steps": 3000}},
        "depth-random": {"variants": ["random"], "tasks": [{"addition": {"digits": 2}}],
                         "sizes": [dict(SIZE, n_heads=16)], "lrs": [0.003], "train": {"steps": 3000}},
    },
}


@pytest.fixture
def text_data(tmp_path, monkeypatch):
    """The real corpora's layout under ../shared/data, with generated text where they are absent (a clone alone,
    offline): the text studies then plan as they would with them, without the Hub."""
    from corpora import labelled_sentences, wikitext_like
    from mixit_lab.reproduce import corpora as sources

    if sources._shared_data_dirs():
        return
    data = tmp_path / "data"
    files = {"wikitext-2/valid.txt": wikitext_like(seed=1), "wikitext-2/test.txt": wikitext_like(seed=2),
             "sentiment-sentences/yelp_labelled.txt": labelled_sentences(),
             "sst-2/train.tsv": "sentence\tlabel\n" + labelled_sentences(seed=1),
             "sst-2/dev.tsv": "sentence\tlabel\n" + labelled_sentences(seed=2)}
    for rel, text in files.items():
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text(text, encoding="utf-8")
    monkeypatch.setattr(sources, "_shared_data_dirs", lambda: [data])


@pytest.fixture(scope="module")
def preset():
    return Preset.from_dict(json.loads(json.dumps(PRESET)), "test preset")


def _flags(t):
    return dict(a[2:].split("=", 1) for a in t["argv"])


def _one(runs, **match):
    hits = [r for r in runs if all(r[k] == v for k, v in match.items())]
    assert len(hits) == 1, (match, hits)
    return hits[0]


def _check_ours(r, t):
    """The translation carries every setting of ours and takes our number of optimizer steps."""
    f = _flags(t)
    assert ar.their_optimizer_steps(t) == r["steps"]
    assert f["model_name_or_path"] == "llama"
    assert t["kind"] == "classifier" or t["pins"]["device"] == "cpu"  # the classifier's device: see the runner
    assert (int(f["n_embd"]), int(f["n_layer"]), int(f["n_head"])) == (r["d_model"], r["n_layers"], r["n_heads"])
    assert float(f["learning_rate"]) == r["lr"] and float(f["weight_decay"]) == r["weight_decay"]
    assert int(f["warmup_steps"]) == r["warmup_steps"] and int(f["seed"]) == r["seed"]
    assert t["pins"].get("per_device_train_batch_size", int(f["per_device_train_batch_size"])) == r["batch_size"]
    assert "weight_frozen" in f or t["kind"] == "classifier"  # their scripts default it to 1: always explicit


@pytest.mark.parametrize("study,script", [
    ("algorithmic", "depth.py"), ("algorithmic-mixit", "depth.py"), ("retrieval", "depth.py"),
    ("modadd", "modadd_exp.py"), ("memorize", "hdmemorize_exp.py"), ("depth", "depth.py"),
    ("depth-random", "depth.py"),
])
def test_steps_and_settings_are_ours(preset, study, script):
    runs = ar.study_runs(preset, study)
    assert runs
    for r in runs:
        t = ar.translate(r)
        assert t["script"] == script
        _check_ours(r, t)


def test_every_quick_study_translates_or_is_refused_with_a_reason(text_data):
    quick = load_preset("quick")
    scripts = set()
    for name, study in quick.studies.items():
        for r in ar.study_runs(quick, name, seeds=[0]):
            try:
                t = ar.translate(r)
            except ValueError as e:
                assert r["task"] in ar.NOT_RUNNABLE or "weight_frozen" in str(e) or "freeze" in str(e) \
                    or "label_tokens" in str(e), (name, r["task"], e)
                continue
            _check_ours(r, t)
            scripts.add(t["script"])
    assert "depth.py" in scripts and "hdmemorize_exp.py" in scripts


def test_numbers(preset):
    dyck = _one(ar.study_runs(preset, "algorithmic", None, None, [0]), seed=0)
    assert (dyck["steps"], dyck["batch_size"], dyck["warmup_steps"], dyck["lr"]) == (1000, 128, 50, 0.003)
    t = ar.translate(dyck)
    f = _flags(t)
    assert f["task"] == "dyckstream_8" and t["pins"]["train_size"] == 128_000 and f["max_steps"] == "1"
    mix = ar.study_runs(preset, "algorithmic-mixit", seeds=[0])[0]
    assert mix["variant"] == "mixit" and mix["n_heads"] == 16 and _flags(ar.translate(mix))["n_head"] == "16"
    ret = ar.study_runs(preset, "retrieval", variants=["standard"], seeds=[0])[0]
    assert ret["warmup_steps"] == 150  # the study's warmup_steps wins over 5% of the steps
    mem = ar.study_runs(preset, "memorize", variants=["standard"], seeds=[0])[0]
    t = ar.translate(mem)
    assert t["pins"]["task"] == "hdmemorize_96_2_1.0" and t["pins"]["per_device_train_batch_size"] == 512
    assert _flags(t)["max_steps"] == "4000" and mem["warmup_steps"] == 200
    mod = ar.translate(ar.study_runs(preset, "modadd", variants=["standard"], seeds=[0])[0])
    assert _flags(mod)["task"] == "modadds_47" and mod["pins"]["per_device_train_batch_size"] == 128
    assert _flags(mod)["max_steps"] == "2000"


def test_retrieval_vocabulary(preset):
    f = _flags(ar.translate(ar.study_runs(preset, "retrieval", variants=["standard"], seeds=[0])[0]))
    assert f["task"] == "condattendstream_8"
    vocab = int(f["vocab_size"])
    assert vocab // 2 - 1 == 32  # their values are 1 .. vocab//2 - 1: our 32 values
    assert 2 * 8 + 32 < vocab  # the largest query id fits


@pytest.mark.parametrize("variant,attention,frozen,qk,mlp", [
    ("standard", "vanilla", "0", False, False), ("frozen_qk", "vanilla", "0", True, False),
    ("frozen_mlp", "vanilla", "0", False, True), ("mixit", "mixing", "0", False, False),
    ("random", "vanilla", "1", False, False), ("mixit_weight_frozen", "mixing", "1", False, False),
])
def test_variant_flags(preset, variant, attention, frozen, qk, mlp):
    run = dict(ar.study_runs(preset, "depth", variants=["mixit"], seeds=[0])[0], variant=variant)
    f = _flags(ar.translate(run))
    assert f["shaped_attention"] == attention and f["weight_frozen"] == frozen
    assert ("freeze_attention" in f) == qk and ("freeze_mlp" in f) == mlp


def test_depth_study_adds_their_frozen_mixit(preset):
    runs = ar.study_runs(preset, "depth", seeds=[0])
    assert {r["variant"] for r in runs} == {"mixit", "mixit_weight_frozen"}
    assert {r["n_layers"] for r in runs} == {2, 6}
    assert {r["variant"] for r in ar.study_runs(preset, "depth-random", seeds=[0])} == {"random"}


def test_refusals(preset):
    mem = ar.study_runs(preset, "memorize", variants=["standard"], seeds=[0])[0]
    with pytest.raises(ValueError, match="embed_tokens"):
        ar.translate(dict(mem, variant="random"))
    own = dict(mem, task_params={"n": 96, "d": 2})  # our default label tokens are not theirs
    with pytest.raises(ValueError, match="label_tokens"):
        ar.translate(own)
    mod = ar.study_runs(preset, "modadd", variants=["standard"], seeds=[0])[0]
    with pytest.raises(ValueError, match="freeze"):
        ar.translate(dict(mod, variant="frozen_qk"))
    with pytest.raises(ValueError):
        ar.translate(dict(mod, task="lm"))


def test_dry_run_and_merge(preset, tmp_path, capsys):
    path = tmp_path / "t.yaml"
    import yaml

    path.write_text(yaml.safe_dump(PRESET))
    assert ar.main(["--authors-repo", str(tmp_path), "--authors-python", "python", "--preset", str(path),
                    "--study", "algorithmic", "--seeds", "0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "python depth.py --model_name_or_path=llama --task=dyckstream_8" in out and "1000 optimizer steps" in out
    run = ar.study_runs(preset, "algorithmic", seeds=[0])[0]
    ref = tmp_path / "ref.json"
    ar.merge_records(ref, [dict(run, value=1.0)])
    ar.merge_records(ref, [dict(run, value=2.0), dict(run, seed=1, value=3.0)])
    data = json.loads(ref.read_text())
    assert set(data) == {"about", "records"}
    assert sorted(r["value"] for r in data["records"]) == [2.0, 3.0]
    # The real file also holds records of their model at init (authors_signal.py), which have no learning rate,
    # width-only sizes and no preset: merging a training run beside them must keep them.
    signal = {"study": "signal", "task": "signal", "variant": "mixit", "d_model": 128, "n_layers": 4, "seed": 0,
              "value": 0.004}
    ar.merge_records(ref, [signal])
    ar.merge_records(ref, [dict(run, seed=2, value=4.0)])
    assert sorted(r["value"] for r in json.loads(ref.read_text())["records"]) == [0.004, 2.0, 3.0, 4.0]


# --------------------------------------------------------------------------- Table 7 on their model at init
import authors_signal as asig  # noqa: E402

SIGNAL = {"variants": ["random", "mixit"], "depths": [2, 8], "widths": [32], "seeds": [0, 1], "n_seqs": 4,
          "controls": {"mixit, no sink": {"variant": "mixit", "sink_head": False}}}


def _jobs(block):
    return asig.signal_jobs(SignalOptions.from_dict(block))


def test_a_signal_block_becomes_jobs_of_their_model():
    jobs = _jobs(SIGNAL)
    assert len(jobs) == 3 * 2 * 2  # (random, mixit, the control) x depths x seeds
    by = {(j["label"], j["n_layers"], j["seed"]): j for j in jobs}
    random, mixit, control = by[("random", 2, 0)], by[("mixit", 8, 1)], by[("mixit, no sink", 2, 1)]
    # random is their vanilla model with weight_frozen=1, mixit their mixing model; only the control drops the sink
    assert (random["shaped_attention"], random["weight_frozen"], random["sink_head"]) == ("vanilla", 1, True)
    assert (mixit["shaped_attention"], mixit["sink_head"], mixit["model_overrides"]) == ("mixing", True, {})
    assert (control["variant"], control["sink_head"], control["model_overrides"]) == ("mixit", False,
                                                                                       {"sink_head": False})
    # the stage's defaults fill what the block leaves out (mixit_lab.analysis.signal.signal_propagation's)
    assert (random["n_heads"], random["n_ctx"], random["d_vocab"], random["n_seqs"]) == (4, 64, 512, 4)
    assert "head 0 of every layer rebuilt" in asig.describe(control) and "rebuilt" not in asig.describe(mixit)
    # what their model file cannot switch is refused, not silently measured as something else
    with pytest.raises(ValueError, match="residual_scale cannot be switched"):
        _jobs({**SIGNAL, "controls": {"x": {"variant": "mixit", "residual_scale": 0.5}}})
    with pytest.raises(ValueError, match="only mixit has a sink"):
        _jobs({**SIGNAL, "controls": {"x": {"variant": "random", "sink_head": False}}})
    with pytest.raises(ValueError, match="no counterpart"):
        _jobs({**SIGNAL, "variants": ["shaped"]})


def test_their_model_is_configured_as_depth_py_configures_it():
    defaults = {"activation_cminus": -1.0, "base_attn_mix": 1.0, "base_hidden_size": 512, "base_n_layer": 4,
                "base_num_attention_heads": 8, "tau0": 1.0, "depth_alpha": 0}
    job = {"shaped_attention": "mixing", "d_model": 128, "n_layers": 16, "n_heads": 4, "n_ctx": 64, "d_vocab": 512}
    kw = asig.their_config_kwargs(job, defaults, True)
    assert (kw["hidden_size"], kw["num_hidden_layers"], kw["intermediate_size"], kw["num_attention_heads"]) == \
        (128, 16, 512, 4)
    assert kw["max_position_embeddings"] == kw["max_seq_len"] == 64 and kw["vocab_size"] == 512
    assert kw["attn_implementation"] == "eager" and kw["initializer_range"] == 0.02
    assert kw["skip_scaling"] == pytest.approx(0.5 ** 0.5) and kw["base_hidden_size"] == 512 and kw["depth_alpha"] == 0
    vanilla = asig.their_config_kwargs({**job, "shaped_attention": "vanilla"}, defaults, True)
    assert vanilla["attn_implementation"] == "sdpa" and "initializer_range" not in vanilla and vanilla["do_rope"]


@pytest.mark.parametrize("preset_name", ["quick", "paper"])
def test_the_recorded_signal_reference_covers_the_presets_signal_settings(preset_name, tmp_path):
    """Every job of the preset's signal stage has a record of their model, and the reference Table 7 built from
    the recorded file at the stage's settings has every row: a changed `signal:` block without new records fails."""
    import math

    from mixit_lab.reproduce.reference import load_reference, reference_signal

    s = load_preset(preset_name).signal
    records = [r for r in load_reference() if r.get("task") == "signal" and r.get("preset") == preset_name]
    have = {(r["variant"], r["d_model"], r["n_layers"], r["seed"]) for r in records}
    for job in asig.signal_jobs(s):
        assert (job["label"], job["d_model"], job["n_layers"], job["seed"]) in have, job
    for rec in records:
        assert {"command", "authors_commit", "date", "machine", "base_variant", "model_overrides"} <= set(rec)
        assert all(math.isfinite(rec[m]) for m in ("covariance", "cosine", "variance", "covariance_layer0"))
    # the stage's cache key (mixit_lab.reproduce.pipeline.signal_stage writes it beside signal.csv) selects them
    (tmp_path / "signal.json").write_text(json.dumps(s.cache_key()))
    t7 = reference_signal(load_reference(), tmp_path / "signal.csv")
    assert len(t7) == len(s.labels()) * len(s.widths) * len(s.depths)
    assert set(t7["variant"]) == set(s.labels())


# --------------------------------------------------------------------------- sentiment: their classifier
def test_sentiment_translates_to_their_classifier(text_data):
    quick = load_preset("quick")
    runs = ar.study_runs(quick, "sentiment", seeds=[0])
    assert {r["variant"] for r in runs} == {"standard", "frozen_qk", "mixit"}
    for r in runs:
        t = ar.translate(r)
        f = _flags(t)
        assert t["script"] == "trainer_classifier.py" and t["kind"] == "classifier"
        assert ar.their_optimizer_steps(t) == r["steps"] == 300
        assert (int(f["n_embd"]), int(f["n_layer"]), int(f["n_head"])) == (r["d_model"], r["n_layers"], r["n_heads"])
        assert int(f["max_seq_len"]) == r["task_params"]["seq_len"] and f["task"] == "yelp_polarity"
        assert float(f["learning_rate"]) == r["lr"] and int(f["warmup_steps"]) == r["warmup_steps"]
        assert int(f["per_device_train_batch_size"]) == r["batch_size"] and int(f["seed"]) == r["seed"]
        assert f["shaped_attention"] == {"standard": "vanilla", "frozen_qk": "vanilla", "mixit": "mixing"}[r["variant"]]
        assert ("freeze_attention" in f) == (r["variant"] == "frozen_qk")
    with pytest.raises(ValueError, match="no weight freezing"):
        ar.translate(dict(runs[0], variant="random"))


def test_their_classifier_gets_our_tokenizer_and_split(tmp_path, monkeypatch):
    """The runner's stand-ins for the Hub (run here, in our Python): their tokenizer call on our texts gives
    our token rows, and their yelp_polarity calls give our split; anything else they load is refused."""
    import datasets
    import torch

    import authors_runner

    words = ["good", "bad", "great", "awful", "food", "service", "place", "slow", "friendly", "cold"]
    lines = [f"the {words[i % 10]} {words[(3 * i) % 10]} was {words[(7 * i) % 10]} indeed\t{i % 2}" for i in range(40)]
    corpus = tmp_path / "labelled.txt"
    corpus.write_text("\n".join(lines) + "\n")
    run = {"task_params": {"seq_len": 8, "vocab_size": 300}}
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(ac.sentiment_inputs(run, [str(corpus)])))
    monkeypatch.setattr(datasets, "load_dataset", datasets.load_dataset)  # restored after the test
    monkeypatch.setattr(torch.cuda, "is_available", torch.cuda.is_available)
    pins, got = authors_runner._classifier_inputs(str(inputs))
    tokenizer = pins["AutoTokenizer"].from_pretrained("meta-llama/Llama-3.2-1B", truncation=True)
    tokenizer.pad_token = tokenizer.eos_token  # their line
    data = got["data"]
    for split in ("train", "test"):
        theirs = datasets.load_dataset("fancyzhx/yelp_polarity", split=split)
        assert list(theirs["text"]) == data[split]["text"] and list(theirs["label"]) == data[split]["label"]
        ids = tokenizer(list(theirs["text"]), padding="max_length", truncation=True, max_length=8)["input_ids"]
        assert ids == data[split]["rows"]  # <|endoftext|> + tokens, cut to 8, right-padded with <pad>
    assert len(data["train"]["text"]) == 32 and len(data["test"]["text"]) == 8  # 20% of each class held out
    assert got["about"]["tokenizer_asked"] == ["meta-llama/Llama-3.2-1B"]
    with pytest.raises(RuntimeError, match="only yelp_polarity"):
        datasets.load_dataset("Yelp/yelp_review_full", split="train")
    assert bool(torch.cuda.is_available) == torch.cuda.is_available()  # their device line reads its truth


def test_seed_init_gives_their_memorization_an_initialisation_per_seed(preset, tmp_path):
    run = ar.study_runs(preset, "memorize", variants=["mixit"], seeds=[3])[0]
    assert "seed" not in ar.translate(run)["pins"]  # theirs: torch seeded with 0 before --seed is read
    assert ar.translate(dict(run, seed_init=True))["pins"]["seed"] == 3
    path = tmp_path / "t.yaml"
    import yaml

    path.write_text(yaml.safe_dump(PRESET))
    common = ["--authors-repo", str(tmp_path), "--authors-python", "python", "--preset", str(path), "--seed-init",
              "--dry-run"]
    with pytest.raises(SystemExit, match="only hdmemorize_exp.py"):
        ar.main([*common, "--study", "algorithmic", "--out", str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="a control, not the reference"):
        ar.main([*common, "--study", "memorize"])
    assert ar.main([*common, "--study", "memorize", "--out", str(tmp_path / "c.json")]) == 0


def test_their_default_schedule_passes_no_warmup_and_records_their_scripts_own(preset):
    """--schedule authors: their scripts at their own warmup (the module globals, or utils.py's rule for the
    classifier), recorded as schedule 'authors', so that the report sets them beside ours."""
    for study, script_warmup in (("algorithmic", 300), ("modadd", 50), ("memorize", 500)):
        run = ar.study_runs(preset, study, variants=["standard"], seeds=[0], schedule="authors")[0]
        assert run["schedule"] == "authors" and run["warmup_steps"] == script_warmup
        assert not any(a.startswith("--warmup_steps") for a in ar.translate(run)["argv"])
        ours = ar.study_runs(preset, study, variants=["standard"], seeds=[0])[0]
        assert ours["schedule"] == "ours" and f"--warmup_steps={ours['warmup_steps']}" in ar.translate(ours)["argv"]
    from authors_flags import their_default_warmup

    assert their_default_warmup("trainer_classifier.py", 300) == 500 and their_default_warmup("trainer.py", 20000) == 800
