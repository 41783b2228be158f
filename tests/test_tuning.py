"""Choosing learning rates: the rule (mixit_lab.training.tuning), `mixit tune`, and a preset's tuned studies in `mixit reproduce`
(mixit_lab.reproduce.tuning): the grid at the tuning seeds, the other seeds at each setting's choice, the record and its reuse."""

import json

import pandas as pd
import pytest

from mixit_lab.analysis.runs import load_runs, reported
from mixit_lab.cli.main import main
from mixit_lab.training import TrainConfig
from mixit_lab.training.rundir import read_summary
from mixit_lab.training.tuning import Tuning, choose, tuning_key


def _frame(rows):
    return pd.DataFrame([{"key": "k", "task": "addition", "status": "finished", "tune_loss": 1.0, **r} for r in rows])


def test_the_rule_takes_the_best_tuning_score_then_the_lower_loss_and_never_a_failed_run():
    rows = [{"lr": 1e-3, "seed": 0, "tune_acc": 0.5}, {"lr": 1e-3, "seed": 1, "tune_acc": 0.7},
            {"lr": 3e-3, "seed": 0, "tune_acc": 0.6}, {"lr": 3e-3, "seed": 1, "tune_acc": 0.7},
            {"lr": 1e-2, "seed": 0, "tune_acc": 0.9}, {"lr": 1e-2, "seed": 1, "tune_acc": 0.9, "status": "diverged"}]
    assert choose(_frame(rows)) == {"k": 3e-3}  # means 0.6 / 0.65; 1e-2 has a diverged seed
    tie = [{"lr": 1e-3, "seed": 0, "tune_acc": 1.0, "tune_loss": 0.2}, {"lr": 3e-3, "seed": 0, "tune_acc": 1.0,
                                                                         "tune_loss": 0.05}]
    assert choose(_frame(tie)) == {"k": 3e-3}  # every lr stores it all: the lower tuning loss
    lm = _frame([{"lr": 1e-3, "seed": 0, "tune_loss": 4.0}, {"lr": 3e-3, "seed": 0, "tune_loss": 3.5}]).assign(task="lm")
    assert choose(lm) == {"k": 3e-3}  # a language model: the lowest tuning loss
    recorded = _frame([{"lr": 1e-3, "seed": 0, "tune_acc": 0.9, "tune_loss": 4.0},
                       {"lr": 3e-3, "seed": 0, "tune_acc": 0.1, "tune_loss": 3.5}]).assign(headline="eval_loss")
    assert choose(recorded) == {"k": 3e-3}  # judged by the loss, as the runs' summaries recorded it
    assert choose(_frame([{"lr": 1e-3, "seed": 0, "tune_acc": None}])) == {"k": None}


def test_a_setting_is_everything_but_the_learning_rate_and_seed_and_files_by_their_base_name():
    base = TrainConfig(task="sentiment", task_params={"text_file": ["/a/b/train.tsv"]}, lr=1e-3, seed=0)
    assert tuning_key(base) == tuning_key(TrainConfig(**{**base.to_dict(), "lr": 3e-3, "seed": 2, "device": "cpu"}))
    assert tuning_key(base) == tuning_key(TrainConfig(**{**base.to_dict(), "task_params": {"text_file": ["train.tsv"]}}))
    assert tuning_key(base) != tuning_key(TrainConfig(**{**base.to_dict(), "schedule": "authors"}))
    assert tuning_key(base) != tuning_key(TrainConfig(**{**base.to_dict(), "variant": "mixit"}))


TINY = ["--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "40",
        "--batch-size", "32", "--eval-every", "40", "--eval-samples", "100", "--tune-samples", "64"]


def test_mixit_tune_trains_the_grid_chooses_per_variant_and_writes_its_record(tmp_path, capsys):
    out = tmp_path / "tune"
    assert main(["tune", *TINY, "--variants", "standard", "mixit", "--lrs", "1e-3", "3e-2", "--out", str(out),
                 "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    tuning = Tuning.read(out / "tuning.json")
    table = tuning.selected()
    assert sorted(table["variant"]) == ["mixit", "standard"] and len(tuning.runs) == 4
    for row in table.itertuples():
        assert row.lr == max(row.scores, key=lambda lr: row.scores[lr]) or len(set(row.scores.values())) == 1
        assert f"{row.variant}: lr {row.lr:g}" in printed
    assert main(["tune", *TINY, "--lrs", "1e-3", "--out", str(tmp_path / "one")]) == 2
    assert "give two learning rates or more" in capsys.readouterr().err


def test_mixit_tune_in_stacks_chooses_as_it_does_run_by_run(tmp_path):
    grid = [*TINY, "--variants", "mixit", "--lrs", "1e-3", "3e-2", "--seeds", "0", "1", "--device", "cpu"]
    assert main(["tune", *grid, "--out", str(tmp_path / "alone")]) == 0
    assert main(["tune", *grid, "--stack", "4", "--out", str(tmp_path / "stacked")]) == 0
    alone, stacked = (Tuning.read(tmp_path / name / "tuning.json").selected() for name in ("alone", "stacked"))
    assert list(stacked["lr"]) == list(alone["lr"])
    for a, s in zip(alone.itertuples(), stacked.itertuples()):
        assert s.scores == pytest.approx(a.scores, rel=1e-4)
    assert {read_summary(p.parent)["stacked"] for p in (tmp_path / "stacked").glob("*/summary.json")} == {4}


def test_mixit_tune_takes_a_researchers_own_task_by_import_path(tmp_path, capsys):
    """The same tuning on one's own task: `--task path/to/file.py:Class`, as mixit train takes it."""
    from conftest import ROOT

    out, task_file = tmp_path / "mine", tmp_path / "my_task.py"  # a task of one's own, under a name of its own
    task_file.write_text((ROOT / "examples" / "my_task.py").read_text().replace('name = "reverse"', 'name = "reverse-t"'))
    assert main(["tune", "--task", f"{task_file}:ReverseTask", "--variants", "standard",
                 "--lrs", "1e-3", "1e-2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--steps", "10",
                 "--batch-size", "16", "--eval-every", "10", "--eval-samples", "64", "--tune-samples", "32",
                 "--out", str(out)]) == 0
    tuning = Tuning.read(out / "tuning.json")
    assert {r["train"]["task"] for r in tuning.runs} == {"reverse-t"} and len(tuning.choices()) == 1
    assert "standard: lr " in capsys.readouterr().out


PRESET = """
name: tiny-tuned
train: {batch_size: 32, steps: 40, eval_every: 40, eval_samples: 100, tune_samples: 64, log_every: 10}
tune: {seeds: [0]}
skip: [signal, speed]
studies:
  algorithmic:
    variants: [standard, mixit]
    tasks: [{addition: {digits: 2}}]
    sizes: [{d_model: 16, n_layers: 1, n_heads: 2}]
    seeds: [0, 1]
    lrs: [0.001, 0.03]
"""


@pytest.mark.slow
def test_a_tuned_preset_trains_its_grid_at_the_tuning_seed_and_the_other_seeds_at_the_choice(tmp_path, capsys):
    preset = tmp_path / "tiny.yaml"
    preset.write_text(PRESET)
    out, dirs = tmp_path / "runs", ["--report-dir", str(tmp_path / "report"), "--figures-dir", str(tmp_path / "figs")]
    assert main(["reproduce", "--preset", str(preset), "--out", str(out), "--workers", "2", "--quiet"]) == 2
    assert "no recorded tuning" in capsys.readouterr().err  # none shipped for this preset: --tune, or --tuning FILE
    assert main(["reproduce", "--preset", str(preset), "--out", str(out), "--workers", "2", "--quiet", "--tune",
                 *dirs]) == 0
    record = Tuning.read(out / "tuning.json")
    assert {(r["train"]["variant"], r["train"]["lr"], r["train"]["seed"]) for r in record.runs} == {
        (v, lr, 0) for v in ("standard", "mixit") for lr in (0.001, 0.03)}
    runs = load_runs(out)
    chosen = record.choices()
    seed1 = runs[runs["seed"] == 1]
    assert len(seed1) == 2 and all(chosen[k] == lr for k, lr in zip(seed1["tuning_key"], seed1["lr"]))
    assert len(runs) == 6 and len(reported(runs)) == 4  # the grid's other learning rate is read from the record only
    assert json.loads((out / "reproduce.json").read_text())["tuning"].startswith("trained now")

    again = tmp_path / "again"  # the record read back: only the chosen runs are trained, the same ones
    assert main(["reproduce", "--preset", str(preset), "--out", str(again), "--workers", "2", "--quiet", "--tuning",
                 str(out / "tuning.json"), "--report-dir", str(tmp_path / "r2"), "--figures-dir",
                 str(tmp_path / "f2")]) == 0
    rerun = load_runs(again)
    assert len(rerun) == 4 and rerun["selected"].all()
    mine = reported(runs).set_index("run")["eval_acc"]
    assert rerun.set_index("run")["eval_acc"].to_dict() == mine.to_dict()  # the same seeds, the same numbers

    other = tmp_path / "other.yaml"  # a record made for other settings is refused before anything trains
    other.write_text(PRESET.replace("steps: 40", "steps: 50"))
    assert main(["reproduce", "--preset", str(other), "--out", str(tmp_path / "o"), "--tuning",
                 str(out / "tuning.json"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "chooses no learning rate for study 'algorithmic'" in err


def test_a_preset_checks_its_tune_block_and_schedules_when_it_loads(tmp_path, capsys):
    from mixit_lab.reproduce.preset import Preset

    base = {"studies": {"s": {"tasks": ["addition"], "lrs": [1e-3, 3e-3]}}}
    assert Preset.from_dict({**base, "tune": {"seeds": [0, 1]}}).tuning_seeds() == [0, 1]
    assert Preset.from_dict(base).tuning_seeds() == [0]
    with pytest.raises(ValueError, match=r"tune has unknown keys \['lrs'\]"):
        Preset.from_dict({**base, "tune": {"lrs": [1e-3]}})
    with pytest.raises(ValueError, match="schedules=.*'cosine'.*not among: ours, authors"):
        Preset.from_dict({"studies": {"s": {"tasks": ["addition"], "schedules": ["cosine"]}}})
    preset = tmp_path / "p.yaml"
    preset.write_text(PRESET)
    assert main(["reproduce", "--preset", str(preset), "--tune", "--tuning", str(tmp_path / "x.json"), "--out",
                 str(tmp_path / "o"), "--dry-run"]) == 2
    assert "give one" in capsys.readouterr().err
    assert main(["reproduce", "--preset", str(preset), "--tune", "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs into" in out and "2 settings tune their learning rate: then each tuned setting's other seeds" in out


def test_a_tuning_only_study_is_trained_by_tune_alone_and_read_from_the_record():
    from mixit_lab.reproduce.preset import Preset
    from mixit_lab.reproduce.tuning import TuningPlan

    grid = [(f"{study}/r{lr}-{seed}", TrainConfig(task="addition", lr=lr, seed=seed, variant=v))
            for study, v in (("main", "standard"), ("schedule-x", "mixit")) for lr in (1e-3, 3e-3) for seed in (0, 1)]
    keys = {name: tuning_key(cfg) for name, cfg in grid}
    plan = TuningPlan(keys, {k: [1e-3, 3e-3] for k in set(keys.values())}, [n for n, c in grid if c.seed == 0], None,
                      "now", frozenset({"schedule-x"}))
    chosen = plan.runs_to_train(grid, {k: 3e-3 for k in keys.values()})
    assert chosen == ["main/r0.003-0", "main/r0.003-1"]  # the tuning-only study's chosen run is the record's
    base = {"studies": {"s": {"tasks": ["addition"], "lrs": [1e-3, 3e-3], "seeds": [0], "tuning_only": True}}}
    assert Preset.from_dict(base).studies["s"].tuning_only
    with pytest.raises(ValueError, match="tuning_only needs several lrs and seeds among the tuning seeds"):
        Preset.from_dict({"studies": {"s": {**base["studies"]["s"], "seeds": [0, 1]}}})


def test_a_record_made_on_one_copy_of_a_corpus_serves_a_run_that_reads_another(tmp_path):
    """A text study's learning rate chosen on ../shared/data's WikiText-2 is found for a reproduction that reads the
    same text from the Hub (the key without where the corpus comes from), and said so."""
    from mixit_lab.reproduce.tuning import plan_tuning

    def cfg(lr, seed, **params):
        return TrainConfig(task="lm", task_params={"seq_len": 64, **params}, lr=lr, seed=seed)

    local = {"text_file": ["/data/wikitext-2/valid.txt"]}
    record = Tuning(runs=[Tuning.entry("lm", f"lm/{lr}", cfg(lr, 0, **local), {"status": "finished", "tune_loss": loss})
                          for lr, loss in ((1e-3, 4.4), (3e-3, 4.2))])
    record.write(tmp_path / "t.json")
    hub = [(f"lm/{lr}-{s}", cfg(lr, s, dataset="wikitext-2-v1-valid-test")) for lr in (1e-3, 3e-3) for s in (0, 1)]
    plan = plan_tuning(hub, [0], "p", record=tmp_path / "t.json")
    assert plan.runs_to_train(hub, plan.chosen) == ["lm/0.003-0", "lm/0.003-1"]
    assert len(plan.notes) == 1 and "learning rate 0.003 is the one chosen there" in plan.notes[0]


@pytest.mark.parametrize("name", ["quick", "scale"])
def test_each_shipped_record_covers_its_presets_grid(name, tmp_path):
    """`mixit reproduce --preset NAME` reads reproduce/tuning/NAME.json: it must choose a rate its grid tries for every
    tuned setting, text studies included (their corpora by file name, as a record matches runs on another machine)."""
    from mixit_lab.reproduce.corpora import TEXT_SOURCES, TextChoice
    from mixit_lab.reproduce.pipeline import preset_runs
    from mixit_lab.reproduce.preset import load_preset
    from mixit_lab.reproduce.tuning import plan_tuning, recorded_tuning_file

    from corpora import labelled_sentences, wikitext_like

    # small corpora named as ../shared/data names them (a record knows a corpus by its files' names)
    contents = {"txt": wikitext_like(), "yelp_labelled.txt": labelled_sentences(),
                "tsv": "sentence\tlabel\n" + labelled_sentences()}
    text = {}
    for kind, source in TEXT_SOURCES.items():
        params = {key: [tmp_path / f for f in files] for key, files in source["local"].items()}
        for path in (p for files in params.values() for p in files):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(contents.get(path.name) or contents[path.suffix[1:]], encoding="utf-8")
        text[kind] = TextChoice({key: [str(p) for p in files] for key, files in params.items()})
    preset = load_preset(name)
    grid = preset_runs(preset, text, tmp_path / "out")
    plan = plan_tuning(grid, preset.tuning_seeds(), name)  # raises if the record leaves a setting out
    assert plan is not None and plan.source == str(recorded_tuning_file(name))
    tuned_studies = {n.split("/", 1)[0] for n, _ in grid if plan.keys[n] in plan.grids}
    assert tuned_studies == {s for s, spec in preset.studies.items() if len(spec.lrs) > 1 or len(spec.schedules or ()) > 1}
