"""What every subcommand shares: `CLIError`, the input boundary (`input_errors`), the one-line argument parser,
the exit codes.

The exit-code boundary. A handler first validates the user's input (options, files, the preset, the task and
model they describe) and only then starts work (training, analysing, drawing). Library code says "no" with a
ValueError (or a subclass: CheckpointError, SettingsChanged, TaskImportError, ...) or a FileNotFoundError:

- raised while validating, inside `with input_errors(command):`, it is the user's mistake: `CLIError`, one
  line on stderr, exit 2 (EXIT_USAGE). So is a CLIError a handler raises itself, and an OSError (permission,
  no space, a file where a directory belongs) anywhere;
- raised once work has started, it is not caught: a traceback and exit 1, a bug to report, like any other
  exception. A run that fails (TrainingDiverged; a sweep's or reproduction's failed runs, analyses or figures,
  which they list; `mixit figures --only` that draws nothing) is exit 1 (EXIT_FAILED) with one line.

An OSError that reaches `mixit_lab.cli.main.main` (a full or read-only disk, no permission, a file where a folder belongs),
before or after work started, is one line naming the path and the cause (`os_error_line`), exit 2: what was
finished before it (checkpoints, analyses, figures) stays. Output folders are checked before work starts
(`check_output_dir`).

Signals: Ctrl-C (SIGINT) is exit 130 (EXIT_INTERRUPTED); SIGTERM to `mixit sweep` or `mixit reproduce`
(`stop_on_sigterm`) is exit 143 (EXIT_TERMINATED). Either way every worker is stopped, finished work is kept, and
one line says how to continue.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from pathlib import Path
from typing import Callable, Iterator

EXIT_OK = 0
EXIT_FAILED = 1  # a run, analysis or figure failed, `figures --only` drew nothing (one line); a bug (a traceback)
EXIT_USAGE = 2  # a bad option, value, file or preset; a path that cannot be written (full or read-only disk): one line
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): finished work is kept, the message says how to continue
EXIT_TERMINATED = 143  # SIGTERM (128 + 15) to `mixit sweep` or `mixit reproduce`: the same, its workers stopped

# What library code raises for input it refuses; inside `input_errors`, the user's mistake (exit 2).
INPUT_ERRORS: tuple[type[Exception], ...] = (ValueError, FileNotFoundError)


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl-C raises KeyboardInterrupt: the same cleanup runs (exit 143)."""


_SIGTERM_SEEN = threading.Event()  # set by stop_on_sigterm's handler; cleared when a block starts


def was_terminated(error: KeyboardInterrupt) -> bool:
    """Whether an interrupt came from SIGTERM. Not only `isinstance(error, Terminated)`: a library that catches
    the KeyboardInterrupt a signal handler raises inside its own blocking call and raises a plain one in its place
    (Ray's ray.get/ray.wait do) would turn a SIGTERM into a Ctrl-C (exit 130 for 143) by the signal's timing."""
    return isinstance(error, Terminated) or _SIGTERM_SEEN.is_set()


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Inside this block SIGTERM raises `Terminated` (once: a second one, during the cleanup, is ignored), so that a
    command stops its workers and keeps finished work as on Ctrl-C; outside the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):  # the signature signal.signal expects
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _SIGTERM_SEEN.set()
        raise Terminated

    _SIGTERM_SEEN.clear()
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def input_errors(command: str) -> Iterator[None]:
    """Validate the user's input inside this block, before work starts: an INPUT_ERRORS exception raised in it
    becomes a CLIError, `mixit COMMAND: error: MESSAGE` (one line, exit 2). Outside it, they are bugs (exit 1)."""
    try:
        yield
    except INPUT_ERRORS as e:
        message = " ".join(str(e).split()) or type(e).__name__  # one line, whatever the message holds
        raise CLIError(f"mixit {command}: error: {message}") from None


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line that points at --help, and an option must be spelled out:
    an abbreviation (`--d-mod` for `--d-model`) is refused, because code that looks for the literal option
    (the sweep's explicit-option check, the torchrun relaunch) would otherwise accept it and ignore it."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise CLIError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def os_error_line(command: str, error: OSError) -> str:
    """`mixit COMMAND: error: PATH: CAUSE` for an OSError (a full or read-only disk, no permission, ...): one line."""
    if error.filename is None or error.strerror is None:
        cause = " ".join(str(error).split()) or type(error).__name__
        return f"mixit {command}: error: {cause}"
    where = f"{error.filename} -> {error.filename2}" if error.filename2 is not None else f"{error.filename}"
    return f"mixit {command}: error: {where}: {error.strerror}"


def check_output_dir(option: str, path: Path) -> None:
    """ValueError naming `option`, `path` and the cause unless `path` is a directory this process can write into,
    or one it can create: not a file, nor below one, on a disk that takes a file (writable, not read-only). A
    probe file is made and removed in the deepest directory that exists; nothing else is written."""
    import errno
    import os
    import tempfile

    existing = next((p for p in (path, *path.parents) if p.exists() or p.is_symlink()), Path("."))
    if not existing.is_dir():
        where = "" if existing == path else f" (its parent {existing} is a file)"
        raise ValueError(f"{option} {path} is not a directory{where}; give a directory, new or existing")
    try:
        fd, probe = tempfile.mkstemp(prefix=".mixit-write-check-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        cause = e.strerror or os.strerror(e.errno or errno.EIO)
        target = "" if existing == path else f" (in {existing})"
        raise ValueError(f"{option} {path} cannot be written{target}: {cause}") from None


def path_arg(value: str) -> Path:
    """An argparse type for paths: an empty one (an unset shell variable, `--out ''`) is refused, because
    Path('') is the current directory and a run would be written there."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path is not allowed (is a shell variable unset?)")
    return Path(value)


def whole_number_arg(meaning: str) -> Callable[[str], int]:
    """An argparse type for a whole number >= 1; `meaning` says what the number is in the error."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise argparse.ArgumentTypeError(f"{value!r} is not allowed: give a whole number >= 1 ({meaning})")
        return number
    return parse


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where training runs execute (mixit_lab.training.sweep.Executor): --executor, --address, --cpus-per-run,
    --gpus-per-run, --runs-per-gpu, --stack."""
    from mixit_lab.training.placement import RUNS_PER_GPU

    group = parser.add_argument_group("executor")
    group.add_argument("--executor", choices=("pool", "ray"), default="pool",
                       help="pool: --workers processes on this machine (default); ray: one Ray task per run "
                            "(pip install 'mixit-lab[ray]')")
    group.add_argument("--address", default=None,
                       help="with --executor ray: the Ray cluster to join (e.g. auto, ray://HOST:10001); "
                            "default: start Ray here with --workers x --cpus-per-run CPUs")
    group.add_argument("--cpus-per-run", type=float, default=1.0, help="with --executor ray: CPUs each run declares")
    group.add_argument("--gpus-per-run", type=float, default=None,
                       help="with --executor ray: GPUs each run declares (default: 0; or give --runs-per-gpu)")
    group.add_argument("--runs-per-gpu", type=whole_number_arg("runs that train on one GPU at once"), default=None, metavar="N",
                       help=f"runs that train on one GPU at once. pool, runs on CUDA: GPUs x N workers (--workers, "
                            f"if given, caps it), each pinned to one GPU (default: {RUNS_PER_GPU}: on an H200 4 "
                            "processes gave 2.0x one run's steps/s, 8 only 2.1x; they time-slice the GPU). ray: each "
                            "run declares 1/N GPU, instead of --gpus-per-run. Refused for runs on the CPU")
    group.add_argument("--stack", type=whole_number_arg("runs trained as one in a process; 1: each alone"), default=1, metavar="N",
                       help="train up to N runs as one in each process (or Ray task) where their settings differ only "
                            "in seed, lr, weight decay, clipping or schedule: their weights stacked, one step for all "
                            "(mixit_lab.training.stack); the others train alone. Each run keeps its own directory and "
                            "resumes alone. Default: 1 (each run alone)")


def executor_from_args(args: argparse.Namespace, workers: int):
    """The mixit_lab.training.sweep.Executor the options ask for (`workers`: --workers, or the CPU runs' default when
    it was not given); CLIError (exit 2) for a bad combination or a missing Ray."""
    from mixit_lab.training.sweep import Executor, check_ray, check_ray_address

    gpus_per_run = args.gpus_per_run
    if args.executor == "pool" and (args.address is not None or args.cpus_per_run != 1.0 or gpus_per_run):
        raise CLIError(f"mixit {args.command}: error: --address, --cpus-per-run and --gpus-per-run need --executor ray")
    if args.runs_per_gpu is not None and gpus_per_run is not None:
        raise CLIError(f"mixit {args.command}: error: --runs-per-gpu={args.runs_per_gpu} and --gpus-per-run="
                       f"{gpus_per_run:g} both set a run's share of a GPU; give one (--runs-per-gpu N declares 1/N GPU "
                       "a run)")
    with input_errors(args.command):
        executor = Executor(args.executor, workers, args.address, args.cpus_per_run, gpus_per_run or 0.0,
                            args.runs_per_gpu, workers_given=args.workers is not None, stack=args.stack)
        if executor.kind == "ray":
            check_ray()
            check_ray_address(executor.address)
            if executor.address is None and executor.run_gpus > 0:
                import torch

                gpus = torch.cuda.device_count()
                if executor.run_gpus > gpus:  # a Ray started here has only these: the runs would wait forever
                    has = f"without --address starts Ray on this machine, which has {gpus} GPU{'s' * (gpus != 1)}"
                    if executor.runs_per_gpu:
                        raise ValueError(f"--runs-per-gpu={executor.runs_per_gpu} {has}; leave it out, or join a "
                                         "cluster with --address")
                    raise ValueError(f"--gpus-per-run={executor.gpus_per_run:g} {has}; allowed: 0..{gpus}, or join "
                                     "a cluster with --address")
    return executor


def check_runs_per_gpu_applies(args: argparse.Namespace, devices: set[str]) -> None:
    """ValueError when --runs-per-gpu would change nothing for runs on these devices (their TrainConfig.device):
    runs on the CPU (the pool: as resolved here, "auto" without CUDA; Ray: device "cpu"), or runs that name their
    GPU ("cuda:N", which the pool leaves as given)."""
    n = getattr(args, "runs_per_gpu", None)
    if n is None:
        return
    from mixit_lab.training.resolve import resolve_device

    listed = ", ".join(repr(d) for d in sorted(devices))
    named = sorted(d for d in devices if d.startswith("cuda:"))
    if named and args.executor == "pool":
        raise ValueError(f"--runs-per-gpu={n} places each run on a GPU, and these runs name theirs (device "
                         f"{named[0]!r}); give one or the other")
    here = {resolve_device(d).type for d in devices} if args.executor == "pool" else set(devices)
    if here <= {"cpu", "mps"}:
        why = "" if args.executor == "ray" or devices <= {"cpu", "mps"} else "; this machine has no CUDA device"
        raise ValueError(f"--runs-per-gpu={n}: the runs train on the CPU (device {listed}{why}), and it places runs "
                         "on GPUs; leave it out")


def add_trust_option(parser: argparse.ArgumentParser) -> None:
    """--trust-tasks: the user's consent to import the task code the runs opened name (mixit_lab.training.tasks.trust_task_code)."""
    parser.add_argument("--trust-tasks", action="store_true",
                        help="import the task code that the runs name (a task of one's own, recorded in run.json), "
                             "as analyses of its eval rows need; without it none is imported and those are skipped. "
                             "Only for runs folders whose code you trust")
