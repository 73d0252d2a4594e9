"""Build sources are verified before use: sdists by sha256, git commits and local folders by tree digest."""

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from verlenv.errors import UserError
from verlenv.native import recipes, sources

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "ext"


def write_recipe(root: Path, package: str, text: str) -> recipes.Recipe:
    folder = root / "recipes" / package
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(text)
    return recipes.load(root, package)


def sdist_recipe(root: Path, sha256: str) -> recipes.Recipe:
    return write_recipe(root, "probe", f"""
package = "probe"
import_name = "probe"
[source]
kind = "pypi-sdist"
[source.sha256]
"1.0" = "{sha256}"
[build]
arch_variable = "TORCH_CUDA_ARCH_LIST"
mem_per_job_gib = 1
""")


def test_a_local_sdist_with_the_pinned_hash_is_stored_once(tmp_path):
    archive = tmp_path / "probe-1.0.tar.gz"
    archive.write_bytes(b"an sdist's bytes")
    recipe = sdist_recipe(tmp_path, hashlib.sha256(b"an sdist's bytes").hexdigest())
    stored = recipe.source.fetch("1.0", tmp_path / "cache", archive)
    assert stored.read_bytes() == archive.read_bytes() and stored.name == archive.name
    archive.unlink()  # the cache answers from now on
    assert recipe.source.fetch("1.0", tmp_path / "cache") == stored


def test_an_sdist_with_another_hash_is_refused_and_not_kept(tmp_path):
    archive = tmp_path / "probe-1.0.tar.gz"
    archive.write_bytes(b"something else")
    recipe = sdist_recipe(tmp_path, hashlib.sha256(b"an sdist's bytes").hexdigest())
    with pytest.raises(UserError) as e:
        recipe.source.fetch("1.0", tmp_path / "cache", archive)
    assert "does not match the recipe's" in str(e.value) and "refusing to build" in str(e.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_corrupted_cached_sdist_is_fetched_again(tmp_path):
    archive = tmp_path / "probe-1.0.tar.gz"
    archive.write_bytes(b"an sdist's bytes")
    recipe = sdist_recipe(tmp_path, hashlib.sha256(b"an sdist's bytes").hexdigest())
    stored = recipe.source.fetch("1.0", tmp_path / "cache", archive)
    stored.write_bytes(b"bit rot")
    assert recipe.source.fetch("1.0", tmp_path / "cache", archive).read_bytes() == b"an sdist's bytes"


def test_an_unpinned_version_is_refused(tmp_path):
    recipe = sdist_recipe(tmp_path, "0" * 64)
    with pytest.raises(UserError) as e:
        recipe.source.source_id("2.0")
    assert str(e.value).endswith("no pinned sha256 for probe 2.0; pinned versions: 1.0")


@pytest.fixture
def git_repo(tmp_path) -> tuple[Path, str, str]:
    """A real git repository with one commit; returns (repo, commit, tree digest of that commit)."""
    repo = tmp_path / "upstream"
    (repo / "csrc").mkdir(parents=True)
    (repo / "setup.py").write_text("print('setup')\n")
    (repo / "csrc" / "k.cu").write_text("__global__ void k() {}\n")
    (repo / "build.sh").write_text("#!/bin/sh\n")
    (repo / "build.sh").chmod(0o755)
    return repo, *commit_all(repo, tmp_path / "checkout")


def commit_all(repo: Path, checkout: Path) -> tuple[str, str]:
    """Make `repo` a git repository whose one commit holds all its files; (that commit, its tree digest, taken of a
    copy without .git at `checkout`)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    shutil.copytree(repo, checkout, ignore=shutil.ignore_patterns(".git"))
    return commit, sources.tree_digest(checkout)


def git_recipe(root: Path, commit: str, digest: str, paths: str = "") -> recipes.Recipe:
    return write_recipe(root, "upstream", f"""
package = "upstream"
import_name = "upstream"
[source]
kind = "git"
url = "https://example.invalid/upstream"
commit = "{commit}"
version = "0.1"
tree_sha256 = "{digest}"
{f"paths = {paths}" if paths else ""}
[build]
arch_variable = "TORCH_CUDA_ARCH_LIST"
mem_per_job_gib = 1
""")


def export(recipe: recipes.Recipe, repo: Path, dest: Path) -> Path:
    """The recipe's git commit made ready as the builder does it: the clone checked, then the commit exported."""
    return recipe.source.place(recipe.source.fetch(recipe.source.version, dest / "cache", repo), dest)


def test_a_git_commit_is_exported_and_checked(git_repo, tmp_path):
    repo, commit, digest = git_repo
    out = export(git_recipe(tmp_path, commit, digest), repo, tmp_path / "src")
    assert (out / "csrc" / "k.cu").is_file() and os.access(out / "build.sh", os.X_OK)
    assert not (out / ".git").exists()


def test_a_git_tree_with_another_digest_is_refused(git_repo, tmp_path):
    repo, commit, _ = git_repo
    with pytest.raises(UserError) as e:
        export(git_recipe(tmp_path, commit, "f" * 64), repo, tmp_path / "src")
    assert "does not match the recipe's" in str(e.value)


def test_a_missing_commit_and_a_non_repository_are_refused(git_repo, tmp_path):
    repo, _, digest = git_repo
    with pytest.raises(UserError) as e:
        export(git_recipe(tmp_path, "1" * 40, digest), repo, tmp_path / "src")
    assert f"has no commit {'1' * 40}" in str(e.value)
    with pytest.raises(UserError) as e:
        export(git_recipe(tmp_path, "1" * 40, digest), tmp_path / "nowhere", tmp_path / "src")
    assert "is not a git repository" in str(e.value)


def test_a_git_commit_travels_as_its_git_archive_and_is_checked_where_it_lands(git_repo, tmp_path):
    """What a bundle carries of a git recipe: `git archive` of the pinned commit, which GitCommit takes back as it
    takes a clone (no clone where it lands), checked by the same tree digest."""
    repo, commit, digest = git_repo
    recipe = git_recipe(tmp_path, commit, digest)
    (tmp_path / "carried").mkdir()
    archive = recipe.source.carry("0.1", recipe.source.fetch("0.1", tmp_path / "cache", repo), tmp_path / "carried")
    plain = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit], capture_output=True,
                           check=True).stdout
    assert archive.name == f"upstream-{commit}.tar" and archive.read_bytes() == plain
    recipe.source.check_given(archive, "--source")
    assert recipe.source.fetch("0.1", tmp_path / "cache", archive) == archive
    out = recipe.source.place(archive, tmp_path / "src")
    assert sources.tree_digest(out) == digest and os.access(out / "build.sh", os.X_OK)


def test_a_changed_git_archive_is_refused(git_repo, tmp_path):
    repo, commit, digest = git_repo
    recipe = git_recipe(tmp_path, commit, digest)
    (tmp_path / "carried").mkdir()
    archive = recipe.source.carry("0.1", repo, tmp_path / "carried")
    data = archive.read_bytes()
    at = data.index(b"__global__")
    archive.write_bytes(data[:at] + b"__device__" + data[at + len(b"__global__"):])  # same size, other kernel
    with pytest.raises(UserError) as e:
        recipe.source.place(recipe.source.fetch("0.1", tmp_path / "cache", archive), tmp_path / "src")
    assert f"tree digest {sources.tree_digest(tmp_path / 'src' / f'upstream-{commit[:12]}')}" in str(e.value)
    assert "does not match the recipe's" in str(e.value) and "\n" not in str(e.value)


def test_a_git_recipe_takes_a_clone_or_a_tar_and_nothing_else(git_repo, tmp_path):
    repo, commit, digest = git_repo
    recipe = git_recipe(tmp_path, commit, digest)
    text = tmp_path / "notes.txt"
    text.write_text("not a tar\n")
    with pytest.raises(UserError) as e:
        recipe.source.check_given(text, "--source")
    assert str(e.value) == (f"--source {text}: not a tar archive; give a clone or mirror of "
                            "https://example.invalid/upstream, or a tar of its commit (git archive)")
    recipe.source.check_given(repo, "--source")


def test_a_local_folder_travels_as_a_reproducible_tar(tmp_path):
    shutil.copytree(DATA, tmp_path / "ext", ignore=shutil.ignore_patterns("__pycache__"))
    source = recipes.load(tmp_path / "ext", "cuda-ext-probe").source
    folder = source.fetch("0.1", tmp_path)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        source.carry("0.1", folder, tmp_path / name)
        os.utime(folder / "setup.py", (0, 12345))  # a later mtime: the same tar all the same
    assert sources.sha256_file(tmp_path / "a" / "cuda-ext-probe-0.1.tar") == \
        sources.sha256_file(tmp_path / "b" / "cuda-ext-probe-0.1.tar")
    out = source.place(source.fetch("0.1", tmp_path, tmp_path / "a" / "cuda-ext-probe-0.1.tar"), tmp_path / "src")
    assert sources.tree_digest(out) == source.tree_sha256
    with tarfile.open(tmp_path / "a" / "cuda-ext-probe-0.1.tar") as t:
        assert {(m.uid, m.mtime) for m in t.getmembers()} == {(0, 0)}


def test_a_carried_tar_reaching_outside_its_folder_is_refused(tmp_path):
    shutil.copytree(DATA, tmp_path / "ext", ignore=shutil.ignore_patterns("__pycache__"))
    source = recipes.load(tmp_path / "ext", "cuda-ext-probe").source
    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as t:
        t.add(tmp_path / "ext" / "cuda-ext-probe" / "setup.py", arcname="../escaped.py")
    with pytest.raises(UserError) as e:
        source.place(source.fetch("0.1", tmp_path, evil), tmp_path / "src")
    assert "not a readable tar of the source tree" in str(e.value) and "refusing to build" in str(e.value)
    assert not (tmp_path / "src" / "escaped.py").exists() and not (tmp_path / "escaped.py").exists()


def test_a_git_pin_without_its_commit_or_with_a_number_for_a_string_is_refused_at_load(tmp_path):
    assert isinstance(git_recipe(tmp_path, "1" * 40, "f" * 64).source, sources.GitCommit)
    path = tmp_path / "recipes" / "upstream" / "recipe.toml"
    pinned = path.read_text()
    path.write_text(pinned.replace(f'commit = "{"1" * 40}"\n', ""))
    with pytest.raises(UserError) as e:
        recipes.load(tmp_path, "upstream")
    assert str(e.value) == f"{path}: missing key source.commit"
    path.write_text(pinned.replace('version = "0.1"', "version = 0.1"))
    with pytest.raises(UserError) as e:
        recipes.load(tmp_path, "upstream")
    assert str(e.value).startswith(f"{path}: malformed (TypeError: source.version is 0.1, not a string)")


def test_only_the_named_paths_of_a_commit_are_exported_and_digested(git_repo, tmp_path):
    repo, commit, _ = git_repo
    subset = tmp_path / "subset"
    (subset / "csrc").mkdir(parents=True)
    shutil.copy(repo / "setup.py", subset)
    shutil.copy(repo / "csrc" / "k.cu", subset / "csrc")
    recipe = git_recipe(tmp_path, commit, sources.tree_digest(subset), '["setup.py", "csrc"]')
    out = export(recipe, repo, tmp_path / "src")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == ["csrc/k.cu", "setup.py"]
    # The whole commit's digest does not pass for the subset, nor a path the commit lacks.
    with pytest.raises(UserError, match="does not match the recipe's"):
        export(git_recipe(tmp_path, commit, sources.tree_digest(subset), '["setup.py"]'), repo,
                                tmp_path / "src2")
    with pytest.raises(UserError, match="source.paths names 'docs', which commit .* does not have"):
        export(git_recipe(tmp_path, commit, "f" * 64, '["setup.py", "docs"]'), repo, tmp_path / "src3")


@pytest.mark.parametrize("paths", ['"src"', "[]", '["/etc"]', '["-o"]'])
def test_malformed_paths_are_refused_in_one_line(tmp_path, paths):
    with pytest.raises(UserError) as e:
        git_recipe(tmp_path, "1" * 40, "f" * 64, paths)
    assert str(e.value).endswith('source.paths must be a non-empty list of paths inside the tree, '
                                 'e.g. ["pyproject.toml", "src"]')


def test_a_clone_missing_a_blob_is_refused_in_one_line(git_repo, tmp_path):
    """A partial mirror (its large files left out) cannot export the whole commit: git's own reason, no traceback."""
    repo, commit, digest = git_repo
    blob = subprocess.run(["git", "-C", str(repo), "rev-parse", f"{commit}:build.sh"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    with pytest.raises(UserError) as e:
        export(git_recipe(tmp_path, commit, digest), repo, tmp_path / "src")
    assert f"git archive of {commit[:12]} failed" in str(e.value) and "use a complete clone" in str(e.value)
    # The paths a build reads are still there: a recipe naming them builds from this clone.
    subset = tmp_path / "subset"
    subset.mkdir()
    shutil.copy(repo / "setup.py", subset)
    out = export(git_recipe(tmp_path, commit, sources.tree_digest(subset), '["setup.py"]'), repo,
                                  tmp_path / "src2")
    assert (out / "setup.py").is_file()


def test_the_megatron_bridge_recipe_matches_its_upstream_commit(tmp_path):
    """Needs a clone or mirror of NVIDIA-NeMo/Megatron-Bridge named by $VERLENV_MEGATRON_BRIDGE_GIT."""
    repo = os.environ.get("VERLENV_MEGATRON_BRIDGE_GIT")
    if not repo:
        pytest.skip("set VERLENV_MEGATRON_BRIDGE_GIT to a clone or mirror of NVIDIA-NeMo/Megatron-Bridge")
    recipe = recipes.load(REPO, "megatron-bridge")
    out = export(recipe, Path(repo), tmp_path / "src")
    info = (out / "src" / "megatron" / "bridge" / "package_info.py").read_text()
    assert ".".join(re.search(rf"^{k} = (\d+)$", info, re.MULTILINE).group(1) for k in ("MAJOR", "MINOR", "PATCH")) \
        == recipe.source.version


def test_the_apex_recipe_matches_its_upstream_commit(tmp_path):
    """Needs a clone or mirror of NVIDIA/apex named by $VERLENV_APEX_GIT (GitHub is not always reachable)."""
    repo = os.environ.get("VERLENV_APEX_GIT")
    if not repo:
        pytest.skip("set VERLENV_APEX_GIT to a clone or mirror of NVIDIA/apex")
    recipe = recipes.load(REPO, "apex")
    out = export(recipe, Path(repo), tmp_path / "src")
    assert f'version="{recipe.source.version}"' in (out / "setup.py").read_text()


def test_the_test_extensions_match_their_pinned_digests(tmp_path):
    for package in ("cuda-ext-probe", "sleepy-probe"):
        recipe = recipes.load(DATA, package)
        out = recipe.source.place(recipe.source.fetch(recipe.source.version, tmp_path, None), tmp_path / package)
        assert (out / "setup.py").is_file()


def test_an_edited_local_folder_is_refused(tmp_path):
    shutil.copytree(DATA, tmp_path / "ext", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "ext" / "cuda-ext-probe" / "probe.cpp").write_text("// edited\n")
    with pytest.raises(UserError) as e:
        source = recipes.load(tmp_path / "ext", "cuda-ext-probe").source
        source.place(source.fetch(source.version, tmp_path, None), tmp_path / "src")
    assert "refusing to build" in str(e.value)


def test_tree_digest_sees_content_names_and_the_executable_bit(tmp_path):
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "a.txt").write_text("a")
    base = sources.tree_digest(tree)
    (tree / "a.txt").chmod(0o755)
    assert sources.tree_digest(tree) != base
    (tree / "a.txt").chmod(0o644)
    assert sources.tree_digest(tree) == base
    (tree / "a.txt").rename(tree / "b.txt")
    assert sources.tree_digest(tree) != base
    (tree / "b.txt").rename(tree / "a.txt")
    (tree / "a.txt").write_text("A")
    assert sources.tree_digest(tree) != base


def test_a_build_tree_matches_its_sdist_until_a_source_file_changes(tmp_path):
    tree = tmp_path / "pkg-1.0"
    (tree / "pkg.egg-info").mkdir(parents=True)
    (tree / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (tree / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\n")
    archive = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(tree, arcname=tree.name)
    dest = tmp_path / "src"
    root = sources.unpack_sdist(archive, dest)
    assert sources.sdist_tree_matches(archive, dest) == root
    # What a build adds, and setuptools rewriting the egg-info, keep the match.
    (root / "build" / "temp").mkdir(parents=True)
    (root / "build" / "temp" / "a.o").write_bytes(b"\x7fELF")
    (root / "pkg.egg-info" / "PKG-INFO").write_text("Name: pkg\nVersion: 1.0\n")
    assert sources.sdist_tree_matches(archive, dest) == root
    (root / "setup.py").write_text("from setuptools import setup\nsetup(name='other')\n")
    assert sources.sdist_tree_matches(archive, dest) is None
    (root / "setup.py").unlink()
    assert sources.sdist_tree_matches(archive, dest) is None


def test_a_local_folders_bytecode_is_no_part_of_its_source(tmp_path):
    """Importing a file of a local folder (a test, a user) leaves __pycache__ beside it: placed and carried trees skip
    it, so the recipe's tree digest still holds and the bundle's tar is the same."""
    folder = tmp_path / "recipes" / "probe" / "src"
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text("print('probe')\n")
    digest = sources.tree_digest(folder)
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "setup.cpython-312.pyc").write_bytes(b"\x00bytecode")
    assert sources.tree_digest(folder) != digest  # the folder as it stands now
    local = sources.LocalDir("probe", folder.parent / "recipe.toml", "src", "1.0", digest)
    placed = local.place(local.fetch("1.0", tmp_path / "work"), tmp_path / "placed")
    assert sorted(p.name for p in placed.rglob("*")) == ["setup.py"]
    carried = local.carry("1.0", folder, tmp_path)
    with tarfile.open(carried) as tar:
        assert tar.getnames() == ["setup.py"]
    assert sources.tree_digest(local.place(carried, tmp_path / "from-tar")) == digest


def test_a_placed_git_tree_stays_resumable_while_its_placed_files_digest_to_the_pin(git_repo, tmp_path):
    """A stopped build's tree is taken up again while the files placed still digest to tree_sha256 (the build's own
    files beside them are not counted); an edited, removed or re-moded source makes a fresh tree."""
    repo, commit, digest = git_repo
    recipe = git_recipe(tmp_path, commit, digest)
    dest = tmp_path / "build-upstream" / "src"
    out = export(recipe, repo, dest)
    assert recipe.source.resumable and recipe.source.intact(repo, dest) == out
    (out / "build" / "temp").mkdir(parents=True)
    (out / "build" / "temp" / "k.o").write_bytes(b"\x7fELF")
    (out / "upstream.egg-info").mkdir()
    assert recipe.source.intact(repo, dest) == out
    (out / "build.sh").chmod(0o644)
    assert recipe.source.intact(repo, dest) is None
    (out / "build.sh").chmod(0o755)
    assert recipe.source.intact(repo, dest) == out
    (out / "csrc" / "k.cu").write_text("__global__ void k() { /* edited */ }\n")
    assert recipe.source.intact(repo, dest) is None
    (out / "csrc" / "k.cu").unlink()
    assert recipe.source.intact(repo, dest) is None


def test_a_local_folder_tree_without_its_list_of_placed_files_is_never_resumed(tmp_path):
    """The list is written only once the placed tree digests to the pin: a tree a refused or older build left, or one
    whose list is gone, starts over."""
    folder = tmp_path / "recipes" / "probe" / "src"
    folder.mkdir(parents=True)
    (folder / "setup.py").write_text("print('probe')\n")
    local = sources.LocalDir("probe", folder.parent / "recipe.toml", "src", "1.0", sources.tree_digest(folder))
    dest = tmp_path / "build-probe" / "src"
    out = local.place(local.fetch("1.0", tmp_path / "work"), dest)
    assert (dest / sources.PLACED_FILES).read_text() == "setup.py\n"
    assert local.intact(folder, dest) == out
    (dest / sources.PLACED_FILES).unlink()
    assert local.intact(folder, dest) is None
    wrong = sources.LocalDir("probe", folder.parent / "recipe.toml", "src", "1.0", "0" * 64)
    with pytest.raises(UserError, match="refusing to build"):
        wrong.place(local.fetch("1.0", tmp_path / "work"), tmp_path / "refused" / "src")
    assert not (tmp_path / "refused" / "src" / sources.PLACED_FILES).exists()


def test_files_digest_is_tree_digest_over_the_files_named(tmp_path):
    """Sorted as tree_digest always sorted (by path parts: "a/x" before "a-b/x"), so the pins of every committed
    recipe hold."""
    for rel in ("a/x", "a-b/x", "a.b", "z"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    files = sources.tree_files(tmp_path)
    assert sources.files_digest(tmp_path, list(reversed(files))) == sources.tree_digest(tmp_path)
    (tmp_path / "new").write_text("added")
    assert sources.files_digest(tmp_path, files) != sources.tree_digest(tmp_path)
    assert sources.files_digest(tmp_path, [*files, "gone"]) is None
