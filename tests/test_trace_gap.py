"""benchmarks/trace_gap.py: switches are parsed, an unknown key is refused (exit 2, one line), and a switch
reaches the trained run's saved config (a few steps of the smoke preset's memorize study)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import trace_gap as tg  # noqa: E402


def test_parse_switch_reads_train_and_model_fields():
    s = tg.parse_switch("loop:sampling=epochs,betas=0.9/0.999,min_lr_ratio=0,model.qk_init_std=0.25")
    assert s.name == "loop"
    assert s.train == {"sampling": "epochs", "betas": (0.9, 0.999), "min_lr_ratio": 0}
    assert s.model == {"qk_init_std": 0.25}
    both = tg.combine([tg.parse_switch("a:sampling=epochs"), tg.parse_switch("b:min_lr_ratio=0")])
    assert both.train == {"sampling": "epochs", "min_lr_ratio": 0}


def test_a_switch_can_change_a_data_processing_choice_one_at_a_time(generated_corpora):
    """task.<parameter> switches: the split and the tokenizer, each alone, reach the run's task parameters."""
    from mixit_lab.training.config import TrainConfig

    s = tg.parse_switch("llama3:task.tokenizer=bpe-llama3,model.attend_padding=true")
    assert s.task == {"tokenizer": "bpe-llama3"} and s.model == {"attend_padding": True} and s.train == {}
    corpus = str(generated_corpora["sentiment"])
    cfg = TrainConfig(task="sentiment", task_params={"text_file": [corpus], "seq_len": 40, "vocab_size": 300},
                      variant="mixit")
    split = tg.apply_switch(cfg, tg.parse_switch("split1:task.split_seed=1"))
    assert split.task_params == {**cfg.task_params, "split_seed": 1} and split.model_extra == cfg.model_extra
    both = tg.apply_switch(cfg, tg.combine([s, tg.parse_switch("split1:task.split_seed=1")]))
    assert both.task_params["tokenizer"] == "bpe-llama3" and both.model_extra == {"attend_padding": True}
    assert tg.group_key(cfg) == f"sentiment(seq_len=40,text_file=['{Path(corpus).name}'],vocab_size=300) mixit d128/l2/h4"


@pytest.mark.parametrize("spec", ["x:foo=1", "x:model.nope=1", "x:seed=3", "nocolon"])
def test_a_bad_switch_is_one_line_and_exit_2(spec, capsys):
    rc = tg.main(["--preset", "smoke", "--study", "memorize", "--switch", spec, "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("trace_gap.py: error:")
    if "=" in spec:
        assert "unknown key" in err and "allowed:" in err and "sampling" in err


def test_a_value_the_config_refuses_is_one_line_and_exit_2(capsys):
    rc = tg.main(["--preset", "smoke", "--study", "memorize", "--switch", "x:min_lr_ratio=2", "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "min_lr_ratio" in err


def test_a_switch_changes_the_trained_config(tmp_path, one_thread):
    out = tmp_path / "trace.json"
    rc = tg.main(["--preset", "smoke", "--study", "memorize", "--task-param", "n=3", "--variants", "standard",
                  "--seeds", "0", "--steps", "3", "--switch", "betas:betas=0.9/0.999", "--work", str(tmp_path / "w"),
                  "--out", str(out)])
    assert rc == 0
    result = json.loads(out.read_text())
    runs = {r["switch"]: r for r in result["runs"]}
    assert set(runs) == {"baseline", "betas"}
    saved = {k: json.loads((Path(r["run_dir"]) / "run.json").read_text())["train"] for k, r in runs.items()}
    assert tuple(saved["betas"]["betas"]) == (0.9, 0.999)
    assert tuple(saved["baseline"]["betas"]) != (0.9, 0.999)
    assert all(s["steps"] == 3 for s in saved.values())
    assert all(r["bits_per_param"] is not None and 0 <= r["label_accuracy"] <= 1 for r in runs.values())
    assert {e["switch"] for e in result["summary"]} == {"baseline", "betas"}
