"""Build sources, verified before use. Each kind a recipe's [source] table names is a type that knows the version it
builds, its id in the build fingerprint, how its tree is made ready and the one file a bundle carries of it: a PyPI
sdist (pinned sha256 per version), a git commit and a local folder (both pinned by tree digest, carried as a tar)."""

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


# Beside a tree placed from a source pinned by tree digest: its files, a relative path a line. A stopped build's tree
# is resumed while these still digest to the recipe's tree_sha256; the files a build adds are not among them.
PLACED_FILES = "placed-files.txt"


def tree_files(root: Path) -> list[str]:
    """Every file and link under `root`, as relative paths (what tree_digest reads)."""
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()]


def files_digest(root: Path, files: list[str]) -> str | None:
    """tree_digest over these relative paths of `root` only; None when one of them is gone."""
    h = hashlib.sha256()
    for path in sorted(root / rel for rel in files):  # sorted as Paths (by parts), as tree_digest always was
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            h.update(f"F {rel} {int(os.access(path, os.X_OK))} {sha256_file(path)}\n".encode())
        else:
            return None
    return h.hexdigest()


def tree_digest(root: Path) -> str:
    """A digest of an extracted tree: every file's relative path, mode bit and sha256, sorted."""
    return files_digest(root, tree_files(root))


def _sdist_url(package: str, version: str) -> tuple[str, str]:
    req = urllib.request.Request(f"{PYPI_SIMPLE}/{canonicalize_name(package)}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            index = json.load(r)
    except OSError as e:
        raise UserError(f"cannot reach the package index for {package} ({e}); pass --source FILE to build "
                        "offline") from None
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


def reproducible(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A tar member without owner or time: the same tree gives the same tar (and sha256), whoever packs it and when."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def pack_tree(root: Path, dest: Path) -> Path:
    """Every file and link under `root` (what tree_digest reads) into the tar `dest`, reproducibly; bytecode Python
    (__pycache__) stays out, as a placed local folder's does."""
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in root.rglob("*") if (p.is_file() or p.is_symlink())
                           and "__pycache__" not in p.relative_to(root).parts):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=reproducible)
    return dest


def _unpack_tree(archive: Path, out: Path) -> Path:
    """A carried tree (a tar of `git archive` or of pack_tree) into `out`; no member lands outside it."""
    out.mkdir(parents=True)
    try:
        with tarfile.open(archive) as t:
            t.extractall(out, filter="tar")
    except (tarfile.TarError, OSError) as e:
        raise UserError(f"{archive}: not a readable tar of the source tree ({e}); refusing to build") from None
    return out


def _check_archive(given: Path, option: str, what: str) -> None:
    validate.existing_file(given, option)
    if not tarfile.is_tarfile(given):
        raise UserError(f"{option} {given}: not a tar archive; give {what}")


def _text(table: dict, key: str, where: str = "source") -> str:
    value = table[key]
    if not isinstance(value, str):
        raise TypeError(f"{where}.{key} is {value!r}, not a string")
    return value


@dataclass(frozen=True)
class _Pinned:
    """What every kind shares. Each kind also answers version_for (the version a build makes), source_id (its
    fingerprint input), fetch (its verified origin: an archive, a clone, a folder), place (its tree, from that
    origin, under a folder) and carry (that origin as the one file a bundle carries, which fetch takes back)."""

    package: str
    recipe: Path  # the recipe file: a local folder is named relative to it, and messages name it
    resumable: ClassVar[bool] = False  # a stopped build's tree may be taken up again
    # What fetch must be given (--source) where no index or recipe path reaches the source; None: nothing.
    copy_needed: ClassVar[str | None] = None

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

    def describe(self, version: str) -> str:
        """Where the source of `version` comes from, for messages."""
        raise NotImplementedError


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

    def describe(self, version: str) -> str:
        return f"the {self.package} {version} sdist on the index, sha256 {self.sha256_for(version)[:12]}"

    def check_given(self, given: Path, option: str) -> None:
        validate.existing_file(given, option)

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The verified sdist in the source cache, copied from `given` or downloaded from the index."""
        return fetch_sdist(self.package, version, self.sha256_for(version), cache, given)

    def place(self, origin: Path, dest: Path) -> Path:
        return unpack_sdist(origin, dest)

    def intact(self, origin: Path, tree: Path) -> Path | None:
        return sdist_tree_matches(origin, tree)

    def carry(self, version: str, origin: Path, folder: Path) -> Path:
        """The verified sdist itself, as a bundle carries it."""
        dest = folder / origin.name
        shutil.copyfile(origin, dest)
        return dest


class _DigestedTree:
    """What the kinds pinned by tree digest share: the placed tree's files are listed beside it once they digest to
    the recipe's tree_sha256, and a stopped build's tree is resumed while exactly those files still do (a build adds
    files, which are not counted; a source file it or anyone edited is, and then a fresh tree is made)."""

    resumable: ClassVar[bool] = True
    tree_sha256: str

    def placed_name(self) -> str:
        """The folder `place` makes under its destination."""
        raise NotImplementedError

    def _seal(self, out: Path) -> str:
        """out's digest; where it is the recipe's, its files are listed beside it (what `intact` digests again)."""
        files = tree_files(out)
        got = files_digest(out, files)
        if got == self.tree_sha256:
            (out.parent / PLACED_FILES).write_text("".join(f"{rel}\n" for rel in files))
        return got

    def intact(self, origin: Path, tree: Path) -> Path | None:
        out, listing = tree / self.placed_name(), tree / PLACED_FILES
        if not out.is_dir() or not listing.is_file():
            return None
        files = listing.read_text().splitlines()
        return out if files and files_digest(out, files) == self.tree_sha256 else None


@dataclass(frozen=True)
class GitCommit(_DigestedTree, _Pinned):
    """A pinned commit, exported with `git archive` from a clone or mirror the user gives, checked by tree digest."""

    kind: ClassVar[str] = "git"
    copy_needed: ClassVar[str | None] = "a clone or mirror holding the pinned commit"  # GitHub may be out of reach
    url: str
    commit: str
    version: str  # setup.py's own version string at the commit
    tree_sha256: str
    # Only these paths of the commit are exported and digested (what the build reads); every path when empty. A
    # partial mirror may lack blobs the build never reads (Megatron-Bridge's docs images).
    paths: tuple[str, ...] = ()

    @classmethod
    def from_table(cls, table: dict, package: str, recipe: Path) -> "GitCommit":
        keys = ("url", "commit", "version", "tree_sha256")
        if missing := [key for key in keys if key not in table]:
            raise UserError(f"{recipe}: missing key source.{missing[0]}")
        paths = table.get("paths", [])
        if not isinstance(paths, list) or ("paths" in table and not paths) or not all(
                isinstance(x, str) and x and not x.startswith(("/", "-")) for x in paths):
            raise UserError(f"{recipe}: source.paths must be a non-empty list of paths inside the tree, "
                            f"e.g. [\"pyproject.toml\", \"src\"]")
        return cls(package, recipe, *(_text(table, key) for key in keys), tuple(paths))

    def _archive(self, repo: Path, *out: str) -> subprocess.CompletedProcess:
        """`git archive` of the pinned commit (its paths, where the recipe names them); a partial mirror lacking a
        blob is one line with git's own reason."""
        archived = _git(repo, "archive", "--format=tar", *out, self.commit, "--", *self.paths)
        if archived.returncode != 0:
            why = (archived.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise UserError(f"{repo}: git archive of {self.commit[:12]} failed ({why}); use a complete clone of "
                            f"{self.url}")
        return archived

    def version_for(self, wanted: str) -> str:
        return self.version

    def source_id(self, version: str) -> str:
        return f"git:{self.commit}:tree-sha256:{self.tree_sha256}"

    def describe(self, version: str) -> str:
        return f"git {self.url} at {self.commit[:12]}"

    def check_given(self, given: Path, option: str) -> None:
        """A clone or mirror (a folder), or a tar of the commit as `git archive` writes it (a bundle carries one)."""
        if Path(given).is_file():
            _check_archive(given, option, f"a clone or mirror of {self.url}, or a tar of its commit (git archive)")
        else:
            validate.existing_dir(given, option)

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The clone or mirror given, once it is a repository that holds the pinned commit; or a tar of the commit
        (checked by tree digest when placed)."""
        if given is None:
            raise UserError(f"{self.package} is built from git {self.url}: pass --source <clone or mirror>")
        if given.is_file():
            self.check_given(given, "--source")
            return given
        if not (given / "HEAD").exists() and not (given / ".git").exists():
            raise UserError(f"{given} is not a git repository; pass --source with a clone of {self.url}")
        kind = _git(given, "cat-file", "-t", self.commit)
        if kind.stdout.strip() != b"commit":
            raise UserError(f"{given} has no commit {self.commit}; fetch it first (git fetch {self.url} {self.commit})")
        for path in self.paths:
            if _git(given, "cat-file", "-e", f"{self.commit}:{path}").returncode:
                raise UserError(f"{self.recipe}: source.paths names {path!r}, which commit {self.commit[:12]} does "
                                "not have")
        return given

    def carry(self, version: str, origin: Path, folder: Path) -> Path:
        """The pinned commit as one tar (`git archive`), as a bundle carries it: no clone is needed where it goes."""
        dest = folder / f"{self.package}-{self.commit}.tar"
        if origin.is_file():
            shutil.copyfile(origin, dest)
        else:
            self._archive(origin, "-o", str(dest))
        return dest

    def placed_name(self) -> str:
        return f"{self.package}-{self.commit[:12]}"

    def place(self, origin: Path, dest: Path) -> Path:
        out = dest / self.placed_name()
        if origin.is_file():
            _unpack_tree(origin, out)
        else:
            tar = self._archive(origin).stdout
            out.mkdir(parents=True)
            with tarfile.open(fileobj=io.BytesIO(tar)) as t:
                t.extractall(out, filter="fully_trusted")
        got = self._seal(out)
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
class LocalDir(_DigestedTree, _Pinned):
    """A folder beside the recipe (its path relative to the recipe), copied and checked by tree digest."""

    kind: ClassVar[str] = "local-dir"
    path: str
    version: str
    tree_sha256: str

    def version_for(self, wanted: str) -> str:
        return self.version

    def source_id(self, version: str) -> str:
        return f"dir:tree-sha256:{self.tree_sha256}"

    def describe(self, version: str) -> str:
        return f"the folder {self.path} beside {self.recipe.name}"

    def check_given(self, given: Path, option: str) -> None:
        """A tar of the folder, as a bundle carries it."""
        _check_archive(given, option, f"a tar of {self.path} (a bundle carries one), or no --source")

    def fetch(self, version: str, cache: Path, given: Path | None = None) -> Path:
        """The folder the recipe names, or a tar of it given (checked by tree digest when placed)."""
        if given is not None:
            self.check_given(given, "--source")
            return given
        folder = (self.recipe.parent / self.path).resolve()
        if not folder.is_dir():
            raise UserError(f"{self.recipe}: source.path {self.path!r} is not a folder ({folder})")
        return folder

    def carry(self, version: str, origin: Path, folder: Path) -> Path:
        """The folder as one reproducible tar, as a bundle carries it."""
        dest = folder / f"{self.package}-{self.version}.tar"
        if origin.is_file():
            shutil.copyfile(origin, dest)
            return dest
        return pack_tree(origin, dest)

    def placed_name(self) -> str:
        return f"{self.package}-{self.version}"

    def place(self, origin: Path, dest: Path) -> Path:
        out = dest / self.placed_name()
        if origin.is_file():
            _unpack_tree(origin, out)
        else:  # bytecode Python left beside the sources (importing a file of it) is no part of them
            shutil.copytree(origin, out, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        got = self._seal(out)
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
    if "paths" in table and kind is not GitCommit:
        raise UserError(f"{recipe}: source.paths is for git sources only (it names what `git archive` exports)")
    return kind.from_table(table, package, recipe)
