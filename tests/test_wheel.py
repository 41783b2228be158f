"""The package installs anywhere: build the wheel from the checkout's sources, install it into a fresh virtual
environment outside the checkout, and there train a tiny run with the installed `mixit`, analyse it, and open
the installed explorer with AppTest. Nothing may come from the checkout (an editable install hides a missing
package: mixit_lab.training.tasks once was one, and the explorer was a file beside the packages).

The new environment sees this one's packages (torch, streamlit, ...) through a .pth file, not its editable
install of mixit-lab (a path line in a .pth adds a folder; it does not run that folder's .pth hooks), so that
no network is needed: `pip wheel --no-deps --no-build-isolation` and `pip install --no-deps`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "README.md", "__init__.py", "app.py", "models", "training", "analysis", "figures", "reproduce", "explorer", "cli"]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
TINY = ["--task", "retrieval", "--pairs", "3", "--num-values", "8", "--eval-samples", "32", "--d-model", "16",
        "--n-layers", "1", "--n-heads", "2", "--steps", "4", "--batch-size", "8", "--quiet"]

# Run by the new environment's python, in the working directory outside the checkout.
EXPLORER_CHECK = textwrap.dedent('''
    import sys
    from pathlib import Path

    from mixit_lab import explorer
    import mixit_lab.training.tasks
    from streamlit.testing.v1 import AppTest

    env = Path(sys.prefix).resolve()
    for module in (explorer, mixit_lab.training.tasks):
        assert Path(module.__file__).resolve().is_relative_to(env), (module.__name__, module.__file__, env)
    sys.argv = ["app.py", "--runs", "runs/tiny"]
    at = AppTest.from_file(str(Path(explorer.__file__).parent / "app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.header[0].value == "Study", [h.value for h in at.header]
    for page, title in (("pages/runs.py", "Runs"), ("pages/attention.py", "Attention")):
        at.switch_page(page).run()
        assert not at.exception and not at.error, (page, [e.value for e in [*at.exception, *at.error]])
        assert at.header[0].value == title
    print("explorer ok", Path(explorer.__file__).parent)
''')


# A project of one's own with the usual folder names (run there as `python mine.py`, so that its folder comes first on
# sys.path): its own `models`, `training` and `analysis` are what it imports, and the toolkit trains beside them.
OWN_PROJECT = textwrap.dedent('''
    import sys
    from pathlib import Path

    import models, training, analysis
    from mixit_lab.training import TrainConfig, train, load_run

    here = Path(__file__).resolve().parent
    for module in (models, training, analysis):
        assert Path(module.__file__).resolve().is_relative_to(here), (module.__name__, module.__file__)
        assert module.MINE == module.__name__
    cfg = TrainConfig(task="retrieval", task_params={"pairs": 3, "num_values": 8}, eval_samples=32, d_model=16,
                      n_layers=1, n_heads=2, steps=4, batch_size=8)
    run = load_run(train(cfg, "runs/own", progress=False)["run_dir"])
    assert run.model.cfg.d_model == 16 and Path(sys.modules["mixit_lab"].__file__).resolve().is_relative_to(sys.prefix)
    print("own project ok", sorted(m for m in sys.modules if m.split(".")[0] in ("models", "training", "analysis")))
''')


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run a command; fail the test with its output if it fails."""
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def fresh_env(path: Path) -> Path:
    """A virtual environment (--system-site-packages) that also sees this interpreter's site-packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "_outer_site_packages.pth").write_text("".join(f"{p}\n" for p in ours))
    return python


ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once from a copy of only what packaging reads (so the build leaves nothing in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, wheels = tmp / "src", tmp / "wheels"
    src.mkdir()
    for name in SOURCES:
        (shutil.copytree(ROOT / name, src / name, ignore=SKIP) if (ROOT / name).is_dir()
         else shutil.copy(ROOT / name, src / name))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels),
         str(src)], tmp, ENV)
    return next(wheels.glob("mixit_lab-*.whl"))


def test_the_wheel_installs_and_runs_outside_the_checkout(wheel, tmp_path):
    work, env = tmp_path / "work", ENV
    python = fresh_env(tmp_path / "env")
    run([str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", str(wheel)],
        tmp_path, env)

    work.mkdir()
    mixit = str(tmp_path / "env" / "bin" / "mixit")
    run([mixit, "train", *TINY, "--out", "runs/tiny/retrieval/standard"], work, env)
    run([mixit, "analyze", "runs/tiny/retrieval/standard", "--n-seqs", "4", "--seq-len", "4", "--eval-samples", "16",
         "--device", "cpu"], work, env)
    assert (work / "runs/tiny/retrieval/standard/analysis/analysis.json").is_file()
    presets = run([str(python), "-c", "from mixit_lab.reproduce.preset import load_preset; from mixit_lab.cli.app import app_file; "
                   "print(load_preset('smoke').name, app_file().resolve())"], work, env).stdout
    assert presets.startswith("smoke ") and str((tmp_path / "env").resolve()) in presets
    done = run([str(python), "-c", EXPLORER_CHECK], work, env)
    assert "explorer ok" in done.stdout
    for layout in ("models.py", "models/__init__.py"):  # a module or a package of one's own named models
        own = tmp_path / layout.replace("/", "_")
        for name in (layout, "training/__init__.py", "analysis/__init__.py"):
            (own / name).parent.mkdir(parents=True, exist_ok=True)
            (own / name).write_text(f"MINE = {name.split('/')[0].removesuffix('.py')!r}\n")
        (own / "mine.py").write_text(OWN_PROJECT)
        done = run([str(python), "mine.py"], own, env)
        assert "own project ok ['analysis', 'models', 'training']" in done.stdout, done.stdout


def test_the_wheel_installs_one_import_package_and_every_subpackage(wheel):
    """The wheel's top level is mixit_lab (and its metadata), and every package folder of the checkout is in it."""
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"mixit_lab"}
    packages = {str(p.parent.relative_to(ROOT)) for folder in SOURCES if (ROOT / folder).is_dir()
                for p in (ROOT / folder).rglob("__init__.py")}
    assert {f"mixit_lab/{p}/__init__.py" for p in packages} <= set(names), packages
    assert "mixit_lab/reproduce/presets/smoke.yaml" in names and "mixit_lab/explorer/pages/runs.py" in names
