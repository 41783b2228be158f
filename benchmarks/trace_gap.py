"""Trace a gap between our results and the authors' code: train one preset study's runs with our own trainer,
switching ONE setting at a time, and compare the metric.

    python benchmarks/trace_gap.py --preset quick --study memorize --task-param n=96 --variants standard \\
        --seeds 0 1 --switch epochs:sampling=epochs --switch betas:betas=0.9/0.999 \\
        --switch decay0:min_lr_ratio=0 --all-together --work /tmp/trace/runs --out /tmp/trace/memorize.json

For each selected run of the study (the preset's settings, exactly as `mixit reproduce` builds them) it trains
the baseline, each switch alone and, with `--all-together`, every switch at once. A switch is
`NAME:key=value[,key=value]`; keys are TrainConfig fields (sampling, betas, min_lr_ratio, warmup_steps, ...;
betas written `0.9/0.999`), `model.<field>` for a ModelConfig field passed through `model_extra`, or
`task.<parameter>` for a task parameter (a data-processing choice: `task.split_seed=1`,
`task.tokenizer=bpe-llama3`). Values are read as YAML scalars (`0`, `0.5`, `true`, `null`, `epochs`).

Metric: for a memorization task (its class's `eval_is_train`, e.g. `memorize`) the bits per trainable
parameter of `mixit_lab.analysis.memory.memorized_bits` (what the reproduce pipeline's analysis stage reports) and its
label accuracy, plus the trainer's final eval accuracy; for other tasks the trainer's final eval accuracy
(`eval_acc` of its summary). It prints one table (run, switch, per-seed values, median) and writes JSON
(`--out`). Runs live under `--work` (default: a new temp folder), one folder per study, so that the runs of a
study share one precision decision; a finished run there is reused, an interrupted one resumed.

Filters: `--task-param n=96` (repeatable: a key given twice accepts either value), `--variants`, `--seeds`.
`--steps N` shortens every run (tests). Train with one torch thread (`--threads`, default 1) and one run at
a time. A bad switch is one line on stderr naming the allowed keys, exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from authors_reference import study_runs  # noqa: E402
from mixit_lab.models.config import ModelConfig  # noqa: E402
from mixit_lab.training.config import TrainConfig  # noqa: E402
from mixit_lab.training.resolve import resolve  # noqa: E402

BASELINE = "baseline"
ALL = "all"
# TrainConfig fields that say which run it is (not a training setting to switch), and ModelConfig fields that
# TrainConfig sets itself
RUN_FIELDS = ("task", "task_params", "variant", "seed", "model_extra")
SET_BY_TRAIN = ("variant", "d_model", "n_layers", "n_heads", "n_ctx", "d_vocab", "seed")


class SwitchError(ValueError):
    """A switch that cannot be applied (its message is one line)."""


@dataclass(frozen=True)
class Switch:
    """A named set of changes to a run's settings: TrainConfig fields and model_extra (ModelConfig) fields."""

    name: str
    train: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    task: dict[str, Any] = field(default_factory=dict)  # task parameters

    def describe(self) -> str:
        items = [*self.train.items(), *((f"model.{k}", v) for k, v in self.model.items()),
                 *((f"task.{k}", v) for k, v in self.task.items())]
        return ", ".join(f"{k}={v}" for k, v in items) or "preset settings"


def allowed_keys() -> list[str]:
    from mixit_lab.training.tasks import task_parameters

    train = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in RUN_FIELDS]
    model = [f"model.{f.name}" for f in dataclasses.fields(ModelConfig) if f.name not in SET_BY_TRAIN]
    return train + model + [f"task.{name}" for name in task_parameters()]


def parse_value(key: str, text: str) -> Any:
    """A switch value: `a/b` is a tuple of numbers (betas), anything else a YAML scalar."""
    if "/" in text:
        try:
            return tuple(float(part) for part in text.split("/"))
        except ValueError:
            raise SwitchError(f"{key}={text!r}: write a pair of numbers as 0.9/0.999") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_switch(spec: str) -> Switch:
    """`NAME:key=value[,key=value]` as a Switch (SwitchError naming the allowed keys for an unknown one)."""
    name, sep, body = spec.partition(":")
    if not sep or not name or not body or name in (BASELINE, ALL):
        raise SwitchError(f"switch {spec!r}: write NAME:key=value[,key=value] (NAME not {BASELINE!r} or {ALL!r})")
    parts: dict[str, dict[str, Any]] = {"train": {}, "model": {}, "task": {}}
    for item in body.split(","):
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise SwitchError(f"switch {spec!r}: {item!r} is not key=value")
        if key not in allowed_keys():
            raise SwitchError(f"switch {name!r}: unknown key {key!r}; allowed: {', '.join(allowed_keys())}")
        value = parse_value(key, text.strip())
        where, _, field_name = key.rpartition(".")
        parts[where or "train"][field_name] = value
    return Switch(name, **parts)


def combine(switches: list[Switch]) -> Switch:
    """Every switch at once (a key set by two switches to different values is refused)."""
    parts: dict[str, dict[str, Any]] = {"train": {}, "model": {}, "task": {}}
    for s in switches:
        for where, target in parts.items():
            for k, v in getattr(s, where).items():
                if k in target and target[k] != v:
                    raise SwitchError(f"--all-together: switches set {k} to both {target[k]!r} and {v!r}")
                target[k] = v
    return Switch(ALL, **parts)


def apply_switch(cfg: TrainConfig, switch: Switch) -> TrainConfig:
    """cfg with the switch's changes (SwitchError, one line, if TrainConfig or ModelConfig refuses a value)."""
    data = {**cfg.to_dict(), **switch.train, "model_extra": {**cfg.model_extra, **switch.model},
            "task_params": {**cfg.task_params, **switch.task}}
    try:
        new = TrainConfig.from_dict(data)
        resolve(new, device=False)
    except (ValueError, TypeError) as e:
        raise SwitchError(f"switch {switch.name!r}: {e}") from None
    return new


def with_steps(cfg: TrainConfig, steps: int) -> TrainConfig:
    """cfg shortened to `steps` (a test's override): the warmup and eval interval shrink with it."""
    warmup = None if cfg.warmup_steps is None else min(cfg.warmup_steps, steps)
    return dataclasses.replace(cfg, steps=steps, warmup_steps=warmup, eval_every=min(cfg.eval_every, steps))


# --------------------------------------------------------------------------- the study's runs
def parse_task_params(items: list[str]) -> dict[str, list[Any]]:
    """`--task-param` filters as {key: accepted values}: a key given twice accepts either value."""
    out: dict[str, list[Any]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq:
            raise SwitchError(f"--task-param {item!r}: write key=value, e.g. n=96")
        out.setdefault(key.strip(), []).append(yaml.safe_load(text))
    return out


def baseline_runs(preset_name: str, study: str, task_params: dict[str, list[Any]], variants: list[str] | None,
                  seeds: list[int] | None) -> list[tuple[str, TrainConfig]]:
    """(run name, TrainConfig) of each selected run of the study, built as the reproduce pipeline builds it."""
    from mixit_lab.reproduce.corpora import choose_text
    from mixit_lab.reproduce.preset import load_preset
    from mixit_lab.training.sweep import expand_grid_models

    preset = load_preset(preset_name)
    spec = preset.studies.get(study)
    train_fields = {**preset.train, **(spec.train if spec else {})}
    if spec is not None and spec.schedules:  # the study's (first) schedule, as the pipeline trains it
        train_fields["schedule"] = spec.schedules[0]
    corpus: dict[str, Any] = {}
    if spec is not None and spec.text:  # a text study reads the corpus `mixit reproduce` would pick
        choice = choose_text(spec.text, None)
        if choice.skipped:
            raise SwitchError(choice.note)
        corpus = choice.params
    out = []
    for run in study_runs(preset, study, variants=variants, seeds=seeds):
        if any(run["task_params"].get(k) not in values for k, values in task_params.items()):
            continue
        size = {k: run[k] for k in ("d_model", "n_layers", "n_heads")}
        task = (run["task"], {**run["task_params"], **corpus})
        (name, cfg, _), = expand_grid_models([run["variant"]], [task], [size], [run["seed"]], [run["lr"]],
                                             train_fields)
        out.append((name, cfg))
    if not out:
        raise SwitchError(f"no run of study {study!r} matches --task-param {task_params}")
    return out


# --------------------------------------------------------------------------- training and the metric
def train_and_measure(cfg: TrainConfig, run_dir: Path) -> dict[str, Any]:
    """Train (or reuse) the run in run_dir; its metrics: eval_acc, and for memorization bits_per_param and
    label_accuracy."""
    from mixit_lab.analysis.memory import is_memorization_task, memorized_bits
    from mixit_lab.training.trainer import train

    summary = train(cfg, run_dir, resume=True, progress=False, argv=["benchmarks/trace_gap.py"])
    row: dict[str, Any] = {"run_dir": str(run_dir), "status": summary["status"], "eval_acc": summary.get("eval_acc"),
                           "precision": summary.get("precision"), "elapsed_s": summary.get("elapsed_s"),
                           "params_trainable": summary.get("params_trainable")}
    if summary["status"] == "finished" and is_memorization_task(cfg.build_task()):
        mem = memorized_bits(run_dir).iloc[0]
        row.update(bits=float(mem["bits"]), bits_per_param=float(mem["bits_per_trainable_param"]),
                   label_accuracy=float(mem["accuracy"]))
    return row


def metric_names(rows: list[dict[str, Any]]) -> list[str]:
    return ["bits_per_param", "label_accuracy", "eval_acc"] if any("bits_per_param" in r for r in rows) else ["eval_acc"]


def group_key(cfg: TrainConfig) -> str:
    """The run without its seed: task, parameters (files by their base names), variant, size."""
    from mixit_lab.training.tuning import portable_params

    params = ",".join(f"{k}={v}" for k, v in sorted(portable_params(cfg.task_params).items()))
    return f"{cfg.task}({params}) {cfg.variant} d{cfg.d_model}/l{cfg.n_layers}/h{cfg.n_heads}"


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (run group, switch): per-seed values and the median of each metric."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["group"], r["switch"]), []).append(r)
    out = []
    for (group, switch), members in groups.items():
        members.sort(key=lambda r: r["seed"])
        entry: dict[str, Any] = {"group": group, "switch": switch, "seeds": [r["seed"] for r in members]}
        for m in metric_names(rows):
            values = [r.get(m) for r in members]
            entry[m] = values
            finite = [v for v in values if v is not None]
            entry[f"{m}_median"] = statistics.median(finite) if finite else None
        out.append(entry)
    return out


def table(summary: list[dict[str, Any]], metrics: list[str]) -> str:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.4f}"

    lines = ["| run | switch | " + " | ".join(f"{m} per seed | {m} median" for m in metrics) + " |",
             "|---|---|" + "---|---|" * len(metrics)]
    for e in summary:
        cells = [f"{' / '.join(fmt(v) for v in e[m])} | {fmt(e[m + '_median'])}" for m in metrics]
        lines.append(f"| {e['group']} | {e['switch']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="quick", help="preset name or YAML path")
    ap.add_argument("--study", required=True, help="a study of the preset, e.g. memorize")
    ap.add_argument("--task-param", action="append", default=[], metavar="KEY=VALUE", help="keep runs with this task parameter")
    ap.add_argument("--variants", nargs="+", help="default: the study's")
    ap.add_argument("--seeds", nargs="+", type=int, help="default: the study's")
    ap.add_argument("--switch", action="append", default=[], metavar="NAME:key=value[,key=value]")
    ap.add_argument("--all-together", action="store_true", help="also train with every switch at once")
    ap.add_argument("--no-baseline", action="store_true", help="skip the baseline (e.g. when it is already in --out)")
    ap.add_argument("--steps", type=int, help="override every run's steps (tests)")
    ap.add_argument("--work", help="folder for the runs (default: a new temp folder)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--dry-run", action="store_true", help="print the runs and their configs; train nothing")
    return ap


def plan(args: argparse.Namespace) -> list[tuple[str, Switch, str, TrainConfig, str]]:
    """(switch name, switch, run name, config, its baseline's group) of every run to train, checked before anything
    trains."""
    switches = [parse_switch(s) for s in args.switch]
    names = [s.name for s in switches]
    if len(set(names)) != len(names):
        raise SwitchError(f"switch names repeat: {', '.join(names)}")
    todo = ([] if args.no_baseline else [Switch(BASELINE)]) + switches
    if args.all_together and switches:
        todo.append(combine(switches))
    jobs = []
    for name, cfg in baseline_runs(args.preset, args.study, parse_task_params(args.task_param), args.variants,
                                   args.seeds):
        if args.steps:
            cfg = with_steps(cfg, args.steps)
        for s in todo:
            jobs.append((s.name, s, name, apply_switch(cfg, s), group_key(cfg)))
    return jobs


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        jobs = plan(args)
    except SwitchError as e:
        print(f"trace_gap.py: error: {e}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.work or tempfile.mkdtemp(prefix="trace_gap_")) / args.study
    rows = []
    for switch_name, switch, name, cfg, group in jobs:
        run_dir = work / f"{switch_name}__{name}"
        if args.dry_run:
            print(f"{run_dir}: {switch.describe()} -> {json.dumps(cfg.to_dict(), default=str)}")
            continue
        row = {"group": group, "switch": switch_name, "seed": cfg.seed, "run": name,
               "changes": switch.describe(), "config": cfg.to_dict(), **train_and_measure(cfg, run_dir)}
        rows.append(row)
        shown = {m: row.get(m) for m in metric_names([row])}
        print(f"{switch_name:>10} {name}: {row['status']} {shown} ({row['elapsed_s']:.0f} s)", flush=True)
    if args.dry_run:
        return 0
    summary = summarize(rows)
    print(table(summary, metric_names(rows)))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        result = {"preset": args.preset, "study": args.study, "task_params": parse_task_params(args.task_param),
                  "switches": {s.name: s.describe() for _, s, _, _, _ in jobs}, "work": str(work),
                  "summary": summary, "runs": rows}
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
