"""What a GPU machine without a package index needs to run gpu_check.py: wheels and corpora in one folder.

    python benchmarks/gpu_bundle.py --out bundle --have-file installed.txt   # here, with a package index
    # there, from a copy of the checkout with bundle/ in it (installed.txt: `pip list --format=freeze` there):
    python3 -m pip install --no-index --no-deps --target /tmp/site bundle/wheels/*.whl
    PYTHONPATH=/tmp/site python3 benchmarks/gpu_check.py device --only engine --data bundle/data --out gpu-check

A GPU machine often has PyTorch and CUDA but no way to fetch packages (a cluster's compute nodes, a sealed image).
The wheels are this project's (built from the checkout) and those of the distributions gpu_check's device phase
imports that the machine lacks: what this environment imports when it loads that phase, at this environment's
versions, less `--have` (the machine's own; without it every one but the PyTorch and CUDA stack). They are the pure
or manylinux wheels for `--python-version` on x86-64 Linux, fetched without their dependencies (the import closure
already names each one used). The corpora are the text studies' files from `--data`: WikiText-2, Tiny Shakespeare,
the labelled sentences and SST-2, the paths gpu_check.py reads under its own `--data`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

# gpu_check's device phase: the modules it imports, and with them everything they import
DEVICE_MODULES = ("gpu_check", "gpu_check_steps", "mixit_lab.training", "mixit_lab.analysis", "mixit_lab.reproduce",
                  "mixit_lab.cli.main")
# the machine's own: PyTorch, its compiler and CUDA's libraries (a wheel of these would not fit, nor match the driver)
TORCH_STACK = re.compile(r"torch|triton|nvidia-.*|cuda-.*")
CORPORA = ("wikitext-2/valid.txt", "wikitext-2/test.txt", "tinyshakespeare/input.txt",
           "sentiment-sentences/yelp_labelled.txt", "sst-2/train.tsv", "sst-2/dev.tsv")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of '-', '_' and '.' as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions(modules: tuple[str, ...] = DEVICE_MODULES) -> dict[str, str]:
    """normalized name -> version of every distribution this environment imports from when it loads `modules`.

    They are loaded in a fresh interpreter: what the caller has already imported (a test run, a notebook) must not
    count."""
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import gpu_bundle; "
            f"print(json.dumps(gpu_bundle.imported_here({list(modules)!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def imported_here(modules: list[str]) -> dict[str, str]:
    """imported_distributions, in this interpreter (it counts everything already in `sys.modules`)."""
    for module in modules:
        importlib.import_module(module)
    owners = metadata.packages_distributions()
    names = {d for m in list(sys.modules) for d in owners.get(m.split(".")[0], [])}
    return {normalized(n): metadata.version(n) for n in names}


def needed(imported: dict[str, str], have: dict[str, str | None]) -> dict[str, str]:
    """The distributions of `imported` to carry: not the machine's (`have`), not the PyTorch stack, not this project
    (built from the checkout instead)."""
    have = {normalized(h) for h in have}
    return {n: v for n, v in sorted(imported.items())
            if n not in have and not TORCH_STACK.fullmatch(n) and n != "mixit-lab"}


def other_versions(imported: dict[str, str], have: dict[str, str | None]) -> list[str]:
    """The machine's distributions that it has at another version than this environment's (it keeps its own)."""
    theirs = {normalized(n): v for n, v in have.items() if v}
    return [f"{n} {v} (here {imported[n]})" for n, v in sorted(theirs.items()) if n in imported and v != imported[n]]


def read_have(path: Path | None, names: list[str]) -> dict[str, str | None]:
    """The machine's distributions and, where known, their versions: `names`, and the lines of a
    `pip list --format=freeze` (or `pip freeze`) file."""
    have: dict[str, str | None] = dict.fromkeys(names)
    if path is not None:
        for line in path.read_text().splitlines():
            name = re.split(r"[=<>@ ;\[]", line.strip(), maxsplit=1)[0]
            if name and not name.startswith("#"):
                pinned = re.match(r"[^=]+==([^ ;]+)", line.strip())
                have[name] = pinned.group(1) if pinned else None
    return have


def download_commands(wanted: dict[str, str], wheels: Path, python_version: str) -> list[list[str]]:
    """The pip commands that fetch `wanted` (name -> version) as wheels for x86-64 Linux and `python_version`, and
    build this project's."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    fetch = [[sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
              "--python-version", python_version, "--implementation", "cp", *platforms, "-d", str(wheels),
              f"{name}=={version}"] for name, version in wanted.items()]
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels),
             str(ROOT)]
    return [*fetch, build]


def copy_corpora(data: Path, into: Path) -> list[str]:
    """Copy the CORPORA found under `data` into `into`, same paths; returns the ones missing there."""
    missing = []
    for rel in CORPORA:
        if (data / rel).is_file():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(data / rel, into / rel)
        else:
            missing.append(rel)
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the bundle folder: wheels/ and data/")
    p.add_argument("--have", nargs="*", default=[], help="distributions the GPU machine already has")
    p.add_argument("--have-file", type=Path, help="its `pip list --format=freeze`")
    p.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data", help="the corpora folder")
    p.add_argument("--dry-run", action="store_true", help="print what would be fetched and copied; fetch nothing")
    args = p.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        p.error(f"--python-version {args.python_version!r}: give major.minor, e.g. 3.12")
    if args.have_file is not None and not args.have_file.is_file():
        p.error(f"--have-file {args.have_file}: no such file")
    imported, have = imported_distributions(), read_have(args.have_file, args.have)
    wanted = needed(imported, have)
    commands = download_commands(wanted, args.out / "wheels", args.python_version)
    print(f"{len(wanted)} wheels to carry: " + ", ".join(f"{n}=={v}" for n, v in wanted.items()) + ", and mixit-lab's")
    if other_versions(imported, have):
        print("the GPU machine keeps its own versions of: " + ", ".join(other_versions(imported, have)))
    if args.dry_run:
        print("\n".join(" ".join(c) for c in commands))
        return 0
    (args.out / "wheels").mkdir(parents=True, exist_ok=True)
    for command in commands:
        subprocess.run(command, check=True)
    missing = copy_corpora(args.data, args.out / "data")
    if missing:
        print(f"not under {args.data} (gpu_check makes up a corpus of the same shapes): {', '.join(missing)}")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"{args.out}: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
