"""`verlenv verify`: static checks of an env (also on CPU), GPU kernel checks, a JSON report; with --ray, every node
of a Ray cluster."""

import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv import catalog, gpus, pins, validate
from verlenv.commands import positive_int
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.install import default_python

GPU_CHOICES = "auto|" + "|".join(gpus.profiles())


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check an env against its lock and run GPU kernel checks; write a JSON report",
        description="Static checks (lock, pip check, apex, torch symbols of extensions, cubins, driver, libcuda) run "
        "everywhere; kernel checks run on a GPU matching the profile. Exit 0: every required check passed; "
        "1: a required check failed; 2: bad input, or a report written to the temp folder (printed) because its path failed.",
    )
    p.add_argument("--gpu", default="auto", metavar=GPU_CHOICES,
                   help="GPU profile; auto = the visible GPU, or the static checks only when there is none")
    p.add_argument("--force", action="store_true", help="use --gpu's profile even when that GPU is not the one present")
    p.add_argument("--stack", help="stack (default: the catalog's default)")
    p.add_argument("--variant", default="fsdp", help="fsdp or megatron")
    p.add_argument("--python", help="interpreter of the env to verify (default: the active env, else .venv-<stack>-<variant>)")
    lock = p.add_mutually_exclusive_group()
    lock.add_argument("--lock", type=Path, help="lock to compare with (default: locks/<stack>-<variant>.linux-64.txt)")
    lock.add_argument("--no-lock", action="store_true", help="skip the lock comparison (an env not installed from the lock)")
    p.add_argument("--skip-package", action="append", default=[], metavar="NAME",
                   help="record NAME's checks as skipped, e.g. a package this machine does not install (repeatable)")
    p.add_argument("--only", metavar="NAME", help="run only NAME's checks")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per kernel check script (default 150)")
    p.add_argument("--kernels-dir", type=Path, help="directory of kernel check scripts (default: the packaged ones)")
    p.add_argument("--report", type=Path,
                   help="JSON report path (default: reports/verify-<stack>-<variant>-<gpu>-<timestamp>.json)")
    p.add_argument("--markdown", type=Path, help="also write a markdown summary of the report here")
    proof = p.add_argument_group("verl's trainer")
    proof.add_argument("--thorough", action="store_true",
                       help="the production path: verl's and vLLM's defaults (CUDA graphs, torch.compile), every check "
                            "in turn (default: the fast proof, vLLM eager, checks side by side)")
    proof.add_argument("--rollout-tp", type=positive_int("--rollout-tp"), default=1, metavar="N",
                       help="tensor-parallel size of verl's vLLM rollout in the trainer check (default 1)")
    proof.add_argument("--actor-tp", type=positive_int("--actor-tp"), default=1, metavar="N",
                       help="tensor-parallel size of verl's Megatron actor in the trainer check (megatron variant; default 1)")
    ray = p.add_argument_group("many nodes")
    ray.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                     help="verify every alive node of a Ray cluster (auto, HOST:PORT or ray://...) and compare them")
    ray.add_argument("--node-timeout", type=float, default=1800.0,
                     help="seconds a node may take before it is reported as hung (default 1800)")
    ray.add_argument("--allreduce", choices=("nccl", "gloo", "off"), default="nccl",
                     help="the cross-node all-reduce: over every GPU (nccl), one rank per node on CPU (gloo), or none")
    ray.add_argument("--runtime-env", type=Path, metavar="FILE",
                     help="JSON file of the Ray runtime_env the job's workers get (e.g. verl's env_vars): checks run under it")
    ray.add_argument("--skip-cluster-trainer", action="store_true",
                     help="leave out the last step: verl's own trainer run once across every GPU node")
    p.set_defaults(func=handle)


def _package(name: str, valid: list[str], option: str) -> str:
    canon = canonicalize_name(name)
    if canon not in valid:
        raise UserError(f"{option} {name}: unknown package; valid: {', '.join(valid)}")
    return canon


def launcher() -> str:
    """Who started this run: the noxfile sets VERLENV_LAUNCHER=nox for the verlenv it runs."""
    return "nox" if os.environ.get("VERLENV_LAUNCHER") == "nox" else "verlenv"


def command_line(args) -> list[str]:
    """The command as given (options at their non-default values), for the report."""
    cmd = ["verlenv", "verify", "--gpu", args.gpu]
    for flag, value in (("--stack", args.stack), ("--variant", args.variant), ("--python", args.python),
                        ("--lock", args.lock), ("--only", args.only), ("--kernels-dir", args.kernels_dir),
                        ("--report", args.report), ("--markdown", args.markdown)):
        if value is not None:
            cmd += [flag, str(value)]
    for name in args.skip_package:
        cmd += ["--skip-package", name]
    cmd += ["--force"] * args.force + ["--no-lock"] * args.no_lock + ["--thorough"] * args.thorough
    for flag, value in (("--rollout-tp", args.rollout_tp), ("--actor-tp", args.actor_tp)):
        if value != 1:
            cmd += [flag, str(value)]
    if args.timeout != 150.0:
        cmd += ["--timeout", f"{args.timeout:g}"]
    return cmd


def handle(args) -> int:
    from verlenv.verify import report, runner

    started = datetime.now(timezone.utc)
    if args.gpu != "auto":
        gpus.profile(args.gpu)  # unknown names fail before anything runs
    cat = catalog.load()
    variant = cat.variant(args.stack, args.variant)
    kernels_dir = args.kernels_dir or runner.KERNELS_DIR
    if args.kernels_dir and not args.kernels_dir.is_dir():
        raise UserError(f"--kernels-dir {args.kernels_dir}: no such directory")
    valid = runner.known_packages(kernels_dir)
    skipped = frozenset(_package(n, valid, "--skip-package") for n in args.skip_package)
    only = _package(args.only, valid, "--only") if args.only else None
    if args.lock and not args.lock.is_file():
        raise UserError(f"--lock {args.lock}: no such file")
    if args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    if args.actor_tp != 1 and variant.name != "megatron":
        raise UserError(f"--actor-tp {args.actor_tp}: only the Megatron actor is tensor-parallel (--variant megatron); "
                        f"verl's FSDP actor is not")
    if args.ray is not None:  # each node checks its own GPUs and env; this machine only drives
        python = validate.python3(args.python or default_python(variant, cat.root, "verify"))
        lock = None if args.no_lock else args.lock or pins.lock_path(cat.root, variant, pins.machine_platform())
        return _verify_cluster(args, cat, variant, python, lock)
    visible = gpus.gpu_details()
    profile = gpus.select_profile(args.gpu, visible, args.force)
    python = validate.python3(args.python or default_python(variant, cat.root, "verify"))
    lock = args.lock or pins.lock_path(cat.root, variant, pins.machine_platform())
    # The report's paths are checked before the checks run: their results must have somewhere to go.
    path = args.report or report.default_path(cat.root, variant.stack.name, variant.name,
                                              profile.key if profile else "cpu", started)
    validate.writable_file(path, "--report")
    if args.markdown:
        validate.writable_file(args.markdown, "--markdown")

    where = f"{profile.title} (sm {profile.arch})" if profile else "no GPU: static checks only"
    print(f"verlenv verify {variant.key} on {where}; env {python}", file=sys.stderr, flush=True)
    settings = runner.Settings(python=python, catalog=cat, variant=variant, profile=profile, gpus=visible,
                               lock=None if args.no_lock else lock.absolute(), no_lock=args.no_lock, skipped=skipped,
                               only=only, kernels_dir=kernels_dir, timeout=args.timeout, forced=args.force,
                               thorough=args.thorough, rollout_tp=args.rollout_tp, actor_tp=args.actor_tp)
    run = runner.verify(settings, lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    data = report.build(run, command_line(args), started, launcher=launcher())
    written = [_write_or_fallback(path, report.json_text(data), "--report", started)]
    if args.markdown:
        written.append(_write_or_fallback(args.markdown, report.markdown(data), "--markdown", started))
    report.print_table(data)
    print(f"report: {', '.join(map(str, written))}", file=sys.stderr)
    lost = written != [path, *([args.markdown] if args.markdown else [])]
    return 2 if lost else run.exit_code


def _verify_cluster(args, cat: catalog.Catalog, variant: catalog.Variant, python: str, lock: Path | None) -> int:
    """`verify --ray`: the flags that apply to many nodes, checked, then the cluster's run."""
    from verlenv.cluster import launch

    if args.node_timeout <= 0:
        raise UserError(f"--node-timeout {args.node_timeout:g}: must be a positive number of seconds")
    if args.kernels_dir:
        raise UserError("--kernels-dir: not with --ray (every node runs the packaged checks)")
    if args.markdown:
        raise UserError("--markdown: not with --ray (its report is the JSON and the tables)")
    return launch.verify_cluster(cat, variant, python, lock, address=args.ray, gpu=args.gpu, force=args.force,
                                 skipped=args.skip_package, only=args.only, timeout=args.timeout,
                                 node_timeout=args.node_timeout, allreduce=args.allreduce,
                                 runtime_env=_runtime_env(args.runtime_env), report=args.report,
                                 command=["verlenv", *sys.argv[1:]], skip_cluster_trainer=args.skip_cluster_trainer,
                                 thorough=args.thorough, rollout_tp=args.rollout_tp, actor_tp=args.actor_tp)


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
        raise UserError(f"--runtime-env {path}: must be a JSON object (a Ray runtime_env, e.g. {{\"env_vars\": {{...}}}})")
    return data


def _write_or_fallback(path: Path, text: str, option: str, started: datetime) -> Path:
    """Write the report where asked; if that fails after all (disk full, a folder gone), write it to the temp
    folder and say where: a finished run's results are never lost."""
    try:
        write_atomic(path, text)
        return path
    except OSError as e:
        fallback = Path(tempfile.gettempdir()) / f"verlenv-{started.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}-{Path(path).name}"
        write_atomic(fallback, text)
        print(f"verlenv verify: {option} {path}: cannot write it ({e.strerror}); the report is at {fallback}",
              file=sys.stderr)
        return fallback
