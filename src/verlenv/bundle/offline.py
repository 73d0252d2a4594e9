"""`verlenv install --bundle DIR`: check every file of a bundle against its manifest and its lock, then
install it with no index at all (uv --offline --no-index --find-links). Nothing is installed unless the
whole bundle checks out."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verlenv.bundle import build_inputs, parts
from verlenv.bundle.make import FORMAT, MANIFEST
from verlenv.catalog.pins import read_lock
from verlenv.env import base_record, install as plain, installed_files
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.native.sources import sha256_file

_FOLDERS = ("wheels", "tool", "kernel-cache", build_inputs.SOURCES_DIR, Path(build_inputs.TOOLKIT_FILE).parent.name)

# Run in the target: {name: installed version or None} for the names given.
_VERSIONS = Path(__file__).with_name("env_programs") / "installed_versions.py"


def open_bundle(folder: Path) -> Path:
    """The bundle folder itself, or the one its parts hold (checked part by part, then extracted)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"no bundle at {folder}")
    if (folder / MANIFEST).is_file():
        return folder
    if parts.is_parts(folder):
        try:
            return parts.assemble(folder)
        except parts.PartsError as e:
            raise UserError(str(e), exit_code=1) from None
    raise UserError(f"{folder} is not a bundle: it has neither {MANIFEST} nor {parts.SUMS} with {parts.INDEX}")


def variant_of(manifest: dict, wanted: str | None) -> str:
    """The variant to install: the one asked for, or the bundle's only one; one line naming those it holds."""
    held = sorted(manifest["variants"])
    if wanted is None:
        if len(held) > 1:
            raise UserError(f"the bundle holds the variants {', '.join(held)}; choose one with --variant")
        return held[0]
    if wanted not in held:
        raise UserError(f"the bundle holds {manifest['stack']} {', '.join(held)}, not {wanted}")
    return wanted


def serves(entry: dict, variant: str) -> bool:
    return variant in entry["variants"]


def read_manifest(bundle: Path) -> dict:
    try:
        manifest = json.loads((bundle / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UserError(f"{bundle / MANIFEST}: unreadable ({e})", exit_code=1) from None
    if manifest.get("format") != FORMAT:
        raise UserError(f"{bundle / MANIFEST}: format {manifest.get('format')!r}, this verlenv reads {FORMAT}; "
                        f"make the bundle again with this checkout", exit_code=1)
    return manifest


def check(bundle: Path, variant: str | None = None, expected_lock: Path | None = None) -> dict:
    """The manifest, once every file matches it, the variant's files match its lock and cover it; else one line."""
    manifest = read_manifest(bundle)
    variant = variant_of(manifest, variant)
    locked = manifest["variants"][variant]["lock"]
    lock = bundle / locked["file"]
    if not lock.is_file() or sha256_file(lock) != locked["sha256"]:
        raise UserError(f"{lock}: missing or not the lock the manifest names (sha256 differs)", exit_code=1)
    if expected_lock is not None and sha256_file(expected_lock) != locked["sha256"]:
        raise UserError(f"the bundle was made from another lock than {expected_lock}; rebundle from this checkout",
                        exit_code=1)
    pins = read_lock(lock)
    listed = {e["file"] for e in manifest["files"] if e["file"]}
    present = {str(p.relative_to(bundle)) for d in _FOLDERS if (bundle / d).is_dir() for p in (bundle / d).iterdir()}
    if extra := sorted(present - listed):
        raise UserError(f"{bundle / extra[0]}: not in the manifest ({len(extra)} such files); the bundle was altered",
                        exit_code=1)
    covered = {}
    for e in manifest["files"]:
        name, version, origin = e["distribution"], e["version"], e["origin"]
        if e["file"]:
            build_inputs.check_file(bundle, e)
        if origin in ("lock", "base") and serves(e, variant):
            pin = pins.get(name)
            if pin is None or pin.version != version:
                raise UserError(f"{name}=={version} ({origin}) is not what {lock.name} pins", exit_code=1)
            # A wheel built from an sdist is checked through that sdist's hash; every other file directly.
            sha = e.get("built_from", {}).get("sha256") or e["sha256"]
            if origin == "lock" and f"sha256:{sha}" not in pin.hashes:
                raise UserError(f"{e['file']}: sha256 {sha} is not among {lock.name}'s hashes for {name}", exit_code=1)
            covered[name] = origin
    if missing := sorted(set(pins) - set(covered)):
        raise UserError(f"the bundle lacks {len(missing)} of the lock's pins ({', '.join(missing[:5])}); it is "
                        "incomplete", exit_code=1)
    return manifest


def check_glibc(python: str, manifest: dict) -> None:
    """The target's glibc runs every wheel of the bundle (it records the newest manylinux it took)."""
    needs = (manifest.get("glibc") or {}).get("needs")
    if not needs:
        return
    out = subprocess.run([python, "-c", "import os; print(os.confstr('CS_GNU_LIBC_VERSION'))"], capture_output=True,
                         text=True)
    have = out.stdout.split()[-1] if out.returncode == 0 and out.stdout.split() else "unknown"
    if have == "unknown" or tuple(map(int, have.split("."))) < tuple(map(int, needs.split("."))):
        raise UserError(f"the bundle's wheels need glibc >= {needs}, the target {python} has {have}; "
                        f"rebundle with --glibc {have}")


def check_base(python: str, manifest: dict, variant: str) -> None:
    """Every distribution the bundle leaves to the base is in the target at exactly the locked version."""
    base = {e["distribution"]: e["version"] for e in manifest["files"] if e["origin"] == "base" and serves(e, variant)}
    if not base:
        return
    out = subprocess.run([python, str(_VERSIONS), *base], capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"cannot read the installed versions of {python}: {out.stderr.strip()[-200:]}")
    found = json.loads(out.stdout)
    bad = [f"{n} {v} (found {found[n] or 'nothing'})" for n, v in base.items() if found[n] != v]
    if bad:
        raise UserError(f"the target {python} lacks {len(bad)} of the bundle's base distributions: "
                        f"{', '.join(bad[:3])}; install into the env the --base freeze came from")


def _prefix_of(python: str) -> Path:
    """The env prefix of an interpreter (sys.prefix, as the env's python says)."""
    out = subprocess.run([python, "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
    if out.returncode != 0:
        raise UserError(f"{python} did not start ({out.stderr.strip()[-200:]})", exit_code=1)
    return Path(out.stdout.strip())


def env_files(manifest: dict, variant: str) -> list[dict]:
    """The bundle's files the variant's env gets: its lock's wheels and its source-built ones."""
    return [e for e in manifest["files"] if e["file"] and e["origin"] in ("lock", "built") and serves(e, variant)]


def requirements(manifest: dict, variant: str) -> str:
    lines = [f"{e['distribution']}=={e['version']} --hash=sha256:{e['sha256']}" for e in env_files(manifest, variant)]
    return "\n".join(lines) + "\n"


def installer_command(python: str, reqs: Path, wheels: Path, exact: bool, system: bool) -> list[str]:
    # Exact (sync) removes what the bundle does not list; with a base, install adds and removes nothing else.
    verb = ["sync", "--strict"] if exact else ["install", "--no-deps"]
    # Bytecode is compiled here, once per node, not by the first import of every process (see install.sync).
    cmd = ["uv", "pip", *verb, "--python", python, "--offline", "--no-index", "--find-links", str(wheels),
           "--require-hashes", "--no-build", "--compile-bytecode", *([] if exact else ["-r"]), str(reqs)]
    return cmd + (["--break-system-packages"] if system else [])


def repair(python: str, manifest: dict, variant: str, install_cmd: list[str]) -> dict:
    """Every bundled distribution's installed files against its RECORD, as a plain install checks them; one that
    differs is installed again from the bundle's own wheels (not from uv's cache: it hard-links the same files)."""
    names = sorted({e["distribution"] for e in env_files(manifest, variant)})
    scan = installed_files.check(python, names, record=True)  # verify then hashes only what changed
    damaged = {name: why for name, entry in scan["dists"].items() if (why := installed_files.damaged(entry))}
    print(f"checked {len(scan['dists'])} distributions, {scan['files']} files against their RECORDs in "
          f"{scan['seconds']:.1f} s" + (f": {len(damaged)} differ" if damaged else ": all as installed"),
          file=sys.stderr)
    if damaged:
        for name, why in sorted(damaged.items()):
            print(f"  {name}: {why}; reinstalling it from the bundle", file=sys.stderr)
        cmd = [*install_cmd, "--no-cache", *(arg for name in sorted(damaged) for arg in ("--reinstall-package", name))]
        if subprocess.run(cmd, env=plain.installer_env()).returncode != 0:
            raise UserError(f"reinstalling {', '.join(sorted(damaged))} from the bundle failed", exit_code=1)
        again = installed_files.check(python, sorted(damaged), record=True)
        if still := {name: why for name, entry in again["dists"].items() if (why := installed_files.damaged(entry))}:
            name, why = next(iter(sorted(still.items())))
            raise UserError(f"{name} still differs from its RECORD after reinstalling it ({why}); "
                            f"remove the env and install the bundle again", exit_code=1)
    return {**scan, "repaired": sorted(damaged)}


def install(folder: Path, prefix: Path | None = None, conda: bool = False, python: str | None = None,
            into: str | None = None, expected_lock: Path | None = None, keep=None,
            variant: str | None = None) -> tuple[str, dict, Path]:
    """Install one variant of a bundle (the only one it holds, or `variant`): into `into` (an existing
    interpreter's env), the active conda env, or a venv at `prefix` (made from `python`). Returns (the env's
    python, the manifest, the variant's lock)."""
    bundle = open_bundle(folder)
    manifest = check(bundle, variant, expected_lock)
    variant = variant_of(manifest, variant)
    has_base = any(e["origin"] == "base" and serves(e, variant) for e in manifest["files"])
    created = False
    if into:
        target, env_prefix = into, None
    elif conda:
        if not os.environ.get("CONDA_PREFIX"):
            raise UserError("--conda given but no conda env is active; `conda activate` one or drop --conda")
        env_prefix = Path(os.environ["CONDA_PREFIX"])
        target = str(plain.env_python(env_prefix))
    else:
        env_prefix = prefix.absolute()
        if has_base and not plain.env_python(env_prefix).exists():
            raise UserError("the bundle leaves distributions to a base env; install into that env (--python PY or "
                            "--conda)")
        created = not plain.env_python(env_prefix).exists()
        if created:
            plain.create_venv(env_prefix, python or plain.find_python(manifest["python"]))
        target = str(plain.env_python(env_prefix))
    started = time.monotonic()
    try:
        check_glibc(target, manifest)
        check_base(target, manifest, variant)
        if env_prefix:
            (env_prefix / plain.MARKER).unlink(missing_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            reqs = Path(tmp) / "bundle-requirements.txt"
            reqs.write_text(requirements(manifest, variant) + "".join(f"{line}\n" for line in (keep or [])))
            cmd = installer_command(target, reqs, bundle / "wheels", exact=not has_base, system=bool(into))
            r = subprocess.run(cmd, env=plain.installer_env())
            if r.returncode != 0:
                raise UserError(f"installing the bundle failed (exit {r.returncode}); nothing was marked installed",
                                exit_code=1)
            files = repair(target, manifest, variant, cmd)
        if has_base:  # what the base env holds besides the lock, for the drift check and verify
            base_record.write(env_prefix or _prefix_of(target), manifest)
    except BaseException:
        if created:
            shutil.rmtree(env_prefix, ignore_errors=True)  # a half-made env must not look usable
        raise
    seconds = time.monotonic() - started
    if env_prefix:
        write_atomic(env_prefix / plain.MARKER, json.dumps({
            "stack": manifest["stack"], "variant": variant, "lock": manifest["variants"][variant]["lock"]["file"],
            "installer": "uv (bundle, offline)", "bundle": str(bundle.absolute()),
            "install_seconds": round(seconds, 1),
            "files_check": {"distributions": len(files["dists"]), "files": files["files"], "bytes": files["bytes"],
                            "seconds": files["seconds"], "repaired": files["repaired"]}}, indent=2) + "\n")
    print(f"installed the bundle {bundle} into {target} in {seconds:.1f} s, offline", file=sys.stderr)
    return target, manifest, bundle / manifest["variants"][variant]["lock"]["file"]
