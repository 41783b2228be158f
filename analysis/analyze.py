"""`analyze_checkpoint`: every analysis that applies to a checkpoint, written beside it and cached by its hash.

For a checkpoint (a run directory from `mixit train`, its checkpoint/ subdirectory, or a bare
checkpoint directory from `save_pretrained`) this writes a directory holding

    analysis.json        metadata (checkpoint SHA-256, model, task, options, what was computed or
                         skipped and why) and a summary of every table
    heads.csv            mixit_lab.analysis.heads.head_scores on repeated random sequences
    in_context_loss.csv  loss per position on those sequences (models with an unembedding)
    attention.csv        mixit_lab.analysis.attention.attention_stats on the task's eval set (random tokens
                         for a bare checkpoint)
    signal.csv           mixit_lab.analysis.signal.signal_propagation_model on the same inputs, for the
                         checkpoint ("checkpoint") and the same config freshly initialised ("init")
    memory.csv           mixit_lab.analysis.memory.memorized_bits (memorisation tasks: `eval_is_train`, as memorize)
    ablation.csv         mixit_lab.analysis.ablation.head_ablation on the task's eval set (run directories only;
                         class loss and accuracy for classifiers)
    components.csv       mixit_lab.analysis.components.component_effects on the task's eval set (algorithmic tasks:
                         those with answer tokens): each attention layer's, MLP's and head's share of
                         the answer's logit difference, and loss and accuracy with each layer's
                         attention or MLP (or all of them) mean- or resample-ablated; memorize runs add
                         the memorized bits under each mean ablation
    task_induction.csv   mixit_lab.analysis.heads.task_induction_scores on the same eval rows (khop runs only):
                         per head, the attention mass on the positions holding each answer and a
                         shuffled-source control; the summary adds chance, the positional ceiling
                         and the head-ablation result of the top head

The directory is replaced atomically. If it already holds an analysis of the same checkpoint files
(config.json + model.safetensors, by SHA-256) with the same options, nothing is recomputed.

Each analysis is an `Analysis` in `ANALYSES`: a name, `applies(context)` (None, or why it is skipped)
and `run(context) -> AnalysisResult` (its tables and its summary). Adding one is a function pair
and one line in ANALYSES; see docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mixit_lab.training.rundir import ANALYSIS_FILE, ANALYSIS_TABLE

FORMAT = "mixit-lab/analysis"
ANALYSIS_VERSION = 6  # bump when a definition changes, so cached results are recomputed
ABLATION_METHODS = ("mean", "zero", "none")


@dataclass(frozen=True)
class AnalysisOptions:
    """How `analyze_checkpoint` measures; the one set of defaults (`mixit analyze` and presets start here)."""

    n_seqs: int = 64  # repeated sequences for head scores; inputs for attention and signal
    seq_len: int = 64  # length of r in the head-score sequences [r, r] (capped at n_ctx / 2)
    eval_samples: int = 512  # eval-set rows for head ablation and task-aligned induction
    ablation: str = "mean"  # head ablation method: mean, zero or none
    seed: int = 0

    def __post_init__(self) -> None:
        for name, lo in (("n_seqs", 1), ("seq_len", 2), ("eval_samples", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"{name}={value!r} must be an integer >= {lo}")
        if self.ablation not in ABLATION_METHODS:
            raise ValueError(f"ablation={self.ablation!r} must be one of {', '.join(ABLATION_METHODS)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} must be an integer")

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> AnalysisOptions:
        """Options from a mapping (a preset's `analysis:` block); unknown keys are refused."""
        data = dict(data or {})
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ValueError(f"unknown analysis option(s) {unknown}; allowed: {allowed}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class AnalysisResult:
    """What one analysis gives: tables (each written as NAME.csv) and a JSON-able summary."""

    tables: dict[str, Any] = field(default_factory=dict)  # name -> pandas DataFrame
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class AnalysisContext:
    """Everything an analysis may use: the model, the task (None for a bare checkpoint or a task that
    cannot be rebuilt, with `task_note` saying why), the inputs, the options and the results so far."""

    model: Any
    task: Any
    task_note: str | None
    options: AnalysisOptions
    inputs: Any  # [batch, pos] tokens for attention statistics and signal propagation
    inputs_note: str
    eval_rows: int = 0  # the eval rows the analyses read: never more than the run held out of training (_eval_rows)
    results: dict[str, AnalysisResult] = field(default_factory=dict)


@dataclass(frozen=True)
class Analysis:
    name: str
    applies: Callable[[AnalysisContext], str | None]  # None, or the reason it is skipped
    run: Callable[[AnalysisContext], AnalysisResult]


# --------------------------------------------------------------------------- the analyses
def _always(ctx: AnalysisContext) -> str | None:
    return None


def _heads_applies(ctx: AnalysisContext) -> str | None:
    if ctx.model.cfg.n_ctx // 2 < 2:
        return f"n_ctx={ctx.model.cfg.n_ctx} is too short for repeated sequences [r, r] (needs n_ctx >= 4)"
    return None


def _heads(ctx: AnalysisContext) -> AnalysisResult:
    """Head scores on repeated random sequences [r, r], as long as the context allows."""
    from .heads import head_scores

    seq_len = min(ctx.options.seq_len, ctx.model.cfg.n_ctx // 2)
    r = head_scores(ctx.model, n_seqs=ctx.options.n_seqs, seq_len=seq_len, seed=ctx.options.seed)
    df = r.table
    tables = {"heads": df}
    if r.loss_by_position is not None:
        tables["in_context_loss"] = _loss_table(r.loss_by_position, seq_len)
    return AnalysisResult(tables, {
        "seq_len": seq_len,
        "top_induction": _head(df, "induction"),
        "top_previous_token": _head(df, "previous_token"),
        "chance": r.chance,
        "labels": df["label"].value_counts().to_dict(),
        "loss_first_half": r.loss_first_half,
        "loss_second_half": r.loss_second_half,
        "in_context_drop": r.in_context_drop,
    })


def _attention(ctx: AnalysisContext) -> AnalysisResult:
    from .attention import attention_stats

    df = attention_stats(ctx.model, ctx.inputs)
    return AnalysisResult({"attention": df}, {
        "inputs": ctx.inputs_note,
        "mean_entropy_normalized": float(df["entropy_normalized"].mean()),
        "mean_sink_mass": float(df["sink_mass"].mean()),
        "max_input_dependence": float(df["input_dependence"].max()),
        "source": str(df["source"].iloc[0]),
    })


def _signal(ctx: AnalysisContext) -> AnalysisResult:
    """Token similarity by layer, for the checkpoint and for the same config freshly initialised."""
    from mixit_lab.models import build_model

    from .signal import signal_propagation_model

    trained = signal_propagation_model(ctx.model, ctx.inputs)
    init = signal_propagation_model(build_model(ctx.model.config).to(ctx.model.cfg.device), ctx.inputs)
    return AnalysisResult({"signal": _concat({"checkpoint": trained, "init": init}, "state")}, {
        "inputs": ctx.inputs_note,
        "last_layer": {"checkpoint": trained.iloc[-1].drop("layer").to_dict(),
                       "init": init.iloc[-1].drop("layer").to_dict()},
    })


def _memorizes(task: Any) -> bool:
    """Whether `task` is a memorisation task (its class's `eval_is_train`: the eval set is the whole training
    set), whose memorized bits mixit_lab.analysis.memory counts (the one test: mixit_lab.analysis.memory.is_memorization_task)."""
    from .memory import is_memorization_task

    return task is not None and is_memorization_task(task)


def _memory_applies(ctx: AnalysisContext) -> str | None:
    if _memorizes(ctx.task):
        return None
    return ctx.task_note or f"memorized bits apply to a memorisation task (eval_is_train), not {ctx.task.name!r}"


def _memory(ctx: AnalysisContext) -> AnalysisResult:
    from .memory import memorized_bits

    df = memorized_bits(ctx.model, ctx.task)
    return AnalysisResult({"memory": df}, df.iloc[0].to_dict())


def _ablation_applies(ctx: AnalysisContext) -> str | None:
    if ctx.options.ablation == "none":
        return "--ablation none"
    return ctx.task_note if ctx.task is None else None


def _ablation(ctx: AnalysisContext) -> AnalysisResult:
    from .ablation import head_ablation

    # (tokens, mask) for next-token tasks; (tokens, attention mask, labels) for classification tasks.
    batch = ctx.task.eval_set(ctx.eval_rows)
    tokens, mask, labels = batch[0], batch[1], (batch[2] if len(batch) > 2 else None)
    r = head_ablation(ctx.model, tokens, mask, ctx.task.metric, method=ctx.options.ablation, labels=labels)
    return AnalysisResult({"ablation": r.table}, {
        "method": ctx.options.ablation,
        "examples": int(tokens.shape[0]),
        "baseline_loss": r.baseline_loss,
        "baseline_accuracy": r.baseline_accuracy,
        "top": r.table.head(3)[["layer", "head", "delta_loss", "delta_accuracy"]].to_dict("records"),
    })


def _components_applies(ctx: AnalysisContext) -> str | None:
    if ctx.task is None:
        return ctx.task_note
    if ctx.task.is_classifier() or ctx.task.needs_corpus:
        return f"component attribution reads answer tokens of the algorithmic tasks, not {ctx.task.name!r}"
    if ctx.eval_rows < 2:
        return "resample ablation needs at least 2 eval rows"
    return None


def _components(ctx: AnalysisContext) -> AnalysisResult:
    from .components import component_effects

    tokens, mask = ctx.task.eval_set(ctx.eval_rows)
    r = component_effects(ctx.model, tokens, mask, ctx.task.metric, seed=ctx.options.seed,
                          memorize_task=ctx.task if _memorizes(ctx.task) else None)
    return AnalysisResult({"components": r.table}, r.summary())


def _task_induction_applies(ctx: AnalysisContext) -> str | None:
    if ctx.task is not None and hasattr(ctx.task, "answer_sources"):
        return None
    return ctx.task_note or f"task-aligned induction applies to the khop task, not {ctx.task.name!r}"


def _task_induction(ctx: AnalysisContext) -> AnalysisResult:
    from .heads import task_induction_scores

    tokens = ctx.task.eval_set(ctx.eval_rows)[0]
    r = task_induction_scores(ctx.model, ctx.task, tokens)
    ablation = ctx.results.get("ablation")
    return AnalysisResult({"task_induction": r.table}, _task_induction_summary(
        r, ablation.tables["ablation"] if ablation else None, ctx.options.ablation, ctx.task.name))


def _patching_applies(ctx: AnalysisContext) -> str | None:
    """Patching applies to a task that builds its own pairs (mixit_lab.analysis.patching.can_patch) for its settings: the
    method's ValueError (k-hop with several hops, too few letters to corrupt one) is the reason it does not."""
    from .patching import can_patch

    if ctx.task is None:
        return ctx.task_note
    if not can_patch(ctx.task):
        return f"activation patching applies to tasks with a patching_pairs method, not {ctx.task.name!r}"
    try:
        ctx.task.patching_pairs(_patching_rows(ctx), ctx.options.seed)  # as _patching draws them: cheap
    except ValueError as e:
        return str(e).removeprefix("patching: ")
    return None


def _patching_rows(ctx: AnalysisContext) -> int:
    return min(ctx.options.eval_samples, 128)


def _patching(ctx: AnalysisContext) -> AnalysisResult:
    from .patching import head_patching

    r = head_patching(ctx.model, ctx.task, n=_patching_rows(ctx), seed=ctx.options.seed)  # the task's patching_pairs
    df = r.frame()
    top = df.sort_values("restored", ascending=False).head(3)
    return AnalysisResult({"patching": df}, {
        "clean_logit_diff": r.clean,
        "corrupted_logit_diff": r.corrupted,
        "top": top[["layer", "head", "restored"]].to_dict("records"),
    })


# The registry, in the order they run (task_induction reads the ablation table).
ANALYSES: tuple[Analysis, ...] = (
    Analysis("heads", _heads_applies, _heads),
    Analysis("attention", _always, _attention),
    Analysis("signal", _always, _signal),
    Analysis("memory", _memory_applies, _memory),
    Analysis("ablation", _ablation_applies, _ablation),
    Analysis("components", _components_applies, _components),
    Analysis("task_induction", _task_induction_applies, _task_induction),
    Analysis("patching", _patching_applies, _patching),
)


# --------------------------------------------------------------------------- one checkpoint
def analyze_checkpoint(
    path: Path, out_dir: Path, options: AnalysisOptions | dict[str, Any] | None = None, device: str = "auto",
    force: bool = False,
) -> tuple[str, dict[str, Any]]:
    """Analyse one checkpoint into out_dir. Returns ("cached" | "computed", analysis.json contents).

    Raises FileNotFoundError / ValueError for a path that is not a checkpoint, FileExistsError if
    out_dir exists and is not an earlier analysis (it is never replaced then).
    """
    import torch

    from mixit_lab.models import load_model
    from mixit_lab.models.files import atomic_directory, write_json
    from mixit_lab.training.machine import pick_device
    from mixit_lab.training.provenance import provenance
    from mixit_lab.training.rundir import find_checkpoint

    from .common import checkpoint_hash

    if not isinstance(options, AnalysisOptions):
        options = AnalysisOptions.from_dict(options)
    options_json = options.to_dict()
    out_dir = Path(out_dir)
    ref = find_checkpoint(path)
    _check_run_file(ref)
    digest = checkpoint_hash(ref.checkpoint)
    previous = None if force else _current(out_dir, digest, options_json)
    if previous is not None:
        return "cached", previous
    if not _is_replaceable(out_dir):
        raise FileExistsError(f"refusing to replace {out_dir}: it exists and is not an earlier analysis")

    started = time.perf_counter()
    model = load_model(ref.checkpoint, device=pick_device(device))
    task, task_note = _load_task(ref, model)
    eval_rows = _eval_rows(task, ref.run_info(), options)
    ctx = AnalysisContext(model, task, task_note, options, *_inputs(model, task, options, eval_rows), eval_rows)
    skipped: dict[str, str] = {}
    for analysis in ANALYSES:
        reason = analysis.applies(ctx)
        if reason is None:
            ctx.results[analysis.name] = analysis.run(ctx)
        else:
            skipped[analysis.name] = reason
    tables = {name: df for r in ctx.results.values() for name, df in r.tables.items()}

    info = ref.run_info()
    result = {
        "format": FORMAT,
        "analysis_version": ANALYSIS_VERSION,
        "checkpoint": str(path),
        "checkpoint_sha256": digest,
        "options": options_json,
        "model": model.config.to_dict(),
        "params": model.parameter_counts(),
        "task": info.to_dict().get("task") if info else None,  # run.json's task section, as written
        "eval_rows": eval_rows if task is not None else None,  # the first rows of the eval set the analyses read
        "computed": list(tables),
        "skipped": skipped,
        "tables": {name: ANALYSIS_TABLE.format(name) for name in tables},
        "summary": {name: r.summary for name, r in ctx.results.items()},
        "elapsed_s": round(time.perf_counter() - started, 3),
        "device": str(model.cfg.device),
        "versions": provenance([])["versions"],
        "torch_threads": torch.get_num_threads(),
    }
    with atomic_directory(out_dir) as tmp:
        for name, df in tables.items():
            df.to_csv(tmp / ANALYSIS_TABLE.format(name), index=False)
        write_json(tmp / ANALYSIS_FILE, _jsonable(result))
    return "computed", _jsonable(result)


# --------------------------------------------------------------------------- helpers
def _eval_rows(task, info, options: AnalysisOptions) -> int:
    """How many eval rows the analyses read: options.eval_samples, at most the rows the run held out of training (its
    eval_samples; all of the eval set for a task that cannot draw an eval row for training, or trains on it)."""
    if task is None:
        return 0
    n = min(options.eval_samples, task.default_eval_size)
    held_out = (info.train.eval_samples if info is not None else None) or task.default_eval_size
    return n if task.eval_disjoint or task.eval_is_train else min(n, held_out)


def _inputs(model, task, options: AnalysisOptions, eval_rows: int) -> tuple[Any, str]:
    """Inputs [n, pos] for attention statistics and signal propagation, and what they are: the task's eval
    set (at most its `eval_rows`), else random tokens."""
    from .common import random_tokens

    if task is not None:
        inputs = task.eval_set(min(options.n_seqs, eval_rows))[0]
        return inputs, f"first {inputs.shape[0]} rows of the {task.name} eval set, without a padding mask"
    inputs = random_tokens(model.cfg.d_vocab, options.n_seqs, model.cfg.n_ctx, options.seed)
    return inputs, f"{inputs.shape[0]} random sequences of {model.cfg.n_ctx} tokens"


def _check_run_file(ref) -> None:
    """CheckpointError (one line naming it) if the run's run.json is damaged: never analysed, nor called cached."""
    from mixit_lab.models.checkpoint import CheckpointError

    try:
        ref.run_info()
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{' '.join(str(e).split())}; the run is damaged: restore its run.json "
                              "(or retrain the run) to analyse it") from None


def cached_analysis(path: str | Path, out_dir: str | Path, options: AnalysisOptions | dict[str, Any] | None = None
                    ) -> dict[str, Any] | None:
    """The analysis.json `analyze_checkpoint` would return as "cached" (the same checkpoint bytes, analysis version and
    options; every table there, with its columns), else None; without loading the model, so that a rerun over
    thousands of analysed runs decides in one process which need a worker. Errors as analyze_checkpoint's."""
    from mixit_lab.training.rundir import find_checkpoint

    from .common import checkpoint_hash

    if not isinstance(options, AnalysisOptions):
        options = AnalysisOptions.from_dict(options)
    ref = find_checkpoint(path)
    _check_run_file(ref)
    return _current(Path(out_dir), checkpoint_hash(ref.checkpoint), options.to_dict())


def _current(out_dir: Path, digest: str, options_json: dict[str, Any]) -> dict[str, Any] | None:
    """The earlier analysis in out_dir if it was made of these checkpoint bytes, by this version, with these options,
    and its tables are sound; else None."""
    previous = _read_previous(out_dir)
    if (previous is not None and previous.get("checkpoint_sha256") == digest
            and previous.get("analysis_version") == ANALYSIS_VERSION and previous.get("options") == options_json
            and _tables_sound(out_dir, previous.get("tables", {}))):
        return previous
    return None


def _tables_sound(out_dir: Path, tables: Any) -> bool:
    """Whether every table an earlier analysis lists is there and readable; a damaged one is warned about (one
    line naming it) and makes the analysis be computed again."""
    import warnings

    from .runs import table_header_problem

    if not isinstance(tables, dict):
        return False
    for name, file in tables.items():
        if not (out_dir / str(file)).is_file():
            return False
        problem = table_header_problem(out_dir / str(file), str(name))
        if problem is not None:
            warnings.warn(problem.split(";")[0].replace("read as missing", "computing it again"), stacklevel=3)
            return False
    return True


def _read_previous(out_dir: Path) -> dict | None:
    """The analysis.json in out_dir if it is one of ours, else None."""
    try:
        data = json.loads((out_dir / ANALYSIS_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _is_replaceable(out_dir: Path) -> bool:
    """Only replace a directory that is missing, empty, or an earlier analysis."""
    return not out_dir.exists() or (out_dir.is_dir() and (not any(out_dir.iterdir()) or _read_previous(out_dir)))


def _load_task(ref, model) -> tuple[Any, str | None]:
    """(task, None) for a run whose task can be rebuilt and fits the model, else (None, reason).

    The task is rebuilt from the run's run.json by `mixit_lab.training.run_task`, as `mixit_lab.training.train` built it (text
    tasks reuse the run's token cache; a researcher's own task is imported from its recorded import path);
    a task whose data or held-out rows changed since training is refused (TaskChanged), with a warning.
    """
    import warnings

    from mixit_lab.training import run_task
    from mixit_lab.training.runinfo import TaskChanged
    from mixit_lab.training.tasks import TaskImportError

    info = ref.run_info()
    if info is None:
        return None, "bare checkpoint (no run.json): task-specific analyses skipped"
    try:
        task = run_task(ref.run_dir, info)
    except (TaskImportError, TaskChanged) as e:  # say so, not only skip: analyses on other rows would be wrong
        warnings.warn(f"{e}; task-specific analyses skipped", stacklevel=2)
        return None, f"task of this run cannot be rebuilt as it trained ({e})"
    except (KeyError, TypeError, ValueError, OSError) as e:
        return None, f"task of this run cannot be rebuilt ({e})"
    if task.d_vocab != model.cfg.d_vocab or task.seq_len > model.cfg.n_ctx:
        return None, (f"task {task.name!r} (d_vocab {task.d_vocab}, seq_len {task.seq_len}) does not fit the model "
                      f"(d_vocab {model.cfg.d_vocab}, n_ctx {model.cfg.n_ctx})")
    return task, None


def _head(df, column: str) -> dict[str, Any]:
    row = df.loc[df[column].idxmax()]
    return {"layer": int(row["layer"]), "head": int(row["head"]), "score": float(row[column])}



def _task_induction_summary(result, ablation_df, method: str, task_name: str) -> dict[str, Any]:
    """The head with the highest task-aligned induction score, its reference levels, and what ablating it costs.

    `top` holds the head's layer, head, score and shuffled score (its mass on other sequences'
    sources: what position alone explains); chance and positional are the task's reference levels.

    The ablation comes from the head-ablation table (computed on the same eval rows): accuracy
    with that head ablated and `accuracy_drop` = intact minus ablated accuracy (fractions; positive
    = the head is needed). None when ablation was switched off (--ablation none).
    """
    scores = result.table
    top = _head(scores, "score")
    top["shuffled"] = float(scores.loc[scores["score"].idxmax(), "shuffled"])
    ablated = None
    if ablation_df is not None:
        row = ablation_df[(ablation_df["layer"] == top["layer"]) & (ablation_df["head"] == top["head"])].iloc[0]
        ablated = {
            "method": method,
            "accuracy": float(row["accuracy"]),
            "accuracy_drop": 0.0 - float(row["delta_accuracy"]),  # not -x: no "-0.0" in the JSON
            "delta_loss": float(row["delta_loss"]),
        }
    return {
        "inputs": f"first {result.n_seqs} rows of the {task_name} eval set",
        "hops": result.hops,
        "rows": result.rows,
        "top": top,
        "chance": result.chance,
        "positional": result.positional,
        "ablation": ablated,
    }


def _loss_table(loss_by_target: list[float], seq_len: int):
    import pandas as pd

    position = list(range(1, len(loss_by_target) + 1))
    half = ["first" if t < seq_len else "boundary" if t == seq_len else "second" for t in position]
    return pd.DataFrame({"position": position, "half": half, "loss": loss_by_target})


def _concat(frames: dict, key: str):
    import pandas as pd

    return pd.concat([df.assign(**{key: name}) for name, df in frames.items()], ignore_index=True)[
        [key, *next(iter(frames.values())).columns]
    ]


def _jsonable(value: Any) -> Any:
    """Plain JSON types (numpy scalars -> Python numbers, NaN -> None)."""
    import math

    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


