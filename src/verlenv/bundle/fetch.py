"""Which file of each pin fits the target, and fetching it through a sha256-addressed cache.

File URLs come from the index's JSON simple API (PEP 691): one request per pin lists every file of the
project with its sha256 and size, so the lock's own hashes pick the files and `--dry-run` can total the
sizes without downloading; `uv pip compile --format pylock.toml` would be a second resolution that could
disagree with the lock.
"""

import hashlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging import tags
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from verlenv import fsutil
from verlenv.catalog import pins
from verlenv.catalog.pins import LockedPin
from verlenv.errors import UserError
from verlenv.native.sources import sha256_file

INDEX = os.environ.get("VERLENV_INDEX_URL", "https://pypi.org/simple")
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# The lock's hashes include wheels for newer glibcs than its manylinux_2_28 resolution target (llguidance
# 1.7.6 has x86_64 wheels for 2.31 only, else a Rust sdist); 2.34 (RHEL 9; Ubuntu 22.04 has 2.35) takes them.
GLIBC = "2.34"
_LEGACY = {"x86_64": [(17, "manylinux2014"), (12, "manylinux2010"), (5, "manylinux1")],
           "aarch64": [(17, "manylinux2014")]}


@dataclass(frozen=True)
class RemoteFile:
    name: str  # canonical distribution name
    version: str
    filename: str
    url: str
    sha256: str
    size: int
    kind: str  # "wheel" or "sdist"


def glibc_minor(glibc: str) -> int:
    major, _, minor = glibc.partition(".")
    if major != "2" or not minor.isdigit() or not 5 <= int(minor) <= 99:
        raise UserError(f"not a glibc version: {glibc!r}; give e.g. 2.28, 2.34 or 2.35")
    return int(minor)


def target_tags(platform: str, python: str, glibc: str = GLIBC) -> list[tags.Tag]:
    """Tags a cp<python> interpreter on manylinux with this glibc accepts, in order of preference.

    Unlike an installer, which prefers the newest manylinux its machine runs, a bundle prefers the oldest: the
    same release's wheel then runs on more of the nodes it is carried to.
    """
    if platform not in pins.MACHINES:
        raise UserError(f"no bundle platform {platform!r}; valid: {', '.join(pins.MACHINES)}")
    arch, top = pins.MACHINES[platform], glibc_minor(glibc)
    named = [(m, f"manylinux_2_{m}_{arch}") for m in range(5, top + 1)]
    named += [(minor, f"{legacy}_{arch}") for minor, legacy in _LEGACY[arch] if minor <= top]
    plats = [name for _, name in sorted(named, key=lambda pair: (pair[0], not pair[1].startswith("manylinux_")))]
    version = tuple(int(x) for x in python.split(".")[:2])
    interp = f"cp{version[0]}{version[1]}"
    return [*tags.cpython_tags(version, [interp], plats), *tags.compatible_tags(version, interp, plats)]


def _get_json(url: str, attempts: int = 3) -> dict:
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": SIMPLE_JSON}), timeout=60) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise UserError(f"{url}: not on the index (404)") from None
            error = e
        except (urllib.error.URLError, OSError) as e:
            error = e
        time.sleep(1 + attempt)
    raise UserError(f"cannot read {url}: {error}", exit_code=1)


def _version_of(filename: str) -> tuple[str, str] | None:
    """(kind, version) of a wheel or sdist file name, or None for other files."""
    try:
        if filename.endswith(".whl"):
            return "wheel", str(parse_wheel_filename(filename)[1])
        if filename.endswith((".tar.gz", ".zip")):
            return "sdist", str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        pass
    return None


def release_files(pin: LockedPin) -> list[RemoteFile]:
    """Every wheel and sdist of the pin's version on the index, with sha256 and size."""
    data = _get_json(f"{INDEX}/{pin.name}/")
    out = []
    for f in data["files"]:
        kind_version = _version_of(f["filename"])
        if kind_version and Version(kind_version[1]) == Version(pin.version) and "sha256" in f["hashes"]:
            out.append(RemoteFile(pin.name, pin.version, f["filename"], f["url"], f["hashes"]["sha256"],
                                  f.get("size") or 0, kind_version[0]))
    return out


def choose(pin: LockedPin, files: list[RemoteFile], wanted: list[tags.Tag]) -> RemoteFile:
    """The best fitting wheel among the lock's hashes, else the lock's sdist; one line when neither exists."""
    locked = {h.removeprefix("sha256:") for h in pin.hashes if h.startswith("sha256:")}
    rank = {t: i for i, t in enumerate(wanted)}
    best, best_rank = None, len(rank)
    for f in files:
        if f.kind != "wheel" or f.sha256 not in locked:
            continue
        try:
            file_tags = parse_wheel_filename(f.filename)[3]
        except InvalidWheelFilename:
            continue
        r = min((rank[t] for t in file_tags if t in rank), default=len(rank))
        if r < best_rank:
            best, best_rank = f, r
    if best:
        return best
    sdists = [f for f in files if f.kind == "sdist" and f.sha256 in locked]
    if sdists:
        return sdists[0]
    raise UserError(f"{pin.requirement}: no file of the release fits {wanted[0]} and matches the lock's hashes "
                    f"({len(files)} files on the index); relock or bundle for another platform", exit_code=1)


def needs_glibc(filename: str) -> str | None:
    """The glibc a manylinux wheel needs ("2.31"), None for other files."""
    if not filename.endswith(".whl"):
        return None
    found = []
    for t in parse_wheel_filename(filename)[3]:
        m = re.match(r"manylinux_2_(\d+)_", t.platform)
        legacy = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}.get(t.platform.rsplit("_", 2)[0])
        if m or legacy:
            found.append(int(m.group(1)) if m else legacy)
    return f"2.{min(found)}" if found else None


def resolve(pins: list[LockedPin], platform: str, python: str, glibc: str = GLIBC,
            workers: int = 8) -> list[RemoteFile]:
    wanted = target_tags(platform, python, glibc)
    with ThreadPoolExecutor(workers) as pool:
        listed = list(pool.map(release_files, pins))
    return [choose(pin, files, wanted) for pin, files in zip(pins, listed)]


def cached(sha256: str) -> Path | None:
    """The cache's copy of a file, or None; a copy that fails its hash is removed."""
    path = fsutil.cache_dir() / "files" / sha256
    if not path.is_file():
        return None
    if sha256_file(path) != sha256:
        path.unlink(missing_ok=True)
        return None
    return path


def _download(f: RemoteFile, advance) -> Path:
    folder = fsutil.cache_dir() / "files"
    folder.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{f.sha256[:16]}.", suffix=".part")
        done = 0
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(f.url, timeout=120) as r:
                for chunk in iter(lambda: r.read(1 << 20), b""):
                    out.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    advance(len(chunk))
            if h.hexdigest() != f.sha256:
                raise UserError(f"{f.filename}: downloaded sha256 {h.hexdigest()} is not the lock's {f.sha256}",
                                exit_code=1)
            final = folder / f.sha256
            os.replace(tmp, final)
            return final
        except (urllib.error.URLError, OSError) as e:
            Path(tmp).unlink(missing_ok=True)
            advance(-done)
            if attempt == 2:
                raise UserError(f"cannot download {f.url}: {e}", exit_code=1) from None
            time.sleep(1 + attempt)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def fetch_all(files: list[RemoteFile], workers: int = 8) -> dict[str, Path]:
    """{sha256: cached path} for every file; only missing or corrupt ones are downloaded, in parallel."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    have = {f.sha256: p for f in files if (p := cached(f.sha256))}
    todo = [f for f in files if f.sha256 not in have]
    if not todo:
        return have
    total = sum(f.size for f in todo)
    print(f"fetching {len(todo)} files ({total / 1024**2:.1f} MiB); {len(have)} already cached", file=sys.stderr)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("download", total=total)
        advance = lambda n: progress.advance(task, n)  # noqa: E731
        with ThreadPoolExecutor(workers) as pool:
            for f, path in zip(todo, pool.map(lambda f: _download(f, advance), todo)):
                have[f.sha256] = path
    return have
