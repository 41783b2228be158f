"""`mixit reproduce`: train a preset's grid, analyse every run, measure init-time signal and speed,
draw the figures and write the report. Every stage resumes: finished runs, analyses and measurements
are kept, so rerunning an interrupted reproduction continues where it stopped.

    from mixit_lab.reproduce.pipeline import reproduce
    from mixit_lab.reproduce.preset import load_preset
    reproduce(load_preset("smoke"), out="runs/smoke", report_dir="reports/smoke", figures_dir="reports/smoke/figures")

Layout of `out` (the runs directory that figures, the report and the explorer read):

    reproduce.json               preset name, its resolved contents, corpus notes, stage timings
    <study>/<run>/               one run directory per training run (see mixit_lab.training.trainer), + analysis/
    <study>/summary.csv          one row per run of the study
    signal/signal.csv            token covariance and cosine vs depth at initialisation (mixit_lab.analysis.signal)
    speed/speed.csv              training throughput per variant (mixit_lab.training.benchmark)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from tqdm.auto import tqdm

from mixit_lab.analysis.analyze import AnalysisOptions
from mixit_lab.models import ModelConfig
from mixit_lab.models.files import atomic_file, read_json, write_json
from mixit_lab.training.rundir import (
    DATA_CACHE_DIR, LAST_STUDY_FILE, LOCK_FILE, MANIFEST, REPORT_FILE, RUNS_SUMMARY, SIGNAL_FILE, SPEED_FILE,
    TUNING_FILE, is_finished, read_summary, run_lock, write_runs_table,
)
from mixit_lab.training.config import TrainConfig
from mixit_lab.training.settings import SettingsChanged, model_differences, settings_differences
from mixit_lab.training.sweep import Executor, Run, tasks_from_file, expand_grid_models, gpu_placed, train_runs

from .analyses import analysis_stage
from .corpora import TextChoice, choose_text
from .preset import Preset
from .stage_options import SignalOptions, SpeedOptions
from .tuning import TuningPlan, plan_tuning, record_from_runs

PROJECT_ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the grid
Planned = tuple[str, TrainConfig, ModelConfig]  # a run's name, its config, and its model (the task built once)


def _preset_grid(preset: Preset, text: dict[str, TextChoice], out: Path | None) -> list[Planned]:
    """Every run of the preset with its model config; text studies without a corpus drop out (see preset_runs)."""
    runs: list[Planned] = []
    for study, spec in preset.studies.items():
        tasks = tasks_from_file(spec.tasks, as_names=False)  # a preset's own tasks as written: its runs' names
        if spec.text:
            choice = text[spec.text]
            if choice.skipped:
                continue
            tasks = [(t, {**p, **choice.params}) for t, p in tasks]
        train = {**preset.train, **spec.train}
        for schedule in spec.schedules or [train.get("schedule", "ours")]:
            try:
                expanded = expand_grid_models(
                    spec.variants, tasks, [dict(s) for s in spec.sizes], spec.seeds, spec.lrs,
                    {**train, "schedule": schedule}, None if out is None or not spec.text else out / study / DATA_CACHE_DIR,
                )
            except ValueError as e:
                raise ValueError(f"study {study!r}: {e}") from None
            runs.extend((f"{study}/{name}", cfg, model) for name, cfg, model in expanded)
    return runs


def preset_runs(preset: Preset, text: dict[str, TextChoice], out: Path | None = None) -> list[Run]:
    """Every run of the preset as ("<study>/<run name>", TrainConfig); text studies without a corpus drop out.

    Each config is checked by building its task. With `out` (the runs directory) a text study's corpus,
    tokenizer and tokens are built once, in the cache its runs use (out/<study>/.token_cache).
    """
    return [(name, cfg) for name, cfg, _ in _preset_grid(preset, text, out)]


@dataclass(frozen=True)
class Plan:
    """What one `mixit reproduce` resolves before anything runs, once (the command line builds it and the pipeline
    and its workers use it): the corpora, every run's config and model, each checked against a run already in `out`,
    and for a preset that tries several learning rates, where each setting's choice comes from (mixit_lab.reproduce.tuning)."""

    out: Path
    text: dict[str, TextChoice]
    grid: list[Run]  # every run of the preset, every learning rate of a tuned study included
    models: dict[str, ModelConfig]  # run name -> its model config (its size: the cost estimate)
    tuning: TuningPlan | None = None  # None: no study tries several learning rates

    def choices(self) -> dict[str, float]:
        """Each tuned setting's chosen learning rate, as recorded ({} before a tuning trained now has chosen)."""
        return {} if self.tuning is None or self.tuning.chosen is None else dict(self.tuning.chosen)

    def runs_for(self, choices: dict[str, float]) -> list[Run]:
        """The runs trained for the report: all of an untuned preset's; a tuned setting's at its chosen rate."""
        if self.tuning is None:
            return list(self.grid)
        keep = set(self.tuning.runs_to_train(self.grid, choices))
        return [(name, cfg) for name, cfg in self.grid if name in keep]

    @property
    def runs(self) -> list[Run]:
        """The runs known to be trained before anything runs: the report's runs, or with a tuning trained now its
        tuning runs and the untuned settings' runs (the other seeds wait for the choices)."""
        if self.tuning is not None and self.tuning.record is None:
            tuning = set(self.tuning.tuning_runs)
            return [(n, cfg) for n, cfg in self.grid if n in tuning or (self.tuning.keys[n] not in self.tuning.grids
                                                                        and n.split("/", 1)[0] not in self.tuning.record_only)]
        return self.runs_for(self.choices())


def plan_reproduction(preset: Preset, out: str | Path, text_files: list[str] | None = None,
                      sentiment_files: list[str] | None = None, hub_check: Callable[[str], None] | None = None,
                      cache: bool = True, sst2_dir: str | None = None, tune: bool = False,
                      tuning_file: str | Path | None = None) -> Plan:
    """Choose the corpora, expand the grid, find where the learning rates are chosen (mixit_lab.reproduce.tuning: `tune`
    trains the grid now, else `tuning_file` or the preset's recorded tuning) and refuse a run directory trained
    otherwise (SettingsChanged): every input error before anything trains. `cache`: write text studies' token caches
    into `out` (False: a dry run writes nothing)."""
    out = Path(out)
    given = {"lm": text_files, "sentiment": sentiment_files, "sst2": [sst2_dir] if sst2_dir else None}
    text = {k: choose_text(k, given[k], hub_check) for k in sorted(preset.text_kinds())}
    grid = _preset_grid(preset, text, out if cache else None)
    runs = [(n, cfg) for n, cfg, _ in grid]
    tuning = plan_tuning(runs, preset.tuning_seeds(), preset.name, tune, tuning_file,
                         frozenset(name for name, study in preset.studies.items() if study.tuning_only))
    for name, cfg, model in grid:
        check_not_stale(out / name, cfg, model)
    return Plan(out, text, runs, {n: model for n, _, model in grid}, tuning)


def run_cost(cfg: TrainConfig, n_ctx: int, d_vocab: int) -> float:
    """Rough training FLOPs (6 x parameters x tokens, attention included), for ordering and the time estimate."""
    d, layers = cfg.d_model, cfg.n_layers
    params = layers * 12 * d * d + d_vocab * d
    return 6.0 * cfg.steps * cfg.batch_size * n_ctx * (params + layers * n_ctx * d)


def check_not_stale(run_dir: Path, cfg: TrainConfig, model: ModelConfig | None = None) -> None:
    """Refuse to reuse a run directory trained with a different configuration (an edited preset), or whose saved model
    differs from `model`, the one its settings build now (a model default changed since it was trained)."""
    try:
        diff = settings_differences(run_dir, cfg)
    except (ValueError, OSError):
        return  # unreadable: the trainer's own check reports it
    changed = model_differences(run_dir, model) if model is not None and not diff else []
    if diff or changed:
        listed = "; ".join([*(f"{k}={old!r}, the preset now says {k}={new!r}" for k, old, new in diff),
                            *(f"{k}={old!r} in its model, this version builds {k}={new!r}" for k, old, new in changed)])
        raise SettingsChanged(f"{run_dir} was trained with {listed}; move that directory away or reproduce into "
                              "another --out")


# --------------------------------------------------------------------------- workers
# --------------------------------------------------------------------------- stages
def train_stage(plan: Plan, runs: list[Run], executor: Executor, progress: bool, log: Callable[[str], None],
                tracker: str | None = None, label: str = "train") -> pd.DataFrame:
    """Train every unfinished run of `runs` (of the plan), longest first; the bar counts estimated work, its label
    runs done/total. The plan has checked every run directory already (plan_reproduction). Returns a row per run."""
    out = plan.out
    todo, rows = [], {}
    costs: dict[str, float] = {}
    for name, cfg in runs:
        run_dir = out / name
        if is_finished(run_dir):
            rows[name] = {"run": name, **read_summary(run_dir)}
            continue
        costs[name] = run_cost(cfg, plan.models[name].n_ctx, plan.models[name].d_vocab)
        todo.append(name)
    todo.sort(key=lambda n: -costs[n])  # longest first: better packing on few workers
    fast = [by for by in (dict(runs)[n] for n in todo) if by.precision == "fast"]
    if fast:  # measured here, before the workers start, into each study's cache, which its runs' trainers read
        from mixit_lab.training.precision import cpu_bf16_speedup, resolve_precision
        from mixit_lab.training.resolve import resolve_device

        device = resolve_device(fast[0].device)  # the device its runs train on (mixit_lab.training.resolve)
        if device.type == "cpu":
            caches = sorted({(out / n).parent / DATA_CACHE_DIR for n in todo if dict(runs)[n].precision == "fast"})
            for cache in caches:
                decision = resolve_precision("fast", device, cache)
            log(f"precision fast: {decision} on this CPU (bf16 matmuls measure {cpu_bf16_speedup(caches[0]):.1f}x "
                "fp32's)")
    by_name = dict(runs)
    where = executor.where(executor.kind == "pool" and gpu_placed(by_name[n] for n in todo))
    log(f"{label}: {len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to train {where}")
    total = sum(costs.values()) or 1.0
    done = len(runs) - len(todo)
    bar = tqdm(total=round(total / 1e9, 1), unit="GFLOP", disable=not progress or not todo,
               desc=f"{label} {done}/{len(runs)} runs", bar_format="{desc} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]")
    try:
        for row in train_runs([(n, by_name[n]) for n in todo], out, executor, "reproduce", tracker):
            rows[row["run"]] = row
            done += 1
            bar.set_description_str(f"{label} {done}/{len(runs)} runs")
            bar.update(round(costs[row["run"]] / 1e9, 1))
            if row["status"] != "finished":
                log(f"  {row['run']}: {row['status']} {row.get('message', '')}".rstrip())
    finally:
        bar.close()
    return pd.DataFrame([rows[n] for n, _ in runs if n in rows])


def write_study_tables(trained: pd.DataFrame, out: Path) -> None:
    """Each study's summary.csv: one row per run the reproduction trained (written once training is over)."""
    by_study: dict[str, list[dict[str, Any]]] = {}
    for row in trained.to_dict("records"):
        study, run = row["run"].split("/", 1)
        by_study.setdefault(study, []).append({**row, "run": run})
    for study, study_rows in by_study.items():
        write_runs_table(study_rows, out / study / RUNS_SUMMARY)


def tune_stage(plan: Plan, executor: Executor, progress: bool, log: Callable[[str], None],
               tracker: str | None) -> tuple[pd.DataFrame, dict[str, float]]:
    """Choose each tuned setting's learning rate: train its grid at the tuning seeds now (mixit reproduce --tune),
    or read the recorded tuning; either way the record is written to out/TUNING_FILE. Returns the tuning runs'
    rows (none when read) and the choices."""
    tuning, out = plan.tuning, plan.out
    rows = pd.DataFrame()
    if tuning.record is None:
        names = set(tuning.tuning_runs)
        rows = train_stage(plan, [(n, cfg) for n, cfg in plan.grid if n in names], executor, progress, log, tracker,
                           label="tune")
        record = record_from_runs(tuning, plan.grid, out, tuning_about(plan))
    else:
        record = tuning.record
        for note in tuning.notes:
            log(f"note: {note}")
    record.write(out / TUNING_FILE)
    choices = record.choices() if tuning.chosen is None else dict(tuning.chosen)
    missing = sorted(set(tuning.grids) - set(choices))
    log(f"tune: {len(choices)} settings' learning rates chosen ({tuning.source})"
        + (f"; {len(missing)} settings without a finished run at any learning rate are left out" if missing else ""))
    return rows, choices


def tuning_about(plan: Plan) -> dict[str, Any]:
    """What a tuning trained now records of itself: its grids, its seeds, where and when."""
    from mixit_lab.training.provenance import provenance

    seeds = sorted({cfg.seed for n, cfg in plan.grid if n in set(plan.tuning.tuning_runs)})
    grids = sorted({tuple(lrs) for lrs in plan.tuning.grids.values()})
    return {"seeds": seeds, "lrs": [list(g) for g in grids], "made": provenance([]),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _cached_csv(path: Path, config: dict[str, Any], compute: Callable[[], pd.DataFrame]) -> tuple[pd.DataFrame, bool]:
    """Read path if it was made with the same config (path.json beside it), else compute and write both."""
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        try:
            if json.loads(meta.read_text()) == json.loads(json.dumps(config)):
                return pd.read_csv(path), True
        except (json.JSONDecodeError, OSError, ValueError):
            pass
    df = compute()
    with atomic_file(path) as fh:
        df.to_csv(fh, index=False)
    write_json(meta, config)
    return df, False


def signal_stage(options: SignalOptions, out: Path, log: Callable[[str], None]) -> None:
    """Token similarity vs depth at initialisation (signal/signal.csv), unless cached at the same settings; a
    control's rows carry its label in the variant column, next to the named variants."""
    from mixit_lab.analysis.signal import signal_propagation

    def compute() -> pd.DataFrame:
        frames = [signal_propagation(**options.arguments())]
        frames += [signal_propagation(**options.arguments(label)).assign(variant=label) for label in options.controls]
        return pd.concat(frames, ignore_index=True)

    _, cached = _cached_csv(out / SIGNAL_FILE, options.cache_key(), compute)
    labels = ", ".join(options.labels())
    log(f"signal: {'cached' if cached else 'computed'} ({labels} at depths {list(options.depths)})")


def speed_stage(options: SpeedOptions, out: Path, log: Callable[[str], None]) -> None:
    """Training throughput per variant (speed/speed.csv), unless cached at the same settings and columns."""
    import torch

    from mixit_lab.training.benchmark import measure_throughput

    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # measured alone, after training, on every core
    try:
        df, cached = _cached_csv(out / SPEED_FILE, options.cache_key(),
                                 lambda: measure_throughput(**options.arguments()))
    finally:
        torch.set_num_threads(before)
    log(f"speed: {'cached' if cached else 'measured'} ({len(df)} variants)")


# --------------------------------------------------------------------------- figures and report, when their inputs changed
CODE_PACKAGES = ("analysis", "figures", "reproduce")  # whose files a figure or the report is made by
# What counts as code there: sources and the data they ship (presets, the authors' reference), not what a study writes
# inside a package folder when told to (`--figures-dir figures/mine`: its images would change the fingerprint they
# are drawn under, so the first rerun of a fresh study redrew everything).
CODE_SUFFIXES = (".py", ".yaml", ".yml", ".json")


def _stamp(path: Path) -> list[Any]:
    """A file's name, size and modification time: changes whenever the file is written."""
    st = path.stat()
    return [path.as_posix(), st.st_size, st.st_mtime_ns]


def inputs_fingerprint(runs: pd.DataFrame, out: Path, options: dict[str, Any]) -> str:
    """A digest of everything the figures and the report are made from: the runs table, every file of every run
    directory (analyses, metrics, checkpoints, by size and modification time), the signal and speed files, the
    options (preset, directories, corpora) and the code of the packages that draw and write them."""
    digest = hashlib.sha256()
    digest.update(runs.drop(columns=["path"]).to_csv(index=False).encode())
    stamps = []
    for run_dir in sorted(runs["path"]) if len(runs) else []:
        for here, dirs, files in os.walk(run_dir):
            dirs[:] = sorted(dirs)
            stamps.extend(_stamp(Path(here) / f) for f in sorted(files) if f != LOCK_FILE)
    stamps.extend(_stamp(out / f) for f in (SIGNAL_FILE, SPEED_FILE, TUNING_FILE) if (out / f).is_file())
    for package in CODE_PACKAGES:
        stamps.extend([f.relative_to(PROJECT_ROOT).as_posix(), hashlib.sha256(f.read_bytes()).hexdigest()]
                      for f in sorted((PROJECT_ROOT / package).rglob("*")) if f.is_file() and f.suffix in CODE_SUFFIXES)
    digest.update(json.dumps([stamps, options], sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _unchanged(previous: dict[str, Any], key: str, fingerprint: str, outputs: list[Path]) -> bool:
    """Whether the previous reproduction into this folder made `key` (figures, report) from the same inputs,
    finished, and its outputs are all still there."""
    return (previous.get("status") == "finished" and (previous.get("inputs") or {}).get(key) == fingerprint
            and all(p.is_file() for p in outputs))


def figures_stage(out: Path, figures_dir: Path, runs: pd.DataFrame, previous: dict[str, Any], fingerprint: str,
                  log: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, str]]:
    """Draw every figure from `runs` (the runs table, read once) unless the previous reproduction drew them from
    the same inputs; returns (name -> files or the reason it was skipped, name -> why it failed)."""
    made_before = previous.get("figures_made") or {}
    files_before = [Path(f) for v in made_before.values() if isinstance(v, list) for f in v]
    if made_before and not previous.get("failed_figures") and _unchanged(previous, "figures", fingerprint,
                                                                        files_before):
        log(f"figures: unchanged ({len(files_before)} files in {figures_dir})")
        return made_before, {}
    from mixit_lab import figures
    failed: dict[str, str] = {}
    try:
        made = figures.make_all(out, figures_dir, runs=runs)
    except figures.FigureError as e:  # one figure that fails is recorded; the others and the report are made
        for name, error in e.failures:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            failed[name] = f"{type(error).__name__}: {reason}".rstrip(": ")
        made = e.results
    for name, result in made.items():
        if name not in failed:
            log(f"figure {name}: " + (", ".join(str(p) for p in result) if isinstance(result, list)
                                      else f"skipped: {result}"))
    for name, reason in failed.items():
        log(f"figure {name}: FAILED: {reason}")
    made = {name: [str(p) for p in result] if isinstance(result, list) else str(result)
            for name, result in made.items() if name not in failed}
    return made, failed


def report_stage(out: Path, report_dir: Path, figures_dir: Path, runs: pd.DataFrame, manifest: dict[str, Any],
                 previous: dict[str, Any], fingerprint: str, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write the report unless the previous reproduction wrote it from the same inputs; return the findings."""
    if previous.get("findings") is not None and _unchanged(previous, "report", fingerprint,
                                                           [report_dir / REPORT_FILE]):
        log(f"report: unchanged ({report_dir / REPORT_FILE})")
        return previous["findings"]
    from .report import write_report

    return write_report(out, report_dir, manifest, figures_dir, runs=runs)  # the table built once, after training


def record_last_study(out: Path, report_dir: Path, figures_dir: Path, preset: str,
                      where: Path | None = None) -> Path:
    """Write .mixit_cache/last_study.json in `where` (the working directory): where this study's runs, report and
    figures are (absolute paths), for `mixit app` with no argument."""
    path = (where or Path.cwd()) / LAST_STUDY_FILE
    write_json(path, {"runs_dir": str(out.resolve()), "report_dir": str(report_dir.resolve()),
                      "figures_dir": str(figures_dir.resolve()), "preset": preset})
    return path


def _previous_manifest(out: Path) -> dict[str, Any]:
    """The manifest of the last reproduction into `out` ({} if none, or unreadable)."""
    try:
        return read_json(out / MANIFEST)
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- the whole pipeline
def reproduce(
    preset: Preset,
    out: str | Path,
    report_dir: str | Path,
    figures_dir: str | Path,
    *,
    workers: int | None = None,
    executor: Executor | None = None,
    tracker: str | None = None,
    text_files: list[str] | None = None,
    sentiment_files: list[str] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    hub_check: Callable[[str], None] | None = None,
    plan: Plan | None = None,
) -> dict[str, Any]:
    """Run every stage of the preset into `out`; return the manifest (also written to out/reproduce.json).

    Training runs on `executor` (default: a pool of `workers` local processes, `workers` defaulting to
    the CPU count; runs on CUDA take GPUs x RUNS_PER_GPU workers, at most a given `workers`: Executor); analysis
    always on the local pool. `plan`: the preset resolved by plan_reproduction (the
    command line's); without it, it is resolved here. The runs table is read once, after training and analysis,
    for the figures and the report; those are made again only when their inputs changed."""
    out, report_dir, figures_dir = Path(out), Path(report_dir), Path(figures_dir)
    given = workers is not None
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    executor = executor or Executor(workers=workers, workers_given=given)
    started = time.time()
    plan = plan or plan_reproduction(preset, out, text_files, sentiment_files, hub_check)
    out.mkdir(parents=True, exist_ok=True)
    # One reproduction (or sweep) at a time in a runs folder, the sweep's lock: another is refused at once
    # (RunLocked, naming its PID) before it writes anything, so each run is trained once and the summaries, the
    # manifest and the report are the finishing reproduction's.
    with run_lock(out):
        for choice in plan.text.values():
            log(("note: " if choice.skipped else "text: ") + choice.note)
        previous = _previous_manifest(out)
        for study in preset.studies:  # written after training: an interrupted reproduction leaves none
            (out / study / RUNS_SUMMARY).unlink(missing_ok=True)
        manifest = _start_manifest(preset, plan, started, workers, executor, report_dir, figures_dir)
        write_json(out / MANIFEST, manifest)
        stages = _Stages(manifest)
        try:
            _run_stages(preset, plan, out, report_dir, figures_dir, previous, manifest, stages,
                        started=started, workers=workers, executor=executor, tracker=tracker, progress=progress,
                        log=log)
        except BaseException as e:  # a write that failed, a bug, Ctrl-C: reproduce.json says so, not "running"
            _record_stop(out, manifest, stages.current, e, started)
            raise
    try:  # last, and only where it can be: the working directory is no output folder (read-only, say)
        record_last_study(out, report_dir, figures_dir, preset.name)
    except OSError as e:
        log(f"note: `mixit app` with no folder will not find this study ({e.filename}: {e.strerror or e})")
    return manifest


class _Stages:
    """Runs the pipeline's stages, timing each into the manifest's timings_s and remembering which one runs."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.timings = manifest["timings_s"]
        self.current: str | None = None

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        self.current = name
        t0 = time.perf_counter()
        result = fn()
        self.timings[name] = round(time.perf_counter() - t0, 1)
        self.current = None
        return result


def _run_stages(preset: Preset, plan: Plan, out: Path, report_dir: Path, figures_dir: Path, previous: dict[str, Any],
                manifest: dict[str, Any], stage: _Stages, *, started: float, workers: int, executor: Executor,
                tracker: str | None, progress: bool, log: Callable[[str], None]) -> None:
    """Every stage of `reproduce`, in order, filling `manifest` (written to out/reproduce.json at the end)."""
    options = AnalysisOptions.from_dict(preset.analysis)  # the preset was checked whole when it loaded
    tuned, choices = pd.DataFrame(), plan.choices()
    if plan.tuning is not None:
        tuned, choices = stage("tune", lambda: tune_stage(plan, executor, progress, log, tracker))
    trained = stage("train", lambda: train_stage(plan, plan.runs_for(choices), executor, progress, log, tracker))
    trained = pd.concat([tuned, trained], ignore_index=True).drop_duplicates("run", keep="last") if len(tuned) else trained
    manifest["runs"] = sorted(trained["run"]) if len(trained) else []
    write_study_tables(trained, out)
    failed_analyses = stage("analyze", lambda: analysis_stage(trained, out, options, workers, progress, log))
    if plan.tuning is not None and plan.tuning.record is None:  # the grid's analyses join its record
        record_from_runs(plan.tuning, plan.grid, out, tuning_about(plan)).write(out / TUNING_FILE)
    if "signal" not in preset.skip:
        stage("signal", lambda: signal_stage(preset.signal, out, log))
    if "speed" not in preset.skip:
        stage("speed", lambda: speed_stage(preset.speed, out, log))

    from mixit_lab.analysis.runs import load_runs

    runs = load_runs(out)  # once: the figures and the report read this table
    settings = {k: manifest[k] for k in ("preset_contents", "text", "runs", "figures_dir_resolved")}
    inputs = {"figures": inputs_fingerprint(runs, out, settings)}
    made, failed = stage("figures", lambda: figures_stage(out, figures_dir, runs, previous, inputs["figures"], log))
    inputs["report"] = hashlib.sha256(json.dumps(
        [inputs["figures"], made, failed, str(report_dir.resolve())], sort_keys=True).encode()).hexdigest()
    failed_runs = int((trained["status"] != "finished").sum()) if len(trained) else 0
    manifest.update(status="finished", failed_runs=failed_runs, failed_analyses=sorted(failed_analyses),
                    failed_figures=failed, figures_made=made,
                    wall_s=round(time.time() - started, 1))
    findings = stage("report", lambda: report_stage(out, report_dir, figures_dir, runs, manifest, previous,
                                                    inputs["report"], log))
    manifest.update(wall_s=round(time.time() - started, 1), findings=findings, inputs=inputs)
    write_json(out / MANIFEST, manifest)
    measured = [f for f in findings if f["verdict"] != "not_measured"]
    undecided = sum(f["verdict"] == "inconclusive" for f in measured)
    verdicts = (f"{sum(bool(f['holds']) for f in measured)} of {len(measured)} measured findings hold"
                + (f", {undecided} undecided" if undecided else "") if measured else "no paper finding measured")
    log(f"report: {report_dir / REPORT_FILE} ({verdicts}); wall time {manifest['wall_s']:.0f}s")


def _record_stop(out: Path, manifest: dict[str, Any], stage: str | None, error: BaseException, started: float) -> None:
    """Write reproduce.json as a reproduction that stopped: status "interrupted" (Ctrl-C, SIGTERM) or "failed", the
    stage it stopped in and why (one line), so the file never says "running" of a reproduction that is over. Best
    effort: a disk that cannot take it (the reason it stopped, perhaps) leaves the error to be reported as it is."""
    interrupted = isinstance(error, KeyboardInterrupt)
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        reason = f"{error.filename}: {error.strerror}"
    else:
        reason = " ".join(str(error).split()) or type(error).__name__
    manifest.update(status="interrupted" if interrupted else "failed", stopped_in=stage,
                    error=None if interrupted else f"{type(error).__name__}: {reason}",
                    wall_s=round(time.time() - started, 1))
    manifest.pop("findings", None)
    with contextlib.suppress(OSError):
        write_json(out / MANIFEST, manifest)


def _start_manifest(preset: Preset, plan: Plan, started: float, workers: int, executor: Executor,
                    report_dir: Path, figures_dir: Path) -> dict[str, Any]:
    """reproduce.json as written when the reproduction starts (status "running")."""
    return {
        "format": "mixit-lab/reproduce", "preset": preset.name, "preset_contents": preset.to_dict(),
        "text": {k: {"note": c.note, "skipped": c.skipped, **c.params} for k, c in plan.text.items()},
        "runs": [n for n, _ in plan.runs], "tuning": None if plan.tuning is None else plan.tuning.source, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "status": "running", "timings_s": {}, "workers": workers,
        "executor": executor.kind, "runs_per_gpu": executor.runs_per_gpu, "stack": executor.stack,
        # where the other outputs went, as given (relative to the working directory) and resolved
        "figures_dir": str(figures_dir), "report_dir": str(report_dir),
        "figures_dir_resolved": str(figures_dir.resolve()), "report_dir_resolved": str(report_dir.resolve()),
    }
