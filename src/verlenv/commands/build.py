"""`verlenv build`: compile the variant's source builds against the env's torch, then install and import them."""

import json
import os
import sys
from pathlib import Path

from verlenv import validate
from verlenv.bundle import build_inputs, offline
from verlenv.catalog import gpus, stacks
from verlenv.commands import add_env_options, positive_int
from verlenv.env.install import default_python
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.native import build, recipes, toolchain


def register(sub) -> None:
    p = sub.add_parser("build", help="build the variant's source builds (flash-attn, apex, TE torch, Megatron-Bridge) "
                                     "against the env's torch")
    p.add_argument("packages", nargs="*", help="packages to build (default: every source build of the variant)")
    add_env_options(p, "interpreter of the env to build for (default: active env or .venv-<stack>-<variant>)")
    p.add_argument("--gpu", action="append",
                   help=f"target GPU: {', '.join(gpus.profiles())} or auto (repeat for a union)")
    p.add_argument("--archs", help="explicit archs, e.g. '8.0;9.0' (overrides --gpu)")
    p.add_argument("--wheelhouse", type=Path, default=Path(os.environ.get("VERLENV_WHEELHOUSE", ".verlenv/wheelhouse")),
                   help="wheel cache; a shared disk lets a cluster build once")
    p.add_argument("--jobs", type=positive_int("--jobs"), help="override MAX_JOBS")
    p.add_argument("--threads", type=positive_int("--threads"), help="override nvcc threads per job")
    p.add_argument("--source", type=Path,
                   help="local source: the sdist file, or a git clone (or a tar of the commit) for git recipes")
    p.add_argument("--bundle", type=Path, metavar="DIR", default=os.environ.get("VERLENV_BUNDLE") or None,
                   help="build offline from the sources (and CUDA_HOME) a `verlenv bundle --build-inputs` carries "
                        "(default: $VERLENV_BUNDLE, which the bundle's nox sets)")
    p.add_argument("--if-gpu", action="store_true",
                   help="with --gpu auto: build only when a GPU is visible, else say so and exit 0")
    p.add_argument("--no-install", action="store_true", help="build and cache only")
    p.add_argument("--keep", action="store_true", help="keep the build tree")
    p.add_argument("--json", type=Path, help="write the build records to this JSON file")
    p.set_defaults(func=_main)


def _main(args) -> int:
    cat = stacks.load()
    bundle = offline.open_bundle(Path(args.bundle)) if args.bundle else None
    manifest = offline.read_manifest(bundle) if bundle else None
    variant = _bundle_variant(cat, bundle, manifest, args) if bundle else cat.variant(args.stack, args.variant)
    python = (validate.interpreter(args.python) if args.python
              else os.path.abspath(default_python(variant, cat.root, "build in")))
    packages = args.packages or [b.name for b in variant.source_builds]
    wanted = [recipes.load(cat.root, package) for package in packages]
    _check_inputs(args, wanted)
    # From a bundle: each package's carried source unless --source gives one, checked before anything is built.
    given = [args.source or (build_inputs.carried_source(bundle, manifest, recipe, variant) if bundle else None)
             for recipe in wanted]
    if args.if_gpu and args.archs is None and (args.gpu or ["auto"]) == ["auto"] and not gpus.visible_gpus():
        print(f"verlenv build: no GPU visible, nothing built (name a target with --gpu {'|'.join(gpus.profiles())})",
              file=sys.stderr)
        return 0
    toolkit = build_inputs.unpack_toolkit(bundle, manifest) if bundle and not os.environ.get("CUDA_HOME") else None
    archs = validate.archs(args.archs) if args.archs is not None else gpus.archs_for(args.gpu or ["auto"])
    # The named GPUs' own compute capabilities: the wheel is checked for them too (a B300's 10.3 by its 10.0 build).
    targets = [gpus.profile(g) for g in dict.fromkeys(args.gpu or []) if g != "auto"] if args.archs is None else []
    work = (cat.root / ".verlenv").resolve()
    results = []
    for package, recipe, source in zip(packages, wanted, given):
        result = build.build_one(cat.root, variant, package, python, archs, args.wheelhouse.resolve(), work,
                                 args.jobs, args.threads, source, args.keep, toolkit, [t.arch for t in targets])
        if recipe.gpu_code:
            for line in build.verdicts(recipe.package, archs, targets, gpus.visible_gpus()):
                print(f"  {line}", file=sys.stderr)
        if not args.no_install:
            build.install_wheel(python, result.wheel, recipe)
        results.append(result)
    if args.json:
        write_atomic(args.json, json.dumps([{"package": r.package, "wheel": str(r.wheel), "fingerprint": r.fingerprint,
                                             "cached": r.cached, "record": r.record} for r in results],
                                           indent=2) + "\n")
    return 0


def _bundle_variant(cat: stacks.Catalog, bundle: Path, manifest: dict, args) -> stacks.Variant:
    """The bundle's stack, and its variant (the one asked for, or its only one)."""
    if args.stack and args.stack != manifest["stack"]:
        raise UserError(f"--bundle {bundle} holds {manifest['stack']}, not {args.stack}")
    return cat.variant(manifest["stack"], offline.variant_of(manifest, args.variant))


def _check_inputs(args, wanted: list[recipes.Recipe]) -> None:
    """Every knob and path of the command, before a toolchain is looked for or a source unpacked."""
    if args.archs is not None:
        validate.archs(args.archs)
    validate.env_count("MAX_JOBS")
    toolchain.check_explicit_cuda_home(dict(os.environ))
    for recipe in wanted:
        validate.env_count(recipe.threads_variable)
        validate.env_count(recipe.concurrent_extensions_variable)
        if args.source is not None:
            recipe.source.check_given(args.source, "--source")
    validate.new_or_dir(args.wheelhouse, "--wheelhouse")
    if args.json:
        validate.writable_file(args.json, "--json")

