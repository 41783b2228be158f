"""Runs trained as one stack (mixit_lab.training.stack) are the runs trained alone, up to float rounding: the same
logs, weights and checkpoints; a run that diverges leaves the stack alone; a stacked run resumes alone and the
reverse; what cannot stack is refused in one line."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from mixit_lab.models import load_model
from mixit_lab.training import TrainConfig, train, train_stack
from mixit_lab.training.rundir import read_metric_records, read_summary
from mixit_lab.training.stack import StackedStep, check_stackable, stack_key

from test_host_syncs import counted_reads

BASE = dict(task="addition", task_params={"digits": 2}, d_model=16, n_layers=2, n_heads=2, batch_size=16,
            steps=24, log_every=4, eval_every=12, eval_samples=32, device="cpu", precision="fp32")
# three runs that differ in what a stack lets differ: seed, learning rate, weight decay, clipping
ROWS = [dict(seed=0, lr=1e-3), dict(seed=1, lr=3e-3, weight_decay=0.0), dict(seed=2, lr=1e-2, grad_clip=0.0)]


def configs(**over) -> list[TrainConfig]:
    return [TrainConfig(**{**BASE, **over, **row}) for row in ROWS]


def assert_same_run(alone: Path, stacked: Path) -> None:
    """Two run directories hold the same run up to float rounding: every logged number and the final weights."""
    a, b = read_metric_records(alone), read_metric_records(stacked)
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for ra, rb in zip(a, b):
        for key in ("loss", "grad_norm", "lr", "eval_loss", "eval_acc"):
            if key in ra:
                assert rb[key] == pytest.approx(ra[key], rel=1e-4, abs=1e-6), (ra["step"], key)
    wa, wb = load_model(alone / "checkpoint").state_dict(), load_model(stacked / "checkpoint").state_dict()
    assert wa.keys() == wb.keys()
    # Each weight within 1e-3 of its norm, not element by element: AdamW divides by the root of its second moment,
    # so an element whose gradient is near zero moves by a good part of the learning rate on rounding alone
    # (at lr 1e-2, up to 2e-4 for a few elements of a MixiT W_gate after 24 steps).
    for name in wa:
        assert (wb[name] - wa[name]).norm() <= 1e-3 * wa[name].norm() + 1e-6, name


@pytest.mark.parametrize("variant", ["standard", "mixit"])
def test_a_stack_trains_each_run_as_it_trains_alone(tmp_path, one_thread, variant):
    cfgs = configs(variant=variant)
    alone = [train(cfg, tmp_path / f"alone{i}", progress=False) for i, cfg in enumerate(cfgs)]
    stacked = train_stack(cfgs, [tmp_path / f"stacked{i}" for i in range(3)], progress=False)
    for a, s in zip(alone, stacked):
        assert s["status"] == "finished" and s["stacked"] == 3 and a["stacked"] == 1
        assert_same_run(Path(a["run_dir"]), Path(s["run_dir"]))
        assert read_summary(s["run_dir"])["seed"] == a["seed"]


MIXED = [dict(variant="standard"), dict(variant="frozen_qk"), dict(variant="frozen_mlp"), dict(variant="random"),
         dict(variant="standard", model_extra={"freeze": ["v@1", "norms"]})]


def test_runs_that_train_different_weights_of_one_model_stack_and_each_is_its_run_alone(tmp_path, one_thread):
    """standard, frozen_qk, frozen_mlp, random and a grid model are built alike: one stack, each run's frozen weights
    at their init to the bit, every logged number that of the run alone."""
    cfgs = [TrainConfig(**{**BASE, **ROWS[i % 3], **over, "checkpoint_every": 12}) for i, over in enumerate(MIXED)]
    assert len({stack_key(c) for c in cfgs}) == 1
    stacked = train_stack(cfgs, [tmp_path / f"s{i}" for i in range(len(cfgs))], progress=False)
    assert [s["stacked"] for s in stacked] == [len(cfgs)] * len(cfgs)
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / f"alone{i}", progress=False)
        assert_same_run(tmp_path / f"alone{i}", tmp_path / f"s{i}")
        model = load_model(tmp_path / f"s{i}" / "checkpoint")
        frozen = [n for n, _ in model.named_parameters() if model.config.is_frozen(n)]
        assert bool(frozen) == (i > 0)
        alone = load_model(tmp_path / f"alone{i}" / "checkpoint").state_dict()
        for n in frozen:  # the run alone keeps them at init; so does the stack, to the bit
            assert torch.equal(model.state_dict()[n], alone[n]), n


def test_a_stack_of_runs_that_train_different_weights_resumes_alone_and_in_a_smaller_stack(tmp_path, monkeypatch,
                                                                                           one_thread):
    """Each run's AdamW state is stored for its own weights only, where its optimizer alone keeps it."""
    cfgs = [TrainConfig(**{**BASE, **ROWS[i], **MIXED[i + 1], "checkpoint_every": 8}) for i in range(3)]
    runs = [tmp_path / f"r{i}" for i in range(3)]
    with monkeypatch.context() as m:
        interrupt_at(m, 10)
        with pytest.raises(Interrupted):
            train_stack(cfgs, runs, progress=False)
    train(cfgs[0], runs[0], resume=True, progress=False)
    train_stack(cfgs[1:], runs[1:], resume=True, progress=False)
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / f"alone{i}", progress=False)
        assert_same_run(tmp_path / f"alone{i}", runs[i])


def test_a_model_built_otherwise_does_not_stack_with_them():
    cfgs = [TrainConfig(**{**BASE, **over}) for over in MIXED] + [TrainConfig(**{**BASE, "variant": "mixit"})]
    assert len({stack_key(c) for c in cfgs}) == 2
    with pytest.raises(ValueError, match=r"run 5 differs from run 0 in variant; .* which weights train"):
        check_stackable(cfgs)
    grid = TrainConfig(**{**BASE, "model_extra": {"attention": ["mixing", "softmax"]}})
    assert stack_key(grid) != stack_key(cfgs[0])


def test_a_stack_in_bf16_trains_each_run_as_it_trains_alone_in_bf16(tmp_path, one_thread):
    """Autocast under vmap (a GPU's default precision): bf16 rounding apart, the runs alone."""
    cfgs = configs(variant="mixit", precision="bf16", steps=12)[:2]
    stacked = train_stack(cfgs, [tmp_path / "s0", tmp_path / "s1"], progress=False)
    for i, cfg in enumerate(cfgs):
        alone = train(cfg, tmp_path / f"alone{i}", progress=False)
        assert stacked[i]["precision"] == alone["precision"] == "bf16"
        assert stacked[i]["loss"] == pytest.approx(alone["loss"], rel=2e-2)
        assert stacked[i]["eval_loss"] == pytest.approx(alone["eval_loss"], rel=2e-2)


def test_a_classifier_stacks(tmp_path, one_thread, generated_corpora):
    cfgs = configs(task="sentiment", task_params={"text_file": [str(generated_corpora["sentiment"])],
                                                  "vocab_size": 300}, variant="mixit")[:2]
    alone = train(cfgs[1], tmp_path / "alone", progress=False)
    stacked = train_stack(cfgs, [tmp_path / "s0", tmp_path / "s1"], progress=False)
    assert [s["status"] for s in stacked] == ["finished", "finished"]
    assert_same_run(Path(alone["run_dir"]), tmp_path / "s1")


def test_a_run_that_diverges_leaves_the_stack_and_the_others_go_on(tmp_path, one_thread):
    cfgs = configs()
    cfgs[1] = TrainConfig(**{**BASE, **ROWS[1], "lr": 1e30, "grad_clip": 0.0})  # blows up within a few steps
    stacked = train_stack(cfgs, [tmp_path / f"s{i}" for i in range(3)], progress=False)
    assert [s["status"] for s in stacked] == ["finished", "diverged", "finished"]
    assert "non-finite" in stacked[1]["message"] and stacked[1]["step"] < BASE["steps"]
    for i in (0, 2):  # untouched by the run beside them
        train(cfgs[i], tmp_path / f"alone{i}", progress=False)
        assert_same_run(tmp_path / f"alone{i}", tmp_path / f"s{i}")


class Interrupted(Exception):
    pass


def interrupt_at(monkeypatch, step: int) -> None:
    """Make the next stack (or run alone) stop as a kill would, just before optimizer step `step` + 1."""
    import mixit_lab.training.trainer as trainer

    stack_step, loop_step = StackedStep.step, trainer.RunLoop._train_step

    def stack(self, *args):
        if self.loops[0].step == step:
            raise Interrupted
        return stack_step(self, *args)

    def alone(self, batch):
        if self.step == step:
            raise Interrupted
        return loop_step(self, batch)

    monkeypatch.setattr(StackedStep, "step", stack)
    monkeypatch.setattr(trainer.RunLoop, "_train_step", alone)


def test_a_stacked_run_resumes_alone_and_a_run_alone_resumes_in_a_stack(tmp_path, monkeypatch, one_thread):
    cfgs = configs(checkpoint_every=8)
    runs = [tmp_path / f"r{i}" for i in range(3)]
    with monkeypatch.context() as m:  # r0 alone, r1 and r2 stacked: each stopped at step 10, checkpoints at 8
        interrupt_at(m, 10)
        with pytest.raises(Interrupted):
            train(cfgs[0], runs[0], progress=False)
        with pytest.raises(Interrupted):
            train_stack(cfgs[1:], runs[1:], progress=False)
    train_stack(cfgs[:2], runs[:2], resume=True, progress=False)  # r0 was alone, r1 stacked: now a stack
    train(cfgs[2], runs[2], resume=True, progress=False)  # stacked, resumed alone
    for i, cfg in enumerate(cfgs):
        train(cfg, tmp_path / f"alone{i}", progress=False)
        assert_same_run(tmp_path / f"alone{i}", runs[i])


def test_resumed_runs_at_different_steps_train_as_one_stack_per_step(tmp_path, monkeypatch, one_thread):
    cfgs = configs(checkpoint_every=8)
    with monkeypatch.context() as m:
        interrupt_at(m, 10)
        with pytest.raises(Interrupted):
            train(cfgs[0], tmp_path / "r0", progress=False)  # checkpoint at 8
    done = train_stack(cfgs, [tmp_path / f"r{i}" for i in range(3)], resume=True, progress=False)
    assert [s["stacked"] for s in done] == [1, 2, 2]  # r0 from step 8 alone, r1 and r2 from 0 together
    train(cfgs[0], tmp_path / "alone0", progress=False)
    assert_same_run(tmp_path / "alone0", tmp_path / "r0")
    again = train_stack(cfgs, [tmp_path / f"r{i}" for i in range(3)], resume=True, progress=False)
    assert [s["step"] for s in again] == [BASE["steps"]] * 3  # finished runs are returned as they are


def test_a_stack_step_reads_no_tensor(tmp_path, one_thread):
    cfgs = configs(variant="mixit")
    from mixit_lab.training.parallel import Ranks
    from mixit_lab.training.trainer import open_loop

    loops = [open_loop(cfg, tmp_path / f"r{i}", False, None, torch.device("cpu"), Ranks()) for i, cfg in enumerate(cfgs)]
    stack = StackedStep(loops)
    batches = [loop.stream.next() for loop in loops]
    with counted_reads() as reads:
        for _ in range(3):
            stack.step(batches, [1e-3] * 3)
    assert not reads, dict(reads)
    assert [loop.n_pending for loop in loops] == [3, 3, 3]
    assert torch.isfinite(loops[2].pending[:3]).all()
    for _ in range(3):  # past the buffer (log_every 4): a caller stepping on its own gets a read, not an error
        stack.step(batches, [1e-3] * 3)
    assert [(loop.n_pending, loop.window_n) for loop in loops] == [(2, 4)] * 3


@pytest.mark.parametrize("variant", ["standard", "mixit", "frozen_qk"])
def test_every_operation_of_a_stack_step_is_batched_not_run_once_per_run(tmp_path, one_thread, variant):
    """vmap runs an operation without a batching rule once per run (a "performance drop" warning): on a GPU that
    would launch K times the kernels, the very cost a stack is there to save."""
    import warnings

    from mixit_lab.training.parallel import Ranks
    from mixit_lab.training.trainer import open_loop

    cfgs = configs(variant=variant, d_model=32, task_params={})[:2]  # long enough for the fused CPU kernel
    loops = [open_loop(cfg, tmp_path / f"r{i}", False, None, torch.device("cpu"), Ranks()) for i, cfg in enumerate(cfgs)]
    stack = StackedStep(loops)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stack.step([loop.stream.next() for loop in loops], [1e-3, 1e-3])
    assert not [str(w.message) for w in caught if "batching rule" in str(w.message)]


def test_runs_whose_logits_a_stack_could_not_hold_are_refused(tmp_path, one_thread, monkeypatch):
    import mixit_lab.training.stack as stack

    # 3 runs' fp32 logits at 2-digit addition (batch 16, 10 positions, 24 tokens), less a byte
    monkeypatch.setattr(stack, "CHUNKED_LOSS_MIN_BYTES", 3 * 16 * 10 * 24 * 4 - 1)
    with pytest.raises(ValueError, match=r"3 runs' logits would take .* GiB at once"):
        train_stack(configs(), [tmp_path / f"r{i}" for i in range(3)], progress=False)
    train_stack(configs()[:2], [tmp_path / f"two{i}" for i in range(2)], progress=False)  # two fit


@pytest.mark.parametrize("over, says", [
    ({"micro_batch_size": 8}, "micro_batch_size=8"),
    ({"compile": True}, "compile=True"),
])
def test_what_cannot_stack_is_refused_in_one_line(over, says):
    with pytest.raises(ValueError, match=says) as e:
        check_stackable(configs(**over))
    assert "\n" not in str(e.value)


class Replayed:
    """A recorded stack step's stand-in on the CPU: replaying runs the step's kernels again on the same buffers."""

    def __init__(self, step: StackedStep):
        self.step, self.replays = step, 0

    def replay(self) -> None:
        self.step._reset()  # a graph writes its gradients, it does not add to them
        self.step._body()
        self.replays += 1


def test_a_stack_replayed_as_a_cuda_graph_trains_the_eager_stack(tmp_path, monkeypatch, one_thread):
    """The capture path as on CUDA (warm-up, record, replay), its CUDA parts replaced by the stand-in."""
    import mixit_lab.training.stack as stack

    class OnTheCpu(StackedStep):
        made: list[StackedStep] = []

        def __init__(self, loops, graph=False):
            super().__init__(loops, graph)
            self.capturing = graph
            OnTheCpu.made.append(self)

        def _side_stream(self):
            return nullcontext()

        def _record(self):
            return Replayed(self)

    cfgs = configs(variant="mixit")
    eager = train_stack(cfgs, [tmp_path / f"eager{i}" for i in range(3)], progress=False)
    monkeypatch.setattr(stack, "graph_refusal", lambda *a: None)
    monkeypatch.setattr(stack, "StackedStep", OnTheCpu)
    graphed = [TrainConfig(**{**c.to_dict(), "cuda_graph": True}) for c in cfgs]
    replayed = train_stack(graphed, [tmp_path / f"graph{i}" for i in range(3)], progress=False)
    assert [s["cuda_graph"] for s in replayed] == [True] * 3 and [s["cuda_graph"] for s in eager] == [False] * 3
    assert OnTheCpu.made[0].graph.replays == BASE["steps"] - 3  # after 3 warm-up steps
    for i in range(3):
        assert_same_run(tmp_path / f"eager{i}", tmp_path / f"graph{i}")


def test_a_stack_asked_for_a_cuda_graph_on_the_cpu_says_so_and_steps_eagerly(tmp_path, one_thread):
    cfgs = configs()[:2]
    eager = train_stack(cfgs, [tmp_path / "e0", tmp_path / "e1"], progress=False)
    graphed = [TrainConfig(**{**c.to_dict(), "cuda_graph": True}) for c in cfgs]
    with pytest.warns(UserWarning, match="cuda_graph: CUDA graphs need a CUDA device, not cpu; the stack takes eager"):
        asked = train_stack(graphed, [tmp_path / "g0", tmp_path / "g1"], progress=False)
    assert [s["cuda_graph"] for s in asked] == [False, False]
    assert [s["loss"] for s in asked] == [s["loss"] for s in eager]  # to the digit


def test_runs_of_other_shapes_do_not_stack():
    cfgs = configs()
    cfgs.append(TrainConfig(**{**BASE, "d_model": 32}))
    assert stack_key(cfgs[0]) == stack_key(cfgs[1]) != stack_key(cfgs[3])
    with pytest.raises(ValueError, match=r"run 3 differs from run 0 in d_model; .* only in seed, lr"):
        check_stackable(cfgs)


def test_frozen_heads_and_a_used_directory_are_refused(tmp_path, one_thread):
    cfgs = configs(model_extra={"freeze": "v@0.h1"})
    with pytest.raises(ValueError, match="heads frozen within a matrix"):
        train_stack(cfgs, [tmp_path / f"f{i}" for i in range(3)], progress=False)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        train_stack(configs(), [tmp_path / "a", tmp_path / "used", tmp_path / "b"], progress=False)
    assert not (tmp_path / "a").exists()  # nothing trained: every run is checked first


def test_a_sweep_stacks_the_runs_that_can_and_trains_the_others_alone(tmp_path, capsys):
    from mixit_lab.cli.main import main

    out = tmp_path / "sweep"
    code = main(["sweep", "--tasks", "addition", "--digits", "2", "--variants", "standard", "frozen_qk", "mixit",
                 "--d-model", "16",
                 "--n-layers", "1", "--n-heads", "2", "--seeds", "0", "1", "2", "--lr", "0.001", "0.003",
                 "--steps", "8", "--batch-size", "16", "--eval-every", "8", "--eval-samples", "32", "--workers", "1",
                 "--stack", "4", "--device", "cpu", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    summaries = [read_summary(p.parent) for p in sorted(out.glob("*/summary.json"))]
    assert len(summaries) == 18 and {s["status"] for s in summaries} == {"finished"}
    stacked = sorted(s["stacked"] for s in summaries)  # standard and frozen_qk's 12 runs: 3 stacks of 4; mixit's 6: 4, 2
    assert stacked == [2] * 2 + [4] * 16


def test_plan_jobs_groups_what_stacks_in_order_and_leaves_the_rest_alone(tmp_path):
    from mixit_lab.training.jobs import StackJob, TrainJob, plan_jobs

    runs = [(f"s{i}", cfg) for i, cfg in enumerate(configs())]
    runs.insert(1, ("wide", TrainConfig(**{**BASE, "d_model": 32})))
    runs.append(("micro", TrainConfig(**{**BASE, "micro_batch_size": 8})))
    runs.append(("mixit", TrainConfig(**{**BASE, "variant": "mixit"})))
    runs.append(("frozen", TrainConfig(**{**BASE, "variant": "frozen_mlp"})))  # built as s0-s2: it stacks with s2
    jobs = plan_jobs(runs, tmp_path, "sweep", stack=2)
    assert [[j.name for j in job.runs] if isinstance(job, StackJob) else job.name for job in jobs] == [
        ["s0", "s1"], ["s2", "frozen"], "wide", "micro", "mixit"]
    assert all(isinstance(j, TrainJob) for j in plan_jobs(runs, tmp_path, "sweep", stack=1))


def test_wandb_which_keeps_one_run_a_process_is_not_stacked(tmp_path):
    from mixit_lab.training.jobs import TrainJob, plan_jobs

    with pytest.raises(ValueError, match="W&B keeps one run open a process"):
        train_stack(configs(), [tmp_path / f"r{i}" for i in range(3)], tracker="wandb", progress=False)
    assert not list(tmp_path.iterdir())
    runs = [(f"s{i}", cfg) for i, cfg in enumerate(configs())]
    with pytest.warns(UserWarning, match="stack=3 is left out with the W&B tracker"):
        jobs = plan_jobs(runs, tmp_path, "sweep", "wandb", stack=3)
    assert all(isinstance(j, TrainJob) for j in jobs) and len(jobs) == 3


def test_a_stack_that_cannot_start_trains_its_runs_alone(tmp_path):
    from mixit_lab.training.jobs import StackJob, TrainJob, train_stacked

    cfgs = configs(model_extra={"freeze": "v@0.h1"})  # refused by the stack (heads frozen within a matrix)
    job = StackJob(tuple(TrainJob(f"r{i}", cfg.to_dict(), str(tmp_path / f"r{i}"), "sweep") for i, cfg in enumerate(cfgs)))
    with pytest.warns(UserWarning, match="its runs go on alone"):
        rows = train_stacked(job)
    assert [r["run"] for r in rows] == ["r0", "r1", "r2"]
    assert [r["status"] for r in rows] == ["finished"] * 3 and [r["stacked"] for r in rows] == [1] * 3
