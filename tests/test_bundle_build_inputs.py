"""verlenv bundle --build-inputs / --toolkit, and verlenv build --bundle: a build's verified sources (a local folder,
a PyPI sdist, a git commit) and a CUDA_HOME carried in a bundle, checked like every bundle file, and built from on a
node that reaches no index. The catalog is tests/data/build-inputs (its README says where each source comes from)."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from test_bundle import (  # noqa: F401 (cache: a fixture)
    ROOT,
    UV,
    _bare_bootstrap,
    _no_network_env,
    _python312,
    _run,
    _verlenv,
    cache,
)
from verlenv.bundle import build_inputs, offline
from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.native import recipes
from verlenv.native.sources import sha256_file, tree_digest

DATA = Path(__file__).parent / "data" / "build-inputs"
EXT = Path(__file__).parent / "data" / "ext"
NVCC_12_5 = Path(__file__).parent / "data" / "nvcc" / "debian-12.5.40.txt"
# Fixed, so the commit is the one recipes/git-probe/recipe.toml pins on every machine.
GIT_ENV = {"GIT_AUTHOR_NAME": "verlenv-test", "GIT_AUTHOR_EMAIL": "test@verlenv.invalid",
           "GIT_COMMITTER_NAME": "verlenv-test", "GIT_COMMITTER_EMAIL": "test@verlenv.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def make_root(dest: Path) -> Path:
    """The catalog, its recipes and the local-folder source, copied into a project root."""
    top = {"git-probe", "README.md", "debian-packages.txt"}  # the repository's files and the notes stay here
    shutil.copytree(DATA, dest, ignore=lambda folder, names: top & set(names) if Path(folder) == DATA else set())
    shutil.copytree(EXT / "recipes" / "cuda-ext-probe", dest / "recipes" / "cuda-ext-probe")
    shutil.copytree(EXT / "cuda-ext-probe", dest / "cuda-ext-probe", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A real git repository of git-probe holding the commit its recipe pins, and nothing about it on any index."""
    repo = tmp_path_factory.mktemp("git") / "git-probe"
    shutil.copytree(DATA / "git-probe", repo)
    env = {**os.environ, **GIT_ENV}
    for cmd in (["init", "-q"], ["add", "."], ["-c", "commit.gpgsign=false", "commit", "-q", "-m", "git-probe 0.1"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env)
    pinned = recipes.load(DATA, "git-probe").source.commit
    assert _run(["git", "-C", str(repo), "rev-parse", "HEAD"]).stdout.strip() == pinned
    return repo


def stand_in_toolkit(dest: Path) -> Path:
    """Test double: a CUDA_HOME laid out as scripts/debian-cuda-home.sh makes it (bin/, lib -> lib64, the
    provenance file), whose bin/nvcc prints Debian's real nvcc 12.5 banner; no real nvcc is needed where nothing is
    compiled with it."""
    (dest / "bin").mkdir(parents=True)
    (dest / "lib64").mkdir()
    (dest / "lib").symlink_to("lib64")
    shutil.copy(NVCC_12_5, dest / "bin" / "nvcc-version.txt")
    nvcc = dest / "bin" / "nvcc"
    nvcc.write_text('#!/bin/sh\ncat "$(dirname "$0")/nvcc-version.txt"\n')
    nvcc.chmod(0o755)
    (dest / "lib64" / "README").write_text("a stand-in for libcudart\n")
    shutil.copy(DATA / "debian-packages.txt", dest / "debian-packages.txt")
    return dest


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The catalog's root with the real `uv pip compile --generate-hashes` lock of its four pins."""
    _python312()
    root = make_root(tmp_path_factory.mktemp("project") / "root")
    (root / "locks").mkdir()
    reqs = stacks.load(root / "stacks.toml").variant("tiny", "fsdp").requirements
    (root / "in.txt").write_text("".join(f"{r}\n" for r in reqs))
    r = _run([UV, "pip", "compile", "--no-config", "--generate-hashes", "--quiet", "--python-version", "3.12",
              "--python-platform", "x86_64-manylinux_2_28", str(root / "in.txt"),
              "-o", str(root / "locks" / "tiny-fsdp.linux-64.txt")])
    if r.returncode != 0:
        pytest.skip(f"PyPI unreachable: {r.stderr.strip()[-200:]}")
    return root


@pytest.fixture(scope="module")
def bundle(project, cache, repo, tmp_path_factory) -> Path:  # noqa: F811 (cache: the fixture imported above)
    toolkit = stand_in_toolkit(tmp_path_factory.mktemp("toolkit") / "cuda-12.5-debian")
    out = project / "bundles" / "inputs"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--no-built", "--build-inputs",
                 "--source", f"git-probe={repo}", "--toolkit", str(toolkit), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def one_line(r: subprocess.CompletedProcess, command: str) -> str:
    lines = [line for line in r.stderr.splitlines() if line.startswith(f"verlenv {command}:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.network
def test_each_source_and_the_toolkit_are_listed_with_their_sha256(project, bundle, repo):
    manifest = json.loads((bundle / "manifest.json").read_text())
    carried = {e["distribution"]: e for e in manifest["files"] if e["origin"] == build_inputs.SOURCE}
    assert sorted(carried) == ["cuda-ext-probe", "docopt", "git-probe"]
    for name, e in carried.items():
        source = recipes.load(project, name).source
        assert e["sha256"] == sha256_file(bundle / e["file"]) and e["kind"] == source.kind
        assert e["source"] == source.source_id(e["version"]) and e["variants"] == ["fsdp"]
    assert carried["docopt"]["file"] == "sources/docopt-0.6.2.tar.gz"
    assert carried["docopt"]["sha256"] == recipes.load(project, "docopt").source.sha256["0.6.2"]  # the sdist itself
    # git-probe travels as the commit's own `git archive`: no clone is needed where it lands.
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", "HEAD"], capture_output=True,
                             check=True).stdout
    assert (bundle / carried["git-probe"]["file"]).read_bytes() == archive
    assert manifest["variants"]["fsdp"]["sources"] == ["cuda-ext-probe", "docopt", "git-probe"]
    assert manifest["variants"]["fsdp"]["built"] == "left out (--no-built)"
    [toolkit] = [e for e in manifest["files"] if e["origin"] == build_inputs.TOOLKIT]
    assert toolkit["file"] == build_inputs.TOOLKIT_FILE and toolkit["version"] == "12.5.40"
    assert manifest["toolkit"]["nvcc"] == "12.5.40" and manifest["toolkit"]["files"] == 5
    assert manifest["toolkit"]["debian_packages"] == (DATA / "debian-packages.txt").read_text().splitlines()
    offline.check(bundle)  # checked like every other file of the bundle


@pytest.mark.network
def test_the_bootstrap_checks_them_and_unpacks_the_toolkit_offline(project, bundle, tmp_path):
    """From parts, with nothing but Python 3.12 and no network: the toolkit lands in BUNDLE/.toolkit, runnable."""
    _, _, bootstrap = _bare_bootstrap(bundle, project, tmp_path)
    r = bootstrap()
    assert r.returncode == 0, r.stderr
    home = tmp_path / "parts" / "bundle" / build_inputs.TOOLKIT_DIR
    assert f"toolkit: nvcc 12.5.40 unpacked into {home}" in r.stderr
    assert "release 12.5, V12.5.40" in _run([str(home / "bin" / "nvcc"), "--version"]).stdout
    assert (home / "lib").is_symlink() and os.readlink(home / "lib") == "lib64"
    assert (home / "debian-packages.txt").read_text() == (DATA / "debian-packages.txt").read_text()
    # The sources stay packed in the bundle; the parts carried them like any other file.
    assert sorted(p.name for p in (tmp_path / "parts" / "bundle" / "sources").iterdir()) == sorted(
        p.name for p in (bundle / "sources").iterdir())
    r = bootstrap()
    assert r.returncode == 0 and "unpacked into" not in r.stderr  # once: the second bootstrap finds it made


@pytest.mark.network
def test_a_tampered_carried_source_or_toolkit_is_refused_in_one_line(project, cache, bundle, tmp_path):  # noqa: F811
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    sdist = copy / "sources" / "docopt-0.6.2.tar.gz"
    data = bytearray(sdist.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sdist.write_bytes(bytes(data))
    build = ("build", "docopt", "--bundle", str(copy), "--python", sys.executable, "--archs", "9.0", "--no-install",
             "--wheelhouse", str(tmp_path / "wheelhouse"))
    r = _verlenv(project, cache, *build, env=_no_network_env(tmp_path))
    assert r.returncode == 1
    assert one_line(r, "build") == (f"verlenv build: {sdist}: sha256 differs from the manifest; the file was altered "
                                    "or truncated")
    with pytest.raises(UserError, match="docopt-0.6.2.tar.gz: sha256 differs from the manifest"):
        offline.check(copy)  # and the bootstrap's install refuses it as it refuses a changed wheel
    assert not (tmp_path / "wheelhouse").exists()

    shutil.copy(bundle / "sources" / "docopt-0.6.2.tar.gz", sdist)
    toolkit = copy / build_inputs.TOOLKIT_FILE
    toolkit.write_bytes(toolkit.read_bytes()[:-1] + b"\x01")
    r = _verlenv(project, cache, *build, env=_no_network_env(tmp_path))
    assert r.returncode == 1 and "cuda-home.tar.gz: sha256 differs from the manifest" in one_line(r, "build")
    assert not (copy / build_inputs.TOOLKIT_DIR).exists()


@pytest.mark.network
def test_a_bundle_without_the_source_says_where_to_get_one(project, cache, tmp_path):  # noqa: F811
    """A bundle made before --build-inputs existed (or without it) still installs, and a build from it says what
    is missing instead of reaching for an index."""
    out = tmp_path / "plain"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--no-built", "--out", str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert not [e for e in manifest["files"] if e["origin"] in (build_inputs.SOURCE, build_inputs.TOOLKIT)]
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--prefix", str(tmp_path / "env"),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 0 and "drift check lock/match: pass" in r.stderr, r.stderr
    r = _verlenv(project, cache, "build", "docopt", "--python", sys.executable, "--archs", "9.0",
                 env={**_no_network_env(tmp_path), "VERLENV_BUNDLE": str(out)})
    assert r.returncode == 2
    assert one_line(r, "build") == (f"verlenv build: the bundle {out} carries no source of docopt; make it with "
                                    "`verlenv bundle ... --build-inputs`, or pass --source")


def test_a_git_recipe_needs_its_clone_before_anything_is_fetched(tmp_path):
    root = make_root(tmp_path / "root")
    empty = tmp_path / "cache"
    r = _verlenv(root, empty, "bundle", "--stack", "tiny", "--no-built", "--build-inputs", "--out", str(tmp_path / "b"))
    assert r.returncode == 2
    assert one_line(r, "bundle") == (
        "verlenv bundle: --build-inputs: git-probe is built from git https://example.invalid/git-probe at "
        "0aa2bf7449d0, which a bundle takes from a local copy; pass --source git-probe=<a clone or mirror holding "
        "the pinned commit>")
    assert not empty.exists() and not (tmp_path / "b").exists()


def test_what_is_carried_is_what_the_bundle_leaves_out(tmp_path, repo):
    root = make_root(tmp_path / "root")
    variant = stacks.load(root / "stacks.toml").variant("tiny", "fsdp")
    everything = {"fsdp": {"cuda-ext-probe", "docopt", "git-probe"}}
    assert build_inputs.wanted(root, [variant], everything, {}) == []
    wanted = build_inputs.wanted(root, [variant], {"fsdp": {"cuda-ext-probe", "git-probe"}}, {})
    assert ([(w.recipe.package, w.version, w.variants, w.given) for w in wanted]
            == [("docopt", "0.6.2", ("fsdp",), None)])
    with pytest.raises(UserError) as e:
        build_inputs.wanted(root, [variant], everything, {"git-probe": repo})
    assert str(e.value) == ("--source git-probe=...: not a source build the bundle leaves out; valid: none (every "
                            "wheel is carried)")
    assert build_inputs.parse_given([f"Git_Probe={repo}"]) == {"git-probe": repo}
    for bad in ("git-probe", "=x", "git-probe="):
        with pytest.raises(UserError, match="not NAME=PATH"):
            build_inputs.parse_given([bad])


def test_the_toolkit_tar_is_reproducible_and_must_be_relocatable(tmp_path):
    home = stand_in_toolkit(tmp_path / "home")
    first = build_inputs.pack_toolkit(home, tmp_path / "a.tar.gz")
    os.utime(home / "bin" / "nvcc", (0, 12345))
    build_inputs.pack_toolkit(home, tmp_path / "b.tar.gz")
    assert sha256_file(tmp_path / "a.tar.gz") == sha256_file(tmp_path / "b.tar.gz")
    assert first == {"source": str(home), "nvcc": "12.5.40", "files": 5,
                     "debian_packages": (DATA / "debian-packages.txt").read_text().splitlines()}
    with tarfile.open(tmp_path / "a.tar.gz") as t:
        assert {(m.uid, m.mtime) for m in t.getmembers()} == {(0, 0)}
    (home / "lib64" / "libcudart.so").symlink_to("/usr/lib/x86_64-linux-gnu/libcudart.so.12")
    with pytest.raises(UserError) as e:
        build_inputs.pack_toolkit(home, tmp_path / "c.tar.gz")
    assert str(e.value) == (f"--toolkit {home}: lib64/libcudart.so links to /usr/lib/x86_64-linux-gnu/libcudart.so.12, "
                            "outside the folder; a carried CUDA_HOME must be relocatable")
    (home / "lib64" / "libcudart.so").unlink()
    (home / "lib64" / "up").symlink_to("../..")
    with pytest.raises(UserError, match="lib64/up links to ../.., outside the folder"):
        build_inputs.pack_toolkit(home, tmp_path / "c.tar.gz")


def test_a_toolkit_is_unpacked_once_and_again_when_it_changed(tmp_path):
    bundle = tmp_path / "bundle"
    home = stand_in_toolkit(tmp_path / "home")
    build_inputs.pack_toolkit(home, bundle / build_inputs.TOOLKIT_FILE)
    tar = bundle / build_inputs.TOOLKIT_FILE

    def manifest() -> dict:
        return {"files": [{"file": build_inputs.TOOLKIT_FILE, "origin": build_inputs.TOOLKIT, "version": "12.5.40",
                           "sha256": sha256_file(tar), "size": tar.stat().st_size}]}

    unpacked = build_inputs.unpack_toolkit(bundle, manifest())
    assert unpacked == bundle / build_inputs.TOOLKIT_DIR and tree_digest(unpacked / "bin") == tree_digest(home / "bin")
    (unpacked / "bin" / "marker").write_text("still the first unpack\n")
    assert build_inputs.unpack_toolkit(bundle, manifest()) == unpacked and (unpacked / "bin" / "marker").exists()
    (home / "bin" / "nvcc-version.txt").write_text((EXT.parent / "nvcc" / "debian-12.4.131.txt").read_text())
    build_inputs.pack_toolkit(home, tar)
    build_inputs.unpack_toolkit(bundle, manifest())
    assert not (unpacked / "bin" / "marker").exists()
    assert "release 12.4" in _run([str(unpacked / "bin" / "nvcc")]).stdout
    assert build_inputs.unpack_toolkit(bundle, {"files": []}) is None


def copied_pypi_cuda_home(python: str, dest: Path) -> Path:
    """A real, relocatable CUDA_HOME: the files of the env's PyPI CUDA 13.0 compiler wheels (nvcc, cicc, ptxas, the
    headers, cudart) copied into the layout torch reads, with relative links only; 0.2 GB."""
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    cu13 = Path(purelib) / "nvidia" / "cu13"
    for name in ("bin", "nvvm", "include"):
        shutil.copytree(cu13 / name, dest / name, symlinks=True)
    (dest / "lib64").mkdir()
    for name in ("libcudart.so.13", "libcudart_static.a", "libcudadevrt.a"):
        shutil.copy2(cu13 / "lib" / name, dest / "lib64" / name)
    (dest / "lib64" / "libcudart.so").symlink_to("libcudart.so.13")
    (dest / "lib").symlink_to("lib64")
    (dest / "targets" / "x86_64-linux").mkdir(parents=True)
    (dest / "targets" / "x86_64-linux" / "include").symlink_to(Path("..", "..", "include"))
    (dest / "targets" / "x86_64-linux" / "lib").symlink_to(Path("..", "..", "lib64"))
    return dest


@pytest.mark.slow
@pytest.mark.network
def test_a_node_without_an_index_builds_from_the_bundle(project, cache, repo, tmp_path):  # noqa: F811
    """The whole path: a bundle of the three sources and a real CUDA_HOME (PyPI's nvcc 13.0, copied: here the build
    really compiles with it), split into parts, bootstrapped with a bare Python and no network, then the bundle's
    `nox -s build` (VERLENV_BUNDLE set) builds all three against the build-test env's torch 2.11.0+cu130, with every
    index unreachable: the real CUDA extension for sm_90 with the carried nvcc, docopt from its carried sdist,
    git-probe from its carried `git archive`. The bootstrap's own env is the tiny lock's (no torch), so the build
    targets the build-test env with --python. A plain build of the same checkout then hits the cache: the
    fingerprints are the ones a build without a bundle makes."""
    from test_build_env import torch_python

    torch = torch_python()
    home = copied_pypi_cuda_home(torch, tmp_path / "cuda-13.0-pypi")
    out = tmp_path / "bundle"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--no-built", "--build-inputs", "--source",
                 f"git-probe={repo}", "--toolkit", str(home), "--out", str(out), "--split", "56MiB")
    assert r.returncode == 0, r.stderr
    shutil.rmtree(out)  # the node gets the parts only

    python = os.path.realpath(_python312())
    dead = {**_no_network_env(tmp_path), "VERLENV_PYPI_SIMPLE": "http://index.invalid/simple",
            "PIP_INDEX_URL": "http://index.invalid/simple", "PIP_NO_INDEX": "1", "UV_OFFLINE": "1",
            "PATH": "/usr/bin:/bin", "VERLENV_ROOT": str(project), "PYTHONNOUSERSITE": "1"}
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME", "MAX_JOBS", "NVCC_THREADS", "TORCH_CUDA_ARCH_LIST",
                "PIP_FIND_LINKS", "VERLENV_BUNDLE", "VERLENV_WHEELHOUSE"):
        dead.pop(var, None)
    node = tmp_path / "bundle.parts"
    r = _run([python, "-S", "-m", "verlenv.bundle.bootstrap", str(node), "--prefix", str(tmp_path / "env"),
              "--python", python], env={**dead, "PYTHONPATH": str(ROOT / "src")}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    toolkit = node / "bundle" / build_inputs.TOOLKIT_DIR

    wheelhouse, records = tmp_path / "wheelhouse", tmp_path / "built.json"
    r = _run([str(node / "bundle" / ".tool" / "bin" / "nox"), "-f", str(ROOT / "noxfile.py"), "--envdir",
              str(tmp_path / "nox-envs"), "-s", "build", "--", "--python", torch, "--archs", "9.0", "--no-install",
              "--wheelhouse", str(wheelhouse), "--json", str(records)], env=dead, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 0, said
    built = {b["package"]: b for b in json.loads(records.read_text())}
    assert sorted(built) == ["cuda-ext-probe", "docopt", "git-probe"] and not any(b["cached"] for b in built.values())
    for b in built.values():
        tc = b["record"]["toolchain"]
        assert (tc["cuda_home"], tc["source"], tc["nvcc"], tc["warning"]) == (str(toolkit), "bundle", "13.0", None)
    assert built["cuda-ext-probe"]["record"]["cubins"] == {"cuda_ext_probe.cpython-312-x86_64-linux-gnu.so": [90]}
    assert Path(built["docopt"]["wheel"]).name == "docopt-0.6.2-py2.py3-none-any.whl"
    assert Path(built["git-probe"]["wheel"]).name.startswith("git_probe-0.1-")
    assert "cannot reach the package index" not in said

    # The same checkout without the bundle (sources from the recipe folder, PyPI, a clone): no rebuild, same keys.
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CONDA_PREFIX", "VIRTUAL_ENV", "MAX_JOBS")}
    r = _verlenv(project, cache, "build", "--python", torch, "--archs", "9.0", "--no-install", "--wheelhouse",
                 str(wheelhouse), "--json", str(tmp_path / "plain.json"), env=env)
    assert r.returncode == 0, r.stderr
    plain = {b["package"]: b for b in json.loads((tmp_path / "plain.json").read_text())}
    assert {p: (b["cached"], b["fingerprint"]) for p, b in plain.items()} == {
        p: (True, b["fingerprint"]) for p, b in built.items()}
