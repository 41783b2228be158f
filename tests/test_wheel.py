"""The package installs anywhere: build the wheel from the checkout's sources, install it into a fresh virtual
environment outside the checkout, and there train a tiny run with the installed `mixit`, analyse it, and open
the installed explorer with AppTest. Nothing may come from the checkout (an editable install hides a missing
package: training.tasks once was one, and the explorer was a file beside the packages).

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
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "README.md", "models", "training", "analysis", "figures", "reproduce", "explorer", "cli"]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
TINY = ["--task", "retrieval", "--pairs", "3", "--num-values", "8", "--eval-samples", "32", "--d-model", "16",
        "--n-layers", "1", "--n-heads", "2", "--steps", "4", "--batch-size", "8", "--quiet"]

# Run by the new environment's python, in the working directory outside the checkout.
EXPLORER_CHECK = textwrap.dedent('''
    import sys
    from pathlib import Path

    import explorer
    import training.tasks
    from streamlit.testing.v1 import AppTest

    env = Path(sys.prefix).resolve()
    for module in (explorer, training.tasks):
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


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    src, wheels, work = tmp_path / "src", tmp_path / "wheels", tmp_path / "work"
    src.mkdir()
    for name in SOURCES:  # only what packaging reads, so the build leaves nothing in the checkout
        (shutil.copytree(ROOT / name, src / name, ignore=SKIP) if (ROOT / name).is_dir()
         else shutil.copy(ROOT / name, src / name))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels),
         str(src)], tmp_path, env)
    wheel = next(wheels.glob("mixit_lab-*.whl"))
    python = fresh_env(tmp_path / "env")
    run([str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", str(wheel)],
        tmp_path, env)

    work.mkdir()
    mixit = str(tmp_path / "env" / "bin" / "mixit")
    run([mixit, "train", *TINY, "--out", "runs/tiny/retrieval/standard"], work, env)
    run([mixit, "analyze", "runs/tiny/retrieval/standard", "--n-seqs", "4", "--seq-len", "4", "--eval-samples", "16",
         "--device", "cpu"], work, env)
    assert (work / "runs/tiny/retrieval/standard/analysis/analysis.json").is_file()
    presets = run([str(python), "-c", "from reproduce.preset import load_preset; from cli.app import app_file; "
                   "print(load_preset('smoke').name, app_file().resolve())"], work, env).stdout
    assert presets.startswith("smoke ") and str((tmp_path / "env").resolve()) in presets
    done = run([str(python), "-c", EXPLORER_CHECK], work, env)
    assert "explorer ok" in done.stdout
