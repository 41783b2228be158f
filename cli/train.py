"""`mixit train`, `mixit tune` and `mixit sweep`: one model, each variant's learning rate, a grid of models.

Task parameters become options automatically from the task registry (e.g. `--digits` for addition, `--pairs` for
retrieval, `--text-file` for lm); an option that the chosen task does not take is an error. A list-valued parameter
(annotated `list[...]`) takes several values and may repeat. `--task package.module:Class` (or path/to/file.py:Class)
is imported and registered before the parser is built (`register_task_arg`), so its parameters are options too.
"""

from __future__ import annotations

import argparse
import itertools
import os
from pathlib import Path
from typing import Any, Sequence

from mixit_lab.models import VARIANTS, CheckpointError
from mixit_lab.training.rundir import DATA_CACHE_DIR, RUN_FILE, RUNS_SUMMARY, TUNING_FILE, RunDamaged, RunLocked, is_run_dir
from mixit_lab.training.tasks import TASKS, TrainStream, is_import_path, load_task_class, register_task, task_parameters
from mixit_lab.training.trackers import TRACKERS, check_tracker
from mixit_lab.training.parallel import Ranks, torchrun_command
from mixit_lab.training.config import PRECISIONS, TrainConfig
from mixit_lab.training.optim import SCHEDULES
from mixit_lab.training.resolve import resolve, resolve_device
from mixit_lab.training.settings import SettingsChanged
from mixit_lab.training.trainer import train

from .common import (
    EXIT_FAILED, EXIT_OK, CLIError, stop_on_sigterm, add_executor_options, executor_from_args, check_output_dir,
    check_runs_per_gpu_applies, input_errors, path_arg, whole_number_arg,
)
from .options import add_field_options, field_values, option_flag

DEFAULTS = TrainConfig()  # the one set of training defaults: --variant, --seed, tune's --variants and --seeds start
# here, TRAIN_OPTIONS' options from the fields themselves


def _add_task_options(parser: argparse.ArgumentParser, many: bool) -> None:
    group = parser.add_argument_group("task parameters (defaults are the task's own)")
    for name, (kind, tasks, is_list) in task_parameters().items():
        flag = f"--{name.replace('_', '-')}"
        help = f"for {', '.join(tasks)}"
        if is_list:  # one list (several values, or the option repeated), in a sweep too
            group.add_argument(flag, dest=f"task_{name}", type=kind, nargs="+", action="extend",
                               metavar=name.upper(), help=help + "; several values or repeated")
        else:
            group.add_argument(flag, dest=f"task_{name}", type=kind, nargs="+" if many else None,
                               metavar=name.upper(), help=help)


def _task_arg(value: str) -> str:
    """--task: a task name, or the import path of a Task class (package.module:Class, path/to/file.py:Class),
    which is imported and registered; gives the task's name."""
    if value in TASKS:
        return value
    if not is_import_path(value):
        raise argparse.ArgumentTypeError(f"unknown task {value!r}; allowed: {', '.join(sorted(TASKS))}, or your own "
                                         "Task class as package.module:Class or path/to/file.py:Class")
    try:
        return register_task(load_task_class(value)).name
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _task_values(argv: Sequence[str]) -> list[str]:
    """The values of --task (train, tune) or --tasks (sweep: several, up to the next option) in argv."""
    flag = "--tasks" if argv[0] == "sweep" else "--task"
    values = []
    for i, arg in enumerate(argv):
        if arg == flag:
            following = argv[i + 1:] if flag == "--tasks" else argv[i + 1:i + 2]
            values += list(itertools.takewhile(lambda a: not a.startswith("-"), following))
        elif arg.startswith(flag + "="):
            values.append(arg.partition("=")[2])
    return values


def register_task_arg(argv: Sequence[str]) -> None:
    """`mixit train --task package.module:Class` (tune, and sweep's --tasks, alike): import and register the class
    before the parser is built, so that its constructor parameters become options (--length ...). CLIError (one
    line) if it cannot be."""
    if not argv or argv[0] not in ("train", "tune", "sweep"):
        return
    for value in filter(is_import_path, _task_values(argv)):
        try:
            _task_arg(value)
        except argparse.ArgumentTypeError as e:
            flag = "--tasks" if argv[0] == "sweep" else "--task"
            raise CLIError(f"mixit {argv[0]}: error: {flag}: {e}") from None


def _task_params(args: argparse.Namespace, task: str) -> dict[str, Any]:
    """Collect the task options given on the command line, checking they apply to `task`."""
    params = {}
    for name, (_, tasks, _) in task_parameters().items():
        value = getattr(args, f"task_{name}", None)
        if value is None:
            continue
        if task not in tasks:
            allowed = [n for n, opt in task_parameters().items() if task in opt.tasks]
            raise CLIError(
                f"--{name.replace('_', '-')} does not apply to task {task!r} "
                f"(its parameters: {', '.join('--' + a.replace('_', '-') for a in allowed) or 'none'})"
            )
        params[name] = value
    return params


# The TrainConfig fields that are options of mixit train, tune and sweep, in --help's order, each with what its --help
# says beyond the flag, type and default that the field gives (mixit_lab.cli.options): the one list of them.
TRAIN_OPTIONS: dict[str, dict[str, Any]] = {
    "d_model": {}, "n_layers": {}, "n_heads": {}, "lr": {}, "steps": {}, "batch_size": {},
    "sampling": {"choices": TrainStream.SAMPLINGS,
                 "help": "uniform: rows drawn independently (default); epochs: each row of a finite training set "
                         "(memorize) once per epoch, as the authors' Trainer draws keys"},
    "micro_batch_size": {"metavar": "ROWS",
                         "help": "accumulate each batch's gradient over slices of ROWS rows, to fit a GPU's memory "
                                 "(the same run up to float rounding; default: the whole batch at once)"},
    "schedule": {"choices": SCHEDULES,
                 "help": "the learning-rate schedule: ours (warmup, then cosine decay to 10%% of --lr) or the "
                         "authors' scripts' default (warmup max(4%% of --steps, 500), then linear decay to 0)"},
    "warmup_steps": {"help": "default: the schedule's (ours: 5%% of --steps)"},
    "weight_decay": {}, "grad_clip": {}, "eval_every": {},
    "eval_samples": {"help": "default: the task's held-out set size"},
    "tune_samples": {"metavar": "ROWS",
                     "help": "also score ROWS rows of the task's tuning set (a validation set held out of training "
                             "and apart from the eval rows) at each evaluation, as tune_loss and tune_acc: what mixit "
                             "tune chooses a learning rate on (0: none)"},
    "checkpoint_every": {"help": "default: every eval"},
    "device": {"help": "auto (CUDA if present, else CPU), cpu, cuda, cuda:N, mps"},
    "compile": {"help": "wrap the model in torch.compile"},
    "cuda_graph": {"help": "on CUDA, capture the training step once as a CUDA graph and replay it (fewer launches: "
                           "faster small models); eager on the CPU, with several processes or micro-batches"},
    "keep_checkpoints": {"metavar": "N",
                         "help": "also keep the model at initialization and at N log-spaced steps up to the last, in "
                                 "RUN/checkpoints/step_NNNNNN/ (score them with mixit analyze --checkpoints)"},
    "precision": {"choices": PRECISIONS,
                  "help": "auto: bf16 autocast on CUDA, fp32 elsewhere; fast: as auto, but bf16 on a CPU whose bf16 "
                          "matmuls measure >= 1.25x fp32's (measured once per machine); bf16: autocast on any CPU "
                          "too; fp32: full precision everywhere"},
}
SIZE_FIELDS = ("d_model", "n_layers", "n_heads")  # a model's size: a sweep's grid of sizes is their product
SWEPT = (*SIZE_FIELDS, "lr")  # mixit sweep takes several values of these (a grid); train and tune one


def _add_training_options(parser: argparse.ArgumentParser, many: bool, lr: bool = True) -> None:
    """TRAIN_OPTIONS (all but --lr for mixit tune, which tries several), and --tracker and --bidirectional."""
    names = [name for name in TRAIN_OPTIONS if lr or name != "lr"]
    split = names.index("precision")  # --tracker, not a field, keeps its place before --precision in --help

    def add(some: Sequence[str]) -> None:
        add_field_options(parser, TrainConfig, {n: TRAIN_OPTIONS[n] for n in some}, many=SWEPT if many else ())

    add(names[:split])
    parser.add_argument("--tracker", choices=TRACKERS, default="none",
                        help="also send the metrics to TensorBoard (RUN/tensorboard/) or Weights & Biases "
                             "(offline unless WANDB_MODE=online); metrics.jsonl stays the source of truth")
    add(names[split:])
    parser.add_argument("--bidirectional", action="store_true", help="non-causal attention")


SET_BY_TRAINING = ("variant", "d_model", "n_layers", "n_heads", "n_ctx", "d_vocab", "seed")  # ModelConfig fields


def _model_options(pairs: Sequence[str]) -> dict[str, Any]:
    """--model-option KEY=VALUE pairs as ModelConfig fields; values are YAML scalars (0.5, true, null)."""
    import dataclasses

    from mixit_lab.models.files import load_yaml

    from mixit_lab.models import ModelConfig

    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig) if f.name not in SET_BY_TRAINING}
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in defaults:
            raise ValueError(f"--model-option {pair!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(defaults))}")
        if key in out:
            raise ValueError(f"--model-option {pair!r}: {key} is already set ({key}={out[key]!r}); give each key once")
        parsed, default = load_yaml(value), defaults[key]
        number = (int, float)
        if (isinstance(default, bool) and not isinstance(parsed, bool)) or (
                isinstance(default, number) and not isinstance(default, bool)
                and (not isinstance(parsed, number) or isinstance(parsed, bool))):
            kind = "true or false" if isinstance(default, bool) else "a number"
            raise ValueError(f"--model-option {pair!r}: {key} must be {kind}")
        out[key] = parsed
    return out


def _comma_list(option: str, value: Any) -> list[str]:
    """A grid option's entries: from repeated options (a list of comma-separated strings), a YAML list or a string."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{option}={value!r} must be comma-separated names")
    return [e.strip() for v in value for e in v.split(",") if e.strip()]


def _train_config(args: argparse.Namespace, **fields: Any) -> TrainConfig:
    """The TrainConfig the options ask for: TRAIN_OPTIONS' values, the model options and `fields` (task, variant,
    seed); one line, exit 2, for a value it refuses."""
    extra = {"causal": False} if args.bidirectional else {}
    with input_errors(args.command):  # one line, `mixit COMMAND: error: ...`
        extra.update(_model_options(getattr(args, "model_option", [])))
        # The trainability grid on top of --variant: every --freeze and a --model-option freeze=... add up.
        freeze = [*_comma_list("--model-option freeze", extra.get("freeze")),
                  *_comma_list("--freeze", getattr(args, "freeze", None))]
    if freeze:
        extra["freeze"] = list(dict.fromkeys(freeze))  # in order, each once
    attention = getattr(args, "attention", None)
    if attention:  # one entry per layer: two sources would be ambiguous, so one of them only
        if len(attention) > 1 or "attention" in extra:
            raise CLIError(f"mixit train: error: --attention given {len(attention) + ('attention' in extra)} times; give each layer's "
                           "attention once, comma-separated (e.g. --attention mixing,softmax)")
        extra["attention"] = attention[0]
    with input_errors(args.command):
        return TrainConfig(**field_values(args, TRAIN_OPTIONS), model_extra=extra, **fields)


def _grid_overrides(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """What the sweep's options say, for mixit_lab.training.sweep.build_grid: only the options given explicitly
    override the grid file; without a grid file, the defaults shown in --help apply."""
    given = {a.split("=")[0] for a in argv if a.startswith("--")}
    out: dict[str, Any] = {"variants": args.variants, "tasks": args.tasks, "seeds": args.seeds}
    out["task_options"] = {
        name: [value] if opt.many else value
        for name, opt in task_parameters().items()
        if (value := getattr(args, f"task_{name}"))
    }
    if given & {option_flag(name) for name in SIZE_FIELDS} or args.grid is None:
        out["sizes"] = [dict(zip(SIZE_FIELDS, size))
                        for size in itertools.product(*(getattr(args, name) for name in SIZE_FIELDS))]
    if option_flag("lr") in given or args.grid is None:
        out["lrs"] = args.lr
    out["train"] = {name: getattr(args, name) for name in TRAIN_OPTIONS
                    if name not in SWEPT and (option_flag(name) in given or args.grid is None)}
    if args.bidirectional:
        out["train"]["model_extra"] = {"causal": False}
    return {k: v for k, v in out.items() if v}


def register(sub: Any) -> None:
    """Add `train`, `tune` and `sweep` to the `mixit` parser (called by mixit_lab.cli.main)."""
    p = sub.add_parser("train", help="train one model", description="Train one model on one task.")
    _add_tune_parser(sub)
    p.set_defaults(handler=cmd_train)
    p.add_argument("--task", required=True, type=_task_arg, metavar="TASK",
                   help=f"one of {', '.join(TASKS)}, or your own Task class: package.module:Class (found from the "
                        "current directory) or path/to/file.py:Class")
    p.add_argument("--variant", default=DEFAULTS.variant, choices=list(VARIANTS), metavar="VARIANT",
                   help=f"one of {', '.join(VARIANTS)}")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed)
    p.add_argument("--out", required=True, type=path_arg, help="run directory (e.g. checkpoints/NAME)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                   help="another ModelConfig field, e.g. qk_init_std=0.044, or residual_scale=0.5 with --variant "
                        "mixit or shaped (repeatable, each key once; a field that changes nothing in the model is refused)")
    p.add_argument("--freeze", metavar="PARTS", action="append",
                   help="also keep these at their init: comma-separated, from embed, pos, qk, q, k, v, o, mix, mlp, "
                        "norms (every norm, ln_final too), ln_final, unembed; PART@L for layer L only (norms@L: its "
                        "ln1, ln2), PART@L.hH for head H of layer L (qk, q, k, v, o, mix; o's head leaves the shared "
                        "b_O trained), e.g. v,o or qk@1 or v@0.h2; repeats add up")
    p.add_argument("--attention", metavar="KINDS", action="append",
                   help="each layer's attention, comma-separated (one entry: every layer): softmax, shaped, mixing "
                        "(fixed random, as MixiT) or learned (trained, input-independent), e.g. mixing,softmax")
    p.add_argument("--nproc", type=int, default=1, metavar="N",
                   help="train data-parallel on N local processes (launches torchrun; gloo on CPU, NCCL on GPUs)")
    _add_training_options(p, many=False)
    _add_task_options(p, many=False)

    s = sub.add_parser("sweep", help="train a grid of models in parallel",
                       description="Train variants x tasks x sizes x seeds x lrs; finished runs are skipped.")
    s.set_defaults(handler=cmd_sweep)
    s.add_argument("grid", nargs="?", type=path_arg, help="YAML/JSON grid file (options below override it)")
    s.add_argument("--variants", nargs="+", help=f"'all' or some of: {', '.join(VARIANTS)}")
    s.add_argument("--tasks", nargs="+", type=_task_arg, metavar="TASK",
                   help=f"some of: {', '.join(TASKS)}, or your own Task classes (package.module:Class, "
                        "path/to/file.py:Class), as mixit train --task takes them")
    s.add_argument("--seeds", type=int, nargs="+")
    s.add_argument("--workers", type=int, default=None,
                   help="parallel worker processes (default: 1; runs on CUDA: GPUs x --runs-per-gpu, which a given "
                        "--workers caps)")
    s.add_argument("--out", type=path_arg, default=Path("checkpoints/sweep"), help="directory of run directories")
    s.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    add_executor_options(s)
    _add_training_options(s, many=True)
    _add_task_options(s, many=True)


def _add_tune_parser(sub: Any) -> None:
    """`mixit tune`: choose each variant's learning rate on its tuning set (mixit_lab.training.tuning)."""
    t = sub.add_parser("tune", help="choose each variant's learning rate on a tuning set",
                       description="Train each variant at each learning rate (and seed) and choose, per variant, the "
                                   "learning rate that scores best on the task's tuning set: rows held out of training "
                                   "and apart from the eval rows a run reports (mixit_lab.training.tuning). Writes OUT/tuning.json.")
    t.set_defaults(handler=cmd_tune)
    t.add_argument("--task", required=True, type=_task_arg, metavar="TASK", help="as for mixit train")
    t.add_argument("--variants", nargs="+", default=[DEFAULTS.variant], metavar="VARIANT",
                   help=f"some of: {', '.join(VARIANTS)}")
    t.add_argument("--lrs", type=float, nargs="+", required=True, metavar="LR",
                   help="the learning rates tried (two or more), e.g. 3e-4 1e-3 3e-3 1e-2")
    t.add_argument("--seeds", type=int, nargs="+", default=[DEFAULTS.seed], help="the tuning seeds")
    t.add_argument("--workers", type=int, default=1, help="parallel worker processes")
    t.add_argument("--stack", type=whole_number_arg("runs trained as one in a process; 1: each alone"), default=1,
                   metavar="N", help="train up to N of the runs (the learning rates and seeds of a variant) as one in "
                                     "each process, as mixit sweep --stack (default: 1, each run alone)")
    t.add_argument("--out", required=True, type=path_arg, help="directory of the runs and tuning.json")
    t.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE", help="as for mixit train")
    _add_training_options(t, many=False, lr=False)
    _add_task_options(t, many=False)
    t.set_defaults(tune_samples=512)  # a tuning needs its tuning rows; mixit train's default is none


def _folder_of_runs(out: Path) -> str:
    """What to do with a folder of runs (a sweep's or a reproduction's) given as one run's --out; "" if it is not one."""
    runs = sorted(str(p.parent) for pattern in ("*/" + RUN_FILE, "*/*/" + RUN_FILE) for p in out.glob(pattern))
    if not runs:
        return ""
    return (f"it is a folder of runs ({len(runs)}): give one of them as --out (e.g. --out {runs[0]}), rerun the sweep "
            "or reproduction that made it to continue them all, or choose another --out")


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _train_config(args, task=args.task, task_params=_task_params(args, args.task), variant=args.variant,
                        seed=args.seed)
    with input_errors("train"):
        check_output_dir("--out", args.out)  # a file, below a file, read-only, not creatable (/proc/...): one line
        # Resolve the run as train() will (the task, the model, the eval size, the device: a GPU asked for and not
        # there is bad input too) before the run directory is written, the token cache where train() looks for it;
        # strictly: a model option that changes nothing is refused, not recorded, and a model too large for memory
        # before it is built.
        resolve(cfg, args.out.parent / DATA_CACHE_DIR, strict=True)
        check_tracker(args.tracker)
    if args.resume and not is_run_dir(args.out):
        raise CLIError(f"mixit train: error: --resume: {args.out} holds no run to resume (no {RUN_FILE}); "
                       + (_folder_of_runs(args.out) or "drop --resume to start one"))
    if args.nproc != 1:
        return _launch_torchrun(args)
    try:  # what train() refuses before its first step: the run directory given is not one it may (re)start
        summary = train(cfg, args.out, resume=args.resume, progress=not args.quiet, tracker=args.tracker)
    except (FileExistsError, SettingsChanged, RunDamaged, RunLocked, CheckpointError) as e:
        folder = isinstance(e, FileExistsError) and not is_run_dir(args.out) and _folder_of_runs(args.out)
        raise CLIError(f"mixit train: error: {args.out} is not a run; {folder}" if folder else f"mixit train: error: {e}") from None
    if Ranks.from_env().main:  # under torchrun, rank 0 speaks for the run
        print(
            f"{args.out}: {summary['status']} at step {summary['step']}, "
            f"eval_acc {summary.get('eval_acc') or 0:.4f}, eval_loss {summary.get('eval_loss') or float('nan'):.4f}"
        )
    return 0


def _process_limit(device: str) -> tuple[int, str]:
    """How many training processes this machine can run side by side: one per GPU on CUDA, one per CPU core
    (that this process may use) elsewhere."""
    import torch

    if resolve_device(device).type == "cuda":
        return torch.cuda.device_count(), "GPUs"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores, "CPU cores"


def _launch_torchrun(args: argparse.Namespace) -> int:
    """`mixit train --nproc N ...` is `torchrun --nproc-per-node N -m mixit_lab.cli train ...` (the same options, less --nproc)."""
    import subprocess

    if args.nproc < 1:
        raise CLIError(f"mixit train: error: --nproc={args.nproc} must be >= 1")
    if Ranks.from_env().launched:
        raise CLIError("mixit train: error: --nproc: already running under torchrun; drop --nproc")
    if args.batch_size % args.nproc:
        raise CLIError(f"mixit train: error: --batch-size={args.batch_size} must be divisible by --nproc={args.nproc}")
    limit, what = _process_limit(args.device)
    if args.nproc > limit:
        raise CLIError(f"mixit train: error: --nproc={args.nproc} is more than the {limit} {what} of this machine; "
                       f"allowed: 1..{limit}")
    argv, skip = [], False
    for a in args.argv:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            argv.append(a)
    env = dict(os.environ)
    # torchrun's default is one thread per process; share this machine's cores instead (and keep it quiet)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc)))
    env.setdefault("PYTHONFAULTHANDLER", "1")  # a worker killed by a native crash prints where its Python was
    return subprocess.run(torchrun_command(args.nproc, ["mixit_lab.cli", *argv]), env=env).returncode


def cmd_tune(args: argparse.Namespace) -> int:
    import pandas as pd

    from mixit_lab.training.sweep import Executor
    from mixit_lab.training.tuning import tune

    cfg = _train_config(args, task=args.task, task_params=_task_params(args, args.task), variant=args.variants[0],
                        seed=args.seeds[0])
    with input_errors("tune"):
        check_output_dir("--out", args.out)
        bad = [v for v in args.variants if v not in VARIANTS]
        if bad:
            raise ValueError(f"--variants {bad[0]!r} is not one of: {', '.join(VARIANTS)}")
        if len(set(args.lrs)) < 2:
            raise ValueError(f"--lrs {' '.join(map(str, args.lrs))}: give two learning rates or more to choose among")
        if args.workers < 1:
            raise ValueError(f"--workers={args.workers} must be >= 1")
        check_tracker(args.tracker)
        resolve_device(cfg.device)
    try:
        with stop_on_sigterm():
            tuning = tune(cfg, args.variants, args.lrs, args.out, seeds=args.seeds,
                          workers=Executor(workers=args.workers, stack=args.stack), tracker=args.tracker,
                          tune_samples=args.tune_samples)
    except (SettingsChanged, RunDamaged, RunLocked) as e:
        raise CLIError(f"mixit tune: error: {e}") from None
    table = tuning.selected()
    for row in table.itertuples():
        scores = ", ".join(f"{lr:g}: " + ("failed" if s is None else f"{s:.4g}") for lr, s in row.scores.items())
        chosen = "none (no learning rate finished)" if pd.isna(row.lr) else f"{row.lr:g}"
        print(f"{row.variant}: lr {chosen} ({row.metric} by lr: {scores})")
    print(f"{len(tuning.runs)} runs; the record is {args.out / TUNING_FILE}")
    failed = [r for r in tuning.runs if r["status"] != "finished"]
    for r in failed:
        print(f"{r['run']}: {r['status']}")
    return EXIT_FAILED if table["lr"].isna().any() else EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    from mixit_lab.training.sweep import build_grid, run_sweep

    with input_errors("sweep"):
        check_output_dir("--out", args.out)  # a file, below a file, read-only: before anything runs (--dry-run too)
        # the token cache is shared by the runs, which live in args.out
        runs = build_grid(args.grid, _grid_overrides(args, args.argv), cache_dir=args.out / DATA_CACHE_DIR)
    if args.dry_run:
        for name, _ in runs:
            print(name)
        return 0
    if args.workers is not None and args.workers < 1:
        raise CLIError(f"mixit sweep: error: --workers={args.workers} must be >= 1")
    with input_errors("sweep"):
        devices = {cfg.device for _, cfg in runs}
        for device in devices:
            resolve_device(device)
        check_runs_per_gpu_applies(args, devices)
        check_tracker(args.tracker)
    executor = executor_from_args(args, args.workers or 1)
    try:
        with stop_on_sigterm():  # SIGTERM stops the workers as Ctrl-C does (exit 143)
            summary = run_sweep(runs, args.out, workers=executor, tracker=args.tracker)
    except (SettingsChanged, RunDamaged, RunLocked) as e:  # before any run trains: other settings, a run.json cut
        # short, or another sweep in args.out
        raise CLIError(f"mixit sweep: error: {e}") from None
    columns = [c for c in ("run", "status", "step", "eval_loss", "eval_acc", "params_trainable", "tokens_per_s")
               if c in summary]
    print(summary[columns].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    failed = (summary["status"] != "finished").sum()
    for row in summary[summary["status"] != "finished"].to_dict("records") if "message" in summary else []:
        if isinstance(row["message"], str) and row["message"]:  # why each run failed, one line each
            print(f"{row['run']}: {row['status']}: {row['message'].strip().splitlines()[0]}")
    print(f"{len(summary)} runs ({failed} not finished); summary in {args.out / RUNS_SUMMARY}")
    return EXIT_FAILED if failed else EXIT_OK
