"""`python -m verlenv.commands.runtime_env --python PY`: write the stack's runtime defaults into an env installed
without `verlenv install` (an offline carry, a conda env made by hand)."""

import argparse
import sys

from verlenv.catalog import stacks
from verlenv.commands import add_env_options
from verlenv.env import runtime_env
from verlenv.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verlenv.commands.runtime_env", description=__doc__)
    add_env_options(parser, "the env's interpreter")
    args = parser.parse_args(argv)
    if not args.python:
        parser.error("--python is required: the env's interpreter")
    try:
        cat = stacks.load()
        path = runtime_env.apply(args.python, cat.path, cat.variant(args.stack, args.variant))
    except UserError as e:
        print(f"verlenv: {e}", file=sys.stderr)
        return e.exit_code
    print(f"wrote {path}" if path else "this stack sets no runtime defaults")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
