"""`verlenv install`: install a locked variant (from the index, or offline from a bundle with --bundle), then check
that the env equals the lock."""

import contextlib
import os
import sys
from pathlib import Path

from verlenv.catalog import pins, stacks
from verlenv.catalog.stacks import VARIANT_HELP
from verlenv.commands import add_env_options
from verlenv.env import install, runtime_env
from verlenv.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("install", help="install a locked variant into a venv or the active conda env, then check drift")
    add_env_options(p, "interpreter for a new venv (default: the stack's Python found on this machine)",
                    variant_help=VARIANT_HELP + "; with --bundle, the bundle's variant (needed when it holds several)")
    p.add_argument("--prefix", type=Path, help="venv to create or update (default: .venv-<stack>-<variant>)")
    p.add_argument("--conda", action="store_true", help="install into the active conda env instead of a venv")
    p.add_argument("--installer", choices=("uv", "pip"), default="uv",
                   help="uv (default) or plain pip, on the same lock")
    p.add_argument("--bundle", type=Path, metavar="DIR",
                   help="install offline from a `verlenv bundle` folder (or its parts); with --python alone, into "
                        "that interpreter's env")
    p.add_argument("--kernel-cache-into", type=Path, metavar="DIR",
                   help="with --bundle: unpack the bundle's kernel cache into DIR (e.g. ~/.triton/cache)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if args.kernel_cache_into and not args.bundle:
        raise UserError("--kernel-cache-into goes with --bundle DIR (it unpacks a bundle's kernel cache)")
    if args.bundle:
        return _install_bundle(args)
    cat = stacks.load()
    variant = cat.variant(args.stack, args.variant or stacks.DEFAULT_VARIANT)
    prefix = install.install(cat.root, variant, args.prefix, args.conda, args.python, args.installer)
    lock = install.lock_path(cat.root, variant)
    return 1 if _drifted(str(install.env_python(prefix)), cat, variant, lock) else 0


def _install_bundle(args) -> int:
    """`verlenv install --bundle DIR`: offline install, then the same drift check as a plain install."""
    from verlenv.bundle import build_inputs, kernel_cache, offline

    if args.installer != "uv":
        raise UserError("--bundle installs with the uv the bundle carries; drop --installer pip")
    cat = stacks.load()
    into = args.python if args.python and not args.prefix and not args.conda else None
    bundle = offline.open_bundle(args.bundle)
    manifest = offline.read_manifest(bundle)  # which stack and variant; offline.install checks it all
    if args.stack and args.stack != manifest["stack"]:
        raise UserError(f"the bundle holds {manifest['stack']}, not {args.stack}")
    variant = cat.variant(manifest["stack"], offline.variant_of(manifest, args.variant))
    kernels = next((e for e in manifest["files"] if e["origin"] == kernel_cache.ORIGIN), None)
    if args.kernel_cache_into and kernels is None:
        raise UserError(f"--kernel-cache-into: {bundle} carries no kernel cache (bundle it with --kernel-cache DIR)")
    expected = pins.lock_path(cat.root, variant, manifest["platform"])
    prefix = args.prefix or cat.root / f".venv-{variant.key}"
    keep = []
    carried = {e["distribution"] for e in offline.env_files(manifest, variant.name) if e["origin"] == "built"}
    if (carried != {b.name for b in variant.source_builds} and not into
            and install.env_python(prefix.absolute()).exists()):
        # What the bundle leaves out (--no-built, --without) and the env's own builds hold is kept through the sync.
        keep = [line for line in install.kept_source_builds(install.env_python(prefix.absolute()), variant)
                if line.split(" @ ")[0] not in carried]
    # One installer per env, as for a plain install; an interpreter's own env (--python) is the user's to guard.
    if into:
        held = None
    elif args.conda:
        held = Path(os.environ["CONDA_PREFIX"]) if os.environ.get("CONDA_PREFIX") else None  # offline.install says so
    else:
        held = prefix.absolute()
    with install.prefix_lock(held, args.conda) if held else contextlib.nullcontext():
        python, manifest, lock = offline.install(bundle, prefix=prefix, conda=args.conda,
                                                 python=None if into else args.python, into=into,
                                                 expected_lock=expected, keep=keep, variant=variant.name)
        # The stack's runtime defaults (.pth) are part of the env, whichever way it was installed.
        runtime_env.apply(python, cat.root / "stacks.toml", variant)
    if _drifted(python, cat, variant, lock):
        return 1
    if kernels and args.kernel_cache_into:
        count = kernel_cache.unpack(bundle / kernels["file"], args.kernel_cache_into)
        print(f"kernel cache: {count} files into {args.kernel_cache_into}", file=sys.stderr)
    elif kernels:
        print(f"note: the bundle carries a kernel cache ({kernels['file']}); --kernel-cache-into DIR unpacks it",
              file=sys.stderr)
    build_inputs.unpack_toolkit(bundle, manifest)  # for `verlenv build` on this node; once, after every check
    return 0


def _drifted(python: str, cat: stacks.Catalog, variant: stacks.Variant, lock: Path) -> bool:
    """The drift check after an install, each result on its own line; True when the env differs from the lock."""
    from verlenv.verify.runner import lock_drift  # here: a plain install's start need not load the verify machinery

    results = lock_drift(python, cat, variant, lock)
    for r in results:
        print(f"drift check {r.name}: {r.status}: {r.reason}", file=sys.stderr)
    if any(r.status == "fail" for r in results):
        print(f"verlenv install: the env differs from {lock.name}", file=sys.stderr)
        return True
    return False
