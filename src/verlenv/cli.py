"""The `verlenv` command: one subcommand per pipeline stage."""

import argparse
import importlib
import signal
import sys
import threading

from verlenv.errors import Terminated, UserError

# Each module adds its own subcommand through `register(subparsers)`; the order is the pipeline's.
STAGE_MODULES = (
    "verlenv.render",
    "verlenv.lock",
    "verlenv.conda_snapshot",
    "verlenv.install",
    "verlenv.toolchain",
    "verlenv.build",
    "verlenv.verify",
    "verlenv.doctor",
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verlenv", description="Reproducible, GPU-verified environments for verl.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in STAGE_MODULES:
        importlib.import_module(name).register(sub)
    return p


def _terminate(signum, frame):
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C: a build stops its compilers, temp folders are removed, nothing half-written stays.
    handler = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() else None
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"verlenv {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"verlenv {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"verlenv {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)
