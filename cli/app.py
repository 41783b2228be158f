"""`mixit app [DIR] [--port N] [--host H]`: open the Streamlit explorer (app.py) on a directory of runs.

It serves on 127.0.0.1 unless --host says otherwise: the explorer shows run provenance (commands, paths,
commit, platform) and loads models on request, which is nothing to offer everyone on the network.

app.py sits at the repository root, beside the packages, not inside one: the command finds it next
to this package, so it works from a source checkout or an editable install (`pip install -e .`);
a wheel installed elsewhere has no app.py and gets a one-line error saying so.
"""

from __future__ import annotations

import argparse
import ipaddress
import errno
import os
import socket
import sys
from pathlib import Path

from .common import CLIError, path_arg

DEFAULT_DIR = Path("checkpoints")
DEFAULT_HOST = "127.0.0.1"
APP_FILE = Path(__file__).resolve().parent.parent / "app.py"


def register(subparsers) -> None:
    """Add the `app` subcommand to the `mixit` parser (called by cli.main)."""
    p = subparsers.add_parser(
        "app",
        help="open the Streamlit explorer on a directory of runs",
        description="Start the explorer (streamlit run app.py -- --runs DIR) and print its address; Ctrl-C stops it.",
    )
    p.set_defaults(handler=cmd_app)
    p.add_argument("runs", nargs="?", type=path_arg, default=DEFAULT_DIR, metavar="DIR",
                   help=f"runs directory, e.g. runs/smoke after `mixit reproduce --preset smoke` (default: {DEFAULT_DIR})")
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


def streamlit_command(runs: Path, port: int | None = None, headless: bool = False, app: Path = APP_FILE,
                      host: str = DEFAULT_HOST) -> list[str]:
    """The command line that serves app.py on `runs` at host:port (checked: the directory and app.py exist,
    the port is valid)."""
    if not runs.is_dir():
        what = "is not a directory" if runs.exists() else "does not exist"
        raise CLIError(f"mixit app: error: runs directory {str(runs)!r} {what} "
                       f"(create runs with: mixit reproduce --preset smoke --out {runs})")
    if port is not None and not 1 <= port <= 65535:
        raise CLIError(f"mixit app: error: --port={port} must lie in 1..65535")
    if not app.is_file():
        raise CLIError(f"mixit app: error: {app} not found; the explorer runs from a source checkout or an editable "
                       "install (pip install -e .), where app.py sits beside the packages")
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


def cmd_app(args: argparse.Namespace) -> int:
    """Become the Streamlit server (exec): SIGTERM, SIGINT and SIGHUP then reach the server itself, and no
    child is left serving after `kill PID`."""
    cmd = streamlit_command(args.runs, args.port, args.headless, host=args.host)
    if args.port is not None:
        check_port(args.host, args.port)
    if not is_loopback(args.host):
        print(f"mixit app: warning: serving on {args.host}: anyone who can reach this machine can browse these runs "
              "and make the server load their models", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached (os.execv replaces this process; tests patch it)
