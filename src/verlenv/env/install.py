"""Materialise a locked variant into an environment, exactly as locked, then prove nothing drifted.

`uv pip sync --require-hashes` installs the lock and nothing else: no resolution happens, every file
is checked against its pinned hash before the env is touched, and packages not in the lock are removed.
Before anything is touched the lock must be the one `verlenv lock` wrote; one installer works on a prefix at a
time; after the sync every file of every locked distribution is checked against its RECORD, and each
distribution that differs is installed again from its locked wheel, so a re-run repairs a torn env.
"""

import contextlib
import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verlenv import validate
from verlenv.catalog import pins, stacks
from verlenv.env import installed_files, runtime_env
from verlenv.errors import UserError
from verlenv.fsutil import is_atomic_temp_of, write_atomic
from verlenv.native.sources import sha256_file

MARKER = "verlenv-env.json"
# Present while verlenv makes a new env: a later install finding it knows the env was cut short and remakes it.
CREATING = ".verlenv-creating"
LOCK_NAME = ".verlenv-install.lock"
LOCK_SUFFIX = ".verlenv-install.lock"


def lock_path(root: Path, variant: stacks.Variant) -> Path:
    """The variant's lock for this machine's platform."""
    platform = pins.machine_platform()
    if platform not in variant.platforms:
        raise UserError(f"{variant.key} is not locked for {platform} (this machine); "
                        f"it is locked for: {', '.join(variant.platforms)}")
    have = machine_glibc()
    if have and _glibc_key(have) < _glibc_key(variant.glibc):
        raise UserError(f"{variant.key} needs glibc >= {variant.glibc} (its wheels are manylinux_"
                        f"{variant.glibc.replace('.', '_')}); this machine has glibc {have}: install it on a newer "
                        f"system (RHEL 9, Ubuntu 22.04 or later) or pick another variant")
    path = pins.lock_path(root, variant, platform)
    if not path.is_file():
        raise UserError(f"no lock for {variant.key} at {path}; run `nox -s lock` first")
    return path


def machine_glibc() -> str | None:
    """This machine's glibc version ("2.36"); None where there is none (musl) or it cannot be told."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (ValueError, OSError):
        return None
    return version if name == "glibc" and version else None


def _glibc_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python(version: str) -> str:
    """An interpreter of the stack's Python (pyenv shims that cannot run it are skipped)."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python{version}")),
                         reverse=True)
    candidates += [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    for c in filter(None, candidates):
        if _runs(c):
            return c
    raise UserError(f"no Python {version} found; install it (pyenv, conda, or your distro) or pass --python")


def env_python(prefix: Path) -> Path:
    return prefix / "bin" / "python"


def default_python(variant: stacks.Variant, root: Path, purpose: str) -> str:
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
    raise UserError(f"no env to {purpose}: activate one, pass --python, or create {venv.parent.parent} "
                    "(verlenv install)")


def installer_env() -> dict[str, str]:
    # Neither installer may fetch a Python build or read config files that could add indexes or constraints.
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1", "PIP_CONFIG_FILE": os.devnull}


def create_venv(prefix: Path, python: str, seed: bool = False) -> None:
    # --allow-existing: the folder already holds the CREATING mark (and maybe a cut-short attempt's files).
    cmd = ["uv", "venv", "--allow-existing", "--python", python, str(prefix)] + (["--seed"] if seed else [])
    r = subprocess.run(cmd, env=installer_env(), capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"cannot create a venv at {prefix} with {python}: {last.removeprefix('error: ')}")


def lock_file(prefix: Path, conda: bool) -> Path:
    hidden = prefix.name if prefix.name.startswith(".") else f".{prefix.name}"
    return prefix / LOCK_NAME if conda else prefix.parent / f"{hidden}{LOCK_SUFFIX}"


@contextlib.contextmanager
def prefix_lock(prefix: Path, conda: bool):
    """One installer per prefix: a second one waits, saying for whom. A venv's lock lies beside it (the venv
    itself may be removed and made again); a conda env, which verlenv never removes, holds its own."""
    path = lock_file(prefix, conda)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            print(f"verlenv install: {prefix} is being installed by {holder}; waiting for it to finish",
                  file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(f"verlenv install (pid {os.getpid()})\n")
        f.flush()
        yield


def refuse_unfresh_lock(root: Path, variant: stacks.Variant) -> None:
    """The lock must be what `verlenv lock` wrote from today's stacks.toml (`lock --check`'s test), else
    installing it would give an env nobody resolved."""
    from verlenv.lock import locks as lock_mod

    # lock_problems reads only the catalog's root from it.
    cat = stacks.Catalog(Path(root) / stacks.CATALOG_NAME, variant.stack.name, {variant.stack.name: variant.stack})
    problems = lock_mod.lock_problems(cat, variant, pins.machine_platform())
    if problems:
        raise UserError(f"refusing to install: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def locked_lines(pins_: dict, names: list[str]) -> str:
    """Requirement lines, with their hashes, of some of a lock's pins."""
    return "".join(f"{pins_[n].requirement} " + " ".join(f"--hash={h}" for h in pins_[n].hashes) + "\n" for n in names)


def _clean_uv_cache(names: list[str]) -> None:
    """uv hard-links installed files to its cache, so a file changed in place is changed there too: drop
    those packages from the cache (the reinstall then reads the locked wheels afresh)."""
    try:
        r = subprocess.run(["uv", "cache", "clean", *names], env=installer_env(), capture_output=True, text=True,
                           timeout=60)
        ok = r.returncode == 0
    except subprocess.TimeoutExpired:
        ok = False
    if not ok:
        print(f"  note: could not clean {', '.join(names)} from uv's cache; `uv cache clean {' '.join(names)}` does it",
              file=sys.stderr)


def repair(python: Path, lock: Path, installer: str, keep: list[str]) -> dict:
    """Check every locked distribution's files against its RECORD; reinstall each that differs from its
    locked, hash-checked file. Returns the figures of the check."""
    locked = pins.read_lock(lock)
    scan = installed_files.check(str(python), sorted(locked), record=True)  # verify then hashes only what changed
    damaged = {name: why for name, entry in scan["dists"].items() if (why := installed_files.damaged(entry))}
    print(f"checked {len(scan['dists'])} locked distributions, {scan['files']} files "
          f"({scan['bytes'] / 1e9:.2f} GB) against their RECORDs in {scan['seconds']:.1f} s"
          + (f": {len(damaged)} differ" if damaged else ": all as installed"), file=sys.stderr)
    if not damaged:
        return {**scan, "repaired": []}
    for name, why in sorted(damaged.items()):
        print(f"  {name}: {why}; reinstalling it from the lock", file=sys.stderr)
    if installer == "uv":
        _clean_uv_cache(sorted(damaged))
    sync(python, lock, installer, keep, reinstall=sorted(damaged), pins_=locked)
    again = installed_files.check(str(python), sorted(damaged), record=True)
    still = {name: why for name, entry in again["dists"].items() if (why := installed_files.damaged(entry))}
    if still:
        name, why = next(iter(sorted(still.items())))
        raise UserError(f"{name} still differs from its RECORD after reinstalling it ({why}); "
                        f"remove {python.parent.parent} and install again", exit_code=1)
    print(f"repaired {', '.join(sorted(damaged))}", file=sys.stderr)
    return {**scan, "repaired": sorted(damaged)}


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


def kept_source_builds(python: Path, variant: stacks.Variant) -> list[str]:
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


def sync(python: Path, lock: Path, installer: str = "uv", keep: list[str] = (), reinstall: list[str] = (),
         pins_: dict | None = None) -> None:
    """Install exactly the lock (plus `keep` lines) into the env of `python`; `reinstall`: distributions to
    install again from their locked files even though they are installed.

    uv compiles the bytecode at install time, as pip does by default: otherwise every process verl spawns on a
    fresh node (Ray workers, vLLM's server and EngineCore) compiles vllm/torch/transformers on import first
    (`import vllm, verl, transformers, ray`: 12.5 s without bytecode, 5.4 s with it, on a 2-core machine)."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = lock
        if keep:
            requirements = Path(tmp) / lock.name
            requirements.write_text(lock.read_text() + "\n" + "\n".join(keep) + "\n")
        if installer == "uv":
            cmd = ["uv", "pip", "sync", "--python", str(python), "--require-hashes", "--strict", "--compile-bytecode",
                   str(requirements)]
            # The cache may hold the damaged files themselves (hard links): reinstall from the wheels, not from it.
            cmd += ([arg for name in reinstall for arg in ("--reinstall-package", name)]
                    + (["--no-cache"] if reinstall else []))
        elif reinstall:
            # pip reinstalls only what it is given: the damaged distributions' locked lines, hashes included.
            requirements = Path(tmp) / "reinstall.txt"
            requirements.write_text(locked_lines(pins_ or pins.read_lock(lock), reinstall))
            cmd = [str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-input",
                   "--force-reinstall", "--disable-pip-version-check", "-r", str(requirements)]
        else:
            # The same lock through plain pip: --no-deps keeps pip from resolving anything itself.
            cmd = [str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "--no-input",
                   "--disable-pip-version-check", "-r", str(requirements)]
        r = subprocess.run(cmd, env=installer_env())
    if r.returncode != 0:
        raise UserError(f"installing {lock.name} failed (exit {r.returncode}); nothing was marked installed",
                        exit_code=1)


def install(root: Path, variant: stacks.Variant, prefix: Path | None, conda: bool, python: str | None,
            installer: str = "uv") -> Path:
    # Every input is checked before anything is touched.
    lock = lock_path(root, variant)
    refuse_unfresh_lock(root, variant)
    if conda:
        if not os.environ.get("CONDA_PREFIX"):
            raise UserError("--conda given but no conda env is active; `conda activate` one or drop --conda")
        prefix = Path(os.environ["CONDA_PREFIX"])
        if not env_python(prefix).exists():
            raise UserError(f"CONDA_PREFIX={prefix}: no conda env there (no bin/python); `conda activate` an env or "
                            "drop --conda")
    else:
        prefix = validate.new_or_dir(prefix or root / f".venv-{variant.key}", "--prefix").absolute()
        python = validate.python(python, variant.stack.python) if python else None
        # Judged again under the lock: another install may be making this env right now (a folder with its
        # first files and no bin/python yet). Without a lock file beside it, none is, and nothing is created.
        if not_an_env(prefix) and not lock_file(prefix, conda).exists():
            raise UserError(not_an_env_message(prefix))
    with prefix_lock(prefix, conda):
        if not conda and not_an_env(prefix):
            raise UserError(not_an_env_message(prefix))
        if not conda:
            remove_discarded(prefix)
        return _install_locked(root, variant, lock, prefix, conda, python, installer)


def discard(prefix: Path) -> None:
    """Remove a half-made env: renamed aside first (atomic), so a kill mid-removal leaves no folder at the prefix
    that has lost its creating mark but kept other files (which the next install would have to refuse)."""
    aside = prefix.parent / f".{prefix.name}.discarded-{os.getpid()}"
    shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(prefix, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def remove_discarded(prefix: Path) -> None:
    """What a kill left mid-removal beside the prefix; only under the prefix lock (no other install is removing)."""
    for left in prefix.parent.glob(f".{prefix.name}.discarded-*"):
        shutil.rmtree(left, ignore_errors=True)


def not_an_env(prefix: Path) -> bool:
    return prefix.is_dir() and not env_python(prefix).exists() and any(prefix.iterdir()) and not half_made(prefix)


def half_made(prefix: Path) -> bool:
    """An env an install was cut short while making: it holds the creating mark, or only the mark's temp file (killed
    between making the folder and renaming the mark in, write_atomic)."""
    if (prefix / CREATING).exists():
        return True
    names = [p.name for p in prefix.iterdir()] if prefix.is_dir() else []
    return bool(names) and all(is_atomic_temp_of(n, CREATING) for n in names)


def not_an_env_message(prefix: Path) -> str:
    return (f"--prefix {prefix}: a folder that is neither empty nor an env (no bin/python); "
            f"give a new or empty folder, or an existing env")


def _install_locked(root: Path, variant: stacks.Variant, lock: Path, prefix: Path, conda: bool, python: str | None,
                    installer: str) -> Path:
    creating = prefix / CREATING
    created = not conda and (creating.exists() or not env_python(prefix).exists())
    if created:
        if half_made(prefix):
            print(f"{prefix}: an earlier install was cut short while making it; making it again", file=sys.stderr)
            discard(prefix)
        base_python = python or find_python(variant.stack.python)
        prefix.mkdir(parents=True, exist_ok=True)
        write_atomic(creating, "verlenv install is making this env; until it finishes, the next install remakes it\n")
    (prefix / MARKER).unlink(missing_ok=True)
    started = time.monotonic()
    try:
        if created:
            create_venv(prefix, base_python, seed=installer == "pip")
        keep = [] if created else kept_source_builds(env_python(prefix), variant)
        sync(env_python(prefix), lock, installer, keep=keep)
        files = repair(env_python(prefix), lock, installer, keep)
    except BaseException:
        if created:
            discard(prefix)  # a half-made env must not look usable
        raise
    seconds = time.monotonic() - started
    runtime_env.apply(env_python(prefix), root / "stacks.toml", variant)
    write_atomic(prefix / MARKER, json.dumps({"stack": variant.stack.name, "variant": variant.name,
                                              "lock": str(lock.relative_to(root)), "installer": installer,
                                              "install_seconds": round(seconds, 1),
                                              "files_check": {"distributions": len(files["dists"]),
                                                              "files": files["files"], "bytes": files["bytes"],
                                                              "seconds": files["seconds"],
                                                              "repaired": files["repaired"]}}, indent=2) + "\n")
    creating.unlink(missing_ok=True)
    print(f"installed {lock.name} into {prefix} with {installer} in {seconds:.1f} s", file=sys.stderr)
    return prefix
