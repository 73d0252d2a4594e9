"""`verlenv bundle`: collect every file a locked variant needs into a folder for offline installs."""

import os
import shlex
import sys
from pathlib import Path

from verlenv import catalog, gpus, pins
from verlenv.bundle import fetch, kernel_cache, make, parts
from verlenv.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("bundle", help="collect every file a locked variant needs into a folder for offline installs")
    p.add_argument("--stack", help="stack (default: the catalog's default)")
    p.add_argument("--variant", default="fsdp", help="fsdp or megatron")
    p.add_argument("--platform", default=pins.LOCK_PLATFORM, help="linux-64 (default) or linux-aarch64")
    p.add_argument("--glibc", default=fetch.GLIBC, help=f"the target's glibc: wheels needing a newer one are not taken (default {fetch.GLIBC})")
    p.add_argument("--out", type=Path, help="bundle folder (default: bundles/<stack>-<variant>.<platform>)")
    p.add_argument("--split", metavar="SIZE", help="also write the bundle as parts of SIZE (e.g. 56MiB) into OUT.parts/")
    p.add_argument("--base", type=Path, metavar="FREEZE", help="pip freeze of the target: leave out what it has at the locked version")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched, with sizes; download nothing")
    p.add_argument("--no-built", action="store_true", help="leave out the source-built wheels (flash-attn, apex, TE torch)")
    p.add_argument("--gpu", action="append", help="source-built wheels must cover this GPU: a100, h100, h200 (repeatable; default: the stack's gpu_archs)")
    p.add_argument("--archs", help="source-built wheels must cover these archs, e.g. '8.0;9.0' (overrides --gpu)")
    p.add_argument("--wheelhouse", type=Path, default=Path(os.environ.get("VERLENV_WHEELHOUSE", ".verlenv/wheelhouse")),
                   help="the wheel cache `verlenv build` fills")
    p.add_argument("--kernel-cache", type=Path, metavar="DIR",
                   help="also carry this prebuilt kernel cache folder (Triton's, FlashInfer's); install --kernel-cache-into unpacks it")
    p.add_argument("--build-python", help="interpreter that builds sdist-only pins (default: the stack's Python)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    cat = catalog.load()
    variant = cat.variant(args.stack, args.variant)
    if args.platform not in variant.platforms:
        raise UserError(f"{variant.key} is not locked for {args.platform}; it is locked for: {', '.join(variant.platforms)}")
    lock = pins.lock_path(cat.root, variant, args.platform)
    size = None
    if args.split:
        try:
            size = parts.parse_size(args.split)
        except ValueError as e:
            raise UserError(f"--split: {e}") from None
    if args.kernel_cache:
        kernel_cache.files(args.kernel_cache)  # before any download: a folder that holds files
    if args.base and not args.base.is_file():
        raise UserError(f"--base {args.base}: no such file; give a `pip freeze` of the target")
    built, note = [], "left out (--no-built)"
    if not args.no_built and variant.source_builds and not args.dry_run:
        archs = ([a.strip() for a in args.archs.split(";")] if args.archs
                 else gpus.archs_for(args.gpu) if args.gpu else list(variant.stack.gpu_archs))
        built, note = make.built_wheels(variant, lock, args.wheelhouse.absolute(), archs), "included"
    out = args.out or cat.root / "bundles" / f"{variant.key}.{args.platform}"
    manifest = make.make(lock, out, args.platform, variant.stack.python, glibc=args.glibc, stack=variant.stack.name, variant=variant.name,
                         built=built, built_note=note if variant.source_builds else "none in this variant",
                         base=args.base, dry=args.dry_run, build_python=args.build_python or variant.stack.python,
                         command=shlex.join(["verlenv", *sys.argv[1:]]), kernel_cache=args.kernel_cache)
    if manifest is not None and size:
        written = parts.split(out, out.with_name(out.name + ".parts"), size)
        print(f"parts: {len(written)} of at most {size / 1024**2:.1f} MiB in {out.with_name(out.name + '.parts')}",
              file=sys.stderr)
    return 0
