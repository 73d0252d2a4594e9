"""conda-lock.yml without a conda channel: the env files' conda specs solved with rattler against the vendored
conda-forge snapshot (`locks/conda-forge`), the pip layer taken pin for pin from the uv locks, written through
conda-lock's own models with conda-lock's own content hash, so `conda-lock install` reads it as its own.

The virtual packages of the solve are conda-lock's defaults for the stack's CUDA (`__glibc` 2.28, `__linux`
5.10, `__cuda` = the stack's CUDA, `__unix`, `__archspec`): the same ones its content hash is computed over. The pip
entries are the wheels pip takes on the glibc the group's base variant is locked for (2.28 unless stacks.toml names
a newer one).
"""

import asyncio
import functools
import json
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.lock import render
from verlenv.lock.conda_snapshot import CHANNEL_URL, SNAPSHOT_DIR  # noqa: F401 -- SNAPSHOT_DIR is part of this API

# The index uv resolves against, through its JSON form (PEP 691): every file with its url and sha256.
SIMPLE_JSON = "https://pypi.org/simple/{name}/"


def lock_spec(sources: list[Path]):
    """conda-lock's own reading of the env files (an empty PyPI->conda name map keeps it offline)."""
    import logging

    from conda_lock.src_parser import make_lock_spec

    # The env files' `# [linux64]` selectors are deliberate: conda-lock's one warning per filtered line is noise here.
    logging.getLogger("conda_lock.src_parser.selectors").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="verlenv-mapping-") as tmp:
        mapping = Path(tmp) / "pypi-to-conda.json"
        mapping.write_text("{}")
        return make_lock_spec(src_files=sources, mapping_url=str(mapping))


def virtual_package_repo(cuda: str):
    from conda_lock.virtual_package import default_virtual_package_repodata

    return default_virtual_package_repodata(cuda_version=cuda)


def virtual_packages(cuda: str, platform: str) -> list:
    """conda-lock's default virtual packages for one platform, as rattler's generic virtual packages."""
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version

    found = []
    for package, subdirs in virtual_package_repo(cuda).packages_by_subdir.items():
        if platform in subdirs:
            # rattler needs a non-empty build string; conda's own virtual packages carry "0".
            found.append(GenericVirtualPackage(PackageName(package.name), Version(package.version),
                                               BuildString(package.build_string or "0")))
    return found


def conda_specs(spec, platform: str) -> list[str]:
    """The conda match specs of one platform ("python 3.12.*"), in the env files' order."""
    specs = []
    for dep in spec.dependencies.get(platform, []):
        if dep.manager == "conda":
            specs.append(" ".join(part for part in (dep.name, dep.version or "*", dep.build) if part))
    return specs


def snapshot_records(root: Path, platform: str) -> dict[str, dict]:
    """url -> record of the snapshot's subdirs for one platform (its own and noarch)."""
    records = {}
    for subdir in (platform, "noarch"):
        path = Path(root) / SNAPSHOT_DIR / subdir / "repodata.json"
        try:
            repodata = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"{path}: cannot read the conda-forge snapshot ({e}); run "
                            "`verlenv conda-snapshot`") from None
        for key in ("packages", "packages.conda"):
            for fn, record in repodata.get(key, {}).items():
                records[f"{CHANNEL_URL}{subdir}/{fn}"] = record
    return records


def solve(root: Path, specs: list[str], platform: str, cuda: str) -> list:
    """rattler's solve of specs against the snapshot; an unsatisfiable spec is one line naming it."""
    import rattler
    from rattler.exceptions import SolverError

    channel = rattler.Channel(CHANNEL_URL.rstrip("/").rsplit("/", 1)[1])
    sparse = [rattler.SparseRepoData(channel, subdir, Path(root) / SNAPSHOT_DIR / subdir / "repodata.json")
              for subdir in (platform, "noarch")]
    try:
        return asyncio.run(rattler.solve_with_sparse_repodata(
            specs, sparse, virtual_packages=virtual_packages(cuda, platform)))
    except SolverError as e:
        names = {r["name"] for r in snapshot_records(root, platform).values()}
        missing = [s.split()[0] for s in specs if s.split()[0] not in names]
        why = (f"no record of {', '.join(missing)} in {SNAPSHOT_DIR} for {platform}" if missing
               else " ".join(str(e).split()))
        raise UserError(f"cannot solve the conda layer for {platform}: {why}; add a public lock file that has it "
                        f"to {SNAPSHOT_DIR}/sources.toml and run `verlenv conda-snapshot`", exit_code=1) from None


def conda_entries(records: list, spec, platform: str) -> list:
    """conda-lock dependencies for solved records, with categories propagated by conda-lock itself."""
    from conda_lock.interfaces.vendored_conda import MatchSpec
    from conda_lock.lockfile import apply_categories
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency

    planned = {}
    for record in records:
        dependencies = {}
        for dep in record.depends:
            match = MatchSpec(dep)
            dependencies[match.name] = match.version.spec_str if match.version is not None else ""
        planned[record.name.normalized] = LockedDependency(
            name=record.name.normalized, version=str(record.version), manager="conda", platform=platform,
            dependencies=dependencies, url=record.url, hash=HashModel(md5=record.md5.hex(), sha256=record.sha256.hex()))
    requested = {d.name: d for d in spec.dependencies.get(platform, []) if d.manager == "conda"}
    # The mapping is read only to convert pip names, which conda entries do not need.
    apply_categories(requested=requested, planned=planned, mapping_url="")
    return list(planned.values())


def wheel_tags(platform: str, python: str = "3.12", glibc: str = stacks.DEFAULT_GLIBC) -> list[Tag]:
    """What pip on that CPython and glibc accepts for the platform, most preferred first."""
    arch, version = pins.MACHINES[platform], tuple(int(part) for part in python.split("."))
    interpreter = f"cp{version[0]}{version[1]}"
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms = []
    for minor in range(int(glibc.split(".")[1]), 4, -1):
        platforms.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_{arch}")
    return [*cpython_tags(version, platforms=platforms), *compatible_tags(version, interpreter, platforms)]


@functools.lru_cache(maxsize=None)  # a lock picks hundreds of pins' files for a few platforms: ~800 tags each
def _tag_rank(platform: str, python: str, glibc: str) -> dict[Tag, int]:
    return {tag: i for i, tag in enumerate(wheel_tags(platform, python, glibc))}


def pick_file(files: list[dict], pin: pins.LockedPin, platform: str, python: str = "3.12",
              glibc: str = stacks.DEFAULT_GLIBC) -> dict | None:
    """The file pip would install for a pin: the best-tagged wheel whose sha256 the lock lists, else its sdist."""
    allowed = {h.split(":", 1)[1] for h in pin.hashes if h.startswith("sha256:")}
    rank = _tag_rank(platform, python, glibc)
    best, best_rank, sdist = None, len(rank), None
    for f in files:
        if f.get("hashes", {}).get("sha256") not in allowed:
            continue
        if f["filename"].endswith(".whl"):
            tags = parse_wheel_filename(f["filename"])[3]
            score = min((rank[t] for t in tags if t in rank), default=len(rank))
            if score < best_rank:
                best, best_rank = f, score
        elif f["filename"].endswith((".tar.gz", ".zip")):
            sdist = f
    return best or sdist


@functools.lru_cache(maxsize=None)  # one process locks several stacks and platforms over the same projects
def pypi_files(name: str, attempts: int = 3) -> list[dict]:
    """Every file of a project on PyPI ({filename, url, hashes})."""
    request = urllib.request.Request(SIMPLE_JSON.format(name=name),
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)["files"]
        except (OSError, ValueError, KeyError) as e:  # URLError and HTTPError are OSErrors; a bad body, ValueError
            if attempt == attempts:
                raise UserError(f"PyPI's index did not answer for {name} ({e}); no conda-lock.yml was written",
                                exit_code=1) from None
            time.sleep(2 * attempt)  # a busy index (429, 503) answers after a pause


def pip_entries(lock: dict[str, pins.LockedPin], platform: str, category: str, python: str, fetch=pypi_files,
                glibc: str = stacks.DEFAULT_GLIBC) -> list:
    """One conda-lock pip dependency per pin: the url and sha256 of the file pip takes for the platform."""
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency

    with ThreadPoolExecutor(max_workers=16) as pool:
        files = dict(zip(lock, pool.map(fetch, lock), strict=True))
    entries = []
    for name, pin in sorted(lock.items()):
        chosen = pick_file(files[name], pin, platform, python, glibc)
        if chosen is None:
            raise UserError(f"{name}=={pin.version}: PyPI lists no file with a sha256 of its lock line for {platform}",
                            exit_code=1)
        entries.append(LockedDependency(name=name, version=pin.version, manager="pip", platform=platform,
                                        dependencies={}, url=chosen["url"],
                                        hash=HashModel(sha256=chosen["hashes"]["sha256"]), categories={category}))
    return entries


def category_locks(root: Path, group: render.Group, platform: str) -> dict[str, dict[str, pins.LockedPin]]:
    """category -> the pins it adds on a platform: the base variant's whole lock, each other variant's extra pins."""
    base = group.base
    base_lock = pins.read_lock(pins.lock_path(root, base, platform))
    found = {render.category(base): base_lock}
    for variant in group.variants:
        if variant is not base and platform in variant.platforms:
            lock = pins.read_lock(pins.lock_path(root, variant, platform))
            found[render.category(variant)] = {n: p for n, p in lock.items() if n not in base_lock}
    return found


def lockfile(root: Path, group: render.Group, sources: list[Path], fetch=pypi_files):
    """The whole content of one group's conda-lock file (conda-lock.yml for the stack's first base variant)."""
    from conda_lock.content_hash import compute_content_hashes
    from conda_lock.lockfile.v2prelim.models import Lockfile, LockMeta

    stack = group.stack
    spec = lock_spec(sources)
    packages = []
    for platform in spec.platforms:
        records = solve(root, conda_specs(spec, platform), platform, stack.cuda)
        packages += conda_entries(records, spec, platform)
        for category, lock in category_locks(root, group, platform).items():
            packages += pip_entries(lock, platform, category, stack.python, fetch, group.base.glibc)
    meta = LockMeta(content_hash=compute_content_hashes(spec, virtual_package_repo(stack.cuda)),
                    channels=list(spec.channels), platforms=spec.platforms,
                    sources=[s.name for s in sources])
    return Lockfile(package=packages, metadata=meta)


def write(root: Path, group: render.Group, folder: Path, sources: list[Path], fetch=pypi_files) -> Path:
    """Solve and write the group's `<folder>/conda-lock*.yml`; the file is replaced only once it is complete."""
    from conda_lock.lockfile import write_conda_lock_file

    content = lockfile(root, group, sources, fetch)
    final = Path(root) / folder / group.lock_file
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".conda-lock-") as tmp:
        path = Path(tmp) / final.name
        write_conda_lock_file(content, path, metadata_choices=set())
        path.replace(final)
    return final


def snapshot_problems(root: Path) -> list[str]:
    """Every snapshot record has provenance with its own hashes, from enough repositories."""
    from verlenv.lock.conda_snapshot import MIN_SOURCES, name_of, read_config, subdir_of

    path = Path(root) / SNAPSHOT_DIR / "provenance.json"
    try:
        provenance = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return [f"{path}: cannot read ({e}); run `verlenv conda-snapshot`"]
    single = set(read_config(root).get("single_source", []))
    problems = []
    for platform in pins.MACHINES:
        for url, record in snapshot_records(root, platform).items():
            if platform == "linux-aarch64" and "/noarch/" in url:
                continue  # noarch is read with linux-64 already
            known = provenance.get(url)
            if known is None:
                problems.append(f"{SNAPSHOT_DIR}: {url.rsplit('/', 1)[1]} has no provenance in provenance.json")
            elif (known.get("sha256"), known.get("md5")) != (record.get("sha256"), record.get("md5")):
                problems.append(f"{SNAPSHOT_DIR}: {url.rsplit('/', 1)[1]}'s hashes differ from those its sources "
                                f"published (provenance.json); the snapshot was edited: run `verlenv conda-snapshot`")
            elif len({s["repo"] for s in known.get("sources", [])}) < (
                    1 if f"{subdir_of(url)}/{name_of(url)}" in single else MIN_SOURCES):
                problems.append(f"{SNAPSHOT_DIR}: {url.rsplit('/', 1)[1]} has fewer independent sources than required")
    return problems


def lockfile_problems(root: Path, group: render.Group, locked, shown: str) -> list[str]:
    """A parsed conda-lock file of one group against the snapshot and the uv locks (offline)."""
    problems = []
    for platform in locked.metadata.platforms:
        conda = [p for p in locked.package if p.platform == platform and p.manager == "conda"]
        pip = [p for p in locked.package if p.platform == platform and p.manager == "pip"]
        problems += _conda_problems(root, group.stack, conda, platform, shown)
        problems += _pip_problems(root, group, pip, platform, shown)
    return problems


def _conda_problems(root: Path, stack: stacks.Stack, conda: list, platform: str, shown: str) -> list[str]:
    snapshot = snapshot_records(root, platform)
    problems = []
    for p in conda:
        record = snapshot.get(p.url)
        if record is None:
            problems.append(f"{shown}: {platform} {p.name} {p.version} ({p.url}) is not in the {SNAPSHOT_DIR} snapshot")
        elif (p.hash.sha256, p.hash.md5) != (record.get("sha256"), record.get("md5")):
            problems.append(f"{shown}: {platform} {p.name} {p.version}: sha256/md5 differ from the snapshot record "
                            f"(lock {p.hash.sha256}, snapshot {record.get('sha256')})")
    if problems:
        return problems
    # Re-solve the locked records, each pinned exactly: a complete, consistent set comes back unchanged.
    pinned = [f"{p.name} =={p.version} {p.url.rsplit('/', 1)[1].rsplit('-', 1)[1].split('.')[0]}" for p in conda]
    try:
        solved = {r.url for r in solve(root, pinned, platform, stack.cuda)}
    except UserError as e:
        return [f"{shown}: {platform}'s conda records do not satisfy each other ({e})"]
    if extra := sorted(solved - {p.url for p in conda}):
        names = ", ".join(u.rsplit("/", 1)[1] for u in extra)
        problems.append(f"{shown}: {platform}'s conda records depend on packages the lock does not hold ({names})")
    return problems


def _pip_problems(root: Path, group: render.Group, pip: list, platform: str, shown: str) -> list[str]:
    want = {(category, name): pin for category, lock in category_locks(root, group, platform).items()
            for name, pin in lock.items()}
    have = {(category, p.name): p for p in pip for category in p.categories}
    problems = []
    for key in sorted(set(want) | set(have)):
        category, name = key
        if key not in have:
            problems.append(f"{shown}: {platform} pip {name}=={want[key].version} ({category}) is in the uv lock, "
                            "not here")
        elif key not in want:
            problems.append(f"{shown}: {platform} pip {name} ({category}) is not in the uv lock")
        elif have[key].version != want[key].version:
            problems.append(f"{shown}: {platform} pip {name} is {have[key].version}, the uv lock pins "
                            f"{want[key].version}")
        elif f"sha256:{have[key].hash.sha256}" not in want[key].hashes:
            problems.append(f"{shown}: {platform} pip {name}=={want[key].version}: sha256 {have[key].hash.sha256} "
                            f"is not one of its uv lock line's hashes")
    return problems
