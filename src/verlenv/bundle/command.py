"""`verlenv bundle`: the command line of bundle making, and install's `--bundle` path."""

import contextlib
import json
import os
import shlex
import sys
from pathlib import Path

from verlenv import catalog, gpus, pins
from verlenv.bundle import fetch, kernel_cache, make, parts
from verlenv.errors import UserError


def _torch_version(lock: Path) -> str:
    torch = pins.read_lock(lock).get("torch")
    if torch is None:
        raise UserError(f"{lock.name} pins no torch; source-built wheels need one (use --no-built)")
    return torch.version


def built_wheels(variant: catalog.Variant, lock: Path, wheelhouse: Path, archs: list[str]) -> list[make.Built]:
    """The variant's source-built wheels from the wheel cache; one line naming the build for a missing one."""
    torch = _torch_version(lock)
    tag = "cp" + variant.stack.python.replace(".", "")
    out = []
    for build in variant.source_builds:
        commit = build.url.rpartition("@")[2] if build.url else None
        hit = make.find_built(wheelhouse, build.name, build.version, torch, variant.stack.cuda, tag, archs, commit=commit)
        if hit is None:
            raise UserError(f"no cached {build.name} {build.version or commit} wheel for torch {torch}, CUDA {variant.stack.cuda}, "
                            f"{tag}, archs {';'.join(archs)} in {wheelhouse}; make it with "
                            f"`verlenv build {build.name} --stack {variant.stack.name} --variant {variant.name} --archs '{';'.join(archs)}' "
                            f"--wheelhouse {wheelhouse}`, or pass --no-built")
        out.append(hit)
    return out


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
        built, note = built_wheels(variant, lock, args.wheelhouse.absolute(), archs), "included"
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


def install_main(args) -> int:
    """`verlenv install --bundle DIR`: offline install, then the same drift check as a plain install."""
    from verlenv.bundle import offline
    from verlenv.install import env_python, kept_source_builds, prefix_lock
    from verlenv.verify.runner import lock_drift

    if args.installer != "uv":
        raise UserError("--bundle installs with the uv the bundle carries; drop --installer pip")
    cat = catalog.load()
    variant = cat.variant(args.stack, args.variant) if args.stack else None
    into = args.python if args.python and not args.prefix and not args.conda else None
    bundle = offline.open_bundle(args.bundle)
    manifest = json.loads((bundle / make.MANIFEST).read_text())  # which variant; offline.install checks it all
    variant = variant or cat.variant(manifest["stack"], manifest["variant"])
    kernels = next((e for e in manifest["files"] if e["origin"] == kernel_cache.ORIGIN), None)
    if args.kernel_cache_into and kernels is None:
        raise UserError(f"--kernel-cache-into: {bundle} carries no kernel cache (bundle it with --kernel-cache DIR)")
    if (variant.stack.name, variant.name) != (manifest["stack"], manifest["variant"]):
        raise UserError(f"the bundle holds {manifest['stack']}-{manifest['variant']}, not {variant.key}")
    expected = pins.lock_path(cat.root, variant, manifest["platform"])
    prefix = args.prefix or cat.root / f".venv-{variant.key}"
    keep = []
    if manifest["built"] != "included" and not into and env_python(prefix.absolute()).exists():
        keep = kept_source_builds(env_python(prefix.absolute()), variant)
    # One installer per env, as for a plain install; an interpreter's own env (--python) is the user's to guard.
    if into:
        held = None
    elif args.conda:
        held = Path(os.environ["CONDA_PREFIX"]) if os.environ.get("CONDA_PREFIX") else None  # offline.install says so
    else:
        held = prefix.absolute()
    with prefix_lock(held, args.conda) if held else contextlib.nullcontext():
        python, manifest, lock = offline.install(bundle, prefix=prefix, conda=args.conda,
                                                 python=None if into else args.python, into=into,
                                                 expected_lock=expected, keep=keep)
        from verlenv import runtime_env

        # The stack's runtime defaults (.pth) are part of the env, whichever way it was installed.
        runtime_env.apply(python, cat.root / "stacks.toml", variant)
    results = lock_drift(python, cat, variant, lock)
    for r in results:
        print(f"drift check {r.name}: {r.status}: {r.reason}", file=sys.stderr)
    if any(r.status == "fail" for r in results):
        print(f"verlenv install: the env differs from {lock.name}", file=sys.stderr)
        return 1
    if kernels and args.kernel_cache_into:
        count = kernel_cache.unpack(bundle / kernels["file"], args.kernel_cache_into)
        print(f"kernel cache: {count} files into {args.kernel_cache_into}", file=sys.stderr)
    elif kernels:
        print(f"note: the bundle carries a kernel cache ({kernels['file']}); --kernel-cache-into DIR unpacks it",
              file=sys.stderr)
    return 0
