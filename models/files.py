"""Atomic writes, tolerant JSON reads and YAML as users write it: the one implementation every layer uses.

A file is written to a hidden temporary sibling and renamed over its target; a directory is built
in a hidden temporary sibling and swapped in. A reader (or a crash) never sees a half-written file
under its final name, and an error never loses the previous version.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

import yaml


def _umask() -> int:
    """The process's umask (read by setting it and putting it back: there is no other portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _usual_mode(path: Path, directory: bool) -> None:
    """Give a temporary file or directory the mode `open()` or `mkdir()` would have: mkstemp and mkdtemp
    make them private (0600 / 0700), which would keep checkpoints and reports from other accounts on a
    shared file system whatever the user's umask says."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def write_safetensors(tensors: dict[str, Any], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` as a safetensors file with the mode `open()` would give it: safetensors' own writer
    makes its files 0600 whatever the umask (checkpoints another account on a shared file system cannot read).
    Written in place: call it inside an `atomic_directory`, as checkpoints are."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, str(path), metadata=metadata)
    except SafetensorError as e:  # its I/O errors are not OSErrors and name no file: a full disk, say
        found = re.search(r"os error (\d+)", str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from e
    _usual_mode(Path(path), directory=False)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Yield a file handle whose contents replace `path` in one rename when the block ends without error.

    No fsync: a reader never sees a half-written file, which is the promise; files written inside an
    `atomic_directory` are synced once, with the whole tree, before it is swapped in. An OSError that names no
    file (a write to a full disk) is raised again naming `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    except OSError as e:  # a full or read-only disk: name the file the user knows, not the hidden temporary one
        raise _naming(e, [], path) from e
    try:
        _usual_mode(Path(tmp), directory=False)
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
        os.replace(tmp, path)
    except OSError as e:  # a write or close names no file (a full disk): name the one being written
        e = _with_errno(e, Path(tmp))  # before the partial file goes: it is what filled the disk
        Path(tmp).unlink(missing_ok=True)
        raise _naming(e, [Path(tmp)], path) from e
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


FULL_BELOW = 1 << 20  # free bytes under which a write that stopped short is taken for a full disk


def _with_errno(error: OSError, written: Path) -> OSError:
    """A write that stopped short with no errno (numpy's `tofile`, under `np.save`, says only "N requested and M
    written") as the error the disk gives: ENOSPC where the disk holding `written` is full, EIO otherwise."""
    if error.errno is not None:
        return error
    try:
        stats = os.statvfs(written.parent)
        full = stats.f_bavail * stats.f_frsize < FULL_BELOW
    except (OSError, AttributeError):  # no statvfs (Windows): say what is known
        full = False
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, os.strerror(code) if full else f"{os.strerror(code)} ({error})", str(written))


def write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically."""
    with atomic_file(path) as fh:
        fh.write(text)


def write_json(path: str | Path, data: Any) -> None:
    """Write `data` as indented, key-sorted JSON to `path` atomically."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path`. FileNotFoundError naming the file if it is missing, ValueError naming it
    if it is not an object; invalid JSON raises json.JSONDecodeError (or UnicodeDecodeError), both ValueErrors."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces `path`.

    The directory is built as `.NAME.tmp-*`, renamed to `.NAME.new-*` once complete and synced, and then
    swapped in (the previous `path` moves to `.NAME.old-*/NAME` first and is deleted last). A kill at any
    point leaves either `path` or a complete copy that `recover_directory` puts back. On an error the
    temporary directory is removed and any existing `path` is left untouched; an OSError that names no file
    (a write to a full disk) is raised again naming `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    except OSError as e:  # a full or read-only disk: name the directory the user knows
        raise _naming(e, [], path) from e
    hidden = [tmp]  # the hidden names of this directory, which an error shows as `path`
    try:
        _usual_mode(tmp, directory=True)
        yield tmp
        _fsync_tree(tmp)
        new = tmp.with_name(tmp.name.replace(".tmp-", ".new-", 1))
        hidden.append(new)
        os.replace(tmp, new)  # complete from here on
        tmp = new
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            hidden += [old / path.name, old]
            os.replace(path, old / path.name)
            os.replace(new, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(new, path)
    except OSError as e:  # a write that names no file (a full disk), or a file in the hidden copy: name `path`
        shutil.rmtree(tmp, ignore_errors=True)
        raise _naming(e, hidden, path) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _naming(error: OSError, hidden: list[Path], path: Path) -> OSError:
    """`error` as the user should read it: naming `path` where it names none, one of the `hidden` temporary names of
    `path` (`.NAME.tmp-*`, ...) or a temporary sibling of `path` (the file or folder the user knows, e.g.
    RUN/checkpoint/model.safetensors instead of RUN/.checkpoint.tmp-x1y2/model.safetensors); itself otherwise."""
    if error.errno is None:
        return error

    def shown(name: Any) -> Any:
        if name is None:
            return None
        here = Path(os.fsdecode(name))
        for place in hidden:
            if here == place or place in here.parents:
                return str(path / here.relative_to(place))
        if here.parent == path.parent and here.name.startswith(f".{path.name}."):  # a temporary sibling
            return str(path)
        return os.fsdecode(name)

    filename = str(path) if error.filename is None else shown(error.filename)
    filename2 = shown(error.filename2)
    if filename2 == filename:  # a rename of the hidden copy onto `path`
        filename2 = None
    if (filename, filename2) == (error.filename, error.filename2):
        return error
    return OSError(error.errno, error.strerror, filename, None, filename2)


def recover_directory(path: str | Path) -> bool:
    """Put back `path` if a kill during `atomic_directory`'s swap left it missing: the newest complete new copy
    (`.NAME.new-*`), else the previous one (`.NAME.old-*/NAME`). True if it did. Call it only while no other
    process writes `path` (the trainer holds the run's lock)."""
    path = Path(path)
    if path.exists() or not path.parent.is_dir():
        return False
    by_age = lambda p: p.stat().st_mtime_ns  # noqa: E731
    newer = sorted(path.parent.glob(f".{path.name}.new-*"), key=by_age, reverse=True)
    older = sorted((p / path.name for p in path.parent.glob(f".{path.name}.old-*") if (p / path.name).is_dir()),
                   key=by_age, reverse=True)
    for candidate in newer + older:
        os.replace(candidate, path)
        return True
    return False


def remove_leftovers(path: str | Path) -> list[Path]:
    """Delete what killed `atomic_directory` calls left beside `path` (`.NAME.tmp-*`, `.new-*`, `.old-*`);
    returns them. Only while no other process writes `path`."""
    path = Path(path)
    removed = []
    for kind in ("tmp", "new", "old"):
        for p in path.parent.glob(f".{path.name}.{kind}-*"):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _fsync_tree(directory: Path) -> None:
    for f in directory.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `3e-3` and `1e4` as numbers (as YAML 1.2 does): YAML 1.1 wants a dot
    in a float (`3.0e-3`), so the learning rates and weight decays people write would be strings."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parse YAML text (safe: plain data only), with exponent floats without a dot read as numbers."""
    return yaml.load(text, Loader=_Loader)


def as_list(value: Any) -> list:
    """A YAML value that may be written as one item or as a list of items, as a list."""
    return value if isinstance(value, list) else [value]
