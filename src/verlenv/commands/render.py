"""`verlenv render`: write the conda environment files from stacks.toml and the locks."""

import sys
from pathlib import Path

from verlenv.catalog import stacks
from verlenv.lock import render


def register(sub) -> None:
    p = sub.add_parser("render", help="generate the conda environment files from stacks.toml and the locks")
    p.add_argument("--catalog", type=Path, default=None, help="stacks.toml to read (default: the project's)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    cat = stacks.load(args.catalog)
    changed = render.write(cat)
    for rel in changed:
        print(f"wrote {rel}", file=sys.stderr)
    print(f"{len(changed)} environment file(s) changed", file=sys.stderr)
    return 0
