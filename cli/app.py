"""`mixit app [DIR] [--port N] [--host H]`: open the Streamlit explorer on a folder of runs.

Given no folder, it opens the runs of the last `mixit reproduce` in the working directory
(.mixit_cache/last_study.json, else the newest runs/*/reproduce.json), or says in one line where to point it.
It serves on 127.0.0.1 unless --host says otherwise: the explorer shows run provenance (commands, paths,
commit, platform) and loads models on request, which is nothing to offer everyone on the network.

The explorer is the `explorer` package (its frame, explorer/app.py, and one file per page), installed with the
others; this command finds the frame's file through importlib.resources and imports nothing else of it but
`mixit_lab.explorer.report` (where a study's folders are). The server runs as a child process: SIGTERM and SIGHUP are
passed on to it, and Ctrl-C stops it and exits 130, like every other command.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import signal
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

from .common import EXIT_INTERRUPTED, CLIError, add_trust_option, path_arg

DEFAULT_HOST = "127.0.0.1"
STOP_WAIT_S = 20  # how long a server stopped by Ctrl-C may take to close before it is killed


def app_file() -> Path:
    """The explorer's frame (explorer/app.py) in the installed `explorer` package."""
    return Path(os.fspath(resources.files("mixit_lab.explorer") / "app.py"))


def register(subparsers) -> None:
    """Add the `app` subcommand to the `mixit` parser (called by mixit_lab.cli.main)."""
    p = subparsers.add_parser(
        "app",
        help="open the Streamlit explorer on a folder of runs",
        description="Start the explorer (streamlit run explorer/app.py -- --runs DIR) and print its address; "
                    "Ctrl-C stops it.",
    )
    p.set_defaults(handler=cmd_app)
    add_trust_option(p)
    p.add_argument("runs", nargs="?", type=path_arg, default=None, metavar="DIR",
                   help="runs folder, e.g. runs/smoke after `mixit reproduce --preset smoke` (default: the runs of the "
                        "last `mixit reproduce` here)")
    p.add_argument("--port", type=int, default=None,
                   help="port to serve on (default: Streamlit's, 8501 or the next free one)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to serve on (default: {DEFAULT_HOST}, this machine only; 0.0.0.0: every interface, "
                        "so anyone who can reach this machine can browse the runs)")
    p.add_argument("--headless", action="store_true", help="do not open a browser window")


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or "localhost") reaches this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def default_runs(cwd: Path | None = None) -> Path:
    """The runs of the last `mixit reproduce` in `cwd`; CLIError (one line saying where to point it) if none."""
    from mixit_lab.explorer.report import LAST_STUDY, default_runs_dir  # here: the other commands need not import the report

    found = default_runs_dir(cwd)
    if found is None:
        raise CLIError(f"mixit app: error: no runs folder given and no study here ({LAST_STUDY}, "
                       "runs/*/reproduce.json); "
                       "give one (mixit app DIR) or create one (mixit reproduce --preset quick)")
    return found


def streamlit_command(runs: Path, port: int | None = None, headless: bool = False, app: Path | None = None,
                      host: str = DEFAULT_HOST) -> list[str]:
    """The command line that serves the explorer on `runs` at host:port (checked: the folder and the explorer's
    file exist, the port is valid)."""
    app = app_file() if app is None else app
    if not runs.is_dir():
        what = "is not a directory" if runs.exists() else "does not exist"
        raise CLIError(f"mixit app: error: runs directory {str(runs)!r} {what} "
                       f"(create runs with: mixit reproduce --preset smoke --out {runs})")
    if port is not None and not 1 <= port <= 65535:
        raise CLIError(f"mixit app: error: --port={port} must lie in 1..65535")
    if not app.is_file():
        raise CLIError(f"mixit app: error: {app} not found: the explorer package is incomplete; reinstall mixit-lab")
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--browser.gatherUsageStats", "false",
           "--client.toolbarMode", "minimal"]
    if not host.strip():
        raise CLIError("mixit app: error: --host='' is empty; give an address such as 127.0.0.1 or 0.0.0.0")
    cmd += ["--server.address", host]
    if port is not None:
        cmd += ["--server.port", str(port)]
    if headless:
        cmd += ["--server.headless", "true"]
    # As typed: streamlit keeps the working directory, and the sidebar then shows the path the user gave.
    return cmd + ["--", "--runs", str(runs)]


def check_port(host: str, port: int) -> None:
    """CLIError (one line naming the port) if something already listens on host:port. Streamlit would
    otherwise print its own multi-line error, or serve on another port than the one asked for."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise CLIError(f"mixit app: error: --host={host!r} cannot be resolved ({e.strerror})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise CLIError(f"mixit app: error: --port={port} is already in use on {host}; "
                               "give another --port, or leave --port out for the next free one") from None
            raise CLIError(f"mixit app: error: cannot serve on {host}:{port} ({e.strerror})") from None


def launch(cmd: list[str]) -> int:
    """Run the server until it stops and return the exit status: SIGTERM and SIGHUP (unless ignored, as under
    nohup) are passed on to it, then 128 + the signal; Ctrl-C stops it, then 130."""
    proc = subprocess.Popen(cmd)
    received: list[int] = []

    def forward(signum: int, _frame) -> None:
        received.append(signum)
        proc.send_signal(signum)

    passed = [s for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, forward) for s in passed}
    try:
        status = proc.wait()
    except KeyboardInterrupt:  # the terminal sent SIGINT to both; tell the server too, in case only we got it
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return EXIT_INTERRUPTED
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if received:
        return 128 + received[0]
    return 128 - status if status < 0 else status


def cmd_app(args: argparse.Namespace) -> int:
    """Serve the explorer on the runs folder until it stops (see launch)."""
    runs = args.runs
    if runs is None:
        runs = default_runs()
        print(f"mixit app: the runs of the last `mixit reproduce` here: {runs}", file=sys.stderr)
    cmd = streamlit_command(runs, args.port, args.headless, host=args.host)
    if args.port is not None:
        check_port(args.host, args.port)
    if not is_loopback(args.host):
        print(f"mixit app: warning: serving on {args.host}: anyone who can reach this machine can browse these runs "
              "and make the server load their models", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    return launch(cmd)
