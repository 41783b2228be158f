"""The reproduction's analysis stage: `mixit analyze` of every finished run, on the process pool, skipping (in this
process, without starting a worker) each run whose analysis is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pandas as pd
from tqdm.auto import tqdm

from mixit_lab.analysis.analyze import AnalysisOptions
from mixit_lab.models.files import atomic_file
from mixit_lab.training.pool import pool_map
from mixit_lab.training.rundir import ANALYSIS_DIR, DYNAMICS_FILE, kept_checkpoints


def analysis_stage(trained: pd.DataFrame, out: Path, options: AnalysisOptions, workers: int, progress: bool,
                   log: Callable[[str], None]) -> list[str]:
    """`mixit analyze` every finished run of `trained` (the training stage's rows; cached by checkpoint hash, so
    reruns cost a hash each); returns the runs whose analysis failed (each logged with its reason)."""
    finished = trained[trained["status"] == "finished"]["run"] if len(trained) else []
    jobs = [(n, str(out / n), options) for n in finished]
    todo = [job for job in jobs if not _analysed(job)]  # here: a rerun starts no worker for what is done
    counts = {"computed": 0, "cached": len(jobs) - len(todo), "error": 0}
    failed: list[str] = []
    bar = tqdm(total=len(jobs), initial=counts["cached"], desc="analyze", unit="run", disable=not progress)
    try:
        lost = lambda job, error: {"run": job[0], "status": "error", "message": str(error)}  # noqa: E731
        for row in pool_map(_analyze_job, todo, workers, lost):
            counts[row["status"]] += 1
            if row["status"] == "error":
                log(f"  analysis of {row['run']} failed: {row['message']}")
                failed.append(row["run"])
            bar.update(1)
    finally:
        bar.close()
    log(f"analyze: {counts['computed']} computed, {counts['cached']} cached, {counts['error']} failed")
    return failed


def _analyze_job(job: tuple[str, str, AnalysisOptions]) -> dict[str, Any]:
    from mixit_lab.analysis.analyze import analyze_checkpoint

    name, run_dir, options = job
    try:
        status, _ = analyze_checkpoint(Path(run_dir), Path(run_dir) / ANALYSIS_DIR, options, device="cpu")
        if kept_checkpoints(run_dir) and (status == "computed" or not (Path(run_dir) / DYNAMICS_FILE).is_file()):
            from mixit_lab.analysis.dynamics import checkpoint_dynamics  # the run kept checkpoints: score them by step

            table = checkpoint_dynamics(run_dir, options.n_seqs, options.seq_len, options.seed)
            with atomic_file(Path(run_dir) / DYNAMICS_FILE) as fh:
                table.to_csv(fh, index=False)
    except Exception as e:
        return {"run": name, "status": "error", "message": f"{type(e).__name__}: {e}"}
    return {"run": name, "status": status}


def _analysed(job: tuple[str, str, AnalysisOptions]) -> bool:
    """Whether a run's analysis (and its dynamics table, for a run that kept checkpoints) is current: a worker would
    only say "cached". Anything wrong is left to the worker, which reports it."""
    from mixit_lab.analysis.analyze import cached_analysis

    _, run_dir, options = job
    try:
        analysed = cached_analysis(Path(run_dir), Path(run_dir) / ANALYSIS_DIR, options) is not None
    except Exception:  # noqa: BLE001 (the worker meets it again and reports it)
        return False
    return analysed and (not kept_checkpoints(run_dir) or (Path(run_dir) / DYNAMICS_FILE).is_file())
