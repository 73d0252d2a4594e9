"""`verlenv lock`: re-resolve the pip locks, re-render the env files, write conda-lock.yml; or `--check` them."""

import sys
from pathlib import Path

from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.lock import conda_layer, locks, render


def register(sub) -> None:
    p = sub.add_parser("lock",
                       help="re-resolve the pip locks, re-render the env files, write conda-lock.yml; or --check them")
    p.add_argument("--catalog", type=Path, default=None, help="stacks.toml to read (default: the project's)")
    p.add_argument("--stack", help="lock only this stack (default: all)")
    p.add_argument("--variant", help="lock only this variant (default: all); a stale base variant is relocked too")
    p.add_argument("--check", action="store_true",
                   help="offline: exit 1 if a lock, env file or conda-lock.yml is not what `verlenv lock` would write")
    p.add_argument("--conda-only", action="store_true",
                   help="only write conda-lock.yml from the committed pip locks and env files (no pip re-resolution)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    cat = stacks.load(args.catalog)
    wanted = locks.selected(cat, args.stack, args.variant)
    if args.check:
        problems = locks.check(cat, args.stack, args.variant)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(f"verlenv lock --check: {len(problems)} problem(s)", file=sys.stderr)
            return locks.EXIT_STALE
        print(f"verlenv lock --check: {len(wanted)} lock(s) and their environment files are fresh", file=sys.stderr)
        return 0
    unreachable = locks.conda_unreachable()
    if args.conda_only:
        chosen = list({v.stack.name: v.stack for v in wanted}.values())
    else:
        locked = locks.relock(cat, wanted)
        for rel in render.write(cat):
            print(f"wrote {rel}", file=sys.stderr)
        chosen = list({v.stack.name: v.stack for v in locked}.values())
    if not unreachable:
        for stack in chosen:
            locks.conda_lock(cat, stack)
        return 0
    print(f"conda channels unreachable ({locks.CONDA_PROBE_URL}: {unreachable}); solving the conda layer against "
          f"{conda_layer.SNAPSHOT_DIR}", file=sys.stderr)
    failed = []
    for stack in chosen:
        try:
            locks.conda_lock_offline(cat, stack)
        except UserError as e:
            failed.append(f"{stack.name}: {e}")
    if failed:
        raise UserError("; ".join(failed) + "; no conda-lock.yml was written for " +
                        ", ".join(f.split(":")[0] for f in failed), exit_code=locks.EXIT_NO_CONDA)
    return 0
