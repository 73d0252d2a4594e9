"""Make a bundle: the lock's files for one platform, sdist-only pins built into wheels, the source-built
wheels from the wheel cache, the wheels `install --bundle` itself runs on, the lock and a manifest; and, for nodes
that build a source-built package themselves, its verified source and a CUDA_HOME (build_inputs.py).

Layout: manifest.json, each variant's lock, wheels/ (what the envs get), tool/ (uv, verlenv's runtime deps and nox),
sources/ and toolkit/ (a build's inputs, when asked for), kernel-cache/ (when asked for).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from verlenv import __version__, cubins, fsutil
from verlenv.bundle import build_inputs as inputs, fetch, kernel_cache as kcache
from verlenv.catalog import stacks
from verlenv.catalog.pins import LockedPin, read_lock
from verlenv.env import base_record
from verlenv.env.install import find_python
from verlenv.errors import UserError
from verlenv.native import wheelcache
from verlenv.native.sources import sha256_file

MANIFEST = "manifest.json"
# 2: one bundle may hold several variants of a stack (`variants`; each file names the variants it serves).
FORMAT = 2
# What `python -m verlenv install --bundle` and `verify` import beyond the standard library (rich for
# verify's table), uv, which installs, and nox with what it imports, so the nox sessions run on a node that
# reaches no index (README: Air-gapped cluster).
TOOL_DISTS = ("uv", "packaging", "pyyaml", "pyelftools", "rich", "markdown-it-py", "mdurl", "pygments",
              "nox", "argcomplete", "attrs", "colorlog", "dependency-groups", "humanize", "platformdirs",
              "python-discovery", "virtualenv", "distlib", "filelock")


@dataclass(frozen=True)
class Built:
    """A source-built wheel chosen from the wheel cache."""

    name: str
    wheel: Path
    sha256: str
    fingerprint: str
    inputs: dict


def read_freeze(path: Path) -> dict[str, str]:
    """{canonical name: version} of a `pip freeze` / `uv pip freeze` (URL and editable lines are skipped)."""
    out = {}
    for lineno, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-") or " @ " in line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise UserError(f"{path}:{lineno}: {raw.strip()!r} is not a 'name==version' freeze line")
        out[canonicalize_name(name.strip())] = version.strip()
    return out


def subtract_base(pins: dict[str, LockedPin],
                  base: dict[str, str]) -> tuple[list[LockedPin], list[LockedPin], list[str]]:
    """(pins to bundle, pins the base has at the same version, notes on same-named pins it has otherwise).

    A local version is a different build (torch 2.11.0+cu130 from the PyTorch index is not PyPI's 2.11.0),
    so it is never taken as equal: the lock's file is bundled and the difference reported.
    """
    keep, dropped, notes = [], [], []
    for pin in pins.values():
        have = base.get(pin.name)
        if have is None:
            keep.append(pin)
            continue
        try:
            same = Version(have) == Version(pin.version)
        except InvalidVersion:
            same = have == pin.version
        if same:
            dropped.append(pin)
        else:
            keep.append(pin)
            notes.append(f"{pin.name}: base has {have}, the lock pins {pin.version}; bundled")
    return keep, dropped, notes


def tool_pins() -> list[LockedPin]:
    """The tool wheels at the versions this verlenv runs with (any hash: PyPI's digest is checked)."""
    out = []
    for name in TOOL_DISTS:
        try:
            out.append(LockedPin(canonicalize_name(name), metadata.version(name), hashes=()))
        except metadata.PackageNotFoundError:
            raise UserError(f"{name} is not installed next to verlenv; reinstall verlenv "
                            "(`pip install -e .`)") from None
    return out


def resolve_tools(platform: str, python: str, glibc: str, tests: bool = False) -> list[fetch.RemoteFile]:
    """The tool wheels for the target; with `tests`, also what `nox -s tests` imports (suite_pins)."""
    wanted = fetch.target_tags(platform, python, glibc)
    hashed = suite_pins(platform, python, glibc) if tests else {}
    out = fetch.resolve(list(hashed.values()), platform, python, glibc)
    for pin in tool_pins():
        if pin.name in hashed:
            continue
        files = fetch.release_files(pin)
        out.append(fetch.choose(LockedPin(pin.name, pin.version, tuple(f"sha256:{f.sha256}" for f in files)),
                                files, wanted))
    return out


def source_tree() -> Path:
    """The source tree this verlenv runs from (pyproject.toml beside src/), which holds the tests."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file() or not (root / "tests").is_dir():
        raise UserError(f"--tests needs verlenv's source tree (pyproject.toml and tests/ in {root}); run verlenv "
                        "from a checkout (`pip install -e .`)")
    return root


def suite_pins(platform: str, python: str, glibc: str) -> dict[str, LockedPin]:
    """verlenv's own dependencies and pyproject.toml's `test` group, resolved by uv for the target with hashes; the
    tool wheels held at the versions this verlenv runs with, so the node's tools stay the ones that made the bundle.
    With them a node that reaches no index runs the suite, e.g. its GPU tests (`nox -s tests -- -m gpu`). `platform`
    is one fetch.target_tags accepted (resolve_tools asks it first)."""
    from verlenv.lock import locks

    with tempfile.TemporaryDirectory() as tmp:
        held = Path(tmp) / "tools.txt"
        held.write_text("".join(f"{p.name}=={p.version}\n" for p in tool_pins()))
        out = Path(tmp) / "tests.txt"
        pyproject = source_tree() / "pyproject.toml"
        cmd = [locks.uv_bin(), "pip", "compile", str(pyproject), "--group", f"{pyproject}:test",
               "--constraint", str(held), "--python-version", python,
               "--python-platform", locks.uv_platform(platform, glibc), "--generate-hashes",
               "--no-header", "--no-annotate", "--quiet", "--no-config", "--default-index", locks.INDEX, "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=locks.uv_env())
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"--tests: uv could not resolve the test tools for {platform}, Python {python}: {tail}",
                            exit_code=1)
        return read_lock(out)


def find_built(wheelhouse: Path, name: str, version: str | None, torch: str, cuda: str, python_tag: str,
               archs: list[str] | None, commit: str | None = None) -> Built | None:
    """The cached build of `name` for this torch/CUDA/Python covering `archs` with the fewest extra ones
    (archs None: the one covering most archs). A git pin (apex) has no version to match: its commit is matched
    against the source the build recorded instead."""
    best = None
    for entry_file in sorted((wheelhouse / name).glob(f"*/{wheelcache.ENTRY_FILE}")):
        record = json.loads(entry_file.read_text())
        inputs = record.get("inputs", {})
        try:
            same_torch = Version(inputs.get("torch", "")).public == Version(torch).public
        except InvalidVersion:
            continue
        if commit is not None and not str(inputs.get("source", "")).startswith(f"git:{commit}:"):
            continue
        if not ((version is None or inputs.get("version") == version) and same_torch
                and inputs.get("python_tag") == python_tag and str(inputs.get("cuda", "")).startswith(cuda)):
            continue
        have = set(inputs.get("archs", []))
        if archs is not None and have and not set(archs) <= have:
            continue
        score = len(have - set(archs)) if archs is not None else -len(have)  # no archs asked: the widest
        if best is None or score < best[0]:
            best = (score, entry_file.parent, record)
    if best is None:
        return None
    entry = wheelcache.lookup(wheelhouse, name, best[1].name)  # re-hashes the wheel
    return Built(name, entry.wheel, entry.record["wheel_sha256"], entry.record["fingerprint"], entry.record["inputs"])


def _torch_version(lock: Path) -> str:
    torch = read_lock(lock).get("torch")
    if torch is None:
        raise UserError(f"{lock.name} pins no torch; source-built wheels need one (use --no-built)")
    return torch.version


def built_wheels(variant: stacks.Variant, lock: Path, wheelhouse: Path, archs: list[str],
                 only: list[str] | None = None, devices: list[str] | None = None) -> list[Built]:
    """The variant's source-built wheels (those named in `only`, else all) from the wheel cache; one line naming
    the build for a missing one, or for one with no cubin that runs on one of `devices` (the target GPUs' compute
    capabilities, by the arch-family rules)."""
    torch = _torch_version(lock)
    tag = "cp" + variant.stack.python.replace(".", "")
    out = []
    for build in variant.source_builds:
        if only is not None and build.name not in only:
            continue
        commit = build.url.rpartition("@")[2] if build.url else None
        hit = find_built(wheelhouse, build.name, build.version, torch, variant.stack.cuda, tag, archs, commit=commit)
        if hit is None:
            raise UserError(f"no cached {build.name} {build.version or commit} wheel for torch {torch}, "
                            f"CUDA {variant.stack.cuda}, {tag}, archs {';'.join(archs)} in {wheelhouse}; make it with "
                            f"`verlenv build {build.name} --stack {variant.stack.name} --variant {variant.name} "
                            f"--archs '{';'.join(archs)}' --wheelhouse {wheelhouse}`, or pass --no-built")
        if devices:
            check_runs_on(hit, devices)
        out.append(hit)
    return out


def check_runs_on(built: Built, devices: list[str]) -> None:
    """Every CUDA object of the wheel holds a cubin that runs on each device (compute capability); else one line."""
    with tempfile.TemporaryDirectory() as tmp:
        missing = cubins.missing_archs(cubins.wheel_shared_objects(built.wheel, Path(tmp)), devices)
        if missing:
            so, sms = next(iter(missing.items()))
            raise UserError(f"{built.wheel.name} ({built.fingerprint}): {Path(so).name} has no cubin that runs on "
                            f"sm_{', sm_'.join(map(str, sms))}; rebuild it for that GPU (verlenv build "
                            f"{built.name} --gpu NAME) or leave it out (--without {built.name})")


def build_sdist(f: fetch.RemoteFile, sdist: Path, python: str) -> Path:
    """A wheel built once from a verified sdist and cached by the sdist's sha256; pure-Python only."""
    folder = fsutil.cache_dir() / "built" / f.sha256
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if wheels:
        return wheels[0]
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        src = Path(tmp) / f.filename
        shutil.copyfile(sdist, src)
        if python.replace(".", "").isdigit():
            python = find_python(python)  # a version: a runnable interpreter of it (pyenv shims may not run)
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}
        r = subprocess.run(["uv", "build", "--wheel", "--python", python, "--out-dir", str(Path(tmp) / "out"),
                            str(src)], env=env, capture_output=True, text=True)
        built = sorted((Path(tmp) / "out").glob("*.whl"))
        if r.returncode != 0 or len(built) != 1:
            raise UserError(f"building a wheel from {f.filename} failed (exit {r.returncode}): "
                            f"{(r.stderr.strip().splitlines() or ['no output'])[-1]}", exit_code=1)
        wheel_tags = parse_wheel_filename(built[0].name)[3]
        if not all(t.abi == "none" and t.platform == "any" for t in wheel_tags):
            raise UserError(f"{f.filename} builds a platform wheel ({built[0].name}); it must be built on the target",
                            exit_code=1)
        (Path(tmp) / "out").rename(folder)
    return sorted(folder.glob("*.whl"))[0]


def _entry(path: Path, origin: str, name: str, version: str, sha256: str, variants: list[str], **extra) -> dict:
    return {"file": path, "sha256": sha256, "size": path.stat().st_size, "distribution": name, "version": version,
            "origin": origin, "variants": list(variants), **extra}


def _place(src: Path, dest: Path) -> None:
    """Hard-link (or copy) `src` to `dest` atomically."""
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def dry_run(remote: list[fetch.RemoteFile], tools: list[fetch.RemoteFile], base: list[LockedPin],
            built: list[Built] = ()) -> int:
    """Every file with its size and state (cached, fetch, or built: a source-built wheel of the wheel cache)."""
    rows = [(f.name, f.version, f.filename, f.size, "cached" if fetch.cached(f.sha256) else "fetch")
            for f in [*remote, *tools]]
    rows += [(b.name, b.inputs.get("version", "?"), f"{b.wheel.name} ({b.fingerprint}, archs "
              f"{';'.join(b.inputs.get('archs', [])) or 'none'})", b.wheel.stat().st_size, "built") for b in built]
    for name, version, filename, size, state in rows:
        print(f"{size / 1024**2:10.1f} MiB  {state:6}  {name}=={version}  {filename}")
    fetch_bytes = sum(r[3] for r in rows if r[4] == "fetch")
    print(f"{len(rows)} files, {sum(r[3] for r in rows) / 1024**2:.1f} MiB in all; "
          f"{fetch_bytes / 1024**2:.1f} MiB to fetch; {len(base)} pins left to the base")
    return 0


def _union(locks: dict[str, Path]) -> tuple[list[LockedPin], dict[tuple[str, str], list[str]]]:
    """Every pin of every variant's lock once, and which variants pin each (name, version)."""
    pins: dict[tuple[str, str], LockedPin] = {}
    users: dict[tuple[str, str], list[str]] = {}
    for variant, lock in locks.items():
        for pin in read_lock(lock).values():
            key = (pin.name, pin.version)
            if key in pins and set(pins[key].hashes) != set(pin.hashes):
                raise UserError(f"{pin.name}=={pin.version} has other hashes in {lock.name} than in another variant's "
                                f"lock; relock the stack (`verlenv lock`)")
            pins.setdefault(key, pin)
            users.setdefault(key, []).append(variant)
    return list(pins.values()), users


@dataclass(frozen=True)
class Options:
    """What a bundle is asked to carry: one or several variants' locks for one platform, and the extras."""

    locks: dict[str, Path]  # variant: its lock
    out: Path
    platform: str
    python: str
    glibc: str = fetch.GLIBC
    stack: str = ""
    built: dict[str, list[Built]] = field(default_factory=dict)  # variant: its source-built wheels
    built_note: dict[str, str] = field(default_factory=dict)  # variant: why they are or are not carried
    base: Path | None = None  # a `pip freeze` of the target: what it has is left out
    tools: bool = True
    build_python: str | None = None  # builds the sdist-only pins (default: python)
    command: str = ""
    kernel_cache: Path | None = None
    sources: tuple[inputs.Wanted, ...] = ()  # source builds whose verified source is carried (sources/)
    toolkit: Path | None = None  # a CUDA_HOME carried as a tar
    tests: bool = False  # the test tools too (suite_pins), unpacked with the other tools by the bootstrap


@dataclass(frozen=True)
class Plan:
    """What a bundle carries and why, resolved before anything is fetched or written."""

    options: Options
    remote: list[fetch.RemoteFile]  # the locks' pins this platform takes (sdist-only ones are built into wheels)
    tools: list[fetch.RemoteFile]  # what `install --bundle` runs on (and, with tests, what the suite imports)
    dropped: list[LockedPin]  # pins the base has at the locked version: left to it
    notes: list[str]  # same-named pins the base has at another version
    users: dict[tuple[str, str], list[str]]  # (name, version): the variants that pin it
    base_others: dict[str, str] = field(default_factory=dict)  # the base's distributions no lock pins


def make(options: Options, dry: bool = False) -> dict | None:
    """Write the bundle of one or several variants' locks into `options.out` (published by one rename); the
    manifest, or None for a dry run, which prints the plan. A file several variants share is carried once; each
    entry names the variants it serves."""
    started = time.monotonic()
    bundle = plan(options)
    if dry:
        print_plan(bundle)
        return None
    return write(bundle, started)


def plan(options: Options) -> Plan:
    """The files to carry: each lock's pins less the base's, resolved for the platform, and the tools."""
    union, users = _union(options.locks)
    base_versions = read_freeze(options.base) if options.base else {}
    keep, dropped, notes = subtract_base({f"{p.name}=={p.version}": p for p in union}, base_versions)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    remote = fetch.resolve(keep, options.platform, options.python, options.glibc)
    tool_files = resolve_tools(options.platform, options.python, options.glibc, options.tests) if options.tools else []
    others = base_record.others_of(base_versions, {canonicalize_name(p.name) for p in union})
    return Plan(options, remote, tool_files, dropped, notes, users, others)


def print_plan(bundle: Plan) -> None:
    """The dry run: every file with its size and whether it is cached, then the extras."""
    o = bundle.options
    for v, lock in sorted(o.locks.items()):
        print(f"{v or 'variant'}: lock {lock.name}; source-built wheels {o.built_note.get(v, 'included')}")
    dry_run(bundle.remote, bundle.tools, bundle.dropped, [b for b, _ in _built_once(o).values()])
    if o.kernel_cache:
        found = kcache.files(o.kernel_cache)
        print(f"kernel cache {o.kernel_cache}: {len(found)} files, "
              f"{sum(f.stat().st_size for f in found) / 1024**2:.1f} MiB")
    for w in o.sources:
        print(f"build input: {w.recipe.package} {w.version} ({w.recipe.source.describe(w.version)})")
    if o.toolkit:
        major_minor, release = inputs.check_toolkit(o.toolkit)
        print(f"toolkit {o.toolkit}: nvcc {release or major_minor}")


def write(bundle: Plan, started: float) -> dict:
    """Fetch and place every planned file in a temporary folder beside the target, then publish it by rename."""
    o = bundle.options
    out = o.out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        # A build's inputs first: a source that fails its check stops the bundle before the lock's downloads.
        files, toolkit_note = _carry_build_inputs(o, tmp)
        have = fetch.fetch_all([*bundle.remote, *bundle.tools])
        files += _carry_lock_files(bundle, have, tmp)
        files += _carry_built(o, tmp)
        files += _carry_tools(bundle, have, tmp)
        kernel_files, kernel_note = _carry_kernel_cache(o, tmp)
        files += kernel_files
        files += [{"file": None, "sha256": None, "size": 0, "distribution": pin.name, "version": pin.version,
                   "origin": "base", "variants": bundle.users[(pin.name, pin.version)]} for pin in bundle.dropped]
        for e in files:
            if e["file"]:
                e["file"] = str(e["file"].relative_to(tmp))
        manifest = _manifest(bundle, tmp, files, toolkit_note, kernel_note, started)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(e["size"] for e in files)
    print(f"bundle {out}: {', '.join(sorted(o.locks))}: {sum(1 for e in files if e['file'])} files, "
          f"{size / 1024**2:.1f} MiB, {len(bundle.dropped)} left to the base, in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return manifest


def _carry_build_inputs(o: Options, tmp: Path) -> tuple[list[dict], dict | None]:
    """(entries, the toolkit's note) of the verified sources and the CUDA_HOME a node's build needs."""
    files = []
    for w, path in inputs.carry_sources(list(o.sources), tmp / inputs.SOURCES_DIR, fsutil.cache_dir()):
        files.append(_entry(path, inputs.SOURCE, w.recipe.package, w.version, sha256_file(path), list(w.variants),
                            kind=w.recipe.source.kind, source=w.recipe.source.source_id(w.version)))
    if not o.toolkit:
        return files, None
    note = inputs.pack_toolkit(o.toolkit, tmp / inputs.TOOLKIT_FILE)
    files.append(_entry(tmp / inputs.TOOLKIT_FILE, inputs.TOOLKIT, None, note["nvcc"],
                        sha256_file(tmp / inputs.TOOLKIT_FILE), sorted(o.locks)))
    return files, note


def _carry_lock_files(bundle: Plan, have: dict[str, Path], tmp: Path) -> list[dict]:
    """The locks' files into wheels/; an sdist-only pin as the wheel built from it."""
    files = []
    (tmp / "wheels").mkdir()
    for f in bundle.remote:
        serves = bundle.users[(f.name, f.version)]
        if f.kind == "sdist":
            wheel = build_sdist(f, have[f.sha256], bundle.options.build_python or bundle.options.python)
            _place(wheel, tmp / "wheels" / wheel.name)
            files.append(_entry(tmp / "wheels" / wheel.name, "lock", f.name, f.version, sha256_file(wheel), serves,
                                built_from={"file": f.filename, "sha256": f.sha256}))
        else:
            _place(have[f.sha256], tmp / "wheels" / f.filename)
            files.append(_entry(tmp / "wheels" / f.filename, "lock", f.name, f.version, f.sha256, serves))
    return files


def _built_once(o: Options) -> dict[str, tuple[Built, list[str]]]:
    """Each source-built wheel once, by its sha256, with the variants it serves (a flash-attn wheel serves several)."""
    once: dict[str, tuple[Built, list[str]]] = {}
    for v in sorted(o.locks):
        for b in o.built.get(v, []):
            once.setdefault(b.sha256, (b, []))[1].append(v)
    return once


def _carry_built(o: Options, tmp: Path) -> list[dict]:
    """The source-built wheels into wheels/, one entry per wheel naming every variant it serves."""
    placed = []
    for b, variants in _built_once(o).values():
        _place(b.wheel, tmp / "wheels" / b.wheel.name)
        placed.append(_entry(tmp / "wheels" / b.wheel.name, "built", b.name, str(parse_wheel_filename(b.wheel.name)[1]),
                             b.sha256, variants, fingerprint=b.fingerprint, inputs=b.inputs))
    return placed


def _carry_tools(bundle: Plan, have: dict[str, Path], tmp: Path) -> list[dict]:
    (tmp / "tool").mkdir()
    every = sorted(bundle.options.locks)
    for f in bundle.tools:
        _place(have[f.sha256], tmp / "tool" / f.filename)
    return [_entry(tmp / "tool" / f.filename, "tool", f.name, f.version, f.sha256, every) for f in bundle.tools]


def _carry_kernel_cache(o: Options, tmp: Path) -> tuple[list[dict], dict | None]:
    if not o.kernel_cache:
        return [], None
    count = kcache.pack(o.kernel_cache, tmp / kcache.FILE)
    entry = _entry(tmp / kcache.FILE, kcache.ORIGIN, None, None, sha256_file(tmp / kcache.FILE), sorted(o.locks))
    return [entry], {"source": str(Path(o.kernel_cache).absolute()), "files": count}


def _manifest(bundle: Plan, tmp: Path, files: list[dict], toolkit_note: dict | None, kernel_note: dict | None,
              started: float) -> dict:
    """The manifest; each variant's lock is copied beside it."""
    o = bundle.options
    variants = {}
    for v, lock in o.locks.items():
        shutil.copyfile(lock, tmp / lock.name)
        variants[v] = {"lock": {"file": lock.name, "sha256": sha256_file(lock)},
                       "built": o.built_note.get(v, "included"),
                       "sources": sorted(w.recipe.package for w in o.sources if v in w.variants)}
    needs = [g for f in [*bundle.remote, *bundle.tools] if (g := fetch.needs_glibc(f.filename))]
    return {
        "format": FORMAT, "stack": o.stack, "platform": o.platform, "python": o.python,
        "glibc": {"allowed": o.glibc, "needs": max(needs, key=fetch.glibc_minor, default=None)},
        "variants": variants,
        "kernel_cache": kernel_note, "toolkit": toolkit_note, "tests": bool(o.tools and o.tests),
        "base": {"freeze_sha256": sha256_file(o.base) if o.base else None, "notes": bundle.notes,
                 "others": bundle.base_others},
        "made": {"by": f"verlenv {__version__}", "command": o.command,
                 "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "seconds": round(time.monotonic() - started, 1)},
        "files": files,
    }


def _publish(tmp: Path, out: Path) -> None:
    """Replace `out` by the finished folder `tmp` (a rename on one filesystem), then drop the old one."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
