"""`mixit reproduce`: train a preset's grid, analyse every run, measure init-time signal and speed,
draw the figures and write the report. Every stage resumes: finished runs, analyses and measurements
are kept, so rerunning an interrupted reproduction continues where it stopped.

    from reproduce.pipeline import load_preset, reproduce
    reproduce(load_preset("smoke"), out="runs/smoke", report_dir="reports/smoke", figures_dir="figures/out/smoke")

Layout of `out` (the runs directory that figures, the report and the explorer read):

    reproduce.json               preset name, its resolved contents, corpus notes, stage timings
    <study>/<run>/               one run directory per training run (see training.trainer), + analysis/
    <study>/summary.csv          one row per run of the study
    signal/signal.csv            token covariance and cosine vs depth at initialisation (analysis.signal)
    speed/speed.csv              training throughput per variant (training.benchmark)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from tqdm.auto import tqdm

from analysis.analyze import AnalysisOptions
from training.rundir import (
    ANALYSIS_DIR, DATA_CACHE_DIR, DYNAMICS_FILE, MANIFEST, RUNS_SUMMARY, SIGNAL_FILE, SPEED_FILE, atomic_file,
    is_finished, kept_checkpoints, read_summary, write_json, write_runs_table,
)
from training.sweep import Executor, Run, _tasks_from_file, expand_grid, pool_map, train_runs
from training.trainer import SettingsChanged, TrainConfig, settings_differences

from .preset import Preset, load_preset, preset_names  # noqa: F401  (the pipeline's API includes them)

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Corpora tried, in order, when a study needs text and no file was given: local copies of the real
# corpora beside the project (../shared/data), then a small, fixed Hub dataset when the Hub can be reached
# (training/tasks/hub.py HUB_DATASETS). For lm the Hub dataset is the same text as the local files (WikiText-2
# validation + test, held out by article the same way); for sentiment it is another corpus of the same
# size: 1,000 Yelp reviews (500 per class) of yelp_polarity's test split instead of the 1,000 sentences.
TEXT_SOURCES: dict[str, dict[str, Any]] = {
    "lm": {"local": ["wikitext-2/valid.txt", "wikitext-2/test.txt"], "hub": "wikitext-2-v1-valid-test",
           "local_about": "WikiText-2 validation + test, held out by article",
           "hub_about": "WikiText-2 validation + test, held out by article as from the local files"},
    "sentiment": {"local": ["sentiment-sentences/yelp_labelled.txt"], "hub": "yelp_polarity-1k",
                  "local_about": "1,000 Yelp review sentences, UCI sentiment labelled sentences",
                  "hub_about": "1,000 Yelp reviews, a fixed sample of 500 per class from yelp_polarity's test split"},
}


# --------------------------------------------------------------------------- text corpora
@dataclass
class TextChoice:
    """Where a text study's data comes from: task parameters to add, or why the study is skipped."""

    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    skipped: bool = False


def _shared_data_dirs() -> list[Path]:
    seen, out = set(), []
    for base in (Path.cwd(), PROJECT_ROOT):
        candidate = (base.parent / "shared" / "data").resolve()
        if candidate not in seen and candidate.is_dir():
            seen.add(candidate)
            out.append(candidate)
    return out


def choose_text(kind: str, files: list[str] | None, hub_check: Callable[[str], None] | None = None) -> TextChoice:
    """Given files (--text-file / --sentiment-file), else ../shared/data, else the Hub, else skip."""
    if files:
        missing = [f for f in files if not Path(f).exists()]
        if missing:
            raise ValueError(f"{kind} corpus: no such file or folder {missing[0]!r}")
        return TextChoice({"text_file": [str(Path(f)) for f in files]}, f"{kind}: {', '.join(files)} (given)")
    source = TEXT_SOURCES[kind]
    for data in _shared_data_dirs():
        paths = [data / p for p in source["local"]]
        if all(p.is_file() for p in paths):
            shown = ", ".join(f"../shared/data/{p}" for p in source["local"])
            return TextChoice({"text_file": [str(p) for p in paths]}, f"{kind}: {shown} ({source['local_about']})")
    if hub_check is None:
        from training.tasks.hub import check_hub_reachable as hub_check
    try:
        hub_check(source["hub"])
        return TextChoice({"dataset": source["hub"]},
                          f"{kind}: Hugging Face dataset {source['hub']} ({source['hub_about']})")
    except Exception as e:  # DatasetUnavailable, or anything else the check raises
        return TextChoice(
            note=f"{kind}: skipped: no corpus given (--{'text' if kind == 'lm' else 'sentiment'}-file), none in "
            f"../shared/data, and the Hub is unreachable ({str(e).split(';')[0]})",
            skipped=True,
        )


# --------------------------------------------------------------------------- the grid
def preset_runs(preset: Preset, text: dict[str, TextChoice], out: Path | None = None) -> list[Run]:
    """Every run of the preset as ("<study>/<run name>", TrainConfig); text studies without a corpus drop out.

    Each config is checked by building its task. With `out` (the runs directory) a text study's corpus,
    tokenizer and tokens are built once, in the cache its runs use (out/<study>/.token_cache).
    """
    runs: list[Run] = []
    for study, spec in preset.studies.items():
        tasks = _tasks_from_file(spec.tasks)
        if spec.text:
            choice = text[spec.text]
            if choice.skipped:
                continue
            tasks = [(t, {**p, **choice.params}) for t, p in tasks]
        try:
            expanded = expand_grid(
                spec.variants, tasks, [dict(s) for s in spec.sizes], spec.seeds, spec.lrs,
                {**preset.train, **spec.train}, None if out is None or not spec.text else out / study / DATA_CACHE_DIR,
            )
        except ValueError as e:
            raise ValueError(f"study {study!r}: {e}") from None
        runs.extend((f"{study}/{name}", cfg) for name, cfg in expanded)
    return runs


def run_cost(cfg: TrainConfig, n_ctx: int, d_vocab: int) -> float:
    """Rough training FLOPs (6 x parameters x tokens, attention included), for ordering and the time estimate."""
    d, layers = cfg.d_model, cfg.n_layers
    params = layers * 12 * d * d + d_vocab * d
    return 6.0 * cfg.steps * cfg.batch_size * n_ctx * (params + layers * n_ctx * d)


def check_not_stale(run_dir: Path, cfg: TrainConfig) -> None:
    """Refuse to reuse a run directory trained with a different configuration (e.g. an edited preset)."""
    try:
        diff = settings_differences(run_dir, cfg)
    except (ValueError, OSError):
        return  # unreadable: the trainer's own check reports it
    if diff:
        listed = "; ".join(f"{k}={old!r}, the preset now says {k}={new!r}" for k, old, new in diff)
        raise SettingsChanged(
            f"{run_dir} was trained with {listed}; move that directory away or reproduce into another --out"
        )


# --------------------------------------------------------------------------- workers
def _analyze_job(job: tuple[str, str, AnalysisOptions]) -> dict[str, Any]:
    from analysis.analyze import analyze_checkpoint

    name, run_dir, options = job
    try:
        status, _ = analyze_checkpoint(Path(run_dir), Path(run_dir) / ANALYSIS_DIR, options, device="cpu")
        if kept_checkpoints(run_dir) and (status == "computed" or not (Path(run_dir) / DYNAMICS_FILE).is_file()):
            from analysis.dynamics import checkpoint_dynamics  # the run kept checkpoints: score them by step

            table = checkpoint_dynamics(run_dir, options.n_seqs, options.seq_len, options.seed)
            with atomic_file(Path(run_dir) / DYNAMICS_FILE) as fh:
                table.to_csv(fh, index=False)
    except Exception as e:
        return {"run": name, "status": "error", "message": f"{type(e).__name__}: {e}"}
    return {"run": name, "status": status}


# --------------------------------------------------------------------------- stages
def train_stage(runs: list[Run], out: Path, executor: Executor, progress: bool, log: Callable[[str], None],
                tracker: str | None = None) -> pd.DataFrame:
    """Train every unfinished run, longest first; the bar counts estimated work, its label runs done/total."""
    todo, rows = [], {}
    costs: dict[str, float] = {}
    for name, cfg in runs:
        run_dir = out / name
        check_not_stale(run_dir, cfg)
        if is_finished(run_dir):
            rows[name] = {"run": name, **read_summary(run_dir)}
            continue
        mcfg = cfg.model_config(cache_dir=run_dir.parent / DATA_CACHE_DIR)
        costs[name] = run_cost(cfg, mcfg.n_ctx, mcfg.d_vocab)
        todo.append(name)
    todo.sort(key=lambda n: -costs[n])  # longest first: better packing on few workers
    fast = [by for by in (dict(runs)[n] for n in todo) if by.precision == "fast"]
    if fast:  # measured here, once, so that every worker reads the same decision (training.trainer)
        from training.trainer import cpu_bf16_speedup, pick_device, resolve_precision

        device = pick_device(fast[0].device)
        if device.type == "cpu":
            log(f"precision fast: {resolve_precision('fast', device)} on this CPU (bf16 matmuls measure "
                f"{cpu_bf16_speedup():.1f}x fp32's)")
    where = (f"on {executor.workers} worker(s)" if executor.kind == "pool" else
             f"as Ray tasks ({executor.address or 'local Ray'}, {executor.cpus_per_run:g} CPU(s) each)")
    log(f"train: {len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to train {where}")
    by_name = dict(runs)
    total = sum(costs.values()) or 1.0
    done = len(runs) - len(todo)
    bar = tqdm(total=round(total / 1e9, 1), unit="GFLOP", disable=not progress or not todo,
               desc=f"train {done}/{len(runs)} runs", bar_format="{desc} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]")
    try:
        for row in train_runs([(n, by_name[n]) for n in todo], out, executor, "reproduce", tracker):
            rows[row["run"]] = row
            done += 1
            bar.set_description_str(f"train {done}/{len(runs)} runs")
            bar.update(round(costs[row["run"]] / 1e9, 1))
            if row["status"] != "finished":
                log(f"  {row['run']}: {row['status']} {row.get('message', '')}".rstrip())
    finally:
        bar.close()
    ordered = [rows[n] for n, _ in runs if n in rows]
    by_study: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        study, run = row["run"].split("/", 1)
        by_study.setdefault(study, []).append({**row, "run": run})
    for study, study_rows in by_study.items():
        write_runs_table(study_rows, out / study / RUNS_SUMMARY)
    return pd.DataFrame(ordered)


def analysis_stage(runs: list[Run], out: Path, options: AnalysisOptions, workers: int, progress: bool,
                   log: Callable[[str], None]) -> dict[str, int]:
    """`mixit analyze` every finished run (cached by checkpoint hash, so reruns cost a hash each)."""
    jobs = [(n, str(out / n), options) for n, _ in runs
            if is_finished(out / n) and read_summary(out / n).get("status") == "finished"]
    counts = {"computed": 0, "cached": 0, "error": 0}
    bar = tqdm(total=len(jobs), desc="analyze", unit="run", disable=not progress)
    try:
        lost = lambda job, error: {"run": job[0], "status": "error", "message": str(error)}  # noqa: E731
        for row in pool_map(_analyze_job, jobs, workers, lost):
            counts[row["status"]] += 1
            if row["status"] == "error":
                log(f"  analysis of {row['run']} failed: {row['message']}")
            bar.update(1)
    finally:
        bar.close()
    log(f"analyze: {counts['computed']} computed, {counts['cached']} cached, {counts['error']} failed")
    return counts


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


def signal_stage(spec: dict[str, Any], out: Path, log: Callable[[str], None]) -> None:
    from analysis.signal import signal_propagation

    config = {"variants": ["random", "mixit"], "depths": [2, 4, 8, 16, 32], "widths": [128], "seeds": [0, 1, 2],
              **spec}
    # controls: {label: {variant: ..., other ModelConfig fields}}, e.g. MixiT without its sink heads; their
    # rows carry the label in the variant column, next to the named variants.
    controls = config.pop("controls", None) or {}

    def compute():
        frames = [signal_propagation(**config)]
        for label, overrides in controls.items():
            overrides = dict(overrides)
            variant = overrides.pop("variant")
            frames.append(signal_propagation(**{**config, "variants": [variant], **overrides}).assign(variant=label))
        return pd.concat(frames, ignore_index=True)

    _, cached = _cached_csv(out / SIGNAL_FILE, {**config, "controls": controls}, compute)
    names = [*config["variants"], *controls]
    log(f"signal: {'cached' if cached else 'computed'} ({', '.join(names)} at depths {config['depths']})")


def speed_stage(spec: dict[str, Any], out: Path, log: Callable[[str], None]) -> None:
    import torch

    from training.benchmark import COLUMNS, measure_throughput

    config = {"variants": "all", "d_model": 256, "n_layers": 4, "n_heads": 4, "seq_len": 128, "batch_size": 32,
              "vocab": 512, "steps": 5, "repeats": 3, "warmup": 2, "device": "auto", **spec}
    if config["variants"] == "all":
        from models import VARIANTS

        config["variants"] = list(VARIANTS)
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # measured alone, after training, on every core
    try:
        # The columns are part of the cache key: a file written before a column existed is measured again.
        df, cached = _cached_csv(out / SPEED_FILE, {**config, "columns": COLUMNS}, lambda: measure_throughput(**config))
    finally:
        torch.set_num_threads(before)
    log(f"speed: {'cached' if cached else 'measured'} ({len(df)} variants)")


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
) -> dict[str, Any]:
    """Run every stage of the preset into `out`; return the manifest (also written to out/reproduce.json).

    Training runs on `executor` (default: a pool of `workers` local processes, `workers` defaulting to
    the CPU count); analysis always on the local pool."""
    out, report_dir, figures_dir = Path(out), Path(report_dir), Path(figures_dir)
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    executor = executor or Executor(workers=workers)
    started = time.time()
    timings: dict[str, float] = {}

    text = {k: choose_text(k, text_files if k == "lm" else sentiment_files, hub_check) for k in sorted(preset.text_kinds())}
    for choice in text.values():
        log(("note: " if choice.skipped else "text: ") + choice.note)
    runs = preset_runs(preset, text, out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": "mixit-lab/reproduce", "preset": preset.name, "preset_contents": preset.to_dict(),
        "text": {k: {"note": c.note, "skipped": c.skipped, **c.params} for k, c in text.items()},
        "runs": [n for n, _ in runs], "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "status": "running", "timings_s": timings, "workers": workers,
        "executor": executor.kind,
        # where the other outputs went, as given (relative to the working directory) and resolved
        "figures_dir": str(figures_dir), "report_dir": str(report_dir),
        "figures_dir_resolved": str(figures_dir.resolve()), "report_dir_resolved": str(report_dir.resolve()),
    }
    write_json(out / MANIFEST, manifest)

    def stage(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        result = fn()
        timings[name] = round(time.perf_counter() - t0, 1)
        return result

    table = stage("train", lambda: train_stage(runs, out, executor, progress, log, tracker))
    options = AnalysisOptions.from_dict(preset.analysis)
    stage("analyze", lambda: analysis_stage(runs, out, options, workers, progress, log))
    if "signal" not in preset.skip:
        stage("signal", lambda: signal_stage(preset.signal, out, log))
    if "speed" not in preset.skip:
        stage("speed", lambda: speed_stage(preset.speed, out, log))

    import figures

    def draw() -> dict[str, Any]:
        """Every figure; one that fails is recorded with its one-line reason, and the others and the report
        are still made."""
        try:
            return figures.make_all(out, figures_dir)
        except figures.FigureError as e:
            for name, error in e.failures:
                reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
                failed_figures[name] = f"{type(error).__name__}: {reason}".rstrip(": ")
            return e.results

    failed_figures: dict[str, str] = {}
    made = stage("figures", draw)
    for name, result in made.items():
        if name not in failed_figures:
            log(f"figure {name}: " + (", ".join(str(p) for p in result) if isinstance(result, list)
                                      else f"skipped: {result}"))
    for name, reason in failed_figures.items():
        log(f"figure {name}: FAILED: {reason}")

    from .report import write_report

    manifest.update(status="finished", failed_runs=int((table["status"] != "finished").sum()) if len(table) else 0,
                    failed_figures=failed_figures, wall_s=round(time.time() - started, 1))
    findings = stage("report", lambda: write_report(out, report_dir, manifest, figures_dir))
    manifest["wall_s"] = round(time.time() - started, 1)
    manifest["findings"] = findings
    write_json(out / MANIFEST, manifest)
    measured = [f for f in findings if f["holds"] is not None]
    verdicts = (f"{sum(f['holds'] for f in measured)} of {len(measured)} measured findings hold" if measured
                else "no paper finding measured")
    log(f"report: {report_dir / 'report.md'} ({verdicts}); wall time {manifest['wall_s']:.0f}s")
    return manifest
