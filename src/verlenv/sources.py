"""Build sources, verified before use: PyPI sdists by pinned sha256, git trees by commit and tree digest."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from packaging.utils import canonicalize_name, parse_sdist_filename

from verlenv.errors import UserError
from verlenv.recipes import Recipe

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


def fetch_sdist(recipe: Recipe, version: str, cache: Path, local: Path | None = None) -> Path:
    """The verified sdist in the source cache; a download appears there only once its hash matched."""
    want = recipe.sha256_for(version)
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
            url, filename = _sdist_url(recipe.package, version)
            with urllib.request.urlopen(url, timeout=300) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        got = sha256_file(tmp)
        if got != want:
            raise UserError(f"{recipe.package} {version}: sha256 {got} does not match the recipe's {want}; refusing to build")
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


def export_git_tree(recipe: Recipe, repo: Path, dest: Path) -> Path:
    """`git archive` of the pinned commit from a local clone or mirror, checked against the pinned tree digest.
    With source.paths, only those paths of the commit are exported (and digested): what the build reads."""
    commit, want = recipe.source["commit"], recipe.source["tree_sha256"]
    paths = list(recipe.source.get("paths", []))
    if not (repo / "HEAD").exists() and not (repo / ".git").exists():
        raise UserError(f"{repo} is not a git repository; pass --source with a clone of {recipe.source['url']}")
    try:
        kind = subprocess.run(["git", "-C", str(repo), "cat-file", "-t", commit], capture_output=True, text=True,
                              check=False)
        if kind.stdout.strip() != "commit":
            raise UserError(f"{repo} has no commit {commit}; fetch it first (git fetch {recipe.source['url']} {commit})")
        for path in paths:
            if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}:{path}"], capture_output=True,
                              check=False).returncode:
                raise UserError(f"{recipe.path}: source.paths names {path!r}, which commit {commit[:12]} does not have")
        archived = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, "--", *paths],
                                  capture_output=True, check=False)
        if archived.returncode != 0:
            # A partial mirror lacks blobs (a clone's large files): name git's own reason.
            why = (archived.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise UserError(f"{repo}: git archive of {commit[:12]} failed ({why}); use a complete clone of {recipe.source['url']}")
        tar = archived.stdout
    except FileNotFoundError:
        raise UserError("git is not installed; it is needed to export the source tree") from None
    out = dest / f"{recipe.package}-{commit[:12]}"
    out.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(out, filter="fully_trusted")
    got = tree_digest(out)
    if got != want:
        raise UserError(f"{recipe.package} at {commit[:12]}: tree digest {got} does not match the recipe's {want}; refusing to build")
    return out


def copy_local_tree(recipe: Recipe, dest: Path) -> Path:
    """A copy of the folder the recipe names (relative to the recipe), checked against the pinned tree digest."""
    folder = (recipe.path.parent / recipe.source["path"]).resolve()
    if not folder.is_dir():
        raise UserError(f"{recipe.path}: source.path {recipe.source['path']!r} is not a folder ({folder})")
    out = dest / f"{recipe.package}-{recipe.source['version']}"
    shutil.copytree(folder, out, symlinks=True)
    got, want = tree_digest(out), recipe.source["tree_sha256"]
    if got != want:
        raise UserError(f"{recipe.package}: tree digest of {folder} is {got}, not the recipe's {want}; refusing to build")
    return out
