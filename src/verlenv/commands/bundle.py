"""`verlenv bundle`: collect every file a locked variant needs into a folder for offline installs."""

import os
import shlex
import sys
from pathlib import Path

from verlenv.bundle import build_inputs, fetch, kernel_cache, make, parts, space
from verlenv.catalog import gpus, pins, stacks
from verlenv.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("bundle", help="collect every file a locked variant needs into a folder for offline installs")
    p.add_argument("--stack", help="stack (default: the catalog's default)")
    p.add_argument("--variant", action="append", metavar="VARIANT",
                   help="a variant of the stack (default: fsdp; stacks.toml names them, e.g. megatron, sglang); "
                        "repeat for one bundle of several variants (shared files carried once)")
    p.add_argument("--platform", default=pins.LOCK_PLATFORM, help="linux-64 (default) or linux-aarch64")
    p.add_argument("--glibc", default=fetch.GLIBC,
                   help=f"the target's glibc: wheels needing a newer one are not taken (default {fetch.GLIBC})")
    p.add_argument("--out", type=Path, help="bundle folder (default: bundles/<stack>-<variant>[+<variant>].<platform>)")
    p.add_argument("--split", metavar="SIZE",
                   help="also write the bundle as parts of SIZE (e.g. 56MiB) into OUT.parts/")
    p.add_argument("--base", type=Path, metavar="FREEZE",
                   help="pip freeze of the target: leave out what it has at the locked version")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched, with sizes; download nothing")
    p.add_argument("--no-built", action="store_true",
                   help="leave out the source-built wheels (flash-attn, apex, TE torch, Megatron-Bridge)")
    p.add_argument("--without", action="append", default=[], metavar="NAME",
                   help="leave out this one source-built wheel, e.g. apex when the nodes build it themselves "
                        "(repeatable)")
    p.add_argument("--gpu", action="append",
                   help=f"source-built wheels must cover this GPU: {', '.join(gpus.profiles())} (repeatable; default: "
                        "the stack's gpu_archs)")
    p.add_argument("--archs", help="source-built wheels must cover these archs, e.g. '8.0;9.0' (overrides --gpu)")
    p.add_argument("--wheelhouse", type=Path,
                   default=Path(os.environ.get("VERLENV_WHEELHOUSE", ".verlenv/wheelhouse")),
                   help="the wheel cache `verlenv build` fills")
    p.add_argument("--kernel-cache", type=Path, metavar="DIR",
                   help="also carry this prebuilt kernel cache folder (Triton's, FlashInfer's); install "
                        "--kernel-cache-into unpacks it")
    p.add_argument("--build-inputs", action="store_true",
                   help="also carry the verified source of every source build whose wheel is left out (--no-built, "
                        "--without), for `verlenv build` on nodes that reach no index")
    p.add_argument("--source", action="append", default=[], metavar="NAME=PATH",
                   help="with --build-inputs: a local copy of NAME's source (a clone or mirror for a git recipe, which "
                        "must be given; an sdist file for a PyPI one); repeatable")
    p.add_argument("--toolkit", type=Path, metavar="DIR",
                   help="also carry this CUDA_HOME (e.g. /opt/cuda-12.5-debian); the node's `verlenv build` uses it")
    p.add_argument("--tests", action="store_true",
                   help="also carry what the test suite imports (verlenv's dependencies and pyproject.toml's test "
                        "group, resolved by uv for the target), so `BUNDLE/.tool/bin/nox -s tests -- -m gpu` runs on "
                        "nodes that reach no index")
    p.add_argument("--build-python", help="interpreter that builds sdist-only pins (default: the stack's Python)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    cat = stacks.load()
    names = list(dict.fromkeys(args.variant or [stacks.DEFAULT_VARIANT]))
    variants = [cat.variant(args.stack, name) for name in names]
    stack = variants[0].stack
    _check_variants(args, variants)
    locks = {v.name: pins.lock_path(cat.root, v, args.platform) for v in variants}
    size = _check_extras(args)
    sources = _carried_sources(args, cat, variants)
    archs, devices = _archs(args, stack)
    built, notes = _built(args, variants, locks, archs, devices)
    out = args.out or cat.root / "bundles" / f"{stack.name}-{'+'.join(names)}.{args.platform}"
    options = make.Options(locks, out, args.platform, stack.python, glibc=args.glibc, stack=stack.name,
                           built=built, built_note=notes, base=args.base,
                           build_python=args.build_python or stack.python,
                           command=shlex.join(["verlenv", *sys.argv[1:]]), kernel_cache=args.kernel_cache,
                           sources=tuple(sources), toolkit=args.toolkit, tests=args.tests)
    with space.reported(out, "--out"):  # a full disk names the bundle's folder, not the cache file read
        manifest = make.make(options, dry=args.dry_run)
    if manifest is not None and size:
        with space.reported(out.with_name(out.name + ".parts"), "--split",
                            needed=sum(e["size"] for e in manifest["files"])):
            written = parts.split(out, out.with_name(out.name + ".parts"), size)
        print(f"parts: {len(written)} of at most {size / 1024**2:.1f} MiB in {out.with_name(out.name + '.parts')}",
              file=sys.stderr)
    return 0


def _check_variants(args, variants: list[stacks.Variant]) -> None:
    """Each variant is locked for the platform and glibc asked for; --without names their source builds."""
    for variant in variants:
        if args.platform not in variant.platforms:
            raise UserError(f"{variant.key} is not locked for {args.platform}; it is locked for: "
                            f"{', '.join(variant.platforms)}")
        if fetch.glibc_minor(args.glibc) < fetch.glibc_minor(variant.glibc):
            raise UserError(f"--glibc {args.glibc}: {variant.key} is locked for glibc >= {variant.glibc} (its wheels "
                            f"need it); give --glibc {variant.glibc} or newer, or another variant")
    buildable = sorted({b.name for v in variants for b in v.source_builds})
    if unknown := [n for n in args.without if n not in buildable]:
        raise UserError(f"--without {unknown[0]}: not a source-built package of {', '.join(v.key for v in variants)}; "
                        f"valid: {', '.join(buildable) or 'none'}")


def _check_extras(args) -> int | None:
    """Check the extras' inputs before any download; the part size of --split, if given."""
    size = None
    if args.split:
        try:
            size = parts.parse_size(args.split)
        except ValueError as e:
            raise UserError(f"--split: {e}") from None
    if args.kernel_cache:
        kernel_cache.files(args.kernel_cache)  # before any download: a folder that holds files
    if args.source and not args.build_inputs:
        raise UserError("--source goes with --build-inputs (it gives the copy of a source the bundle carries)")
    if args.toolkit:
        build_inputs.check_toolkit(args.toolkit)
    if args.tests:
        make.source_tree()  # before any download: the tests and their pyproject.toml are here
    if args.base and not args.base.is_file():
        raise UserError(f"--base {args.base}: no such file; give a `pip freeze` of the target")
    return size


def _carried_sources(args, cat: stacks.Catalog, variants: list[stacks.Variant]) -> list:
    """With --build-inputs: the source builds whose wheel the bundle leaves out, so the nodes build them."""
    if not args.build_inputs:
        return []
    carried = {v.name: set() if args.no_built else {b.name for b in v.source_builds} - set(args.without)
               for v in variants}
    sources = build_inputs.wanted(cat.root, variants, carried, build_inputs.parse_given(args.source))
    if not sources:
        print("note: --build-inputs: the bundle carries every source-built wheel; no source to carry",
              file=sys.stderr)
    return sources


def _archs(args, stack) -> tuple[list[str], list[str]]:
    """(the archs the source-built wheels must cover, the named GPUs' own compute capabilities)."""
    targets = [gpus.profile(g) for g in dict.fromkeys(args.gpu or []) if g != "auto"] if not args.archs else []
    for target in targets:
        if target.machine != pins.MACHINES.get(args.platform):
            there = next((p for p, m in pins.MACHINES.items() if m == target.machine), target.machine)
            raise UserError(f"--gpu {target.key}: an {target.title} comes with {target.machine} CPUs, and this bundle "
                            f"is for {args.platform}; give --platform {there}")
    archs = ([a.strip() for a in args.archs.split(";")] if args.archs
             else gpus.archs_for(args.gpu) if args.gpu else list(stack.gpu_archs))
    return archs, [t.arch for t in targets]


def _built(args, variants: list[stacks.Variant], locks: dict[str, Path], archs: list[str],
           devices: list[str]) -> tuple[dict[str, list[make.Built]], dict[str, str]]:
    """Each variant's source-built wheels from the wheel cache and why they are carried or not. A dry run looks them
    up too (the cache is local): it lists them, or stops on a missing one as the bundle would."""
    built, notes = {}, {}
    for v in variants:
        wanted = [b for b in v.source_builds if b.name not in args.without]
        if not v.source_builds:
            built[v.name], notes[v.name] = [], "none in this variant"
        elif args.no_built:
            built[v.name], notes[v.name] = [], "left out (--no-built)"
        else:
            left = sorted(b.name for b in v.source_builds if b.name in args.without)
            built[v.name] = make.built_wheels(v, locks[v.name], args.wheelhouse.absolute(), archs,
                                              only=[b.name for b in wanted], devices=devices)
            notes[v.name] = "included" if not left else f"included but {', '.join(left)} (left out: --without)"
    return built, notes
