"""Materialise a locked variant into an environment, exactly as locked, then prove nothing drifted.

`uv pip sync --require-hashes` installs the lock and nothing else: no resolution happens, every file
is checked against its pinned hash before the env is touched, and packages not in the lock are removed.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verlenv import catalog, pins, runtime_env
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.sources import sha256_file

MARKER = "verlenv-env.json"


def lock_path(root: Path, variant: catalog.Variant) -> Path:
    """The variant's lock for this machine's platform."""
    platform = pins.machine_platform()
    if platform not in variant.platforms:
        raise UserError(f"{variant.key} is not locked for {platform} (this machine); "
                        f"it is locked for: {', '.join(variant.platforms)}")
    path = pins.lock_path(root, variant, platform)
    if not path.is_file():
        raise UserError(f"no lock for {variant.key} at {path}; run `nox -s lock` first")
    return path


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python(version: str) -> str:
    """An interpreter of the stack's Python (pyenv shims that cannot run it are skipped)."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")), reverse=True)
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for c in filter(None, candidates):
        if _runs(c):
            return c
    raise UserError(f"no Python {version} found; install it (pyenv, conda, or your distro) or pass --python")


def env_python(prefix: Path) -> Path:
    return prefix / "bin" / "python"


def default_python(variant: catalog.Variant, root: Path, purpose: str) -> str:
    """The env a command works on: the active venv/conda env unless it is verlenv's own (e.g. a nox
    session's), else the variant's default venv."""
    own = os.path.realpath(sys.prefix)
    active = [p for p in (os.environ.get("VIRTUAL_ENV"), os.environ.get("CONDA_PREFIX")) if p]
    for prefix in active:
        if os.path.realpath(prefix) != own:
            return str(Path(prefix) / "bin" / "python")
    venv = root / f".venv-{variant.key}" / "bin" / "python"
    if venv.exists():
        return str(venv)
    if active:
        return str(Path(active[0]) / "bin" / "python")
    raise UserError(f"no env to {purpose}: activate one, pass --python, or create {venv.parent.parent} (verlenv install)")


def installer_env() -> dict[str, str]:
    # Neither installer may fetch a Python build or read config files that could add indexes or constraints.
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": os.devnull}


def create_venv(prefix: Path, python: str, seed: bool = False) -> None:
    cmd = ["uv", "venv", "--python", python, str(prefix)] + (["--seed"] if seed else [])
    subprocess.run(cmd, check=True, env=installer_env(), capture_output=True)


# Run in the env: for each named distribution installed from a local wheel file, that file's URL.
_LOCAL_WHEELS = r"""
import json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    try:
        text = metadata.distribution(name).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        continue
    url = json.loads(text).get("url", "") if text else ""
    if url.startswith("file://") and url.endswith(".whl"):
        out[name] = url
print(json.dumps(out))
"""


def kept_source_builds(python: Path, variant: catalog.Variant) -> list[str]:
    """Requirement lines for the variant's locally built wheels the env already has, so a sync keeps them.

    `uv pip sync` removes what the lock does not list; flash-attn, apex and TE's torch part are never in
    the lock (they are compiled against the env), so without these lines every install would drop them.
    """
    names = [b.name for b in variant.source_builds]
    out = subprocess.run([str(python), "-c", _LOCAL_WHEELS, *names], capture_output=True, text=True)
    if out.returncode != 0:
        return []
    lines = []
    for name, url in json.loads(out.stdout).items():
        wheel = Path(url.removeprefix("file://"))
        if wheel.is_file():
            lines.append(f"{name} @ {url} --hash=sha256:{sha256_file(wheel)}")
        else:
            print(f"note: {name} was installed from {wheel}, which is gone; `verlenv build {name}` reinstalls it",
                  file=sys.stderr)
    return lines


def sync(python: Path, lock: Path, installer: str = "uv", keep: list[str] = ()) -> None:
    """Install exactly the lock (plus `keep` lines) into the env of `python`."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = lock
        if keep:
            requirements = Path(tmp) / lock.name
            requirements.write_text(lock.read_text() + "\n" + "\n".join(keep) + "\n")
        if installer == "uv":
            cmd = ["uv", "pip", "sync", "--python", str(python), "--require-hashes", "--strict", str(requirements)]
        else:
            # The same lock through plain pip: --no-deps keeps pip from resolving anything itself.
            cmd = [str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-input",
                   "--disable-pip-version-check", "-r", str(requirements)]
        r = subprocess.run(cmd, env=installer_env())
    if r.returncode != 0:
        raise UserError(f"installing {lock.name} failed (exit {r.returncode}); nothing was marked installed", exit_code=1)


def install(root: Path, variant: catalog.Variant, prefix: Path | None, conda: bool, python: str | None,
            installer: str = "uv") -> Path:
    lock = lock_path(root, variant)
    if conda:
        if not os.environ.get("CONDA_PREFIX"):
            raise UserError("--conda given but no conda env is active; `conda activate` one or drop --conda")
        prefix, created = Path(os.environ["CONDA_PREFIX"]), False
    else:
        prefix = (prefix or root / f".venv-{variant.key}").absolute()
        created = not env_python(prefix).exists()
        if created:
            create_venv(prefix, python or find_python(variant.stack.python), seed=installer == "pip")
    (prefix / MARKER).unlink(missing_ok=True)
    started = time.monotonic()
    try:
        sync(env_python(prefix), lock, installer, keep=[] if created else kept_source_builds(env_python(prefix), variant))
    except BaseException:
        if created:
            shutil.rmtree(prefix, ignore_errors=True)  # a half-made env must not look usable
        raise
    seconds = time.monotonic() - started
    runtime_env.apply(env_python(prefix), root / "stacks.toml", variant)
    write_atomic(prefix / MARKER, json.dumps({"stack": variant.stack.name, "variant": variant.name,
                                              "lock": str(lock.relative_to(root)), "installer": installer,
                                              "install_seconds": round(seconds, 1)}, indent=2) + "\n")
    print(f"installed {lock.name} into {prefix} with {installer} in {seconds:.1f} s", file=sys.stderr)
    return prefix


def register(sub) -> None:
    p = sub.add_parser("install", help="install a locked variant into a venv or the active conda env, then check drift")
    p.add_argument("--stack", help="stack (default: the catalog's default)")
    p.add_argument("--variant", default="fsdp", help="fsdp or megatron")
    p.add_argument("--prefix", type=Path, help="venv to create or update (default: .venv-<stack>-<variant>)")
    p.add_argument("--conda", action="store_true", help="install into the active conda env instead of a venv")
    p.add_argument("--python", help="interpreter for a new venv (default: the stack's Python found on this machine)")
    p.add_argument("--installer", choices=("uv", "pip"), default="uv", help="uv (default) or plain pip, on the same lock")
    p.add_argument("--bundle", type=Path, metavar="DIR",
                   help="install offline from a `verlenv bundle` folder (or its parts); with --python alone, into that interpreter's env")
    p.set_defaults(func=_main)


def _main(args) -> int:
    if args.bundle:
        from verlenv.bundle.command import install_main

        return install_main(args)
    cat = catalog.load()
    variant = cat.variant(args.stack, args.variant)
    prefix = install(cat.root, variant, args.prefix, args.conda, args.python, args.installer)
    from verlenv.verify.runner import lock_drift

    results = lock_drift(str(env_python(prefix)), cat, variant, lock_path(cat.root, variant))
    for r in results:
        print(f"drift check {r.name}: {r.status}: {r.reason}", file=sys.stderr)
    failed = [r for r in results if r.status == "fail"]
    if failed:
        print(f"verlenv install: the env differs from {lock_path(cat.root, variant).name}", file=sys.stderr)
        return 1
    return 0
