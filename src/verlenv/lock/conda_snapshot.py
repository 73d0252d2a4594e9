"""The vendored conda-forge snapshot: real package records read from public lock files, kept as a local
channel (`locks/conda-forge/<subdir>/repodata.json`) with the files each record was read from.

No conda channel answers from the machines that lock, but conda-forge's records (url, sha256, md5,
depends, constrains) are published in public `pixi.lock` files. `locks/conda-forge/sources.toml` names
those files (repository, path, and the commit whose history was read); `verlenv conda-snapshot` reads
every version of each from a clone with py-rattler's lock-file parser, keeps a record only where at least
two repositories carry it with the same url, sha256 and md5 (refusing any that disagree), and writes the
snapshot plus `provenance.json`. Nothing is typed in by hand: a record is what its sources say.
"""

import json
import subprocess
import tempfile
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from verlenv.errors import UserError
from verlenv.fsutil import write_atomic

SNAPSHOT_DIR = Path("locks") / "conda-forge"
CHANNEL_URL = "https://conda.anaconda.org/conda-forge/"
# prefix.dev serves conda-forge's own files under its own address; the sha256 says whether they are the same.
CHANNEL_MIRRORS = ("https://prefix.dev/conda-forge/", "https://repo.prefix.dev/conda-forge/")
SUBDIRS = ("linux-64", "linux-aarch64", "noarch")
MIN_SOURCES = 2
# Fields that come from the lock file's location, not the record; repodata keys records by file name.
LOCATION_FIELDS = ("url", "channel", "fn")


@dataclass(frozen=True, order=True)
class Source:
    repo: str
    path: str
    commit: str

    def as_dict(self) -> dict:
        return {"repo": self.repo, "path": self.path, "commit": self.commit}


def records_in_lock(text: bytes) -> dict[str, dict]:
    """conda-forge records (url -> record as rattler reads it) of one pixi.lock, for SUBDIRS only."""
    import rattler

    with tempfile.NamedTemporaryFile(suffix=".lock") as f:
        f.write(text)
        f.flush()
        try:
            lock = rattler.LockFile.from_path(f.name)
        except Exception:  # an old or broken lock version: it contributes nothing
            return {}
    found = {}
    for _, env in lock.environments():
        for platform in env.platforms():
            for record in env.conda_repodata_records_for_platform(platform) or []:
                url = record.url
                for mirror in CHANNEL_MIRRORS:
                    if url.startswith(mirror):
                        url = CHANNEL_URL + url[len(mirror):]
                if url.startswith(CHANNEL_URL) and record.subdir in SUBDIRS:
                    found[url] = json.loads(record.to_json())
    return found


def lock_versions(git_dir: Path, path: str, head: str) -> list[tuple[str, bytes]]:
    """(commit, text) for every distinct version of `path` in the history up to `head`, newest first."""
    log = subprocess.run(["git", "--git-dir", str(git_dir), "log", "--format=%H", head, "--", path],
                         capture_output=True, text=True, check=False)
    if log.returncode != 0:
        raise UserError(f"{git_dir}: cannot read the history of {path} at {head} ({log.stderr.strip()})")
    seen, versions = set(), []
    for commit in log.stdout.split():
        blob = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "-q", f"{commit}:{path}"],
                              capture_output=True, text=True, check=False).stdout.strip()
        if not blob or blob in seen:
            continue  # deleted in that commit, or the same text as a newer version
        seen.add(blob)
        text = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", blob],
                              capture_output=True, check=False)
        if text.returncode == 0:  # a shallow or partial clone may lack old blobs: those versions are not read
            versions.append((commit, text.stdout))
    return versions


def harvest(files) -> dict[str, list[tuple[Source, dict]]]:
    """url -> every (source, record) sighting, over (Source, text) pairs."""
    sightings: dict[str, list[tuple[Source, dict]]] = defaultdict(list)
    for source, text in files:
        for url, record in records_in_lock(text).items():
            sightings[url].append((source, record))
    return sightings


def _content(record: dict) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in LOCATION_FIELDS}, sort_keys=True)


def agree(sightings: dict[str, list[tuple[Source, dict]]], min_sources: int = MIN_SOURCES,
          single_source: frozenset[str] = frozenset(),
          ) -> tuple[dict[str, dict], dict[str, list[Source]], list[tuple[str, str]]]:
    """Records that at least min_sources repositories carry identically, their sources, and why others were refused.

    A url whose sha256 or md5 differs between sources is refused outright. Where sources agree on the hashes but
    not on the metadata (a later channel patch), the version the most repositories carry wins, if enough do.
    Packages named in single_source ("<subdir>/<name>": no second public file was found) may have one source."""
    records, provenance, refused = {}, {}, []
    for url, seen in sorted(sightings.items()):
        hashes = {(r.get("sha256"), r.get("md5")) for _, r in seen}
        if len(hashes) > 1:
            refused.append((url, f"sources disagree on its hashes ({sorted(hashes)})"))
            continue
        # content -> (repo, path) -> the newest commit of that file carrying it (files are read newest first)
        by_content: dict[str, dict[tuple[str, str], Source]] = defaultdict(dict)
        for source, record in seen:
            by_content[_content(record)].setdefault((source.repo, source.path), source)
        content, files = max(by_content.items(), key=lambda item: (len({r for r, _ in item[1]}), item[0]))
        repos = {repo for repo, _ in files}
        if len(repos) < min_sources and f"{subdir_of(url)}/{name_of(url)}" not in single_source:
            refused.append((url, f"in {len(repos)} repository, fewer than {min_sources}"))
            continue
        records[url] = json.loads(content)
        provenance[url] = sorted(files.values())
    return records, provenance, refused


def closure(records: dict[str, dict], roots: set[str]) -> set[str]:
    """Names reachable from roots through any record's depends (virtual packages left out)."""
    depends_of: dict[str, set[str]] = defaultdict(set)
    for record in records.values():
        depends_of[record["name"]].update(d.split()[0] for d in record.get("depends", []))
    names, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in names or name.startswith("__"):
            continue
        names.add(name)
        todo.extend(depends_of.get(name, ()))
    return names


def write(root: Path, records: dict[str, dict], provenance: dict[str, list[Source]]) -> list[Path]:
    """The snapshot as a channel: one repodata.json per subdir, and provenance.json for every record."""
    out = Path(root) / SNAPSHOT_DIR
    written = []
    for subdir in SUBDIRS:
        packages = {"packages": {}, "packages.conda": {}}
        for url, record in sorted(records.items()):
            if subdir_of(url) == subdir:  # the file's address decides; a few old records say otherwise
                fn = url.rsplit("/", 1)[1]
                packages["packages.conda" if fn.endswith(".conda") else "packages"][fn] = record
        repodata = {"info": {"subdir": subdir}, **packages, "repodata_version": 1}
        path = out / subdir / "repodata.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(repodata, indent=1, sort_keys=True) + "\n")
        written.append(path)
    table = {url: {"sha256": records[url]["sha256"], "md5": records[url]["md5"],
                   "sources": [s.as_dict() for s in provenance[url]]} for url in sorted(records)}
    path = out / "provenance.json"
    write_atomic(path, json.dumps(table, indent=1) + "\n")
    return [*written, path]


def read_config(root: Path) -> dict:
    """`locks/conda-forge/sources.toml`: the source files, the root package names, the single-source exceptions."""
    path = Path(root) / SNAPSHOT_DIR / "sources.toml"
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"{path}: cannot read the snapshot's sources ({type(e).__name__}: {e})") from None
    if missing := [key for key in ("roots", "file") if key not in config]:
        raise UserError(f"{path}: no {' or '.join(missing)}; it needs `roots = [...]` and `[[file]]` tables")
    return config


def read_sources(root: Path) -> list[dict]:
    return read_config(root)["file"]


def roots_of(root: Path) -> set[str]:
    """The conda package names the snapshot must cover: `locks/conda-forge/sources.toml`'s `roots`."""
    return set(read_config(root)["roots"])


def build(root: Path, clones: dict[str, Path]) -> tuple[dict[str, dict], dict[str, list[Source]], list[str]]:
    """Read every source file's history from its clone and keep what the sources agree on, for the roots' closure."""
    files = []
    for entry in read_sources(root):
        git_dir = clones.get(entry["repo"])
        if git_dir is None:
            raise UserError(f"no clone given for {entry['repo']}; pass --clone {entry['repo']}=PATH")
        for commit, text in lock_versions(git_dir, entry["path"], entry["head"]):
            files.append((Source(entry["repo"], entry["path"], commit), text))
    records, provenance, refused = agree(harvest(files),
                                         single_source=frozenset(read_config(root).get("single_source", [])))
    wanted = closure(records, roots_of(root))
    keep = {url for url, r in records.items() if r["name"] in wanted}
    return ({u: records[u] for u in keep}, {u: provenance[u] for u in keep},
            [f"{url}: {why}" for url, why in refused if name_of(url) in wanted])


def subdir_of(url: str) -> str:
    return url.rsplit("/", 2)[-2]


def name_of(url: str) -> str:
    """A conda file's package name: its file name less `-<version>-<build>.<ext>`."""
    return url.rsplit("/", 1)[-1].rsplit("-", 2)[0]
