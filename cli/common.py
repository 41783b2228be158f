"""What every subcommand shares: `CLIError`, the one-line argument parser, the exit codes."""

from __future__ import annotations

import argparse

EXIT_OK = 0
EXIT_FAILED = 1  # a run failed or diverged, a figure failed
EXIT_USAGE = 2  # a bad option, value, file or preset: one line on stderr
EXIT_INTERRUPTED = 130  # Ctrl-C


class CLIError(Exception):
    """A user error: printed as one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are a single line that points at --help."""

    def error(self, message: str):  # type: ignore[override]
        raise CLIError(f"{self.prog}: error: {message} (see {self.prog} --help)")
