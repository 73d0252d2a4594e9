"""The `verlenv` command: one subcommand per pipeline stage."""

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import threading

from verlenv.errors import Terminated, UserError

# One module per subcommand, verlenv/commands/<name>.py, adds it through `register(subparsers)`; the order is the
# pipeline's. A run of one subcommand imports only its module (the doctor reading a log should not pay for
# conda-lock, rattler and the verify machinery).
COMMANDS = ("render", "lock", "conda-snapshot", "install", "bundle", "toolchain", "build", "verify", "doctor")


def command_module(command: str) -> str:
    return "verlenv.commands." + command.replace("-", "_")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line like every other bad input (exit 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


def version_line() -> str:
    """`verlenv --version`: the tool's version and the default stack of the catalog it would use here."""
    from verlenv import __version__
    from verlenv.catalog import stacks

    try:
        cat = stacks.load()
    except UserError as e:
        return f"verlenv {__version__} (no catalog here: {e})"
    stack = cat.stack()
    return f"verlenv {__version__}; default stack {stack.name}: {stack.description}; catalog {cat.path}"


class _Version(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit(0)


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    p = _Parser(prog="verlenv", description="Reproducible, GPU-verified environments for verl.")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="print verlenv's version and the catalog's default stack")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    args = sys.argv[1:] if argv is None else argv
    first = args[0] if args else None
    # --version needs no subcommand: none is imported for it.
    for command in [first] if first in COMMANDS else [] if first == "--version" else COMMANDS:
        importlib.import_module(command_module(command)).register(sub)
    return p


def _drop_tool_paths(environ) -> None:
    """Take verlenv's own import folders off PYTHONPATH before any subcommand runs an env's interpreter: a tool
    run as `PYTHONPATH=src:<tool wheels> python3 -m verlenv` must not lend its packaging or pyyaml to the env it
    verifies, diagnoses or builds for (they would be judged as the env's own: lock drift, pip check)."""
    own = {os.path.realpath(os.path.dirname(os.path.dirname(spec.origin)))
           for name in ("verlenv", "packaging", "rich", "elftools", "yaml", "uv")
           if (spec := importlib.util.find_spec(name)) is not None and spec.origin}
    entries = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    kept = [p for p in entries if os.path.realpath(p) not in own]
    if kept != entries:
        if kept:
            environ["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            environ.pop("PYTHONPATH", None)


def _terminate(signum, frame):
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    args = parser(argv).parse_args(argv)
    _drop_tool_paths(os.environ)
    # SIGTERM unwinds like Ctrl-C: a build stops its compilers, temp folders are removed, nothing half-written stays.
    handler = (signal.signal(signal.SIGTERM, _terminate)
               if threading.current_thread() is threading.main_thread() else None)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"verlenv {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        if e.filename is None:
            raise  # not about a path the user gave: a bug, keep its traceback
        # A path that could not be read or written and was not checked up front: still one line, no traceback.
        print(f"verlenv {args.command}: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"verlenv {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"verlenv {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)
