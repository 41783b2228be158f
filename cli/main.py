"""The `mixit` command line: the parser and the entry point `main`. The top layer: it may import every
package, and none imports it. `CLIError`, the one-line parser and the exit codes are in mixit_lab.cli.common.

Each subcommand lives in a module of this package (`COMMANDS`: train, tune and sweep in mixit_lab.cli.train) that exposes
`register(subparsers)`; each subcommand's parser sets `handler=fn` with `fn(args) -> int` (its exit status).
`mixit COMMAND ...` imports only COMMAND's module, so a command that reads run folders (`mixit figures`) starts
without torch and TransformerLens; `mixit --help` imports them all. Library code raises ordinary exceptions
(ValueError, FileNotFoundError, ...); handlers turn the user's mistakes into CLIError. Every error is one line on
stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from mixit_lab.training.pool import one_line_warnings

from .common import (
    EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, CLIError, OneLineParser, os_error_line, was_terminated,
)

# command -> the module of this package that registers it, in the order `mixit --help` lists them
COMMANDS = {"train": "train", "tune": "train", "sweep": "train", "analyze": "analyze", "figures": "figures",
            "reproduce": "reproduce", "app": "app"}


def build_parser(command: str | None = None) -> OneLineParser:
    """The `mixit` parser: every command, or only `command`'s (its module alone is imported) when it is one."""
    parser = OneLineParser(prog="mixit", description="MixiT Lab: train and analyse Transformer variants.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    modules = [COMMANDS[command]] if command in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in modules:
        importlib.import_module(f"{__package__}.{name}").register(sub)
    for subparser in sub.choices.values():
        _show_defaults(subparser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append "(default: X)" to the help of every option with a default that its help does not mention yet
    (no default, an off switch or an empty list show nothing), so `--help` shows every default."""
    for action in parser._actions:
        default, text = action.default, action.help or ""
        if (not action.option_strings or text == argparse.SUPPRESS or isinstance(default, bool)
                or default in (None, argparse.SUPPRESS, []) or "default" in text):
            continue
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        shown = shown.replace("%", "%%")  # argparse %-formats help strings
        action.help = f"{text} (default: {shown})" if text else f"default: {shown}"


def _raised_by(module: str, name: str) -> tuple[type[BaseException], ...]:
    """(module.name,) when the command imported `module`, else (): a command that never imported it cannot have
    raised its exceptions, and importing it here would cost a light command (`mixit figures`) torch."""
    found = sys.modules.get(module)
    return (getattr(found, name),) if found is not None else ()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    one_line_warnings()
    command = argv[0] if argv else None
    try:
        if COMMANDS.get(command) == "train":  # `--task file.py:Class` registers the class before the parser is built
            importlib.import_module(f"{__package__}.train").register_task_arg(argv)
    except CLIError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser(command)
    args = argparse.Namespace(command="")  # until parsed
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        args.argv = argv
        if getattr(args, "trust_tasks", False):  # consent, inherited by the workers and the explorer it starts
            from mixit_lab.training.tasks import trust_task_code

            trust_task_code()
        return args.handler(args)
    except CLIError as e:  # the user's mistake, found before work started (mixit_lab.cli.common: the input boundary)
        print(e, file=sys.stderr)
        return EXIT_USAGE
    # the run failed, or a file it needed went away meanwhile
    except (FileNotFoundError, *_raised_by("mixit_lab.training.trainer", "TrainingDiverged")) as e:
        print(f"mixit {args.command}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    # a task's own code drew rows that break the batch format, at any step: its input
    except _raised_by("mixit_lab.training.tasks.base", "TaskError") as e:
        print(f"mixit {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    # A ValueError (or anything else) that reaches here was raised after work started: a bug, a traceback, exit 1.
    except OSError as e:  # permission, not a directory, no space, read-only file system: one line naming the path
        print(os_error_line(args.command, e), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM inside stop_on_sigterm (Terminated)
        hint = ("rerun with --resume to continue from the last checkpoint" if args.command == "train" else
                "rerun the same command to continue: finished work is kept")
        terminated = was_terminated(e)
        print(f"mixit {args.command}: {'terminated' if terminated else 'interrupted'}; {hint}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
