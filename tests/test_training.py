import dataclasses
import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

import mixit_lab.training.loss as loss_mod
from mixit_lab.training.settings import check_same_settings
from mixit_lab.models import load_model
from mixit_lab.training import TrainConfig, TrainingDiverged, evaluate, train
from mixit_lab.cli.main import main

TINY = dict(task="addition", task_params={"digits": 2}, d_model=32, n_layers=1, n_heads=4, batch_size=32,
            lr=3e-3, eval_every=10, eval_samples=200, log_every=5)


def weights(run_dir):
    return load_file(str(run_dir / "checkpoint" / "model.safetensors"))


def test_lr_schedule_warms_up_then_decays():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert cfg.lr_at(0) == pytest.approx(0.1)
    assert cfg.lr_at(9) == pytest.approx(1.0)
    assert cfg.lr_at(10) == pytest.approx(1.0)
    assert cfg.lr_at(55) == pytest.approx(0.55, abs=0.01)
    assert cfg.lr_at(99) == pytest.approx(0.1, abs=0.01)
    lrs = [cfg.lr_at(s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_the_authors_schedule_is_their_scripts_default_warmup_then_linear_decay_to_zero():
    """Their utils.py warmup, max(4% of the steps, 500), and the Hugging Face "linear" schedule: 0 at the first step."""
    cfg = TrainConfig(steps=20_000, lr=1.0, schedule="authors")
    assert cfg.warmup == 800  # 4% of 20,000
    assert cfg.lr_at(0) == 0.0 and cfg.lr_at(400) == pytest.approx(0.5) and cfg.lr_at(800) == pytest.approx(1.0)
    assert cfg.lr_at(10_400) == pytest.approx(0.5) and cfg.lr_at(19_999) == pytest.approx(1 / 19_200)
    short = TrainConfig(steps=300, lr=1.0, schedule="authors")  # warmup 500 > 300 steps: it never decays
    assert short.warmup == 500 and short.lr_at(299) == pytest.approx(299 / 500)
    assert TrainConfig(steps=300, lr=1.0, schedule="authors", warmup_steps=30).lr_at(165) == pytest.approx(0.5)
    assert TrainConfig(steps=300).warmup == 15  # ours: 5%


def test_a_run_at_the_authors_schedule_records_it_and_names_it(tmp_path, capsys):
    from mixit_lab.training.sweep import run_name

    out = tmp_path / "run"
    assert main(["train", "--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--steps", "4",
                 "--batch-size", "8", "--schedule", "authors", "--out", str(out), "--quiet"]) == 0
    recorded = TrainConfig.from_dict(json.loads((out / "run.json").read_text())["train"])
    assert recorded.schedule == "authors" and recorded.warmup == 500
    assert [r["lr"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())][-1] == pytest.approx(
        recorded.lr_at(3))
    assert run_name(recorded).endswith("__lr0.001-authors__s0")
    assert run_name(TrainConfig()).endswith("__lr0.001__s0")  # ours is unnamed, as before the option existed


@pytest.mark.parametrize("kw, needle", [({"steps": 0}, "steps=0"), ({"lr": -1.0}, "lr=-1.0"),
                                         ({"device": "tpu"}, "device='tpu'"), ({"warmup_steps": 5000}, "warmup_steps=5000"),
                                         ({"schedule": "linear"}, "schedule='linear' is not one of: ours, authors")])
def test_bad_train_config(kw, needle):
    with pytest.raises(ValueError, match=needle):
        TrainConfig(**kw)


def test_evaluate_sequence_and_token_metrics():
    class Echo(torch.nn.Module):
        """Predicts token t from position t-1 correctly except where the target is 3."""

        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(1))
            self.unembed = torch.nn.Identity()

        def forward(self, tokens, return_type=None):
            nxt = torch.cat([tokens[:, 1:], tokens[:, -1:]], 1)
            nxt = torch.where(nxt == 3, torch.zeros_like(nxt), nxt)
            return torch.nn.functional.one_hot(nxt, 5).float() * 10

    tokens = torch.tensor([[1, 2, 4, 1], [1, 2, 3, 4]])
    mask = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool)
    seq = evaluate(Echo(), tokens, mask, "sequence")
    tok = evaluate(Echo(), tokens, mask, "token")
    assert seq["eval_acc"] == 0.5 and tok["eval_acc"] == 0.75


@pytest.mark.slow
def test_small_standard_model_learns_two_digit_addition(tmp_path):
    # It passes 0.9 near step 420 here (0.39 at 300, 0.87 at 400, 0.98 at 500); 1,000 steps leave more than twice
    # that, for CPUs whose float rounding makes it take off later.
    cfg = TrainConfig(task="addition", task_params={"digits": 2}, variant="standard", d_model=64, n_layers=2,
                      n_heads=4, steps=1000, batch_size=128, lr=3e-3, eval_every=500, eval_samples=1000)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["status"] == "finished"
    assert summary["eval_acc"] > 0.9, summary


@pytest.mark.slow  # two trainings, one in bf16 emulated on CPUs without it
def test_bf16_precision_trains_like_fp32_and_is_recorded(tmp_path):
    """--precision bf16 autocasts the forward passes on the CPU: the run learns as fp32 does, is seeded alike,
    is not bit-identical to fp32 (so autocast really ran), and run.json / summary.json say which it was."""
    cfg = dict(TINY, task_params={"digits": 2}, steps=150, variant="standard")
    fp32 = train(TrainConfig(**cfg, precision="fp32"), tmp_path / "fp32", progress=False)
    bf16 = train(TrainConfig(**cfg, precision="bf16"), tmp_path / "bf16", progress=False)
    again = train(TrainConfig(**cfg, precision="bf16"), tmp_path / "bf16-again", progress=False)
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert json.loads((tmp_path / "bf16" / "run.json").read_text())["train"]["precision"] == "bf16"
    assert abs(bf16["eval_loss"] - fp32["eval_loss"]) < 0.1 * fp32["eval_loss"] + 0.05, (bf16, fp32)
    a, b, c = weights(tmp_path / "fp32"), weights(tmp_path / "bf16"), weights(tmp_path / "bf16-again")
    assert all(torch.equal(b[k], c[k]) for k in b)  # reproducible from the seed
    assert not all(torch.equal(a[k], b[k]) for k in a)
    assert weights(tmp_path / "bf16")["embed.W_E"].dtype == torch.float32  # weights and optimizer stay fp32


def test_precision_is_checked():
    from mixit_lab.training.precision import resolve_precision

    with pytest.raises(ValueError, match="precision='half' is not one of: auto, fp32, bf16"):
        TrainConfig(precision="half")
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("auto", torch.device("cuda")) == "bf16"
    with pytest.raises(ValueError, match="not mps"):
        resolve_precision("bf16", torch.device("mps"))


def test_same_seed_same_weights(tmp_path):
    cfg = TrainConfig(**TINY, steps=20, variant="mixit")
    train(cfg, tmp_path / "a", progress=False)
    train(cfg, tmp_path / "b", progress=False)
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = TrainConfig(**{**TINY, "seed": 1}, steps=20, variant="mixit")
    train(other, tmp_path / "c", progress=False)
    assert not torch.equal(a["embed.W_E"], weights(tmp_path / "c")["embed.W_E"])


@pytest.mark.parametrize("variant", ["standard", "frozen_qk"])
def test_resume_after_kill_matches_uninterrupted_run(variant, tmp_path, monkeypatch):
    cfg = TrainConfig(**TINY, steps=40, variant=variant)
    train(cfg, tmp_path / "full", progress=False)

    real_loss, calls = loss_mod.masked_loss, {"n": 0}

    def dies_at_step_27(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 28:
            raise KeyboardInterrupt  # as if killed between checkpoints
        return real_loss(*args, **kwargs)

    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", dies_at_step_27)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "killed", progress=False)
    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", real_loss)
    state = json.loads((tmp_path / "killed" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 20 and not (tmp_path / "killed" / "summary.json").exists()

    summary = train(cfg, tmp_path / "killed", resume=True, progress=False)
    assert summary["step"] == 40
    full, resumed = weights(tmp_path / "full"), weights(tmp_path / "killed")
    for key in full:
        assert torch.equal(full[key], resumed[key]), key
    steps = [json.loads(l)["step"] for l in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # no duplicated steps after resume
    # Resuming a finished run is a no-op that returns its summary.
    assert train(cfg, tmp_path / "killed", resume=True, progress=False)["step"] == 40


def test_resume_with_different_config_is_refused(tmp_path):
    train(TrainConfig(**TINY, steps=10), tmp_path / "run", progress=False)
    (tmp_path / "run" / "summary.json").unlink()
    with pytest.raises(ValueError, match="differs in .*steps"):
        train(TrainConfig(**TINY, steps=20), tmp_path / "run", resume=True, progress=False)


def test_nonfinite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    real_loss, calls = loss_mod.masked_loss, {"n": 0}

    def nan_from_step_15(*args, **kwargs):
        calls["n"] += 1
        loss = real_loss(*args, **kwargs)
        return loss * float("nan") if calls["n"] > 15 else loss

    monkeypatch.setattr("mixit_lab.training.loss.masked_loss", nan_from_step_15)
    # read from the device at the next log (step 20), it names the step where the loss first was not finite
    with pytest.raises(TrainingDiverged, match="non-finite loss.*at step 15, found at step 20.*step 10"):
        train(TrainConfig(**TINY, steps=40), tmp_path / "run", progress=False)
    model = load_model(tmp_path / "run")  # a run directory loads its checkpoint
    assert all(torch.isfinite(p).all() for p in model.parameters())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["step"]) == ("diverged", 15)
    assert json.loads((tmp_path / "run" / "checkpoint" / "trainer_state.json").read_text())["step"] == 10


def test_run_directory_records_provenance_and_metrics(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(TrainConfig(**TINY, steps=20), tmp_path / "run", progress=False, argv=["mixit", "train", "--x"])
    finally:
        torch.set_num_threads(threads)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["command"] == "mixit train --x"
    assert run["torch_threads"] == 1  # CPU sums split by thread: part of what reproduces a run
    assert run["versions"]["torch"] == torch.__version__
    assert "git_commit" in run and run["model"]["n_ctx"] > 0 and run["train"]["steps"] == 20
    metrics = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in metrics if "eval_acc" in m]
    assert [m["step"] for m in evals] == [10, 20]
    for key in ("loss", "lr", "tokens_per_s", "elapsed_s", "eval_loss", "eval_acc"):
        assert key in evals[-1]


# ---------------------------------------------------------------- CLI
def run_cli(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["train", "--task", "nope", "--out", "x"], "nope"),
        (["train", "--task", "addition", "--variant", "bogus", "--out", "x"], "bogus"),
        (["train", "--task", "dyck", "--digits", "3", "--out", "x"], "--digits does not apply to task 'dyck'"),
        (["train", "--task", "addition", "--d-model", "30", "--out", "x"], "d_model=30"),
        (["train", "--task", "addition", "--steps", "0", "--out", "x"], "steps=0"),
        (["train", "--task", "addition", "--digits", "0", "--out", "x"], "digits"),
        (["train", "--task", "addition", "--steps", "ten", "--out", "x"], "ten"),
        (["sweep", "--tasks", "addition", "--variants", "nope"], "nope"),
        (["sweep", "--tasks", "addition", "--pairs", "4"], "--pairs does not apply"),
    ],
)
def test_cli_bad_input_one_line_error(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(argv, capsys)
    assert code == 2  # bad input: the documented exit status
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_cli_refuses_to_overwrite_a_run(tmp_path, capsys):
    args = ["train", "--task", "addition", "--digits", "2", "--d-model", "32", "--n-layers", "1", "--steps", "10",
            "--batch-size", "16", "--eval-every", "5", "--eval-samples", "100", "--quiet", "--out", str(tmp_path / "r")]
    assert run_cli(args, capsys)[0] == 0
    before = (tmp_path / "r" / "checkpoint" / "model.safetensors").read_bytes()
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "--resume" in err
    assert (tmp_path / "r" / "checkpoint" / "model.safetensors").read_bytes() == before
    code, out, _ = run_cli(args + ["--resume"], capsys)
    assert code == 0 and "finished at step 10" in out


@pytest.mark.slow  # a fresh interpreter per case
def test_mixit_console_script_exit_status(tmp_path):
    exe = [sys.executable, "-m", "mixit_lab.cli"]
    bad = subprocess.run(exe + ["train", "--task", "addition", "--variant", "nah", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nah" in bad.stderr


@pytest.mark.slow  # worker processes
def test_sweep_runs_grid_in_parallel_and_skips_finished(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "variants: [standard, mixit]\n"
        "tasks: [{addition: {digits: 2}}]\n"
        "sizes: [{d_model: 32, n_layers: 1, n_heads: 4}]\n"
        "seeds: [0]\n"
        "lrs: [0.003]\n"
        "train: {steps: 10, batch_size: 16, eval_every: 5, eval_samples: 100}\n"
    )
    out = tmp_path / "sweep"
    code, stdout, _ = run_cli(["sweep", str(grid), "--workers", "2", "--out", str(out)], capsys)
    assert code == 0, stdout
    table = pd.read_csv(out / "summary.csv")
    assert sorted(table["variant"]) == ["mixit", "standard"]
    assert (table["status"] == "finished").all() and (table["step"] == 10).all()
    mixit_run = table[table["variant"] == "mixit"]["run"].item()
    assert (out / mixit_run / "checkpoint" / "config.json").exists()
    stamp = (out / mixit_run / "summary.json").stat().st_mtime_ns
    # Rerun with one more seed: only the new runs train, finished ones are skipped.
    code, _, _ = run_cli(["sweep", str(grid), "--seeds", "0", "1", "--out", str(out)], capsys)
    assert code == 0
    assert (out / mixit_run / "summary.json").stat().st_mtime_ns == stamp
    assert len(pd.read_csv(out / "summary.csv")) == 4


def test_sweep_options_expand_task_parameters(tmp_path, capsys):
    code, out, _ = run_cli(["sweep", "--tasks", "addition", "retrieval", "--digits", "2", "3", "--variants", "all",
                            "--seeds", "0", "--dry-run", "--out", str(tmp_path)], capsys)
    names = out.split()
    assert code == 0 and len(names) == 3 * 6
    assert sum(n.startswith("addition_digits2__") for n in names) == 6
    assert sum(n.startswith("retrieval__") for n in names) == 6


def test_example_grid_file_expands(capsys):
    from pathlib import Path

    grid = Path(__file__).resolve().parent.parent / "examples" / "grid.yaml"
    code, out, _ = run_cli(["sweep", str(grid), "--dry-run"], capsys)
    assert code == 0 and len(out.split()) == 6 * 2 * 2
    code, out, _ = run_cli(["sweep", str(grid), "--variants", "mixit", "--seeds", "3", "--dry-run"], capsys)
    assert out.split() == ["addition_digits3__mixit__d64_l2_h4__lr0.003__s3", "retrieval_pairs8__mixit__d64_l2_h4__lr0.003__s3"]


def test_model_option_sets_model_fields_and_refuses_bad_ones(tmp_path, capsys):
    from mixit_lab.cli.main import main

    base = ["train", "--task", "addition", "--digits", "2", "--variant", "mixit", "--d-model", "32", "--n-heads", "4",
            "--steps", "2", "--batch-size", "8", "--quiet"]
    assert main([*base, "--model-option", "residual_scale=0.5", "--model-option", "sink_head=false",
                 "--out", str(tmp_path / "a")]) == 0
    model = json.loads((tmp_path / "a" / "run.json").read_text())["model"]
    assert model["residual_scale"] == 0.5 and model["sink_head"] is False
    capsys.readouterr()
    for bad, said in [("foo=1", "KEY one of"), ("residual_scale=abc", "residual_scale must be a number"),
                      ("d_model=8", "KEY one of"), ("sink_head", "expected KEY=VALUE")]:
        assert main([*base, "--model-option", bad, "--out", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err
        assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name, params", [("memorize", {"n": 6, "d": 2}), ("addition", {"digits": 2}),
                                          ("retrieval", {"pairs": 3, "num_values": 8}), ("dyck", {"max_pairs": 4})])
def test_masked_logits_runs_only_the_positions_its_loss_reads(name, params, causal, monkeypatch):
    """The loss's logits and targets are those of the full forward pass, while the model runs on positions up to
    the last that predicts a scored token (causal models) and its last block from the first such position."""
    from mixit_lab.models import ModelConfig, build_model
    from mixit_lab.training.tasks import get_task

    task = get_task(name, **params)
    tokens, mask = task.sample(32, torch.Generator().manual_seed(0))[:2]
    model = build_model(ModelConfig(d_model=32, n_layers=2, n_heads=4, n_ctx=task.seq_len, d_vocab=task.d_vocab,
                                    causal=causal, init_std=0.2))
    resid = model(tokens, return_type=None)[:, :-1]
    predict = mask[:, 1:]
    want_logits, want_targets = model.unembed(resid[predict]), tokens[:, 1:][predict]

    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda t, *a, **k: calls.append((t.shape[1], k.get("from_pos", 0))) or forward(t, *a, **k))
    logits, targets = loss_mod.masked_logits(model, tokens, mask)
    assert torch.equal(targets, want_targets)
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
    scored = predict.any(0).nonzero().flatten()
    assert calls == [(int(scored[-1]) + 1 if causal else task.seq_len, int(scored[0]))]
    assert calls[0][1] > 0  # every task here scores only later positions
    # With a hook attached (an ablation, say) the model runs on every position, as the hook expects.
    calls.clear()
    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_z", lambda z, hook: z)]):
        loss_mod.masked_logits(model, tokens, mask)
    assert calls == [(task.seq_len, 0)]


def test_fast_precision_takes_bf16_only_where_it_pays_and_decides_once_per_cache_folder(tmp_path, monkeypatch):
    import mixit_lab.training.precision as precision
    from mixit_lab.training.rundir import DATA_CACHE_DIR

    cpu, cache = torch.device("cpu"), tmp_path / "cache"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    for speedup, expected in ((2.0, "bf16"), (1.1, "fp32")):
        monkeypatch.setattr(precision, "_BF16_SPEEDUP", {})
        (cache / precision.SPEEDUP_FILE).unlink(missing_ok=True)
        monkeypatch.setattr(precision, "_measure_bf16_speedup", lambda s=speedup: s)
        assert precision.resolve_precision("fast", cpu, cache) == expected
    # The measurement is kept in the cache folder passed: a new process reads it instead of measuring again.
    monkeypatch.setattr(precision, "_BF16_SPEEDUP", {})

    def no_measuring():
        raise AssertionError("measured again")

    monkeypatch.setattr(precision, "_measure_bf16_speedup", no_measuring)
    assert precision.cpu_bf16_speedup(cache) == 1.1 and precision.resolve_precision("fast", cpu, cache) == "fp32"
    # Without a folder it is measured once per process; nothing goes to the home folder.
    monkeypatch.setattr(precision, "_BF16_SPEEDUP", {})
    monkeypatch.setattr(precision, "_measure_bf16_speedup", lambda: 2.0)
    assert precision.resolve_precision("fast", cpu) == "bf16"
    # The trainer keeps it in the runs folder's cache, beside the runs, and that folder's answer wins.
    summary = train(TrainConfig(**{**TINY, "steps": 2, "precision": "fast", "device": "cpu"}), tmp_path / "runs" / "a",
                    progress=False)
    assert summary["precision"] == "bf16" and (tmp_path / "runs" / DATA_CACHE_DIR / precision.SPEEDUP_FILE).is_file()
    assert not (tmp_path / "home").exists() and not (tmp_path / "xdg").exists()
    # Without native bf16 it is fp32 whatever a measurement would say; other precisions are unchanged.
    monkeypatch.setattr(precision, "_BF16_SPEEDUP", {})
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert precision.resolve_precision("fast", cpu, tmp_path / "other") == "fp32" and precision.cpu_bf16_speedup() == 0.0
    assert precision.resolve_precision("auto", cpu) == "fp32" and precision.resolve_precision("bf16", cpu) == "bf16"
    assert precision.resolve_precision("fast", torch.device("meta")) == "fp32"


def _compile_unavailable() -> str | None:
    """Why torch.compile cannot run here (None if it can): Dynamo unsupported on this Python/platform, or no
    C compiler for the CPU backend."""
    import shutil

    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile (Dynamo) is not supported on this Python or platform"
    except Exception as e:  # an import error of a partial build
        return f"torch.compile is unavailable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available() and not any(shutil.which(c) for c in ("cc", "gcc", "clang", "g++")):
        return "torch.compile on CPU needs a C compiler (cc, gcc or clang), and none is on PATH"
    return None


@pytest.mark.slow  # compiling takes most of a minute on 2 cores
@pytest.mark.skipif(_compile_unavailable() is not None, reason=str(_compile_unavailable()))
def test_compile_trains_the_run_an_uncompiled_run_trains(tmp_path, capsys):
    """mixit train --compile: the same run (config, steps, metrics within float tolerance) as without it."""
    argv = ["train", "--task", "addition", "--digits", "2", "--d-model", "16", "--n-layers", "1", "--n-heads", "2",
            "--steps", "10", "--batch-size", "16", "--eval-every", "10", "--eval-samples", "64", "--device", "cpu",
            "--precision", "fp32", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
    assert main([*argv, "--compile", "--out", str(tmp_path / "compiled")]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "compiled" / "run.json").read_text())["train"]["compile"] is True
    plain, compiled = (json.loads((tmp_path / r / "summary.json").read_text()) for r in ("plain", "compiled"))
    assert compiled["status"] == "finished" and compiled["step"] == 10
    for key in ("loss", "eval_loss", "eval_acc"):
        assert compiled[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-5), key


@pytest.mark.parametrize("task", [{"task": "addition", "task_params": {"digits": 2}},
                                  {"task": "retrieval", "task_params": {"pairs": 3, "num_values": 8}}])
def test_micro_batches_train_the_same_run_as_the_whole_batch(task, tmp_path):
    """--micro-batch-size accumulates the batch's gradient slice by slice (uneven slices too, each weighted by its
    share of the scored tokens): the same loss curve and weights, up to float rounding; a resume may change it."""
    base = {**TINY, **task, "steps": 12, "eval_every": 6, "batch_size": 30}
    whole = train(TrainConfig(**base), tmp_path / "whole", progress=False)
    parts = train(TrainConfig(**base, micro_batch_size=8), tmp_path / "parts", progress=False)
    assert parts["loss"] == pytest.approx(whole["loss"], rel=1e-5) and parts["eval_loss"] == pytest.approx(
        whole["eval_loss"], rel=1e-5)
    a, b = (load_file(str(tmp_path / r / "checkpoint" / "model.safetensors")) for r in ("whole", "parts"))
    for name in a:  # b_K's gradient is zero in exact arithmetic (softmax ignores a shift of every key): Adam
        if not name.endswith("b_K"):  # turns its rounding noise into full-size steps, whatever the slicing
            torch.testing.assert_close(b[name], a[name], rtol=1e-4, atol=1e-6, msg=name)
    assert check_same_settings(tmp_path / "whole", TrainConfig(**base, micro_batch_size=16)) is None


@pytest.mark.parametrize("bad", [0, -4, 2.5])
def test_a_micro_batch_size_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises(ValueError, match=f"micro_batch_size={bad!r}"):
        TrainConfig(**TINY, micro_batch_size=bad)


def test_epoch_sampling_shows_every_key_once_per_epoch_and_resumes_exactly():
    """sampling="epochs" (the authors' Trainer's way of drawing memorization keys): each epoch is a permutation
    of all keys, its own per epoch; a stream rebuilt from a saved state goes on with the same rows."""
    from mixit_lab.training.tasks import TrainStream, get_task

    task = get_task("memorize", n=5, d=2)  # 25 keys; batches of 10 straddle the epochs
    stream = TrainStream(task, batch_size=10, seed=7, sampling="epochs")
    rows = torch.cat([stream.next()[0] for _ in range(5)])  # 50 rows: two epochs
    everything = task.eval_set(task.held_out_size)[0]
    key = lambda t: sorted(map(tuple, t.tolist()))  # noqa: E731
    assert key(rows[:25]) == key(everything) == key(rows[25:])  # every key once in each epoch
    assert not torch.equal(rows[:25], rows[25:])  # in another order
    uniform = TrainStream(task, batch_size=50, seed=7).next()[0]
    assert len(set(map(tuple, uniform.tolist()))) < 25  # with replacement, some keys repeat and some are missed
    saved = stream.state_dict()
    again = TrainStream(task, batch_size=10, seed=7, sampling="epochs")
    again.load_state_dict(saved)
    assert torch.equal(again.next()[0], stream.next()[0])


@pytest.mark.parametrize("fields, message", [({"sampling": "shuffled"}, "sampling='shuffled' is not one of"),
                                             ({"sampling": "epochs", "task": "addition"}, "memorize")])
def test_an_unknown_sampling_or_epochs_on_an_endless_task_is_refused(fields, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        train(TrainConfig(**{**TINY, "steps": 2, **fields}), tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "run.json").exists()


def test_a_run_whose_gradient_stays_zero_is_flagged(tmp_path):
    """init_std=1e6 saturates every softmax and norm: the gradient is 0 from step 1 and nothing moves. The run
    finishes, but its summary and a warning say nothing trained, naming the options that set the first step."""
    cfg = TrainConfig(task="retrieval", task_params={"pairs": 2}, d_model=16, n_layers=1, n_heads=2, steps=4,
                      batch_size=8, eval_every=4, eval_samples=16, log_every=2, model_extra={"init_std": 1e6})
    with pytest.warns(UserWarning, match="gradient was 0 at every logged step: nothing trained; check .*init_std=1e"):
        summary = train(cfg, tmp_path / "flat", progress=False)
    assert summary["status"] == "finished" and "nothing trained" in summary["message"]
    fine = train(dataclasses.replace(cfg, model_extra={}), tmp_path / "fine", progress=False)
    assert "message" not in fine


def test_sweep_workers_share_the_threads_omp_num_threads_allows(monkeypatch):
    """A shared machine's OMP_NUM_THREADS caps a sweep's workers as it caps mixit train: never cores // workers above
    it (which oversubscribed the machine 11-15x)."""
    import os

    from mixit_lab.training.pool import threads_per_worker

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads_per_worker(1) == cores and threads_per_worker(cores * 4) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads_per_worker(1) == 1 and threads_per_worker(2) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", str(2 * cores))  # more than the machine has: the cores decide
    assert threads_per_worker(1) == cores


# --------------------------------------------------------------------------- one resolution, one eval-size rule
def test_the_eval_size_rule_is_one_bound_and_a_small_held_out_set_is_scored_whole():
    """mixit_lab.training.resolve.check_eval_size: eval_samples in 1..65,536, or up to a larger fixed held-out set's
    size; a smaller fixed set asked for more gives all of its rows, the same rows as asking for none."""
    from mixit_lab.training.resolve import check_eval_size
    from mixit_lab.training.tasks import get_task

    modadd, addition, memorize = get_task("modadd", p=11), get_task("addition"), get_task("memorize")
    assert modadd.held_out_size == 7 and addition.held_out_size is None and memorize.held_out_size == 262_144
    assert [check_eval_size(n, modadd) for n in (None, 5, 7, 1000, 65_536)] == [7, 5, 7, 7, 7]
    assert modadd.eval_fingerprint(1000) == modadd.eval_fingerprint(None)  # the same run, whatever it asks
    assert [check_eval_size(n, addition) for n in (None, 1, 65_536)] == [addition.default_eval_size, 1, 65_536]
    assert check_eval_size(262_144, memorize) == 262_144
    for n, task, allowed in ((65_537, modadd, 65_536), (65_537, addition, 65_536), (262_145, memorize, 262_144)):
        with pytest.raises(ValueError, match=rf"^eval_samples={n} is too many: .*; allowed: 1\.\.{allowed}$"):
            check_eval_size(n, task)


def test_train_sweeps_and_the_command_line_resolve_a_run_alike(tmp_path, capsys):
    """The trainer, a sweep's grid and `mixit train` refuse the same settings with the same line (one resolve), and
    the run the trainer writes records the model and eval rows resolve gives."""
    from mixit_lab.training.resolve import resolve
    from mixit_lab.training.sweep import build_grid

    bad = TrainConfig(**{**TINY, "eval_samples": 70_000, "steps": 2})
    with pytest.raises(ValueError) as refused:
        resolve(bad, device=False)
    line = str(refused.value)
    with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
        train(bad, tmp_path / "r", progress=False)
    with pytest.raises(ValueError, match=f"^{re.escape(line)}$"):
        build_grid(None, {"tasks": ["addition"], "variants": ["standard"], "train": {"eval_samples": 70_000}})
    assert main(["train", "--task", "addition", "--eval-samples", "70000", "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.strip() == f"mixit train: error: {line}"
    good = TrainConfig(**{**TINY, "task": "modadd", "task_params": {"p": 11}, "eval_samples": 1000, "steps": 2})
    run = resolve(good)
    assert run.eval_size == 7 and run.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train(good, tmp_path / "m", progress=False)
    recorded = json.loads((tmp_path / "m" / "run.json").read_text())
    assert recorded["model"] == run.model.to_dict() and recorded["train"]["eval_samples"] == 1000
    assert recorded["task"]["eval_fingerprint"] == run.task.eval_fingerprint(run.eval_size)
