"""What every subcommand shares: `CLIError`, the one-line argument parser, the exit codes."""

from __future__ import annotations

import argparse
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1  # a run failed or diverged, a figure failed
EXIT_USAGE = 2  # a bad option, value, file or preset: one line on stderr
EXIT_INTERRUPTED = 130  # Ctrl-C


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line that points at --help, and an option must be spelled out:
    an abbreviation (`--d-mod` for `--d-model`) is refused, because code that looks for the literal option
    (the sweep's explicit-option check, the torchrun relaunch) would otherwise accept it and ignore it."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise CLIError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def path_arg(value: str) -> Path:
    """An argparse type for paths: an empty one (an unset shell variable, `--out ''`) is refused, because
    Path('') is the current directory and a run would be written there."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an empty path is not allowed (is a shell variable unset?)")
    return Path(value)


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where training runs execute (training.sweep.Executor): --executor, --address, --cpus-per-run, --gpus-per-run."""
    group = parser.add_argument_group("executor")
    group.add_argument("--executor", choices=("pool", "ray"), default="pool",
                       help="pool: --workers processes on this machine (default); ray: one Ray task per run "
                            "(pip install 'mixit-lab[ray]')")
    group.add_argument("--address", default=None,
                       help="with --executor ray: the Ray cluster to join (e.g. auto, ray://HOST:10001); "
                            "default: start Ray here with --workers x --cpus-per-run CPUs")
    group.add_argument("--cpus-per-run", type=float, default=1.0, help="with --executor ray: CPUs each run declares")
    group.add_argument("--gpus-per-run", type=float, default=0.0, help="with --executor ray: GPUs each run declares")


def executor_from_args(args: argparse.Namespace, workers: int):
    """The training.sweep.Executor the options ask for; CLIError (exit 2) for a bad combination or a missing Ray."""
    from training.sweep import Executor, check_ray, check_ray_address

    if args.executor == "pool" and (args.address is not None or args.cpus_per_run != 1.0 or args.gpus_per_run != 0.0):
        raise CLIError(f"mixit {args.command}: error: --address, --cpus-per-run and --gpus-per-run need --executor ray")
    try:
        executor = Executor(args.executor, workers, args.address, args.cpus_per_run, args.gpus_per_run)
        if executor.kind == "ray":
            check_ray()
            check_ray_address(executor.address)
            if executor.address is None and executor.gpus_per_run > 0:
                import torch

                gpus = torch.cuda.device_count()
                if executor.gpus_per_run > gpus:  # a Ray started here has only these: the runs would wait forever
                    raise ValueError(f"--gpus-per-run={executor.gpus_per_run:g} without --address starts Ray on this "
                                     f"machine, which has {gpus} GPU{'s' * (gpus != 1)}; allowed: 0..{gpus}, or join "
                                     "a cluster with --address")
    except ValueError as e:
        raise CLIError(f"mixit {args.command}: error: {e}") from None
    return executor
