"""The `verlenv` command: one subcommand per pipeline stage."""

import argparse
import importlib
import sys

from verlenv.errors import UserError

# Each module adds its own subcommand through `register(subparsers)`; the order is the pipeline's.
STAGE_MODULES = (
    "verlenv.render",
    "verlenv.lock",
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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"verlenv {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"verlenv {args.command}: interrupted", file=sys.stderr)
        return 130
