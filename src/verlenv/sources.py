"""Build sources, verified before use. Each kind a recipe's [source] table names is a type that knows the version it
builds, its id in the build fingerprint and how its tree is made ready: a PyPI sdist (pinned sha256 per version),
a git commit and a local folder (both pinned by tree digest)."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from packaging.utils import canonicalize_name, parse_sdist_filename

from verlenv import validate
from verlenv.errors import UserError

PYPI_SIMPLE = os.environ.get("VERLENV_PYPI_SIMPLE", "https://pypi.org/simple")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """A digest of an extracted tree: every file's relative path, mode bit and sha256, sorted."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        else:
            h.update(f"F {rel} {int(os.access(path, os.X_OK))} {sha256_file(path)}\n".encode())
    return h.hexdigest()


def _sdist_url(package: str, version: str) -> tuple[str, str]:
    req = urllib.request.Request(f"{PYPI_SIMPLE}/{canonicalize_name(package)}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            index = json.load(r)
    except OSError as e:
        raise UserError(f"cannot reach the package index for {package} ({e}); pass --source FILE to build offline") from None
    for f in index["files"]:
        if f["filename"].endswith((".tar.gz", ".zip")):
            try:
                _, v = parse_sdist_filename(f["filename"])
            except ValueError:
                continue
            if str(v) == version:
                return f["url"], f["filename"]
    raise UserError(f"{package} {version} has no sdist on the index")


def fetch_sdist(package: str, version: str, want: str, cache: Path, local: Path | None = None) -> Path:
    """The sdist of sha256 `want` in the source cache; a download appears there only once its hash matched."""
    store = cache / "sources" / want
    existing = list(store.glob("*")) if store.is_dir() else []
    for path in existing:
        if sha256_file(path) == want:
            return path
        path.unlink()  # a corrupted cache file: fetch again
    store.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=store, prefix=".part-")
    os.close(fd)
    tmp = Path(tmp)
    try:
        if local:
            shutil.copyfile(local, tmp)
            filename = Path(local).name
        else:
            url, filename = _sdist_url(package, version)
            with urllib.request.urlopen(url, timeout=300) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        got = sha256_file(tmp)
        if got != want:
            raise UserError(f"{package} {version}: sha256 {got} does not match the recipe's {want}; refusing to build")
        final = store / filename
        os.replace(tmp, final)
        return final
    finally:
        tmp.unlink(missing_ok=True)


def unpack_sdist(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as t:
        t.extractall(dest, filter="data")
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise UserError(f"{archive.name}: expected one top-level folder, found {len(roots)}")
    return roots[0]


def sdist_tree_matches(archive: Path, dest: Path) -> Path | None:
    """The top folder under `dest` when every file of the (verified) sdist is there byte for byte, else None.
    Files a build adds (build/, objects, the wheel) are allowed; *.egg-info is skipped, setuptools rewrites it."""
    try:
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile()]
            for m in members:
                if ".egg-info/" in m.name:
                    continue
                path = dest / m.name
                if not path.is_file() or path.stat().st_size != m.size or path.read_bytes() != t.extractfile(m).read():
                    return None
    except (OSError, tarfile.TarError):
        return None
    roots = {Path(m.name).parts[0] for m in members}
    return dest / roots.pop() if len(roots) == 1 else None


def _text(table: dict, key: str, where: str = "source") -> str:
    value = table[key]
    if not isinstance(value, str):
        raise TypeError(f"{where}.{key} is {value!r}, not a string")
    return value


@dataclass(frozen=True)
class _Pinned:
    """What every kind shares. Each kind also answers version_for (the version a build makes), source_id (its
    fingerprint input), fetch (its verified origin: an archive, a clone, a folder) and place (its tree, from that
    origin, under a folder)."""

    package: str
    recipe: Path  # the recipe file: a local folder is named relative to it, and messages name it
    resumable: ClassVar[bool] = False  # a stopped build's tree may be taken up again

    @classmethod
    def from_table(cls, table: dict, package: str, recipe: Path):
        keys = [f.name for f in fields(cls)][2:]
        missing = [key for key in keys if key not in table]
        if missing:
            raise UserError(f"{recipe}: missing key source.{missing[0]}")
        return cls(package, recipe, *(_text(table, key) for key in keys))

    def check_given(self, given: Path, option: str) -> None:
        """A local copy the user gives (`option`) has this kind's shape; a kind that takes none ignores it."""

    def intact(self, origin: Path, tree: Path) -> Path | None:
        """The sources under a stopped build's `tree` while they still equal `origin`'s; None: never resumed."""
        return None


@dataclass(frozen=True)
class PypiSdist(_Pinned):
    """An sdist from the package index, one pinned sha256 per version: it builds the version the catalog names."""

    kind: ClassVar[str] = "pypi-sdist"
    resumable: ClassVar[bool] = True  # its tree is checked file by file against the verified archive
    sha256: dict[str, str]

    @classmethod
    def from_table(cls, table: dict, package: str, recipe: Path) -> "PypiSdist":
        pins = table.get("sha256", {})
        if not isinstance(pins, dict):
            raise TypeError(f"source.sha256 is {pins!r}, not a table of version = sha256")
        return cls(package, recipe, {version: _text(pins, version, "source.sha256") for version in pins})

    def version_for(self, wanted: str) -> str:
        return wanted

    def sha256_for(self, version: str) -> str:
        try:
            return self.sha256[version]
        except KeyError:
            known = ", ".join(self.sha256) or "none"
            raise UserError(f"{self.recipe}: no pinned sha256 for {self.package} {version}; "
                            f"pinned versions: {known}") from None

    def source_id(self, version: str) -> str:
        return f"sha256:{self.sha256_for(version)}"

    def check_given(self, given: Path, option: str) -> None:
        validate.existing_file(given, option)

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The verified sdist in the source cache, copied from `given` or downloaded from the index."""
        return fetch_sdist(self.package, version, self.sha256_for(version), cache, given)

    def place(self, origin: Path, dest: Path) -> Path:
        return unpack_sdist(origin, dest)

    def intact(self, origin: Path, tree: Path) -> Path | None:
        return sdist_tree_matches(origin, tree)


@dataclass(frozen=True)
class GitCommit(_Pinned):
    """A pinned commit, exported with `git archive` from a clone or mirror the user gives, checked by tree digest."""

    kind: ClassVar[str] = "git"
    url: str
    commit: str
    version: str  # setup.py's own version string at the commit
    tree_sha256: str

    def version_for(self, wanted: str) -> str:
        return self.version

    def source_id(self, version: str) -> str:
        return f"git:{self.commit}:tree-sha256:{self.tree_sha256}"

    def check_given(self, given: Path, option: str) -> None:
        validate.existing_dir(given, option)

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The clone or mirror given, once it is a repository that holds the pinned commit."""
        if given is None:
            raise UserError(f"{self.package} is built from git {self.url}: pass --source <clone or mirror>")
        if not (given / "HEAD").exists() and not (given / ".git").exists():
            raise UserError(f"{given} is not a git repository; pass --source with a clone of {self.url}")
        kind = _git(given, "cat-file", "-t", self.commit)
        if kind.stdout.strip() != b"commit":
            raise UserError(f"{given} has no commit {self.commit}; fetch it first (git fetch {self.url} {self.commit})")
        return given

    def place(self, origin: Path, dest: Path) -> Path:
        tar = _git(origin, "archive", "--format=tar", self.commit, check=True).stdout
        out = dest / f"{self.package}-{self.commit[:12]}"
        out.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(out, filter="fully_trusted")
        got = tree_digest(out)
        if got != self.tree_sha256:
            raise UserError(f"{self.package} at {self.commit[:12]}: tree digest {got} does not match the recipe's "
                            f"{self.tree_sha256}; refusing to build")
        return out


def _git(repo: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=check)
    except FileNotFoundError:
        raise UserError("git is not installed; it is needed to export the source tree") from None


@dataclass(frozen=True)
class LocalDir(_Pinned):
    """A folder beside the recipe (its path relative to the recipe), copied and checked by tree digest."""

    kind: ClassVar[str] = "local-dir"
    path: str
    version: str
    tree_sha256: str

    def version_for(self, wanted: str) -> str:
        return self.version

    def source_id(self, version: str) -> str:
        return f"dir:tree-sha256:{self.tree_sha256}"

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The folder the recipe names."""
        folder = (self.recipe.parent / self.path).resolve()
        if not folder.is_dir():
            raise UserError(f"{self.recipe}: source.path {self.path!r} is not a folder ({folder})")
        return folder

    def place(self, origin: Path, dest: Path) -> Path:
        out = dest / f"{self.package}-{self.version}"
        shutil.copytree(origin, out, symlinks=True)
        got = tree_digest(out)
        if got != self.tree_sha256:
            raise UserError(f"{self.package}: tree digest of {origin} is {got}, not the recipe's {self.tree_sha256}; "
                            "refusing to build")
        return out


Source = PypiSdist | GitCommit | LocalDir
KINDS: dict[str, type[Source]] = {kind.kind: kind for kind in (PypiSdist, GitCommit, LocalDir)}


def from_table(table: dict, package: str, recipe: Path) -> Source:
    """A recipe's [source] table as the type its `kind` names."""
    kind = KINDS.get(table.get("kind"))
    if kind is None:
        raise UserError(f"{recipe}: source.kind is {table.get('kind')!r}; valid: {', '.join(KINDS)}")
    return kind.from_table(table, package, recipe)
