"""Finding 5's covariance half on the authors' own model: Table 7's signal study run on their `modeling_llama.py`
at initialization, beside ours, at a preset's `signal:` settings.

    python benchmarks/authors_signal.py --authors-repo ../MixiT --authors-python ../authors-env/bin/python \\
        --preset quick [--preset paper] --out reproduce/authors_reference.json [--compare] [--dry-run]

Our signal stage (mixit_lab.reproduce.pipeline.signal_stage, mixit_lab.analysis.signal.signal_propagation) builds, per variant,
width, depth and seed, a fresh model and measures the token covariance and cosine of its residual stream on
`n_seqs` random sequences of `n_ctx` distinct tokens. This file does the same with the authors' model:

* Their model: `LlamaForCausalLM` of their `modeling_llama.py` (commit 22ce029), built from `MixingLlamaConfig`
  with the arguments their `depth.py` passes (`get_model_config`, with `--model_name_or_path=llama`): our width
  (`hidden_size`), depth (`num_hidden_layers`), heads, `intermediate_size = 4 * width`, `max_position_embeddings
  = max_seq_len = n_ctx`, `vocab_size = d_vocab`, `skip_scaling = sqrt(0.5)`, `attn_implementation` eager for
  `mixing` and sdpa for `vanilla`, `initializer_range = 0.02`, and the rest at the defaults of their
  `utils.ScriptArguments` / `utils.TrainingArguments`, read from their files at run time (`base_hidden_size`
  512, `base_num_attention_heads` 8, `activation_cminus` -1, `base_attn_mix` 1, `tau0` 1, `depth_alpha` 0,
  `do_rope` True); then `attention_bias = mlp_bias = True` as depth.py sets them. Seeded as depth.py seeds
  before it builds the model (`random`, `numpy` and `torch.manual_seed(seed)`), on the CPU in fp32.
* Variants: our `random` is their `--shaped_attention=vanilla --weight_frozen=1` (at initialization
  `weight_frozen` changes nothing: it only chooses what trains), our `mixit` their `--shaped_attention=mixing`
  with the sink head their constructor always puts in head 0 of every layer (`LlamaAttention.__init__`).
* The control without sink heads: their code has no switch for the sink, so it is removed at run time: after
  the model is built, head 0's matrix of every layer is rebuilt as their constructor computed it before the
  sink line overwrote it, `tril(I + base_attn_mix * (mixing_noise[0] - mixing_noise_drift[0]))`, from the
  noise the layer keeps (`mixing_noise`, `mixing_noise_drift`). The runner first checks that the same formula
  gives back heads 1.. exactly, i.e. that it is their construction. Only `sink_head: false` can be switched on
  their side; a control setting any other model field is refused.
* Inputs: the same token ids as ours (mixit_lab.analysis.common.random_tokens with the same seed, computed here and
  handed over), the whole batch at once.
* Measurement: their residual stream before the first decoder layer (token embedding, plus `wpe` for mixing)
  and after the last one (its output, before their final norm), captured with forward hooks and measured here
  with our own `mixit_lab.analysis.signal.token_similarity`, averaged over the sequences: the same numbers as our
  layer 0 and last layer. Table 7 reads the last layer.

Nothing of theirs is copied or edited: `authors_signal.py --run SPEC.json` is this same file started in their
Python (it imports only the standard library at the top), which imports their model file from `--authors-repo`
and writes the captured residual streams as .npy files into a scratch folder. Records (one per variant, width,
depth and seed; `task: signal`; `covariance`, `cosine`, `variance` of the last layer, `*_layer0` of the first
layer's input; `model_overrides` the ModelConfig fields of a control, e.g. `sink_head: false`) are merged into
`--out` with benchmarks/authors_reference.py's merge, and mixit_lab.reproduce.reference.reference_signal turns them into
the report's reference Table 7. `--compare` also runs our signal study at the same settings and prints both
side by side.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # their Python runs this file too (--run): only the standard library at the top
    from mixit_lab.reproduce.stage_options import SignalOptions

ROOT = Path(__file__).resolve().parent.parent
# variant (ours) -> their shaped_attention and weight_frozen
THEIR_FLAGS = {"random": ("vanilla", 1), "mixit": ("mixing", 0), "standard": ("vanilla", 0)}
SWITCHABLE = ("sink_head",)  # model fields a control may set on their side
STUDY = "signal"


# --------------------------------------------------------------------------- their side (runs in their Python)
def _rebuild_without_sink(attn, config) -> None:
    """Head 0 of one of their mixing layers as their constructor computed it before the sink overwrote it."""
    import torch

    if config.depth_alpha != 0:
        raise ValueError("the sink can only be removed with depth_alpha = 0 (the identity is part of the matrix)")
    rebuilt = attn.mixing_I + config.base_attn_mix * (attn.mixing_noise - attn.mixing_noise_drift)
    if attn.is_causal:
        rebuilt = torch.tril(rebuilt)
    if not torch.equal(rebuilt[1:], attn.attn_weights[1:]):
        raise RuntimeError("rebuilding their mixing matrices does not give back heads 1.. exactly")
    attn.attn_weights[0] = rebuilt[0]


def their_config_kwargs(job: dict, script_defaults: dict, do_rope: bool) -> dict:
    """The MixingLlamaConfig arguments depth.py's get_model_config passes, for one job (pure)."""
    attention = job["shaped_attention"]
    shaped = attention in ("mixing", "shaped")
    kwargs = dict(
        hidden_size=job["d_model"], num_hidden_layers=job["n_layers"], intermediate_size=4 * job["d_model"],
        num_attention_heads=job["n_heads"], shaped_attention=attention, max_position_embeddings=job["n_ctx"],
        skip_scaling=math.sqrt(0.5), attn_implementation="eager" if shaped else "sdpa",
        activation_cminus=script_defaults["activation_cminus"], max_seq_len=job["n_ctx"], vocab_size=job["d_vocab"],
        do_rope=do_rope, base_attn_mix=script_defaults["base_attn_mix"],
        base_hidden_size=script_defaults["base_hidden_size"], base_n_layer=script_defaults["base_n_layer"],
        base_num_attention_heads=script_defaults["base_num_attention_heads"], tau0=script_defaults["tau0"],
        depth_alpha=script_defaults["depth_alpha"],
    )
    if shaped:
        kwargs["initializer_range"] = 0.02
    return kwargs


def run_spec(spec_path: str) -> None:
    """In their Python: build each job's model at init, feed it the tokens, save layer 0 and the last layer."""
    import dataclasses

    import numpy as np
    import torch

    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(int(spec["threads"]))
    sys.path.insert(0, spec["repo"])
    import transformers

    import modeling_llama
    import utils

    script_defaults = {f.name: f.default for f in dataclasses.fields(utils.ScriptArguments)}
    do_rope = {f.name: f.default for f in dataclasses.fields(utils.TrainingArguments)}["do_rope"]
    out = Path(spec["out"])
    results = []
    for i, job in enumerate(spec["jobs"]):
        start = time.time()
        seed = job["seed"]
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        config = modeling_llama.MixingLlamaConfig(**their_config_kwargs(job, script_defaults, do_rope))
        config.attention_bias = True
        config.mlp_bias = True
        model = modeling_llama.LlamaForCausalLM(config).eval()
        if not job["sink_head"]:
            for layer in model.model.layers:
                _rebuild_without_sink(layer.self_attn, config)
        seen: dict[str, torch.Tensor] = {}
        layers = model.model.layers
        layers[0].register_forward_pre_hook(lambda m, args: seen.__setitem__("first", args[0].detach().clone()))
        layers[-1].register_forward_hook(lambda m, args, output: seen.__setitem__("last", output[0].detach().clone()))
        tokens = torch.tensor(job["tokens"], dtype=torch.long)
        with torch.no_grad():
            model.model(input_ids=tokens, use_cache=False)
        np.save(out / f"{i}.npy", torch.stack([seen["first"], seen["last"]]).float().numpy())
        results.append({"wall_s": round(time.time() - start, 2), "params": sum(p.numel() for p in model.parameters())})
    (out / "result.json").write_text(json.dumps({
        "jobs": results, "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "torch_threads": torch.get_num_threads()}))


# --------------------------------------------------------------------------- our side
def signal_jobs(s: SignalOptions) -> list[dict]:
    """One job per (variant or control, width, depth, seed) of a preset's signal stage, in their terms."""
    jobs = []
    for label, (variant, overrides) in s.labels().items():
        if variant not in THEIR_FLAGS:
            raise ValueError(f"{label}: no counterpart of variant {variant!r} in their model file at init")
        unknown = sorted(set(overrides) - set(SWITCHABLE))
        if unknown:
            raise ValueError(f"{label}: {', '.join(unknown)} cannot be switched in their model file")
        sink = overrides.get("sink_head", True)
        if not sink and variant != "mixit":
            raise ValueError(f"{label}: only mixit has a sink head")
        attention, frozen = THEIR_FLAGS[variant]
        for width in sorted(s.widths):
            for depth in sorted(s.depths):
                for seed in sorted(s.seeds):
                    jobs.append({"label": label, "variant": variant, "model_overrides": overrides,
                                 "shaped_attention": attention, "weight_frozen": frozen, "sink_head": sink,
                                 "d_model": width, "n_layers": depth, "n_heads": s.n_heads, "n_ctx": s.n_ctx,
                                 "d_vocab": s.d_vocab, "n_seqs": s.n_seqs, "seed": seed})
    return jobs


def describe(job: dict) -> str:
    """How their model is built for a job, as a record's `command`."""
    text = (f"LlamaForCausalLM(MixingLlamaConfig(hidden_size={job['d_model']}, num_hidden_layers={job['n_layers']}, "
            f"num_attention_heads={job['n_heads']}, max_seq_len={job['n_ctx']}, vocab_size={job['d_vocab']}, "
            f"shaped_attention={job['shaped_attention']!r}, ... as depth.py --model_name_or_path=llama)) after "
            f"torch.manual_seed({job['seed']}); flags --shaped_attention={job['shaped_attention']} "
            f"--weight_frozen={job['weight_frozen']}; at init")
    return text + ("" if job["sink_head"] else "; head 0 of every layer rebuilt without the sink")


def measure(arrays, n_seqs: int) -> dict[str, float]:
    """Our token similarity (mixit_lab.analysis.signal.token_similarity) of [2, batch, pos, d] residual streams."""
    import torch

    from mixit_lab.analysis.signal import MEASURES, token_similarity

    out = {}
    for where, resid in (("layer0", arrays[0]), ("last", arrays[1])):
        sim = token_similarity(torch.from_numpy(resid))
        assert sim["covariance"].shape[0] == n_seqs
        for m in MEASURES:
            out[m if where == "last" else f"{m}_layer0"] = float(sim[m].mean())
    return out


def run_theirs(jobs: list[dict], preset: str, repo: Path, python: str, threads: int) -> list[dict]:
    """Run the jobs in their Python; one record per job."""
    import datetime
    import shutil
    import subprocess
    import tempfile

    import numpy as np

    from mixit_lab.analysis.common import random_tokens

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from authors_reference import _commit, _machine

    work = Path(tempfile.mkdtemp(prefix="authors_signal_"))
    try:
        tokens = {}
        for j in jobs:
            key = (j["d_vocab"], j["n_seqs"], j["n_ctx"], j["seed"])
            if key not in tokens:
                tokens[key] = random_tokens(*key).tolist()
        spec = {"repo": str(repo), "threads": threads, "out": str(work),
                "jobs": [dict(j, tokens=tokens[(j["d_vocab"], j["n_seqs"], j["n_ctx"], j["seed"])]) for j in jobs]}
        (work / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        proc = subprocess.run([python, str(Path(__file__).resolve()), "--run", str(work / "spec.json")], cwd=work,
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not (work / "result.json").is_file():
            raise RuntimeError(f"their model failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        res = json.loads((work / "result.json").read_text())
        commit, machine = _commit(repo), _machine(res["torch_threads"])
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        records = []
        for i, (job, ran) in enumerate(zip(jobs, res["jobs"])):
            values = measure(np.load(work / f"{i}.npy"), job["n_seqs"])
            records.append({
                "preset": preset, "study": STUDY, "task": STUDY,
                "task_params": {k: job[k] for k in ("n_ctx", "d_vocab", "n_seqs")},
                "variant": job["label"], "base_variant": job["variant"], "model_overrides": job["model_overrides"],
                "d_model": job["d_model"], "n_layers": job["n_layers"], "n_heads": job["n_heads"], "seed": job["seed"],
                "metric": "covariance", "value": values["covariance"], **values,
                "command": describe(job), "params_total": ran["params"],
                "runtime_overrides": {} if job["sink_head"] else {
                    "sink_head": "head 0 of every layer rebuilt as tril(I + base_attn_mix * (mixing_noise[0] - "
                                 "mixing_noise_drift[0])), their construction before the sink line"},
                "authors_commit": commit, "date": date, "machine": machine, "torch_threads": res["torch_threads"],
                "torch_version": res["torch_version"], "transformers_version": res["transformers_version"],
                "wall_s": ran["wall_s"],
            })
        return records
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ours(s: SignalOptions):
    """Our signal study at the stage's settings, as the signal stage computes it (last-layer rows, Table 7)."""
    import pandas as pd

    from mixit_lab.analysis.signal import signal_propagation

    frames = [signal_propagation(**s.arguments(label)).assign(variant=label) for label in s.labels()]
    df = pd.concat(frames, ignore_index=True)
    return df[df["layer"] == df["depth"]].reset_index(drop=True)


def comparison(records: list[dict], mine) -> str:
    """A markdown table: per variant, width and depth, last-layer covariance (mean ± std over seeds) ours and
    theirs, and the growth from the shallowest depth."""
    import numpy as np

    lines = ["| variant | width | depth | covariance, ours | covariance, theirs | growth ours / theirs |",
             "|---|---|---|---|---|---|"]
    first: dict[tuple, tuple[float, float]] = {}
    for row in mine.sort_values(["variant", "d_model", "depth"], kind="stable").to_dict("records"):
        theirs = [r["covariance"] for r in records if r["variant"] == row["variant"]
                  and r["d_model"] == row["d_model"] and r["n_layers"] == row["depth"]]
        t_mean, t_std = float(np.mean(theirs)), float(np.std(theirs))
        base = first.setdefault((row["variant"], row["d_model"]), (row["covariance"], t_mean))
        lines.append(f"| {row['variant']} | {row['d_model']} | {row['depth']} | {row['covariance']:.3g} ± "
                     f"{row['covariance_std']:.2g} | {t_mean:.3g} ± {t_std:.2g} | x{row['covariance'] / base[0]:.1f} / "
                     f"x{t_mean / base[1]:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors-repo", required=True, help="a checkout of princeton-pli/MixiT")
    ap.add_argument("--authors-python", required=True, help="a Python with their requirements")
    ap.add_argument("--preset", action="append", required=True, help="our preset (name or YAML path); repeatable")
    ap.add_argument("--out", default="reproduce/authors_reference.json", help="JSON file the records are merged into")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--compare", action="store_true", help="also run our signal study and print both")
    ap.add_argument("--dry-run", action="store_true", help="print the jobs, run nothing")
    a = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from authors_reference import merge_records

    from mixit_lab.reproduce.preset import load_preset

    for name in a.preset:
        preset = load_preset(name)
        if "signal" in preset.skip:
            raise SystemExit(f"preset {preset.name!r} skips the signal stage")
        jobs = signal_jobs(preset.signal)
        if a.dry_run:
            for j in jobs:
                print(f"# {preset.name} {j['label']} width {j['d_model']} depth {j['n_layers']} seed {j['seed']}")
                print(describe(j))
            continue
        python = os.path.abspath(a.authors_python) if os.sep in a.authors_python else a.authors_python
        start = time.time()
        records = run_theirs(jobs, preset.name, Path(a.authors_repo).resolve(), python, a.threads)
        merge_records(Path(a.out), records)
        print(f"{preset.name}: {len(records)} records of their model at init ({time.time() - start:.0f} s)", flush=True)
        if a.compare:
            print(comparison(records, ours(preset.signal)), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--run":
        run_spec(sys.argv[2])
    else:
        sys.exit(main())
