"""The conda-forge snapshot: records read from pixi.lock files (written here by rattler from the committed
snapshot's real records), kept only where two repositories agree, refused where their hashes differ."""

import json
import subprocess
from pathlib import Path

import pytest

from verlenv import cli
from verlenv.errors import UserError
from verlenv.lock import conda_snapshot
from verlenv.lock.conda_snapshot import CHANNEL_URL, SNAPSHOT_DIR, Source

ROOT = Path(__file__).resolve().parents[1]


def real_records(names: set[str], subdir: str = "linux-64") -> list:
    """rattler records of the committed snapshot (its newest of each name), as a channel client reads them."""
    import rattler

    sparse = rattler.SparseRepoData(rattler.Channel("conda-forge"), subdir,
                                    ROOT / SNAPSHOT_DIR / subdir / "repodata.json")
    newest = {}
    for record in sparse.load_all_records():
        name = record.name.normalized
        if name in names and (name not in newest or record.version > newest[name].version):
            newest[name] = record
    assert set(newest) == names
    return list(newest.values())


def pixi_lock(path: Path, records: list) -> bytes:
    """A real pixi.lock of the records, written by rattler's own lock-file writer."""
    import rattler

    platform = rattler.LockPlatform("linux-64")
    lock = rattler.LockFile([platform])
    lock.set_channels("default", [rattler.LockChannel(CHANNEL_URL)])
    for record in records:
        lock.add_conda_package("default", platform, record)
    lock.to_path(str(path))
    return path.read_bytes()


def test_lock_file_records_round_trip(tmp_path):
    records = real_records({"python", "libffi"})
    found = conda_snapshot.records_in_lock(pixi_lock(tmp_path / "pixi.lock", records))
    assert set(found) == {r.url for r in records}
    python = next(r for r in records if r.name.normalized == "python")
    assert found[python.url]["sha256"] == python.sha256.hex() and found[python.url]["depends"] == python.depends


def sightings(record: dict, url: str, repos: list[str]) -> dict:
    return {url: [(Source(repo, "pixi.lock", f"{i:040x}"), record) for i, repo in enumerate(repos)]}


def a_record() -> tuple[str, dict]:
    provenance = json.loads((ROOT / SNAPSHOT_DIR / "provenance.json").read_text())
    url = next(u for u in provenance if "/linux-64/python-3.12" in u)
    repodata = json.loads((ROOT / SNAPSHOT_DIR / "linux-64" / "repodata.json").read_text())
    return url, repodata["packages.conda"][url.rsplit("/", 1)[1]]


def test_two_repositories_are_needed():
    url, record = a_record()
    kept, provenance, refused = conda_snapshot.agree(sightings(record, url, ["a/one", "b/two"]))
    assert kept == {url: record} and [s.repo for s in provenance[url]] == ["a/one", "b/two"]
    # two versions of one repository's file are one source
    kept, _, refused = conda_snapshot.agree(sightings(record, url, ["a/one", "a/one"]))
    assert kept == {} and refused == [(url, "in 1 repository, fewer than 2")]
    # unless the package is a named single-source exception
    kept, _, _ = conda_snapshot.agree(sightings(record, url, ["a/one"]), single_source=frozenset({"linux-64/python"}))
    assert kept == {url: record}


def test_sources_that_disagree_on_a_hash_are_refused():
    url, record = a_record()
    # A fabricated record (test data only, never in the snapshot): the real one with another sha256.
    forged = {**record, "sha256": "f" * 64}
    seen = sightings(record, url, ["a/one", "b/two"])
    seen[url].append((Source("c/three", "pixi.lock", "0" * 40), forged))
    kept, _, refused = conda_snapshot.agree(seen)
    assert kept == {} and len(refused) == 1 and refused[0][1].startswith("sources disagree on its hashes")


def test_metadata_most_repositories_carry_wins():
    url, record = a_record()
    # A later channel patch changes a record's depends, not its file: the version two repositories carry wins.
    patched = {**record, "depends": [*record["depends"], "test-only-patch-dependency"]}
    seen = sightings(record, url, ["a/one", "b/two"])
    seen[url].append((Source("c/three", "pixi.lock", "0" * 40), patched))
    kept, provenance, _ = conda_snapshot.agree(seen)
    assert kept[url] == record and {s.repo for s in provenance[url]} == {"a/one", "b/two"}


def test_closure_follows_depends_and_skips_virtual_packages():
    records = {}
    for subdir in ("linux-64", "noarch"):
        repodata = json.loads((ROOT / SNAPSHOT_DIR / subdir / "repodata.json").read_text())
        for fn, r in {**repodata["packages"], **repodata["packages.conda"]}.items():
            records[f"{CHANNEL_URL}{subdir}/{fn}"] = r
    names = conda_snapshot.closure(records, {"python"})
    assert {"python", "libffi", "openssl", "ncurses", "tzdata"} <= names
    assert "gxx" not in names and not any(n.startswith("__") for n in names)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}).stdout.strip()


def repo_with_locks(path: Path, versions: list[list]) -> str:
    path.mkdir()
    git(path, "init", "-q")
    for records in versions:
        pixi_lock(path / "pixi.lock", records)
        git(path, "add", "pixi.lock")
        git(path, "commit", "-q", "-m", "lock")
    return git(path, "rev-parse", "HEAD")


def test_snapshot_is_built_from_every_version_of_each_source(tmp_path, capsys):
    libffi, others = real_records({"libffi"}), real_records({"bzip2", "libzlib"})
    # repo one had libffi first, then all three; repo two has bzip2 and libzlib: only those two are in both
    head_one = repo_with_locks(tmp_path / "one", [libffi, libffi + others])
    head_two = repo_with_locks(tmp_path / "two", [others])
    root = tmp_path / "project"
    (root / SNAPSHOT_DIR).mkdir(parents=True)
    (root / SNAPSHOT_DIR / "sources.toml").write_text(
        'roots = ["libffi", "bzip2", "libzlib"]\n'
        f'[[file]]\nrepo = "test/one"\npath = "pixi.lock"\nhead = "{head_one}"\n'
        f'[[file]]\nrepo = "test/two"\npath = "pixi.lock"\nhead = "{head_two}"\n')
    rc = cli.main(["conda-snapshot", "--root", str(root),
                   "--clone", f"test/one={tmp_path / 'one'}", "--clone", f"test/two={tmp_path / 'two'}"])
    assert rc == 0
    repodata = json.loads((root / SNAPSHOT_DIR / "linux-64" / "repodata.json").read_text())
    kept = set(repodata["packages.conda"]) | set(repodata["packages"])
    assert kept == {r.url.rsplit("/", 1)[1] for r in others}  # libffi: only test/one carried it
    provenance = json.loads((root / SNAPSHOT_DIR / "provenance.json").read_text())
    assert {s["repo"] for s in provenance[others[0].url]["sources"]} == {"test/one", "test/two"}
    assert provenance[others[0].url]["sources"][0]["commit"] == head_one  # the newest version that carries it
    assert "2 records, 1 refused" in capsys.readouterr().err


def test_a_missing_clone_is_one_line(tmp_path):
    (tmp_path / SNAPSHOT_DIR).mkdir(parents=True)
    (tmp_path / SNAPSHOT_DIR / "sources.toml").write_text(
        'roots = ["python"]\n[[file]]\nrepo = "test/one"\npath = "pixi.lock"\nhead = "HEAD"\n')
    with pytest.raises(UserError) as e:
        conda_snapshot.build(tmp_path, {})
    assert str(e.value) == "no clone given for test/one; pass --clone test/one=PATH"


def test_prefix_dev_addresses_are_conda_forge_files(tmp_path):
    import rattler

    (record,) = real_records({"libffi"})
    # How pixi writes a record fetched through prefix.dev: the same file, at the mirror's address.
    mirror = "https://prefix.dev/conda-forge/"
    at_mirror = rattler.RepoDataRecord(record, record.file_name, mirror + record.url[len(CHANNEL_URL):], mirror)
    found = conda_snapshot.records_in_lock(pixi_lock(tmp_path / "pixi.lock", [at_mirror]))
    assert list(found) == [record.url] and found[record.url]["sha256"] == record.sha256.hex()


def test_roots_cover_every_conda_spec_of_the_env_files():
    from verlenv.catalog import stacks
    from verlenv.lock import conda_layer, locks, render

    cat = stacks.load(ROOT / "stacks.toml")
    roots = conda_snapshot.roots_of(ROOT)
    for stack in cat.stacks.values():
        folder = ROOT / render.stack_dir(stack)
        for group in render.groups(stack):
            spec = conda_layer.lock_spec([folder / name for name in locks.env_files(group)])
            for platform in spec.platforms:
                names = {s.split()[0] for s in conda_layer.conda_specs(spec, platform)}
                assert names <= roots, f"{stack.name} {platform}: {sorted(names - roots)} not in sources.toml's roots"
