"""The authors' own training code, run at the settings of one of our preset studies: a reference number
for each of our results that comes from their scripts, not from our re-implementation.

    python benchmarks/authors_reference.py --authors-repo ../MixiT --authors-python ../authors-env/bin/python \\
        --preset quick --study algorithmic --task dyck --variants standard mixit --seeds 0 1 \\
        --out reproduce/authors_reference.json [--jobs 2] [--dry-run]

Filters: `--task`, `--task-param pairs=8`, `--n-layers 2 6`, `--variants`, `--seeds`. `--jobs N` runs N at
once, `--threads` torch threads each, `--log-dir` keeps their logs, `--launch-deadline EPOCH_S` starts no run
after that time (for time-boxed batches).

Learning rates and schedules: a tuned study's settings run at the learning rate chosen for each (the preset's
recorded tuning, reproduce/tuning/PRESET.json, or `--tuning FILE`), as `mixit reproduce` trains them.
`--schedule authors` runs their scripts at their own default schedule instead of ours: no `--warmup_steps`, so each
script warms up as it does by default (depth.py 300 steps, modadd_exp.py 50, hdmemorize_exp.py 500, the classifier
utils.py's max(4% of the steps, 500)) and decays as always (cosine to 0; the classifier linearly), recorded as
`schedule: authors` with that warmup; the report sets those
records beside ours in the end-to-end table. `--set-task-param KEY=VALUE` changes a data-processing choice (a
control for tracing a difference, e.g. `split_seed=1` or `tokenizer=bpe-llama3`; write it to another `--out`).

`--authors-repo` is a checkout of princeton-pli/MixiT (we read commit 22ce029) and `--authors-python` a
Python with their requirements (torch, transformers 4.51, accelerate, datasets). Nothing of theirs is
copied here: each run starts their script in their Python through benchmarks/authors_runner.py, in a
scratch directory, and the final metrics come back as JSON. Records are merged into `--out`; a record with
the same key (preset, study, task, task parameters, variant, sizes, seed) is replaced. `--dry-run` prints
the command lines and the run-time overrides and trains nothing. `--study algorithmic-mixit` etc. pick the
study by its name in the preset; without `--variants` / `--seeds` / `--task` the study's own lists are used
(for `depth` the variant `mixit_weight_frozen` is added, see below).

Which script runs what (docs/fidelity.md, "Their algorithmic scripts", "Their depth study"):

| our task | their script | their task |
| --- | --- | --- |
| addition (digits d) | depth.py | additionstream_d (exactly d-digit operands) |
| dyck (max_pairs m) | depth.py | dyckstream_m |
| retrieval (pairs k, num_values v) | depth.py | condattendstream_k with vocab_size 2(v+1): their values are 1..vocab_size//2-1 |
| modadd (p) | modadd_exp.py | modadds_p (95% train, as ours) |
| memorize (n, d, label_tokens keys) | hdmemorize_exp.py | hdmemorize_n_d_1.0 (labels are key tokens of position 0, = our `label_tokens: keys`) |
| sentiment (seq_len L) | trainer_classifier.py | yelp_polarity with `--max_seq_len=L`; tokenizer and data ours, see below |

Every run passes `--model_name_or_path=llama` (their Llama file, as their Slurm scripts do) and our
width (`--n_embd`), layers (`--n_layer`), heads (`--n_head`), seed (`--seed`), peak learning rate
(`--learning_rate`), weight decay (`--weight_decay`), warmup (`--warmup_steps`, our
`TrainConfig.warmup`: `warmup_steps` if the preset sets it, else 5% of the steps; none with `--schedule
authors`), batch size and number of optimizer steps. Variants:

| ours | their flags |
| --- | --- |
| standard | `--shaped_attention=vanilla --weight_frozen=0` |
| frozen_qk | `vanilla --weight_frozen=0 --freeze_attention=True` (depth.py, hdmemorize_exp.py; modadd_exp.py has no such flag) |
| frozen_mlp | `vanilla --weight_frozen=0 --freeze_mlp=True` (same scripts) |
| mixit | `--shaped_attention=mixing --weight_frozen=0` (their model then has learned positions and no W_Q/W_K) |
| random | `vanilla --weight_frozen=1` (depth.py only: token embeddings, positions and readout train) |
| mixit_weight_frozen | `mixing --weight_frozen=1` (depth.py only): the MixiT of their depth array script's default |
| shaped | `--shaped_attention=shaped --weight_frozen=0` |

`mixit_weight_frozen` (only token embeddings, learned positions and readout train) is added to our
`depth` study's variants by default. `--weight_frozen` is always passed: all three scripts default it to 1
(everything but the embeddings and readout frozen). modadd_exp.py and hdmemorize_exp.py freeze by a name list without `embed_tokens`, so with
their Llama file `weight_frozen=1` would freeze the token embeddings too; `random` is refused there.

Everything else is theirs: AdamW with HF's betas (0.9, 0.999) and clipping 1, cosine decay to 0, fp32
on CPU, their initialisation (0.02 for every matrix, W_Q/W_K included: our presets' `qk_init_std` is not
carried over), their data generators and their eval sets (4,000 held-out sequences for the streaming tasks,
the held-out 5% for modular addition, every key for memorization), their metric (`compute_metrics`).

Behaviour of their code that is left as it is (it affects what the numbers mean):
- hdmemorize_exp.py seeds torch with its default seed (0) before it reads the command line and not again
  before it builds the model, so `--seed` changes only the order of the training batches (the Trainer's
  seed), not the initialisation; the labels come from a fixed seed (12345) in any case. `--seed-init`
  (a control, not the reference: write its records to another `--out`) pins their global `seed` to ours,
  so that torch is seeded with it before the model is built and each seed has its own initialisation.
- The streaming tasks skip every training sequence that equals one of the 4,000 eval sequences. With
  short strings that recur (dyck with 8 pairs: 1,807 distinct eval strings), the skipped share is large
  (65% of dyck draws), so the eval set holds the frequent strings that training never sees.

Run-time changes to how their code runs (benchmarks/authors_runner.py does them; their files are not
edited):

1. Pinned globals. Their scripts keep settings in module globals that the command line either cannot
   reach or that are overwritten after it is read. The runner executes the script in a namespace where
   a few names keep our value whatever the script assigns later:
   - `device = "cpu"` (all scripts; their default is "cuda", and their argument parser rejects an
     unknown `--device` flag, so it cannot be passed on the command line).
   - depth.py: `train_size = steps * batch_size`, with `--max_steps=1`. depth.py reads `--max_steps` as
     passes over `train_size` sequences and trains `max_steps * train_size // batch` optimizer steps;
     the task files set `train_size` (80,000 or 200,000), which gives no whole number of passes for our
     step counts. The training data is an endless generator either way; `train_size` is used for the
     step count only.
   - modadd_exp.py: `per_device_train_batch_size = ours` (the script hard-codes 4,000 after reading the
     command line). The prime comes from `--task=modadds_p` (their default is 199); the 95% split is theirs
     and equals ours.
   - hdmemorize_exp.py: `task = "hdmemorize_<n>_<d>_1.0"` (the script reassigns `hdmemorize_512_2_1.0`
     after reading the command line) and `per_device_train_batch_size = ours` (hard-coded there to
     min(keys, 32,768)).
2. `--report_to=none` and `--disable_tqdm=True` (their TrainingArguments flags): no logging integration
   (none is reachable offline), no progress bar in the log. Display only.
3. `wandb` and `sklearn` stand-ins when they are not installed (modadd_exp.py and hdmemorize_exp.py import
   them; `wandb.init`/`log` only log, PCA only runs with `calc_pca=True`); WANDB_MODE=disabled always.
4. `transformers.Trainer.evaluate` is wrapped to keep the metrics of each evaluation. Under transformers
   4.51 their scripts' `evaluation_strategy="steps"` sets an attribute that no longer exists (the field is
   `eval_strategy`), so no evaluation runs during training; the reported value is their final
   `trainer.evaluate()` after the last step.
5. The working directory is a fresh scratch directory holding links to their `configurator.py` and
   `task_*.py` (read by relative path), so their run folders and checkpoints land there and are deleted.
6. One torch thread per run (`--threads`; OMP_NUM_THREADS too), so that two runs share a 2-core machine
   without contention, and the Hugging Face offline switches (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE,
   HF_DATASETS_OFFLINE): none of these scripts downloads anything.

After their script finishes the runner measures, on their trained model and their data: the trainable
parameter count (requires_grad after all their freezing; their own printed count is taken before
`--freeze_attention`/`--freeze_mlp` apply), for the streaming tasks our "sequence" accuracy (every answer
token of a row right, as in training/tasks/algorithmic.py) on their eval set, and for memorization the
logits over their n label tokens for every key, from which this file computes memorized bits with our
`mixit_lab.analysis.memory.bits_from_logits` (bits = sum of max(0, log2 n + log2 p(y|x)), softmax over the label
tokens only) and divides by their trainable parameter count.

Their metrics and ours (each record's `value` is their `compute_metrics` accuracy in %):
- dyck, retrieval, modadd, memorize: one answer token per row; their accuracy is per-row accuracy, as
  ours (memorize: argmax over the whole vocabulary, ours over the label tokens; `label_accuracy` is ours).
- addition: their mask selects positions whose *input* token is an answer token and scores the next
  token, so the first sum digit (predicted from `=`) is neither trained nor scored, and the token after
  `<stop>` (a pad, when the sum has d digits) is; and the accuracy is averaged over tokens, not rows.
  `sequence_accuracy` in the record is ours on their eval set.

Sentiment (trainer_classifier.py, their `LlamaForSequenceClassification`) loads its tokenizer from the
Hugging Face Hub (the gated `meta-llama/Llama-3.2-1B` with `--llama3=True`, as their README's command) and
its data with `datasets.load_dataset("fancyzhx/yelp_polarity")`. Neither loads offline, so the runner
answers both calls with our study's own (benchmarks/authors_classifier.py writes them, `sentiment_inputs`):
- `AutoTokenizer` is pinned to a stand-in whose `from_pretrained` returns our study's BPE tokenizer (trained
  on the training split, the study's `vocab_size`) as a `PreTrainedTokenizerFast` that prepends our
  `<|endoftext|>` as its BOS (as Llama 3's prepends `<|begin_of_text|>`) and has our `<pad>` as its eos,
  which their script then makes the pad token (`tokenizer.pad_token = tokenizer.eos_token`). Their
  `tokenize_dataset` (padding to `max_seq_len`, truncation) then gives exactly our token rows; each run
  checks every row and fails otherwise.
- `datasets.load_dataset("fancyzhx/yelp_polarity", split=...)` returns our study's split of the same
  labelled file (train: the training split; test: the held-out split, 20% of each class); any other
  dataset is refused.
- Their device line is `"cuda" if torch.cuda.is_available else "cpu"` (the function, not its result, so
  always "cuda", and a local of `main()`, so it cannot be pinned): `torch.cuda.is_available` is replaced by
  a callable whose truth is its result, so that line reads "cpu" on a machine without CUDA.
Their classifier trainer is otherwise theirs: their model file at their classifier settings (bidirectional,
`skip_scaling` sqrt(1/2), attention and MLP biases, `base_hidden_size` left at the config's default),
padding attended (they pass no attention mask), the class read at the last non-pad token, the HF Trainer's
shuffled epochs, AdamW betas (0.9, 0.999), linear decay to 0 (their script sets `lr_scheduler_type`), and
their `compute_metrics` accuracy on the held-out split after the last step.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNNER = Path(__file__).resolve().parent / "authors_runner.py"
if str(RUNNER.parent) not in sys.path:
    sys.path.insert(0, str(RUNNER.parent))

from authors_classifier import sentiment_inputs, translate_classifier  # noqa: E402
from authors_flags import VARIANTS, their_default_warmup, warmup_flag  # noqa: E402
SCRIPTS = {"addition": "depth.py", "dyck": "depth.py", "retrieval": "depth.py", "modadd": "modadd_exp.py",
           "memorize": "hdmemorize_exp.py", "sentiment": "trainer_classifier.py"}
FROZEN_ONLY_DEPTH = ("random", "mixit_weight_frozen")  # weight_frozen=1 means our variant only in depth.py
DEPTH_STUDIES = ("depth",)  # studies that also get mixit_weight_frozen by default
NOT_RUNNABLE = {
    "lm": "trainer.py needs the Llama tokenizer from the Hub; not translated",
    "khop": "the authors' code has no k-hop task",
}
ABOUT = (
    "Final metrics of the authors' own training scripts (princeton-pli/MixiT, Llama model file) run at the "
    "settings of our preset studies by benchmarks/authors_reference.py (its docstring lists every run-time "
    "change). value: their compute_metrics accuracy in % on their eval set, after their final evaluate(); "
    "accuracy: the same as a fraction; eval_loss: their final eval loss (their loss mask); eval_items: rows in their eval set; sequence_accuracy (streaming tasks): our row-level metric on their eval "
    "set; memorize: bits_per_trainable_param = our mixit_lab.analysis.memory bits over their trainable parameters, "
    "label_accuracy = argmax over the label tokens. Their optimizer (AdamW betas 0.9/0.999, cosine to 0), "
    "init (0.02 everywhere) and fp32 on CPU. Sentiment: trainer_classifier.py (linear decay to 0) with our "
    "study's tokenizer and labelled split in place of the Hub's (their token ids equal ours, checked per run)."
)


# --------------------------------------------------------------------------- our side: the runs of a study
def study_runs(preset, study_name: str, task: str | None = None, variants: list[str] | None = None,
               seeds: list[int] | None = None, tuning: str | None = None, schedule: str = "ours") -> list[dict]:
    """Our settings of every run of `study_name` in `preset` (a mixit_lab.reproduce.preset.Preset), one dict per run, as
    `mixit reproduce` trains them: a tuned study's settings each at the learning rate chosen for it (the preset's
    recorded tuning, or `tuning`, a tuning.json). `schedule` "authors": their scripts' default warmup instead of ours
    (the record says so)."""
    from mixit_lab.reproduce.corpora import TextChoice, choose_text
    from mixit_lab.reproduce.pipeline import preset_runs
    from mixit_lab.reproduce.tuning import plan_tuning
    from mixit_lab.training.tuning import PATH_PARAMS

    if study_name not in preset.studies:
        raise SystemExit(f"study {study_name!r} is not in preset {preset.name!r}: {', '.join(preset.studies)}")
    study = preset.studies[study_name]
    text = {k: choose_text(k, None) if k == study.text else TextChoice(skipped=True) for k in preset.text_kinds()}
    # the whole preset (another study may hold this one's tuning runs), each corpus tokenized once, in a scratch cache
    everything = preset_runs(preset, text, Path(tempfile.gettempdir()) / "mixit_authors_reference_cache")
    plan = plan_tuning(everything, preset.tuning_seeds(), preset.name, tune=False, record=tuning)
    grid = [(n, cfg) for n, cfg in everything if n.split("/", 1)[0] == study_name]
    chosen = set(plan.runs_to_train(grid, plan.chosen)) if plan is not None else {n for n, _ in grid}
    settings: dict[tuple, object] = {}  # one config per setting at its chosen learning rate
    for name, cfg in grid:
        if name in chosen:
            settings.setdefault((cfg.task, json.dumps(cfg.task_params, sort_keys=True), cfg.variant, cfg.d_model,
                                 cfg.n_layers, cfg.n_heads), cfg)
    wanted = list(variants) if variants is not None else None
    runs = []
    for cfg in settings.values():
        if task is not None and cfg.task != task:
            continue
        names = [cfg.variant] + (["mixit_weight_frozen"] if study_name in DEPTH_STUDIES and cfg.variant == "mixit"
                                 and wanted is None else [])
        for variant in (names if wanted is None else [v for v in wanted if v in names or (
                v == "mixit_weight_frozen" and cfg.variant == "mixit")]):
            for seed in (study.seeds if seeds is None else seeds):
                params = {k: v for k, v in cfg.task_params.items() if k not in PATH_PARAMS}
                runs.append({
                    "preset": preset.name, "study": study_name, "task": cfg.task, "task_params": params,
                    "variant": variant, "d_model": cfg.d_model, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                    "steps": cfg.steps, "batch_size": cfg.batch_size, "lr": cfg.lr, "weight_decay": cfg.weight_decay,
                    "warmup_steps": cfg.warmup if schedule == "ours" else their_default_warmup(
                        SCRIPTS.get(cfg.task, ""), cfg.steps),
                    "schedule": schedule, "seed": seed, **({"text": study.text} if study.text else {}),
                })
    if not runs:
        raise SystemExit(f"no runs: study {study_name!r} has no task {task!r}")
    return runs


# --------------------------------------------------------------------------- their side: the translation
def translate(run: dict) -> dict:
    """Their script, command-line flags, pinned globals and measurement kind for one of our runs (pure)."""
    task, p, variant = run["task"], run["task_params"], run["variant"]
    if task in NOT_RUNNABLE:
        raise ValueError(f"{task}: {NOT_RUNNABLE[task]}")
    if task not in SCRIPTS:
        raise ValueError(f"no script of the authors runs our task {task!r}")
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} has no counterpart in their flags: {', '.join(VARIANTS)}")
    script = SCRIPTS[task]
    if script == "trainer_classifier.py":
        return translate_classifier(run)
    attention, frozen, freeze_qk, freeze_mlp = VARIANTS[variant]
    if variant in FROZEN_ONLY_DEPTH and script != "depth.py":
        raise ValueError(f"{script}: weight_frozen=1 also freezes the token embeddings (its name list lacks "
                         f"embed_tokens), so it is not our {variant!r}")
    if (freeze_qk or freeze_mlp) and script == "modadd_exp.py":
        raise ValueError("modadd_exp.py has no --freeze_attention / --freeze_mlp")
    steps, batch = run["steps"], run["batch_size"]
    argv = ["--model_name_or_path=llama"]
    pins: dict[str, Any] = {"device": "cpu"}
    task_info: dict[str, Any] = {"task": task}
    if script == "depth.py":
        if task == "addition":
            their_task = f"additionstream_{p.get('digits', 10)}"
        elif task == "dyck":
            their_task = f"dyckstream_{p.get('max_pairs', 40)}"
        else:
            pairs, values = p.get("pairs", 30), p.get("num_values", 255)
            if p.get("num_keys", pairs) != pairs:
                raise ValueError("their retrieval has exactly `pairs` keys; num_keys must equal pairs")
            vocab = 2 * (values + 1)  # their values: 1 .. vocab//2 - 1
            if 2 * pairs + values >= vocab:  # largest id: query (pairs - 1) + pairs + vocab//2
                raise ValueError(f"retrieval: {pairs} pairs do not fit a vocabulary of {vocab}")
            their_task = f"condattendstream_{pairs}"
            task_info["first_query_id"] = pairs + vocab // 2
        argv.append(f"--task={their_task}")
        kind = "stream"
    elif script == "modadd_exp.py":
        argv.append(f"--task=modadds_{p.get('p', 599)}")
        kind = "modadd"
    else:
        n, d = p.get("n", 512), p.get("d", 2)
        if p.get("label_tokens", "own") != "keys":  # their labels are always position 0's key tokens
            raise ValueError("hdmemorize_exp.py writes labels with position 0's key tokens: our label_tokens='keys'")
        pins["task"] = f"hdmemorize_{n}_{d}_1.0"
        if run.get("seed_init"):  # their init from our seed too (a control: see --seed-init)
            pins["seed"] = run["seed"]
        task_info["n"] = n
        kind = "memorize"
    argv += [f"--n_embd={run['d_model']}", f"--n_layer={run['n_layers']}", f"--n_head={run['n_heads']}",
             f"--seed={run['seed']}", f"--learning_rate={run['lr']}", f"--weight_decay={run['weight_decay']}",
             *warmup_flag(run), f"--per_device_train_batch_size={batch}"]
    if script == "depth.py":
        argv.append("--max_steps=1")
        pins["train_size"] = steps * batch
        if task == "retrieval":
            argv.append(f"--vocab_size={vocab}")
    else:
        argv.append(f"--max_steps={steps}")
        pins["per_device_train_batch_size"] = batch
    argv += [f"--shaped_attention={attention}", f"--weight_frozen={frozen}"]
    if freeze_qk:
        argv.append("--freeze_attention=True")
    if freeze_mlp:
        argv.append("--freeze_mlp=True")
    argv += ["--report_to=none", "--disable_tqdm=True"]
    return {"script": script, "argv": argv, "pins": pins, "kind": kind, "task_info": task_info}


def their_optimizer_steps(t: dict) -> int:
    """How many optimizer steps their script takes with these flags and pins (their formula)."""
    flags = dict(a[2:].split("=", 1) for a in t["argv"])
    max_steps = int(flags["max_steps"])
    if t["script"] == "depth.py":  # passes over train_size: max_steps * train_size // batch
        batch = int(t["pins"].get("per_device_train_batch_size", flags["per_device_train_batch_size"]))
        return max_steps * int(t["pins"]["train_size"]) // batch
    return max_steps


def command_line(t: dict) -> str:
    return " ".join(["python", t["script"], *map(shlex.quote, t["argv"])])


# --------------------------------------------------------------------------- running
def _machine(threads: int) -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.platform()}; {cpu}; {os.cpu_count()} logical cores; torch threads {threads}"


def _commit(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record_key(r: dict) -> tuple:
    """What makes a record one setting's run (a signal record of their model at init has no learning rate)."""
    lr = r.get("lr")
    return (r.get("preset"), r["study"], r["task"], json.dumps(r.get("task_params"), sort_keys=True), r["variant"],
            r.get("d_model"), r.get("n_layers"), r.get("n_heads"), r.get("seed"), None if lr is None else float(lr),
            r.get("schedule") or "ours")


def merge_records(path: Path, new: list[dict]) -> None:
    """Merge `new` into the JSON file at `path`, replacing records with the same key (file-locked, so that
    several drivers can write to one file)."""
    import fcntl
    import hashlib

    lock_name = "authors_reference_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16] + ".lock"
    with open(Path(tempfile.gettempdir()) / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text()) if path.is_file() else {"records": []}
        keys = {record_key(r) for r in new}
        records = [r for r in data.get("records", []) if record_key(r) not in keys] + new
        records.sort(key=lambda r: (r["study"], r["task"], json.dumps(r.get("task_params"), sort_keys=True),
                                    r["variant"], r.get("n_layers") or 0, r.get("seed") or 0))
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps({"about": ABOUT, "records": records}, indent=1) + "\n")
        tmp.replace(path)


def run_one(run: dict, repo: Path, python: str, threads: int, commit: str, log_dir: Path | None,
            text_files: list[str] | None = None) -> dict:
    """Train one run with their script; the record for it (raises RuntimeError with the log tail on failure)."""
    t = translate(run)
    work = Path(tempfile.mkdtemp(prefix="authors_run_"))
    try:
        for f in [repo / "configurator.py", *sorted(repo.glob("task_*.py"))]:
            (work / f.name).symlink_to(f.resolve())
        spec = {**t, "repo": str(repo.resolve()), "threads": threads, "out": str(work / "result.json")}
        if t["kind"] == "classifier":  # their Hub tokenizer and data replaced by our study's (the runner wraps them)
            spec["inputs"] = str(work / "inputs.json")
            (work / "inputs.json").write_text(json.dumps(sentiment_inputs(run, text_files)))
        (work / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        start = time.time()
        with open(work / "log.txt", "w") as log:
            proc = subprocess.run([python, str(RUNNER), str(work / "spec.json")], cwd=work, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
        wall = time.time() - start
        name = f"{run['study']}_{run['task']}_{run['variant']}_L{run['n_layers']}_h{run['n_heads']}_s{run['seed']}"
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(work / "log.txt", log_dir / f"{name}.log")
        if proc.returncode != 0 or not (work / "result.json").is_file():
            tail = "\n".join((work / "log.txt").read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"{name}: exit code {proc.returncode}\n{tail}")
        res = json.loads((work / "result.json").read_text())
        final = res["final"] or {}
        # their eval sets: train_testA (held out; modadd_exp.py also evaluates train_trainA), or train_trainA
        # alone (memorization, where the training set is the eval set)
        acc_keys = [k for k in final if k.endswith("_accuracy")]
        held_out = [k for k in acc_keys if "testA" in k]
        acc_keys = held_out or acc_keys
        if t["kind"] == "classifier":  # trainer_classifier.py's compute_metrics returns {"Acc": ...}
            acc_keys = [k for k in final if k == "eval_Acc"]
        if len(acc_keys) != 1:
            raise RuntimeError(f"{name}: cannot find one accuracy in their final metrics {final}")
        accuracy = final[acc_keys[0]]
        loss_key = "eval_loss" if t["kind"] == "classifier" else acc_keys[0][: -len("accuracy")] + "loss"
        if res["optimizer_steps"] != run["steps"]:
            raise RuntimeError(f"{name}: their trainer took {res['optimizer_steps']} steps, ours {run['steps']}")
        rec = {**run, "metric": "accuracy", "value": 100.0 * accuracy, "accuracy": accuracy}
        if held_out and "eval_train_trainA_accuracy" in final:
            rec["train_accuracy"] = final["eval_train_trainA_accuracy"]
        if t["kind"] == "stream":
            rec["sequence_accuracy"] = res["sequence_accuracy"]
            rec["answer_token_accuracy"] = res["answer_token_accuracy"]
        if t["kind"] == "classifier":
            if res["rows_differ"]:
                raise RuntimeError(f"{name}: their tokenizer gave other token ids than ours in {res['rows_differ']} "
                                   f"rows")
            rec["inputs"] = res["inputs"]
        if t["kind"] == "memorize":
            import numpy as np
            import torch

            from mixit_lab.analysis.memory import bits_from_logits

            logits = torch.from_numpy(np.load(str(work / "result.json") + ".logits.npy"))
            labels = torch.from_numpy(np.load(str(work / "result.json") + ".labels.npy"))
            bits = bits_from_logits(logits, labels)
            rec.update(bits=bits["bits"], max_bits=bits["max_bits"], label_accuracy=bits["accuracy"],
                       bits_per_trainable_param=bits["bits"] / res["params_trainable"])
        rec.update(
            params_trainable=res["params_trainable"], params_total=res["params_total"],
            eval_items=res.get("eval_rows"), their_metric_key=acc_keys[0],
            eval_loss=final.get(loss_key),
            script=t["script"], command=command_line(t), runtime_overrides=t["pins"], authors_commit=commit,
            date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            machine=_machine(res["torch_threads"]), torch_threads=res["torch_threads"],
            torch_version=res["torch_version"], transformers_version=res["transformers_version"],
            wall_s=round(wall, 1),
        )
        return rec
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    """The command line of main."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors-repo", required=True, help="a checkout of princeton-pli/MixiT")
    ap.add_argument("--authors-python", required=True, help="a Python with their requirements")
    ap.add_argument("--preset", default="quick", help="our preset (name or YAML path)")
    ap.add_argument("--study", required=True, help="a study of the preset, e.g. algorithmic, memorize, depth")
    ap.add_argument("--task", help="only this task of the study (e.g. dyck)")
    ap.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE",
                    help="only tasks with this parameter value, e.g. pairs=8 (repeatable)")
    ap.add_argument("--n-layers", nargs="+", type=int, help="only these depths (the study's sizes)")
    ap.add_argument("--variants", nargs="+", help="default: the study's (+ mixit_weight_frozen for depth)")
    ap.add_argument("--seeds", nargs="+", type=int, help="default: the study's")
    ap.add_argument("--out", default="reproduce/authors_reference.json", help="JSON file the records are merged into")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--log-dir", help="keep each run's log here")
    ap.add_argument("--launch-deadline", type=float, metavar="EPOCH_S",
                    help="start no run after this time (seconds since the epoch); the runs left are listed as skipped")
    ap.add_argument("--sentiment-file", nargs="+", metavar="FILE",
                    help="sentiment: the labelled corpus (default: as `mixit reproduce` picks it, ../shared/data first)")
    ap.add_argument("--schedule", choices=("ours", "authors"), default="ours",
                    help="ours: their scripts at our warmup (the reference of our runs); authors: at their scripts' "
                         "default warmup, max(4%% of the steps, 500), recorded as schedule 'authors'")
    ap.add_argument("--tuning", metavar="FILE",
                    help="a tuned study's learning rates from this tuning.json (default: the preset's recorded one)")
    ap.add_argument("--set-task-param", action="append", default=[], metavar="KEY=VALUE",
                    help="run with this task parameter changed (a data-processing choice to trace, e.g. split_seed=1 or "
                         "tokenizer=bpe-llama3; a control: use another --out)")
    ap.add_argument("--seed-init", action="store_true",
                    help="memorize: seed their initialisation with --seed too (a control; use another --out)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, train nothing")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)

    from mixit_lab.reproduce.preset import load_preset
    from mixit_lab.reproduce.reference import REFERENCE_FILE

    study = load_preset(a.preset).studies.get(a.study)
    if study is not None and study.text in NOT_RUNNABLE:
        raise SystemExit(f"{a.study}: not run: {NOT_RUNNABLE[study.text]}")
    runs = study_runs(load_preset(a.preset), a.study, a.task, a.variants, a.seeds, a.tuning, a.schedule)
    for kv in a.task_param:
        key, _, value = kv.partition("=")
        runs = [r for r in runs if str(r["task_params"].get(key)) == value]
    if a.n_layers:
        runs = [r for r in runs if r["n_layers"] in a.n_layers]
    if not runs:
        raise SystemExit(f"no runs match {a.task_param} / n_layers {a.n_layers}")
    if a.set_task_param:
        if Path(a.out).resolve() == REFERENCE_FILE.resolve():
            raise SystemExit(f"--set-task-param runs are a control, not the reference: give another --out than {a.out}")
        import yaml

        changes = {k: yaml.safe_load(v) for k, _, v in (kv.partition("=") for kv in a.set_task_param)}
        runs = [dict(r, task_params={**r["task_params"], **changes}) for r in runs]
    if a.seed_init:
        if any(r["task"] != "memorize" for r in runs):
            raise SystemExit("--seed-init: only hdmemorize_exp.py (memorize) seeds its model apart from --seed")
        if Path(a.out).resolve() == REFERENCE_FILE.resolve():
            raise SystemExit(f"--seed-init runs are a control, not the reference: give another --out than {a.out}")
        runs = [dict(r, seed_init=True) for r in runs]
    plans = [(r, translate(r)) for r in runs]
    if a.dry_run:
        for r, t in plans:
            print(f"# {r['study']} {r['task']} {r['variant']} L{r['n_layers']} seed {r['seed']}: "
                  f"{their_optimizer_steps(t)} optimizer steps; pinned globals {t['pins']}")
            print(command_line(t))
        return 0
    repo, out = Path(a.authors_repo).resolve(), Path(a.out)
    python = os.path.abspath(a.authors_python) if os.sep in a.authors_python else a.authors_python  # runs in a scratch cwd
    commit = _commit(repo)
    lock, failures = threading.Lock(), []

    def job(r):
        if a.launch_deadline is not None and time.time() > a.launch_deadline:
            print(f"skipped (launch deadline): {r['study']} {r['task']} {r['variant']} L{r['n_layers']} seed {r['seed']}",
                  flush=True)
            return
        rec = run_one(r, repo, python, a.threads, commit, Path(a.log_dir) if a.log_dir else None, a.sentiment_file)
        with lock:
            merge_records(out, [rec])
        print(f"{r['study']} {r['task']} {r['variant']} d{r['d_model']} L{r['n_layers']} h{r['n_heads']} seed "
              f"{r['seed']}: {rec['value']:.2f}% ({rec['wall_s']:.0f} s)", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(job, r): r for r in runs}
        for f in concurrent.futures.as_completed(futures):
            if f.exception() is not None:
                failures.append(str(f.exception()))
                print(f"FAILED {type(f.exception()).__name__}: {f.exception()}", file=sys.stderr, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
