"""`verlenv verify`: static checks of an env (also on CPU), GPU kernel checks, a JSON report; with --ray, every node
of a Ray cluster. The options are verify/options.py's VerifyOptions, each written once."""

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv import validate
from verlenv.catalog import gpus, pins, stacks
from verlenv.commands import add_options
from verlenv.env.install import default_python
from verlenv.errors import UserError
from verlenv.verify.options import VerifyOptions, option_fields


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check an env against its lock and run GPU kernel checks; write a JSON report",
        description="Static checks (lock, pip check, apex, torch symbols of extensions, cubins, driver, libcuda) run "
        "everywhere; kernel checks, verl's trainer among them, run on a GPU matching the profile. Exit 0: every "
        "required check passed; 1: a required check failed; 2: bad input, or a report written to the temp folder "
        "(printed) because its path failed.",
    )
    add_options(p, option_fields())
    p.set_defaults(func=handle)


def _package(name: str, valid: list[str], option: str) -> str:
    canon = canonicalize_name(name)
    if canon not in valid:
        raise UserError(f"{option} {name}: unknown package; valid: {', '.join(valid)}")
    return canon


def launcher() -> str:
    """Who started this run: the noxfile sets VERLENV_LAUNCHER=nox for the verlenv it runs."""
    return "nox" if os.environ.get("VERLENV_LAUNCHER") == "nox" else "verlenv"


def command_line(options: VerifyOptions) -> list[str]:
    """The command as given (options at their non-default values), for the report; --gpu always."""
    argv = options.to_argv()
    return ["verlenv", "verify", "--gpu", options.gpu, *(a for i, a in enumerate(argv)
                                                         if a != "--gpu" and (i == 0 or argv[i - 1] != "--gpu"))]


def checked(options: VerifyOptions, cat: stacks.Catalog) -> tuple[stacks.Variant, list[dict]]:
    """Every option checked before anything runs, one line for the first one wrong: the variant, and the family
    rows the trainer check trains."""
    from verlenv.catalog import backends
    from verlenv.verify import runner, user_overrides

    if options.gpu != "auto":
        gpus.profile(options.gpu)  # unknown names fail before anything runs
    variant = cat.variant(options.stack, options.variant)
    kernels_dir = Path(options.kernels_dir) if options.kernels_dir else runner.KERNELS_DIR
    if options.kernels_dir and not kernels_dir.is_dir():
        raise UserError(f"--kernels-dir {options.kernels_dir}: no such directory")
    valid = runner.known_packages(kernels_dir)
    for name in options.skip_package:
        _package(name, valid, "--skip-package")
    if options.only:
        _package(options.only, valid, "--only")
    if options.lock and not Path(options.lock).is_file():
        raise UserError(f"--lock {options.lock}: no such file")
    validate.seconds(options.timeout, "--timeout")
    validate.seconds(options.node_timeout, "--node-timeout")  # before a --model-config's probe runs
    actor = backends.table().actor(variant.actor)
    if options.actor_tp != 1 and not actor.tensor_parallel:
        parallel = [v.name for v in variant.stack.variants.values() if backends.table().actor(v.actor).tensor_parallel]
        raise UserError(f"--actor-tp {options.actor_tp}: verl's {actor.name} actor of the {variant.name} variant is "
                        "not tensor-parallel" + (f"; a variant whose actor is takes it (--variant "
                                                 f"{' or '.join(parallel)})" if parallel else ""))
    user_overrides.checked(options.trainer_override)
    rows = runner.family_rows(options)
    shrunk = [row for row in rows if row["source"] != "families.toml"]  # the --model-config ones
    if shrunk:  # built in the env on the meta device: its class exists there and the model is tiny
        from verlenv.catalog import families
        from verlenv.verify import model_probe

        python = validate.python3(options.python or default_python(variant, cat.root, "verify"))
        model_probe.check(python, shrunk, families.table().shrink["max_params"],
                          backends.table().rollout(variant.rollout).registry)
    return variant, rows


def handle(args) -> int:
    options = VerifyOptions.from_args(args)
    started = datetime.now(timezone.utc)
    cat = stacks.load()
    variant, families = checked(options, cat)
    if options.ray is not None:  # each node checks its own GPUs and env; this machine only drives
        return _verify_cluster(options, cat, variant, families, started)
    from verlenv.verify import report, runner

    visible = gpus.gpu_details()
    profile = gpus.select_profile(options.gpu, visible, options.force)
    python = validate.python3(options.python or default_python(variant, cat.root, "verify"))
    lock = Path(options.lock) if options.lock else pins.lock_path(cat.root, variant, pins.machine_platform())
    # The report's paths are checked before the checks run: their results must have somewhere to go.
    path = Path(options.report) if options.report else report.default_path(
        cat.root, variant.stack.name, variant.name, profile.key if profile else "cpu", started)
    validate.writable_file(path, "--report")
    if options.markdown:
        validate.writable_file(Path(options.markdown), "--markdown")

    where = f"{profile.title} (sm {profile.arch})" if profile else "no GPU: static checks only"
    print(f"verlenv verify {variant.key} on {where}; env {python}", file=sys.stderr, flush=True)
    settings = runner.Settings.from_options(options, python=python, cat=cat, variant=variant, profile=profile,
                                            visible=visible, lock=lock.absolute(), families_rows=families,
                                            kernels_dir=Path(options.kernels_dir) if options.kernels_dir else None)
    run = runner.verify(settings, lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    data = report.build(run, command_line(options), started, launcher=launcher())
    written = [_write_or_fallback(path, report.json_text(data), "--report", started)]
    if options.markdown:
        written.append(_write_or_fallback(Path(options.markdown), report.markdown(data), "--markdown", started))
    report.print_table(data)
    print(f"report: {', '.join(map(str, written))}", file=sys.stderr)
    lost = written != [path, *([Path(options.markdown)] if options.markdown else [])]
    return 2 if lost else run.exit_code


def _verify_cluster(options: VerifyOptions, cat: stacks.Catalog, variant: stacks.Variant, families: list[dict],
                    started: datetime) -> int:
    """`verify --ray`: the flags that apply to many nodes, the address and the report path checked up front, then
    the cluster's run."""
    from verlenv.cluster import address, launch

    if options.kernels_dir:
        raise UserError("--kernels-dir: not with --ray (every node runs the packaged checks)")
    if options.markdown:
        raise UserError("--markdown: not with --ray (its report is the JSON and the tables)")
    where = address.parse(options.ray)
    runtime_env = _runtime_env(Path(options.runtime_env) if options.runtime_env else None)
    report = Path(options.report) if options.report else (
        cat.root / "reports" / f"verify-cluster-{variant.key}-{started:%Y%m%dT%H%M%SZ}.json")
    validate.writable_file(report, "--report")
    python = validate.python3(options.python or default_python(variant, cat.root, "verify"))
    lock = None if options.no_lock else (Path(options.lock) if options.lock else
                                         pins.lock_path(cat.root, variant, pins.machine_platform()))
    address.probe(where)
    return launch.verify_cluster(cat, variant, python, lock, options, families, runtime_env, report,
                                 ["verlenv", *sys.argv[1:]])


def _runtime_env(path: Path | None) -> dict:
    """--runtime-env FILE: the Ray runtime_env the job's workers get."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"--runtime-env {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"--runtime-env {path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"--runtime-env {path}: must be a JSON object (a Ray runtime_env, e.g. "
                        "{\"env_vars\": {...}})")
    return data


def _write_or_fallback(path: Path, text: str, option: str, started: datetime) -> Path:
    from verlenv.cluster.launch import write_or_fallback

    return write_or_fallback(path, text, option, started)
