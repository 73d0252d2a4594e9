"""Locks: one exact, hash-pinned pip set per variant (`uv pip compile`, date-capped), the conda files
rendered from them, and conda-lock where conda channels are reachable.

`verlenv lock --check` proves offline that the committed files are fresh: each lock was written by
`verlenv lock` from the inputs stacks.toml gives now (recorded in `locks/<key>.inputs.json`, and
`locks/<key>.<platform>.inputs.json` for a platform other than linux-64), every platform's lock of a
variant pins the versions of its linux-64 lock (the env files' one pip list serves all platforms), the
environment files are what `verlenv render` writes, and a conda-lock.yml's content hash matches them, its
conda records are the vendored conda-forge snapshot's and satisfy each other, and its pip entries are the uv
locks' pins (conda_layer.py). Where no conda channel answers, `verlenv lock` solves the conda layer against
that snapshot instead of running conda-lock.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.fsutil import read_text, write_atomic
from verlenv.lock import conda_layer, render

INDEX = "https://pypi.org/simple"
COMPILE_COMMAND = "nox -s lock"
CONDA_PROBE_URL = "https://conda.anaconda.org/conda-forge/linux-64/repodata.json"
CONDA_LOCK_FILE = render.CONDA_LOCK_FILE
EXIT_STALE = 1
EXIT_NO_CONDA = 3
# Transport settings only: any other UV_* (indexes, constraints, date caps) would change the resolution.
UV_ENV_KEEP = {"UV_CACHE_DIR", "UV_NO_CACHE", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_HTTP_RETRIES",
               "UV_CONCURRENT_DOWNLOADS", "UV_PYTHON_DOWNLOADS"}


def inputs_path(root: Path, variant: stacks.Variant, platform: str = pins.LOCK_PLATFORM) -> Path:
    # linux-64 keeps the name it had when it was the only platform.
    suffix = "" if platform == pins.LOCK_PLATFORM else f".{platform}"
    return Path(root) / pins.LOCK_DIR / f"{variant.key}{suffix}.inputs.json"


def base_of(variant: stacks.Variant) -> stacks.Variant | None:
    return variant.stack.variants[variant.extends] if variant.extends else None


def resolver_requirements(variant: stacks.Variant) -> list[str]:
    """The variant's pins plus its source builds, so their dependencies come from real metadata.
    Source builds no index serves (a git URL, this project's own build) stay out: uv would clone and build them,
    or find none."""
    return [*variant.requirements, *(str(b.requirement) for b in variant.source_builds if b.indexed)]


def resolver_overrides(variant: stacks.Variant) -> list[str]:
    """The variant's overrides, plus one per requirement it does not take: a source build's own pin
    replaces the published one, anything else gets a marker that is never true (dropped)."""
    dropped = []
    for name in sorted(variant.not_taken):
        build = variant.source_build(name)
        dropped.append(str(build.requirement) if build and build.indexed else f"{name} ; sys_platform == 'never'")
    return [*variant.overrides, *dropped]


def uv_platform(platform: str, glibc: str) -> str:
    """uv's --python-platform for a conda platform name on a glibc: <machine>-manylinux_<glibc>."""
    return f"{pins.MACHINES[platform]}-manylinux_{glibc.replace('.', '_')}"


def python_platform(variant: stacks.Variant, platform: str) -> str:
    """uv's --python-platform for a variant's lock: the platform's machine on the variant's glibc (manylinux_2_28
    unless stacks.toml names a newer one, as for a package that publishes manylinux_2_34 wheels only)."""
    return uv_platform(platform, variant.glibc)


def uv_flags(variant: stacks.Variant, platform: str = pins.LOCK_PLATFORM) -> list[str]:
    stack = variant.stack
    flags = ["--python-version", stack.python, "--python-platform", python_platform(variant, platform),
             "--generate-hashes", "--exclude-newer", stack.exclude_newer]
    for name, date in sorted(stack.exclude_newer_package.items()):
        flags += ["--exclude-newer-package", f"{name}={date}"]
    for build in sorted(b.name for b in variant.source_builds if b.indexed):
        flags += ["--no-emit-package", build]
    return flags + ["--no-config", "--default-index", INDEX, "--custom-compile-command", COMPILE_COMMAND]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lock_inputs(variant: stacks.Variant, base_lock_text: str | None, platform: str = pins.LOCK_PLATFORM) -> dict:
    """Everything the resolution depends on besides PyPI itself; its digest goes into the sidecar."""
    inputs: dict = {"requirements": resolver_requirements(variant), "uv_flags": uv_flags(variant, platform)}
    if overrides := resolver_overrides(variant):
        # Only when present, so the records of variants without overrides keep their digests.
        inputs["overrides"] = overrides
    if base := base_of(variant):
        # Resolved against the base's pins, so one conda-lock.yml can hold both as categories.
        inputs["constraints"] = {"lock": f"{pins.LOCK_DIR}/{pins.lock_path(Path(), base, platform).name}",
                                 "sha256": _sha256(base_lock_text or "")}
    return inputs


def inputs_digest(inputs: dict) -> str:
    return _sha256(json.dumps(inputs, sort_keys=True))


def uv_bin() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise UserError("uv not found; install it (`pip install uv`)") from None
        return found


def uv_version(uv: str) -> str:
    """The resolver as a lock's inputs record names it, e.g. "uv 0.13.9": the build triple `uv --version` prints
    after it would differ between machines for the same lock."""
    return " ".join(subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout.split()[:2])


def uv_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in UV_ENV_KEEP}


def resolve(variant: stacks.Variant, platform: str, workdir: Path, uv: str,
            base_pins: dict[str, pins.LockedPin] | None) -> str:
    """Run `uv pip compile` for one variant and platform in workdir; return the lock's text."""
    key = variant.key
    # A folder per variant and platform: the input names below stay the same (uv writes them into the lock), and
    # resolutions side by side never share a file.
    workdir = workdir / key / platform
    workdir.mkdir(parents=True)
    # Relative names: uv writes them into the `# via -r ...` annotations, so the lock stays path-free.
    (workdir / f"{key}.in").write_text("\n".join(resolver_requirements(variant)) + "\n")
    out = f"{key}.{platform}.txt"
    cmd = [uv, "pip", "compile", f"{key}.in", "-o", out, "--quiet", *uv_flags(variant, platform)]
    if base_pins is not None:
        base = base_of(variant)
        constraints = f"{base.key}.pins.txt"
        (workdir / constraints).write_text("".join(f"{p.requirement}\n" for _, p in sorted(base_pins.items())))
        cmd += ["--constraints", constraints]
    if overrides := resolver_overrides(variant):
        (workdir / f"{key}.overrides.txt").write_text("".join(f"{o}\n" for o in overrides))
        cmd += ["--overrides", f"{key}.overrides.txt"]
    # linux-64 keeps the messages it had when it was the only platform.
    shown = key if platform == pins.LOCK_PLATFORM else f"{key} for {platform}"
    started = time.monotonic()
    # uv's messages are taken whole and printed at once: resolutions run side by side (relock).
    result = subprocess.run(cmd, cwd=workdir, env=uv_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, check=False)
    seconds = time.monotonic() - started
    if result.stderr:
        print(result.stderr, end="" if result.stderr.endswith("\n") else "\n", file=sys.stderr)
    if result.returncode != 0:
        raise UserError(f"uv could not resolve {shown} (exit {result.returncode}, see above); no lock was written",
                        exit_code=1)
    text = (workdir / out).read_text()
    print(f"resolved {shown}: {len(pins.parse_lock(text, out))} pins in {seconds:.1f} s", file=sys.stderr)
    return text


def version_differences(reference: dict[str, pins.LockedPin], other: dict[str, pins.LockedPin]) -> list[str]:
    """Packages whose pins differ between two locks of one variant ("name a vs b", "name only in one")."""
    diffs = []
    for name in sorted(set(reference) | set(other)):
        if name not in other or name not in reference:
            diffs.append(f"{name} only in {'the linux-64' if name in reference else 'this'} lock")
        elif reference[name].version != other[name].version:
            diffs.append(f"{name} {reference[name].version} vs {other[name].version}")
    return diffs


def platform_problems(cat: stacks.Catalog, variant: stacks.Variant) -> list[str]:
    """Each platform's lock must pin what the linux-64 lock pins: the env files list those pins for all."""
    reference = pins.lock_path(cat.root, variant)
    problems = []
    for platform in variant.platforms:
        path = pins.lock_path(cat.root, variant, platform)
        if platform == pins.LOCK_PLATFORM or not path.is_file() or not reference.is_file():
            continue
        try:
            diffs = version_differences(pins.read_lock(reference), pins.read_lock(path))
        except UserError:
            continue  # lock_problems reports a lock that does not parse
        if diffs:
            problems.append(f"{_rel(cat, path)}: pins other versions than {reference.name} ({'; '.join(diffs[:5])}"
                            f"{f'; {len(diffs) - 5} more' if len(diffs) > 5 else ''}); one pip list in the env files "
                            f"cannot serve both: change stacks.toml's pins or drop {platform} from the variant's "
                            "platforms")
    return problems


def lock_problems(cat: stacks.Catalog, variant: stacks.Variant, platform: str = pins.LOCK_PLATFORM) -> list[str]:
    """Why the committed lock of a variant for a platform is not what `verlenv lock` would write now (offline)."""
    lock, side = pins.lock_path(cat.root, variant, platform), inputs_path(cat.root, variant, platform)
    rel, fix = _rel(cat, lock), f"run `verlenv lock --stack {variant.stack.name} --variant {variant.name}`"
    if not lock.is_file():
        return [f"{rel}: missing; {fix}"]
    try:
        text = read_text(lock)
    except UserError as e:
        return [f"{e}; {fix}"]
    problems = []
    try:
        pins.parse_lock(text, rel)
    except UserError as e:
        problems.append(str(e))
    if not side.exists():
        return problems + [f"{_rel(cat, side)}: missing (it records the lock's inputs); {fix}"]
    try:
        record = json.loads(read_text(side))
    except UserError as e:
        return problems + [f"{e}; {fix}"]
    except json.JSONDecodeError as e:
        return problems + [f"{_rel(cat, side)}: not valid JSON ({e}); {fix}"]
    if not isinstance(record, dict):
        return problems + [f"{_rel(cat, side)}: not an inputs record; {fix}"]
    if record.get("lock_sha256") != _sha256(text):
        problems.append(f"{rel}: edited after `verlenv lock` wrote it (sha256 differs from {side.name}); {fix}")
    base = base_of(variant)
    base_lock = pins.lock_path(cat.root, base, platform) if base else None
    base_text = base_lock.read_text() if base_lock and base_lock.is_file() else None
    expected = lock_inputs(variant, base_text, platform)
    if record.get("inputs_sha256") != inputs_digest(expected):
        recorded = record.get("inputs") if isinstance(record.get("inputs"), dict) else {}
        problems.append(f"{rel}: stale, {_what_changed(recorded, expected)}; {fix}")
    return problems


def _what_changed(old: dict, new: dict) -> str:
    old_reqs, new_reqs = old.get("requirements", []), new["requirements"]
    added = [r for r in new_reqs if r not in old_reqs]
    removed = [r for r in old_reqs if r not in new_reqs]
    if added or removed:
        return ("stacks.toml's requirements changed ("
                + ", ".join([*(f"+{r}" for r in added), *(f"-{r}" for r in removed)]) + ")")
    if old.get("uv_flags") != new["uv_flags"]:
        return f"its resolver flags changed (now: {' '.join(new['uv_flags'])})"
    if old.get("constraints") != new.get("constraints"):
        return f"it was resolved against another {new['constraints']['lock']} than the one committed"
    return "its recorded inputs do not match"


def _rel(cat: stacks.Catalog, path: Path) -> str:
    try:
        return str(path.relative_to(cat.root))
    except ValueError:
        return str(path)


def selected(cat: stacks.Catalog, stack: str | None, variant: str | None) -> list[stacks.Variant]:
    chosen = [cat.stack(stack)] if stack else list(cat.stacks.values())
    return [s.variant(variant) for s in chosen] if variant else [v for s in chosen for v in s.variants.values()]


def _plan(cat: stacks.Catalog, wanted: list[stacks.Variant]) -> list[stacks.Variant]:
    """Wanted variants, bases first; a base joins the run only when its committed lock is not fresh."""
    wanted = list(wanted)
    keys = {v.key for v in wanted}
    for v in list(wanted):
        base = base_of(v)
        if base and base.key not in keys and any(lock_problems(cat, base, p) for p in base.platforms):
            wanted.append(base)
            keys.add(base.key)
    return sorted(wanted, key=lambda v: (v.stack.name, _depth(v)))


def _depth(variant: stacks.Variant) -> int:
    base = base_of(variant)
    return 0 if base is None else 1 + _depth(base)


def relock(cat: stacks.Catalog, wanted: list[stacks.Variant]) -> list[stacks.Variant]:
    """Resolve every planned variant for each of its platforms, then (only if all succeeded and every
    platform pins the linux-64 versions) replace the committed locks."""
    plan = _plan(cat, wanted)
    uv = uv_bin()
    resolver = uv_version(uv)
    texts: dict[tuple[str, str], str] = {}

    def base_text(v: stacks.Variant, platform: str) -> str | None:
        base = base_of(v)
        return ((texts.get((base.key, platform)) or pins.lock_path(cat.root, base, platform).read_text())
                if base else None)

    def one(v: stacks.Variant, platform: str) -> str:
        base = base_text(v, platform)
        return resolve(v, platform, Path(tmp), uv, pins.parse_lock(base, v.extends) if base else None)

    # A resolution mostly waits on the index (uv below 1 % CPU): every variant of one depth, each platform, at once;
    # a variant after the base it is constrained by. The first failure in plan order is the one raised.
    with tempfile.TemporaryDirectory(prefix="verlenv-lock-") as tmp:
        for depth in sorted({_depth(v) for v in plan}):
            level = [(v, platform) for v in plan if _depth(v) == depth for platform in v.platforms]
            with ThreadPoolExecutor(max_workers=len(level)) as pool:
                futures = [pool.submit(one, v, platform) for v, platform in level]
            for (v, platform), future in zip(level, futures):
                texts[v.key, platform] = future.result()
    for v in plan:
        reference = pins.parse_lock(texts[v.key, pins.LOCK_PLATFORM])
        for platform in v.platforms:
            if diffs := version_differences(reference, pins.parse_lock(texts[v.key, platform])):
                raise UserError(f"{v.key} resolves to other versions for {platform} than for {pins.LOCK_PLATFORM} "
                                f"({'; '.join(diffs[:5])}); no lock was written", exit_code=1)
    for v in plan:
        for platform in v.platforms:
            write_lock(cat.root, v, platform, texts[v.key, platform], base_text(v, platform), resolver)
    return plan


def write_lock(root: Path, variant: stacks.Variant, platform: str, text: str, base_text: str | None,
               resolver: str) -> None:
    """The lock and the record of its inputs, which `lock --check` and `install` test it against."""
    inputs = lock_inputs(variant, base_text, platform)
    # linux-64's record keeps the fields it had when it was the only platform.
    named = {} if platform == pins.LOCK_PLATFORM else {"platform": platform}
    record = {"variant": variant.key, **named, "resolver": resolver, "inputs": inputs,
              "inputs_sha256": inputs_digest(inputs), "lock_sha256": _sha256(text)}
    write_atomic(pins.lock_path(root, variant, platform), text)
    write_atomic(inputs_path(root, variant, platform), json.dumps(record, indent=2) + "\n")


def env_problems(cat: stacks.Catalog, chosen: list[stacks.Stack]) -> list[str]:
    """Committed environment files against what render produces now: pins first, then the whole text."""
    try:
        want = render.rendered(cat)
    except UserError as e:
        return [f"cannot render the environment files: {e}"]
    names = {s.name for s in chosen}
    problems = []
    for rel, text in want.items():
        owner = rel.parts[1] if rel.parts[0] == "environments" else cat.default
        if owner not in names:
            continue
        path = cat.root / rel
        if not path.is_file():
            problems.append(f"{rel}: missing; run `verlenv render`")
            continue
        have = path.read_text(errors="replace")
        if have == text:
            continue
        pin_diff = _pin_diff(_pip_list(have), _pip_list(text))
        if pin_diff:
            problems.append(f"{rel}: its pip pins differ from the locks ({pin_diff}); run `verlenv render`")
        else:
            problems.append(f"{rel}: differs from what `verlenv render` writes; run `verlenv render`")
    return problems


def _pip_list(text: str) -> list[str]:
    import yaml  # here, not at the top: `verlenv verify`/`install` import this module and run without pyyaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        return []
    for dep in doc.get("dependencies", []) if isinstance(doc, dict) else []:
        if isinstance(dep, dict) and isinstance(dep.get("pip"), list):
            return [str(p) for p in dep["pip"]]
    return []


def _pin_diff(have: list[str], want: list[str]) -> str:
    extra = [p for p in have if p not in want]
    missing = [p for p in want if p not in have]
    parts = [*(f"not in lock: {p}" for p in extra[:3]), *(f"lock has: {p}" for p in missing[:3])]
    more = len(extra) + len(missing) - len(parts)
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


def conda_dirs(cat: stacks.Catalog, stack: stacks.Stack) -> list[Path]:
    """Folders holding one stack's environment files (and its conda-lock files), relative to the root."""
    return [render.stack_dir(stack)] + ([Path(".")] if stack.name == cat.default else [])


def env_files(group: render.Group) -> list[str]:
    """The env files one conda-lock file is made from: its base variant's first (conda-lock's main category)."""
    return group.env_files


def conda_lock_problems(cat: stacks.Catalog, chosen: list[stacks.Stack]) -> list[str]:
    """For each committed conda-lock file: it parses, and its content hash matches its group's env files."""
    problems = []
    for stack in chosen:
        for folder in conda_dirs(cat, stack):
            for group in render.groups(stack):
                lockfile = cat.root / folder / group.lock_file
                if lockfile.is_file():
                    sources = [cat.root / folder / name for name in env_files(group)]
                    problems += conda_lock_file_problems(
                        lockfile, sources, stack.cuda, _rel(cat, lockfile),
                        lambda locked, shown, g=group: conda_layer.lockfile_problems(cat.root, g, locked, shown))
    return problems


def conda_lock_file_problems(lockfile: Path, sources: list[Path], cuda: str, shown: str, contents=None) -> list[str]:
    """It parses, its content hash matches the env files, and (contents) what it holds passes the given check."""
    import yaml
    from conda_lock.content_hash import backwards_compatible_content_hashes
    from conda_lock.lockfile import parse_conda_lock_file

    try:
        locked = parse_conda_lock_file(lockfile)
    # pydantic's ValidationError and conda-lock's version errors are ValueErrors; a non-mapping is a
    # Type/AttributeError.
    except (yaml.YAMLError, ValueError, TypeError, AttributeError) as e:
        return [f"{shown}: not a conda-lock file ({type(e).__name__}: {str(e).splitlines()[0]})"]
    spec = conda_layer.lock_spec(sources)
    # The same virtual packages `verlenv lock` passes to conda-lock (--with-cuda) and to rattler.
    packages = conda_layer.virtual_package_repo(cuda)
    problems = []
    for platform in spec.platforms:
        have = locked.metadata.content_hash.get(platform)
        if have not in backwards_compatible_content_hashes(spec, packages, platform):
            problems.append(f"{shown}: its {platform} content hash does not match "
                            f"{', '.join(s.name for s in sources)}; run `verlenv lock --conda-only`")
    if contents is not None and not problems:
        problems += contents(locked, shown)
    return problems


def check(cat: stacks.Catalog, stack: str | None = None, variant: str | None = None) -> list[str]:
    variants = selected(cat, stack, variant)
    chosen = list({v.stack.name: v.stack for v in variants}.values())
    problems = [p for v in variants for platform in v.platforms for p in lock_problems(cat, v, platform)]
    problems += [p for v in variants for p in platform_problems(cat, v)]
    # A lock cannot be checked against a broken snapshot: its problems alone are reported then.
    snapshot = conda_layer.snapshot_problems(cat.root)
    return problems + env_problems(cat, chosen) + (snapshot or conda_lock_problems(cat, chosen))


def conda_unreachable(url: str = CONDA_PROBE_URL, timeout: float = 5.0) -> str | None:
    """None when the conda-forge channel answers, else why not."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # the server answered; a status code is not a network failure
    except (urllib.error.URLError, OSError) as e:
        return str(getattr(e, "reason", e))
    return None


def _conda_exe() -> list[str]:
    for name in ("micromamba", "mamba", "conda"):
        if found := shutil.which(name):
            return ["--conda", found]
    return []


def conda_lock(cat: stacks.Catalog, stack: stacks.Stack) -> None:
    """Run conda-lock for each group of one stack's env files; a lockfile is replaced only when it succeeds."""
    for folder in conda_dirs(cat, stack):
        where = cat.root / folder
        for group in render.groups(stack):
            tmp = where / f".{group.lock_file}.tmp"
            final = where / group.lock_file
            files = [arg for name in env_files(group) for arg in ("-f", name)]
            platforms = [arg for platform in group.platforms for arg in ("-p", platform)]
            cmd = [sys.executable, "-m", "conda_lock", "lock", *files, *platforms,
                   "--lockfile", tmp.name, "--with-cuda", stack.cuda, *_conda_exe()]
            result = subprocess.run(cmd, cwd=where, check=False)
            if result.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise UserError(f"conda-lock failed for {_rel(cat, where)} (exit {result.returncode}, see above)",
                                exit_code=1)
            os.replace(tmp, final)
            print(f"wrote {_rel(cat, final)}", file=sys.stderr)


def conda_lock_offline(cat: stacks.Catalog, stack: stacks.Stack) -> None:
    """The conda-lock files from the vendored snapshot: the default stack's at the top, the others' beside their env
    files; one per group (conda-lock.yml, conda-lock.<base>.yml)."""
    folder = Path(".") if stack.name == cat.default else render.stack_dir(stack)
    for group in render.groups(stack):
        started = time.monotonic()
        path = conda_layer.write(cat.root, group, folder, [cat.root / folder / name for name in env_files(group)])
        print(f"wrote {_rel(cat, path)} in {time.monotonic() - started:.1f} s", file=sys.stderr)
