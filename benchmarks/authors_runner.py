"""Runs one of the authors' training scripts (princeton-pli/MixiT) inside their own Python, for
benchmarks/authors_reference.py. Not meant to be called by hand.

    AUTHORS_PYTHON benchmarks/authors_runner.py SPEC.json

It must run under their interpreter (torch, transformers 4.51), so it imports nothing of MixiT Lab and
only the standard library at the top. SPEC.json (written by authors_reference.py) holds: `repo` (their
checkout), `script` (e.g. "depth.py"), `argv` (their command-line flags), `pins` (globals of their
script held at our values, see below), `kind` (which extra measurements to take), `task_info`,
`threads`, `out` (where the result JSON goes; a memorize run also writes `<out>.logits.npy` and
`<out>.labels.npy`) and, for the classifier, `inputs` (our tokenizer and labelled split, JSON). The
working directory must be a scratch folder that holds links to their
`configurator.py` and `task_*.py` (their scripts read those by relative path and write run folders
into the working directory).

What this file changes about how their script runs (authors_reference.py's docstring has the full list
and the reasons):

* The script is compiled from their file and executed as `__main__` in a namespace whose pinned names
  ignore assignments: the script's own defaults, their `configurator.py` and their task files cannot
  overwrite a pinned global. Nothing else in their code is touched.
* `wandb` and `sklearn` get inert stand-ins when they are not installed (their modular-addition and
  memorization scripts import them at the top; `wandb` only logs, `sklearn`'s PCA only runs with
  `calc_pca=True`). WANDB_MODE=disabled is set either way.
* `transformers.Trainer.evaluate` is wrapped so that the metrics of every evaluation their script runs
  are kept; the result is the last one, their final `trainer.evaluate()` after training.
* torch uses `threads` threads.
* `kind: classifier` (trainer_classifier.py): `AutoTokenizer` is pinned to a stand-in that returns our study's
  tokenizer, `datasets.load_dataset` answers their yelp_polarity calls with our split (`inputs`, written by
  authors_reference.py), and `torch.cuda.is_available` is made a callable whose truth is its result (their
  device line tests the function itself). Their token rows are then compared with ours.

After their script returns, this file reads their trained `model` from the namespace and measures, with
their model and their data: trainable parameters (those with requires_grad after all of their freezing),
our "sequence" accuracy on their eval set for the streaming tasks (every answer token of a row right),
and for memorization the logits over the label tokens of every key (bits are computed by the caller).
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types


class PinnedNamespace(dict):
    """Module globals in which the names given at creation keep their values: later assignments to them
    (by the script, by `exec`'d configurator or task files, or through `globals()[name] = ...`) are ignored.
    Module-level code stores names through `__setitem__` when its namespace is not an exact dict."""

    def __init__(self, pins: dict):
        super().__init__(pins)
        self._pinned = frozenset(pins)

    def __setitem__(self, key, value):
        if key in self._pinned:
            return
        super().__setitem__(key, value)


def _stub(name: str) -> None:
    """An inert stand-in for a module that is missing from their environment."""
    if importlib.util.find_spec(name.split(".")[0]) is not None:
        return
    if name == "wandb":
        mod = types.ModuleType("wandb")

        class _Run:
            def log_code(self, *a, **k):
                return None

            def __getattr__(self, _):
                return lambda *a, **k: None

        mod.run = _Run()
        mod.init = lambda *a, **k: mod.run
        mod.log = lambda *a, **k: None
        mod.finish = lambda *a, **k: None
        mod.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
        sys.modules["wandb"] = mod
    elif name == "sklearn":
        pkg = types.ModuleType("sklearn")
        sub = types.ModuleType("sklearn.decomposition")

        class PCA:  # only used by their scripts with calc_pca=True, which we never set
            def __init__(self, *a, **k):
                raise RuntimeError("sklearn is not installed in this environment")

        sub.PCA = PCA
        pkg.decomposition = sub
        pkg.__spec__ = importlib.machinery.ModuleSpec("sklearn", None, is_package=True)
        sub.__spec__ = importlib.machinery.ModuleSpec("sklearn.decomposition", None)
        sys.modules["sklearn"] = pkg
        sys.modules["sklearn.decomposition"] = sub


class _TruthOfCall:
    """`torch.cuda.is_available` whose truth is its result. trainer_classifier.py picks its device with
    `"cuda" if torch.cuda.is_available else "cpu"` (the function, not its result: always "cuda")."""

    def __init__(self, fn):
        self._fn = fn

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __bool__(self) -> bool:
        return bool(self._fn())


def _classifier_inputs(path: str) -> tuple[dict, dict]:
    """What replaces the Hub for trainer_classifier.py: pins (an `AutoTokenizer` whose from_pretrained gives our
    study's tokenizer, wrapped as a PreTrainedTokenizerFast that prepends our BOS and pads with our pad token
    as their eos) and `datasets.load_dataset` answering their yelp_polarity calls with our labelled split."""
    import datasets
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    data = json.loads(open(path).read())
    bos, pad = data["bos_token"], data["pad_token"]
    tok = Tokenizer.from_str(data["tokenizer"])
    tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=pad, pad_token=pad,
                                   padding_side="right")
    splits = {k: datasets.Dataset.from_dict({"text": data[k]["text"], "label": data[k]["label"]})
              for k in ("train", "test")}
    asked: list[str] = []

    def from_pretrained(name, *args, **kwargs):
        asked.append(str(name))
        return fast

    def load_dataset(path, *args, split=None, **kwargs):
        if path != "fancyzhx/yelp_polarity" or split not in splits:
            raise RuntimeError(f"load_dataset({path!r}, split={split!r}): only yelp_polarity's train/test are given")
        return splits[split]

    datasets.load_dataset = load_dataset
    torch_cuda = sys.modules["torch"].cuda
    torch_cuda.is_available = _TruthOfCall(torch_cuda.is_available)
    about = {"tokenizer_asked": asked, "vocab": len(fast), "source": data["source"],
             "train_rows": len(data["train"]["text"]), "eval_rows": len(data["test"]["text"])}
    return {"AutoTokenizer": types.SimpleNamespace(from_pretrained=from_pretrained)}, {"data": data, "about": about}


def _rows_differ(dataset, rows: list[list[int]]) -> int:
    """How many of their tokenized rows differ from ours (the same texts, in the same order)."""
    theirs = [list(map(int, r)) for r in dataset["input_ids"]]
    return sum(a != b for a, b in zip(theirs, rows)) + abs(len(theirs) - len(rows))


def _sequence_accuracy(model, tokens, task_info: dict) -> dict:
    """Our metric on their eval rows: a row counts as right when every answer token is predicted (argmax
    at the previous position). Answer tokens: addition, the sum digits and the stop token (ids >= 20);
    dyck, the token after `?`; retrieval, the token after the query."""
    import torch

    kind = task_info["task"]
    right_rows, right_tokens, n_tokens = 0, 0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, tokens.shape[0], 1000):
            x = tokens[start : start + 1000]
            pred = model(input_ids=x).logits.argmax(-1)[:, :-1]
            prev, target = x[:, :-1], x[:, 1:]
            if kind == "addition":
                mask = target >= 20
            elif kind == "dyck":
                mask = prev == 3
            elif kind == "retrieval":
                mask = prev >= task_info["first_query_id"]
            else:
                raise ValueError(f"no sequence accuracy for {kind!r}")
            ok = (pred == target) | ~mask
            right_rows += int(ok.all(dim=1).sum())
            right_tokens += int(((pred == target) & mask).sum())
            n_tokens += int(mask.sum())
    return {"sequence_accuracy": right_rows / tokens.shape[0], "answer_token_accuracy": right_tokens / n_tokens}


def _measure(spec: dict, ns: dict, trainer, classifier: dict | None) -> dict:
    """What each kind of run measures beyond their metrics, on their trained model and their data."""
    import torch

    model, kind, result = trainer.model, spec["kind"], {}
    if kind == "stream":
        tokens = ns["datasets"]["testA"].input_ids
        result.update(_sequence_accuracy(model, tokens, spec["task_info"]))
        result["eval_rows"] = int(tokens.shape[0])
    elif kind == "memorize":
        import numpy as np

        n = int(spec["task_info"]["n"])
        data = torch.tensor(ns["taskA_train"], dtype=torch.long)
        model.eval()
        chunks = []
        with torch.no_grad():
            for s in range(0, data.shape[0], 4096):
                # their label tokens are ids 0..n-1 (the first key slot's tokens); logits at -2 predict the label
                chunks.append(model(input_ids=data[s : s + 4096]).logits[:, -2, :n].double())
        np.save(spec["out"] + ".logits.npy", torch.cat(chunks).numpy())
        np.save(spec["out"] + ".labels.npy", data[:, -1].numpy())
        result["eval_rows"] = int(data.shape[0])
    elif kind == "classifier":
        data = classifier["data"]
        result["rows_differ"] = (_rows_differ(trainer.train_dataset, data["train"]["rows"])
                                 + _rows_differ(trainer.eval_dataset, data["test"]["rows"]))
        result["inputs"] = classifier["about"]
        result["eval_rows"] = len(trainer.eval_dataset)
    elif kind == "modadd":
        result["eval_rows"] = int(len(ns["taskA_test"]))
    return result


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    os.environ.setdefault("WANDB_MODE", "disabled")
    import torch

    torch.set_num_threads(int(spec["threads"]))
    repo = spec["repo"]
    sys.path.insert(0, repo)
    import transformers  # before the stand-ins, so that its own availability checks see the real environment

    _stub("wandb")
    _stub("sklearn")

    evaluations: list[dict] = []
    trainers: list = []  # the trainer that evaluated (trainer_classifier.py keeps its own inside main())
    original_evaluate = transformers.Trainer.evaluate

    def evaluate(self, *args, **kwargs):
        trainers.append(self)
        metrics = original_evaluate(self, *args, **kwargs)
        evaluations.append({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})
        return metrics

    transformers.Trainer.evaluate = evaluate

    script = os.path.join(repo, spec["script"])
    sys.argv = [spec["script"], *spec["argv"]]
    pins, classifier = dict(spec["pins"]), None
    if spec["kind"] == "classifier":
        objects, classifier = _classifier_inputs(spec["inputs"])
        pins.update(objects)
    ns = PinnedNamespace(pins)
    dict.update(ns, {"__name__": "__main__", "__file__": script, "__builtins__": builtins})
    start = time.time()
    exec(compile(open(script).read(), script, "exec"), ns)
    train_wall = time.time() - start

    trainer = ns["trainer"] if "trainer" in ns else trainers[-1]
    model = trainer.model
    params = list(model.parameters())
    result = {
        "evaluations": evaluations,
        "final": evaluations[-1] if evaluations else None,
        "params_trainable": sum(p.numel() for p in params if p.requires_grad),
        "params_total": sum(p.numel() for p in params),
        "trainable_names": [n for n, p in model.named_parameters() if p.requires_grad],
        "optimizer_steps": int(trainer.state.global_step),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "script_wall_s": train_wall,
        "pinned": {k: ns[k] for k in spec["pins"]},  # JSON pins only (the classifier's objects are in `inputs`)
    }
    result.update(_measure(spec, ns, trainer, classifier))
    with open(spec["out"], "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
