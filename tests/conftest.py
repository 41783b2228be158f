import json
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _threads_per_process() -> int:
    """The cores this test process may use: all of them (at most 2) alone, its share under pytest-xdist's workers."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


torch.set_num_threads(min(_threads_per_process(), torch.get_num_threads()))
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # the commands a test starts share its cores too
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads_per_process()))


def _shared_data() -> Path | None:
    """The real corpora: ../shared/data beside the repository, or $MIXIT_DATA; None if neither exists."""
    for candidate in (ROOT.parent / "shared" / "data", os.environ.get("MIXIT_DATA")):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


SHARED_DATA = _shared_data()
NEEDS_SHARED_DATA = "real corpora not found in ../shared/data (or $MIXIT_DATA)"  # the skip reason


@pytest.fixture(scope="session")
def generated_corpora(tmp_path_factory) -> dict[str, Path]:
    """Small generated corpora (tests/corpora.py) for tests that need a corpus but not the real ones:
    {"lm": WikiText-like articles, "sentiment": `sentence<TAB>label` lines}."""
    from corpora import write_corpora

    return write_corpora(tmp_path_factory.mktemp("generated_corpora"))


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from a second thread and lose a lot to it on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def tiny_cfg():
    """Factory for small model configs used across tests."""
    from mixit_lab.models import ModelConfig

    def make(variant: str = "standard", **kw) -> ModelConfig:
        base = dict(variant=variant, d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=13, seed=0)
        base.update(kw)
        return ModelConfig(**base)

    return make


# --------------------------------------------------------------------------- the explorer's runs directory
TINY_TEXT = "\n".join(f"Line {i}: the quick brown fox jumps over the lazy dog near bank {i}." for i in range(40))
TINY_SENTENCES = "\n".join(
    [f"The food was great and the staff kind {i}.\t1" for i in range(12)]
    + [f"Cold soup, slow and rude service {i}.\t0" for i in range(12)]
)


def _tiny_run(root: Path, study: str, name: str, task: str, params: dict, variant: str, n_layers: int = 2,
              steps: int = 30, keep: int = 0) -> Path:
    from mixit_lab.training import TrainConfig, train

    cfg = TrainConfig(task=task, task_params=params, variant=variant, d_model=16, n_layers=n_layers, n_heads=2,
                      seed=0, steps=steps, batch_size=32, lr=3e-3, eval_every=10, eval_samples=64, log_every=10,
                      device="cpu", keep_checkpoints=keep)
    out = root / study / name
    train(cfg, out, progress=False)
    return out


@pytest.fixture(scope="session")
def explorer_runs(tmp_path_factory) -> dict:
    """A small runs directory laid out as `mixit reproduce` writes one, built once per test session.

    retrieval/{standard, frozen_qk, mixit} (standard analysed, the others not; frozen_qk kept checkpoints at
    steps 0, 1 and 30), memorize/standard
    (analysed: memory.csv), lm/standard and sentiment/mixit (byte tokenizer; their corpora lie
    outside the runs directory), signal/signal.csv, speed/speed.csv, reproduce.json with a figure
    inside the directory, and two broken runs: unreadable/bad-json (run.json is not JSON) and
    unreadable/truncated (a copy of retrieval/standard whose model.safetensors is cut in half).
    Returns {"root": Path, "corpus": Path, name: run directory, ...}.
    """
    import shutil
    import warnings

    from mixit_lab.analysis.analyze import analyze_checkpoint
    from mixit_lab.analysis.signal import signal_propagation
    from mixit_lab.training.benchmark import measure_throughput

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    base = tmp_path_factory.mktemp("explorer")
    root, corpus = base / "runs", base / "corpus"
    corpus.mkdir()
    (corpus / "text.txt").write_text(TINY_TEXT)
    (corpus / "sentences.txt").write_text(TINY_SENTENCES)
    options = {"n_seqs": 8, "seq_len": 8, "eval_samples": 32, "ablation": "none", "seed": 0}
    runs: dict = {"root": root, "corpus": corpus}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny tasks: the trainer warns that the stream sees eval rows
            retrieval = {"pairs": 3, "num_values": 8}
            for variant in ("standard", "frozen_qk", "mixit"):  # frozen_qk keeps checkpoints: the step sliders
                runs[variant] = _tiny_run(root, "retrieval", f"retrieval-{variant}", "retrieval", retrieval, variant,
                                          keep=2 if variant == "frozen_qk" else 0)
            analyze_checkpoint(runs["standard"], runs["standard"] / "analysis", options, device="cpu")
            runs["memorize"] = _tiny_run(root, "memorize", "memorize-standard", "memorize", {"n": 3, "d": 2},
                                         "standard", n_layers=1)
            analyze_checkpoint(runs["memorize"], runs["memorize"] / "analysis", options, device="cpu")
            runs["lm"] = _tiny_run(root, "lm", "lm-standard", "lm", {"text_file": [str(corpus / "text.txt")],
                                   "tokenizer": "byte", "seq_len": 16}, "standard", n_layers=1, steps=10)
            runs["sentiment"] = _tiny_run(root, "sentiment", "sentiment-mixit", "sentiment",
                                          {"text_file": [str(corpus / "sentences.txt")], "tokenizer": "byte",
                                           "seq_len": 48}, "mixit", n_layers=1, steps=10)
        (root / "signal").mkdir()
        signal_propagation(variants=("random", "mixit"), depths=(1, 2), widths=(16,), n_heads=2, n_ctx=8,
                           d_vocab=16, n_seqs=2, seeds=(0,)).to_csv(root / "signal" / "signal.csv", index=False)
        (root / "speed").mkdir()
        measure_throughput(["standard", "mixit"], d_model=16, n_layers=1, n_heads=2, seq_len=8, batch_size=4,
                           vocab=16, steps=1, repeats=1, warmup=0, device="cpu").to_csv(root / "speed" / "speed.csv",
                                                                                          index=False)
        figures = root / "figures"
        figures.mkdir()
        from PIL import Image

        Image.new("RGB", (40, 20), (0, 114, 178)).save(figures / "retrieval_pairs.png")
        (root / "reproduce.json").write_text(json.dumps({"preset": "tiny", "figures_dir": "figures",
                                                         "figures_dir_resolved": str(figures)}))
        bad = root / "unreadable" / "bad-json"
        bad.mkdir(parents=True)
        (bad / "run.json").write_text("{not json")
        runs["bad_json"] = bad
        truncated = root / "unreadable" / "truncated"
        shutil.copytree(runs["standard"], truncated)
        weights = truncated / "checkpoint" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        runs["truncated"] = truncated
    finally:
        torch.set_num_threads(before)
    return runs


def count_run_file_opens(runs_dir: Path, monkeypatch) -> list[Path]:
    """Every opening of a file inside a run directory below runs_dir from now on (io.open and open: pathlib, json,
    csv and pandas all go through them)."""
    import builtins
    import io

    opened: list[Path] = []
    real = io.open
    run_dirs = {p.parent for p in runs_dir.rglob("run.json")}

    def counted(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and any(d in run_dirs for d in Path(file).parents):
            opened.append(Path(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", counted)
    monkeypatch.setattr(builtins, "open", counted)
    return opened


def read_more_than_once(opened: list[Path], runs_dir: Path) -> dict[str, int]:
    """The files of `opened` read more than once (relative to runs_dir: how often). A checkpoint's config.json is
    read before and after its weights once per model loaded (a trainer may be swapping the checkpoint meanwhile:
    mixit_lab.models.checkpoint), so twice is once for it."""
    from collections import Counter

    return {str(p.relative_to(runs_dir)): n for p, n in Counter(opened).items()
            if n > (2 if p.parts[-2:] == ("checkpoint", "config.json") else 1)}


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) the tests that share a module-scoped fixture (a
    trained runs folder, a smoke reproduction) run on one worker, which builds it once; the others spread one by one."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)  # the fixtures a test uses, with their scopes (no public API)
        if info is not None and any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
