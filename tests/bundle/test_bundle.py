"""verlenv bundle / install --bundle: a real small bundle from PyPI (a cp312 manylinux wheel, pure wheels, an
sdist-only pin), installed with no network; tampering, parts, base subtraction, the source-built wheel choice,
the RECORD repair and the installer lock of install --bundle, and a kernel cache carried in the bundle."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from verlenv.bundle import make, offline, parts
from verlenv.catalog.pins import read_lock
from verlenv.doctor import facts as facts_mod
from verlenv.env import base_record, install
from verlenv.errors import UserError
from verlenv.native import wheelcache
from verlenv.verify.runner import installed_versions
from waiting import StreamLines

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
# pyyaml: a cp312 manylinux wheel; six, idna: pure; antlr4-python3-runtime 4.9.3 exists only as an sdist.
REQUIREMENTS = "six==1.16.0\nidna==3.10\npyyaml==6.0.2\nantlr4-python3-runtime==4.9.3\n"
CATALOG = """
default = "tiny"
[stacks.tiny]
description = "test catalog: four small pins"
python = "3.12"
cuda = "13.0"
min_driver = "580.65.06"
exclude_newer = "2026-10-15T00:00:00Z"
gpu_archs = ["9.0"]
cxx11_abi = true
toolkit = "pypi"
host_compiler = "gxx=13"
[stacks.tiny.variants.fsdp]
requirements = {requirements}
[stacks.tiny.variants.megatron]
requirements = {megatron}
"""
# The megatron variant: fsdp's pins and one more, as the real stacks' megatron locks are fsdp's plus TE & co.
MEGATRON_EXTRA = "packaging==24.1\n"


def _python312() -> str:
    try:
        return install.find_python("3.12")
    except UserError:
        pytest.skip("no Python 3.12 here: the test bundle is for cp312")


def _run(args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd)


def _no_network_env(tmp: Path) -> dict:
    """Any index or proxy use fails: an index that cannot resolve, a dead proxy, an empty uv cache."""
    return {**os.environ, "UV_INDEX_URL": "http://index.invalid/simple", "UV_CACHE_DIR": str(tmp / "uv-cache"),
            "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
            "ALL_PROXY": "http://127.0.0.1:9", "VERLENV_INDEX_URL": "http://index.invalid/simple"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project root with a tiny catalog and its real `uv pip compile --generate-hashes` lock."""
    _python312()
    root = tmp_path_factory.mktemp("project")
    reqs = [r for r in REQUIREMENTS.split()]
    (root / "stacks.toml").write_text(CATALOG.format(requirements=json.dumps(reqs),
                                                     megatron=json.dumps(reqs + MEGATRON_EXTRA.split())))
    (root / "locks").mkdir()
    for variant, text in (("fsdp", REQUIREMENTS), ("megatron", REQUIREMENTS + MEGATRON_EXTRA)):
        (root / f"in-{variant}.txt").write_text(text)
        r = _run([UV, "pip", "compile", "--no-config", "--generate-hashes", "--quiet", "--python-version", "3.12",
                  "--python-platform", "x86_64-manylinux_2_28", str(root / f"in-{variant}.txt"),
                  "-o", str(root / "locks" / f"tiny-{variant}.linux-64.txt")])
        if r.returncode != 0:
            pytest.skip(f"PyPI unreachable: {r.stderr.strip()[-200:]}")
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The download cache kept across runs, so a rerun fetches nothing."""
    path = Path(os.environ.get("VERLENV_TEST_CACHE", Path.home() / ".cache" / "verlenv-test" / "bundle"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _verlenv(project: Path, cache: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "VERLENV_ROOT": str(project), "VERLENV_CACHE": str(cache),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return _run([sys.executable, "-m", "verlenv", *args], env=env, cwd=project)


@pytest.fixture(scope="module")
def bundle(project, cache) -> Path:
    out = project / "bundles" / "tiny"
    # With the test tools: the bootstrap test runs `nox -s tests` from it offline.
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--tests", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _copy(bundle: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "bundle"
    shutil.copytree(bundle, dest)
    return dest


@pytest.mark.network
def test_bundle_holds_exactly_the_lock(project, bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    pins = read_lock(project / "locks" / "tiny-fsdp.linux-64.txt")
    env_files = {e["distribution"]: e for e in manifest["files"] if e["origin"] == "lock"}
    assert set(env_files) == set(pins)
    assert env_files["pyyaml"]["file"].startswith("wheels/PyYAML-6.0.2-cp312-cp312-manylinux")
    for name, e in env_files.items():
        locked = e.get("built_from", {}).get("sha256") or e["sha256"]
        assert f"sha256:{locked}" in pins[name].hashes
    antlr = env_files["antlr4-python3-runtime"]
    assert antlr["built_from"]["file"].endswith(".tar.gz") and antlr["file"].endswith("-py3-none-any.whl")
    tools = {e["distribution"]: e["version"] for e in manifest["files"] if e["origin"] == "tool"}
    # --tests: the tool wheels at this verlenv's own versions, and what the suite imports beside them.
    assert manifest["tests"] is True
    assert all(tools[name] == metadata.version(name) for name in make.TOOL_DISTS), tools
    assert {"pytest", "pytest-xdist", "pytest-timeout", "hypothesis", "jsonschema", "conda-lock", "py-rattler",
            "google-re2"} <= set(tools), sorted(tools)
    assert manifest["variants"]["fsdp"]["lock"]["sha256"] == make.sha256_file(project / "locks"
                                                                              / "tiny-fsdp.linux-64.txt")
    assert all(e["variants"] == ["fsdp"] for e in manifest["files"])
    assert (bundle / "tiny-fsdp.linux-64.txt").read_text() == (project / "locks" / "tiny-fsdp.linux-64.txt").read_text()


@pytest.mark.network
def test_install_from_bundle_uses_no_network(project, cache, bundle, tmp_path):
    prefix = tmp_path / "env"
    r = _verlenv(project, cache, "install", "--bundle", str(bundle), "--prefix", str(prefix),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "drift check lock/match: pass" in r.stderr
    assert list(prefix.glob("lib/python*/site-packages/yaml/__pycache__/*.pyc"))  # compiled at install, offline
    out = _run([str(prefix / "bin" / "python"), "-c",
                "import yaml, six, antlr4; print(yaml.__version__, six.__version__)"])
    assert out.stdout.split() == ["6.0.2", "1.16.0"]
    assert not any((tmp_path / "uv-cache").rglob("*.whl"))  # nothing came through an index into uv's cache


@pytest.mark.network
def test_tampered_file_changes_nothing(project, cache, bundle, tmp_path):
    copy = _copy(bundle, tmp_path)
    wheel = next((copy / "wheels").glob("six-*.whl"))
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    wheel.write_bytes(bytes(data))
    prefix = tmp_path / "env"
    r = _verlenv(project, cache, "install", "--bundle", str(copy), "--prefix", str(prefix),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 1
    assert "six-1.16.0-py2.py3-none-any.whl: sha256 differs from the manifest" in r.stderr
    assert not prefix.exists()


@pytest.mark.network
def test_incomplete_or_padded_bundle_is_refused(bundle, tmp_path):
    copy = _copy(bundle, tmp_path)
    shutil.copy(next((copy / "wheels").glob("idna-*.whl")), copy / "wheels" / "idna-9.9-py3-none-any.whl")
    with pytest.raises(UserError, match="idna-9.9-py3-none-any.whl: not in the manifest"):
        offline.check(copy)
    (copy / "wheels" / "idna-9.9-py3-none-any.whl").unlink()
    manifest = json.loads((copy / "manifest.json").read_text())
    # The lock's idna only: the test tools carry an idna of their own (requests').
    manifest["files"] = [e for e in manifest["files"] if (e["distribution"], e["origin"]) != ("idna", "lock")]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    next((copy / "wheels").glob("idna-*.whl")).unlink()
    with pytest.raises(UserError, match=r"lacks 1 of the lock's pins \(idna\)"):
        offline.check(copy)


@pytest.mark.network
def test_manifest_cannot_vouch_for_a_file_outside_the_lock(bundle, tmp_path):
    copy = _copy(bundle, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    six = next(e for e in manifest["files"] if e["distribution"] == "six")
    other = copy / six["file"]
    other.write_bytes(b"not the locked wheel")
    six.update(sha256=make.sha256_file(other), size=other.stat().st_size)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="is not among tiny-fsdp.linux-64.txt's hashes for six"):
        offline.check(copy)


@pytest.mark.network
def test_parts_round_trip_and_each_fault_names_the_part(bundle, tmp_path):
    written = parts.split(bundle, tmp_path / "parts", parts.parse_size("64KiB"))
    assert len(written) > 3 and all(size <= 64 * 1024 for _, _, size in written)
    assembled = offline.open_bundle(tmp_path / "parts")
    assert offline.check(assembled)["variants"] == json.loads((bundle / "manifest.json").read_text())["variants"]

    def fresh() -> Path:
        dest = tmp_path / "faulty"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(tmp_path / "parts", dest, ignore=shutil.ignore_patterns("bundle"))
        return dest

    folder = fresh()
    (folder / parts.PART.format(2)).unlink()
    with pytest.raises(UserError, match="part bundle.tar.part0002 is missing"):
        offline.open_bundle(folder)
    folder = fresh()
    a, b = folder / parts.PART.format(2), folder / parts.PART.format(3)
    a.rename(folder / "swap"), b.rename(a), (folder / "swap").rename(b)
    with pytest.raises(UserError, match="part bundle.tar.part0002 fails its sha256"):
        offline.open_bundle(folder)
    folder = fresh()
    with open(folder / parts.PART.format(3), "r+b") as f:
        f.seek(100)
        f.write(b"\0corrupt")
    with pytest.raises(UserError, match="part bundle.tar.part0003 fails its sha256"):
        offline.open_bundle(folder)
    assert not (folder / parts.ASSEMBLED).exists()


def _dists(env: Path) -> set[str]:
    """The distributions an env's python sees, as verify reads them (the test envs have no pip)."""
    return set(installed_versions(facts_mod.gather(env / "bin" / "python")))


@pytest.mark.network
def test_base_subtraction_and_its_check(project, cache, bundle, tmp_path):
    freeze = tmp_path / "freeze.txt"
    # six as locked (left out); idna at another version and pyyaml as a local build: both bundled, reported;
    # pyelftools, which the lock does not pin, the base env's own (any real wheel at hand: the bundle's tool one).
    elftools = next((bundle / "tool").glob("pyelftools-*.whl"))
    elftools_version = elftools.name.split("-")[1]
    freeze.write_text(f"six==1.16.0\nidna==3.7\npyyaml==6.0.2+local\npyelftools=={elftools_version}\n")
    out = tmp_path / "based"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--out", str(out), "--base", str(freeze))
    assert r.returncode == 0, r.stderr
    assert "idna: base has 3.7, the lock pins 3.10; bundled" in r.stderr
    assert "pyyaml: base has 6.0.2+local, the lock pins 6.0.2; bundled" in r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    origins = {e["distribution"]: e["origin"] for e in manifest["files"] if e["origin"] != "tool"}
    assert origins == {"six": "base", "idna": "lock", "pyyaml": "lock", "antlr4-python3-runtime": "lock"}
    assert not list((out / "wheels").glob("six-*"))
    assert manifest["base"]["others"] == {"pyelftools": elftools_version}

    python = _python312()
    lacking = tmp_path / "lacking"
    install.create_venv(lacking, python)
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--python", str(lacking / "bin" / "python"),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 2 and "lacks 1 of the bundle's base distributions: six 1.16.0 (found nothing)" in r.stderr
    assert "pyyaml" not in _dists(lacking)

    having = tmp_path / "having"
    install.create_venv(having, python)
    six = next((bundle / "wheels").glob("six-*.whl"))
    subprocess.run([UV, "pip", "install", "--python", str(having / "bin" / "python"), "--offline", str(six),
                    str(elftools)], check=True, capture_output=True)
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--python", str(having / "bin" / "python"),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 0, r.stderr
    # The base env's own pyelftools is not a difference from the lock: the install recorded it as the base's.
    assert "drift check lock/match: pass" in r.stderr and "1 others are the base env's" in r.stderr
    record = json.loads((having / base_record.RECORD_FILE).read_text())
    assert record["others"] == {"pyelftools": elftools_version}
    assert {"pyelftools", "six", "pyyaml"} <= _dists(having)  # the bundle's added, the base's kept

    # One the base did not have is still a difference.
    mdurl = next((out / "tool").glob("mdurl-*.whl"))
    subprocess.run([UV, "pip", "install", "--python", str(having / "bin" / "python"), "--offline", str(mdurl)],
                   check=True, capture_output=True)
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--python", str(having / "bin" / "python"),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 1 and "1 not in the lock (mdurl)" in r.stderr, r.stderr


@pytest.mark.network
def test_dry_run_downloads_nothing(project, tmp_path):
    empty = tmp_path / "cache"
    kernels = _kernel_folder(tmp_path / "kernels")
    r = _verlenv(project, empty, "bundle", "--stack", "tiny", "--out", str(tmp_path / "b"), "--dry-run",
                 "--kernel-cache", str(kernels))
    assert r.returncode == 0, r.stderr
    assert "antlr4-python3-runtime==4.9.3  antlr4-python3-runtime-4.9.3.tar.gz" in r.stdout
    assert "MiB to fetch" in r.stdout.splitlines()[-2]
    assert r.stdout.splitlines()[-1].startswith(f"kernel cache {kernels}: 3 files")
    assert not (tmp_path / "b").exists() and not list(empty.rglob("*.whl")) and not (empty / "files").exists()


# A test file the bundle's `nox -s tests` runs: its imports are the bundle's test tools; its network test is
# deselected by the session's offline default.
OFFLINE_PROBE = """
import pytest


def test_the_suite_runs_on_the_bundles_tools():
    import _pytest, conda_lock, hypothesis, jsonschema, rattler, re2, xdist
    import verlenv

    for module in (_pytest, xdist, hypothesis, jsonschema, conda_lock, rattler, re2):
        assert module.__file__.startswith({site!r}), module.__file__
    assert verlenv.__file__.startswith({src!r}), verlenv.__file__


@pytest.mark.network
def test_a_network_test_is_left_out():
    raise AssertionError("ran although the session runs `not network` offline")
"""


def _bare_bootstrap(bundle: Path, project: Path, tmp: Path):
    """The bundle split into tmp/parts, to be bootstrapped into tmp/env by nothing but Python 3.12 (no
    site-packages: -S) and the source tree, with no network: (that python, its environment, a call that runs the
    bootstrap and returns its process)."""
    parts.split(bundle, tmp / "parts", parts.parse_size("4MiB"))
    python = os.path.realpath(_python312())
    env = {**_no_network_env(tmp), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"),
           "VERLENV_ROOT": str(project), "PYTHONNOUSERSITE": "1"}
    env.pop("VIRTUAL_ENV", None)

    def bootstrap() -> subprocess.CompletedProcess:
        return _run([python, "-S", "-m", "verlenv.bundle.bootstrap", str(tmp / "parts"), "--prefix", str(tmp / "env"),
                     "--python", python], env=env, cwd=tmp)

    return python, env, bootstrap


@pytest.mark.network
def test_bootstrap_installs_split_bundle_with_a_bare_python(project, bundle, tmp_path):
    """Nothing but Python 3.12 (no site-packages: -S), the source tree and the parts; no network."""
    python, env, bootstrap = _bare_bootstrap(bundle, project, tmp_path)
    prefix = tmp_path / "env"
    r = bootstrap()
    assert r.returncode == 0, r.stderr
    assert "drift check lock/match: pass" in r.stderr  # the tool wheels did not leak into the target env
    listed = _run([UV, "pip", "list", "--python", str(prefix / "bin" / "python"), "--offline"]).stdout
    assert "antlr4-python3-runtime" in listed and "pyelftools" not in listed
    tool = f"{ROOT / 'src'}:{tmp_path / 'parts' / 'bundle' / '.tool' / 'site'}"
    r = _run([python, "-S", "-c", "from verlenv.verify.report import print_table; import rich.table, elftools, yaml"],
             env={**env, "PYTHONPATH": tool})
    assert r.returncode == 0, r.stderr  # verify runs on the node with the same tool wheels

    # The bundle's nox runs the project's sessions offline: no venv made, verlenv from the bundle's tools.
    report, envdir = tmp_path / "verify.json", tmp_path / "nox-envs"
    node_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # the launchers set the tools' path themselves
    r = _run([str(tmp_path / "parts" / "bundle" / ".tool" / "bin" / "nox"), "-f", str(ROOT / "noxfile.py"),
              "--envdir", str(envdir), "-s", "verify", "--", "--stack", "tiny", "--report", str(report)],
             env=node_env, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert "verlenv install --bundle" in said and "drift check lock/match: pass" in said, said
    assert not envdir.exists()
    data = json.loads(report.read_text())
    assert data["launcher"] == "nox" and data["stack"] == "tiny"
    # The tiny stack has no torch: its verify fails; what matters here is that nox ran it, offline.
    assert r.returncode == 1 and data["result"] == "fail"

    # The suite runs offline from the bundle's test tools (`verlenv bundle --tests`): pytest, its plugins and what
    # the tests import come from the bundle, verlenv from this tree; without a -m of the user's, `not network`.
    site = tmp_path / "parts" / "bundle" / ".tool" / "site"
    probe = tmp_path / "suite" / "test_offline.py"
    probe.parent.mkdir()
    probe.write_text(OFFLINE_PROBE.format(site=str(site), src=str(ROOT / "src")))
    r = _run([str(site.parent / "bin" / "nox"), "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-s",
              "tests", "--", "-n", "0", "-p", "no:cacheprovider", str(probe)],
             env=node_env, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 0, said
    assert "1 passed, 1 deselected" in said, said
    assert not envdir.exists()

    # A node's python with pytest plugins of its own (a GPU host's torch venv): the suite runs on the bundle's only.
    # A plugin planted in a venv's site-packages would fail every run it is loaded into.
    node = tmp_path / "node-venv"
    subprocess.run([UV, "venv", "-q", "--offline", str(node), "--python", python], check=True,
                   env={**env, "PATH": os.environ["PATH"]})
    site_packages = next(node.glob("lib/python3*/site-packages"))
    (site_packages / "planted_plugin.py").write_text("raise RuntimeError(\"a node's own pytest plugin was loaded\")\n")
    info = site_packages / "planted_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: planted-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nplanted = planted_plugin\n")
    launcher = (site.parent / "bin" / "nox").read_text().replace(python, str(node / "bin" / "python"))
    (tmp_path / "nox-on-node").write_text(launcher)
    r = _run(["sh", str(tmp_path / "nox-on-node"), "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-s",
              "tests", "--", "-n", "2", "-p", "no:cacheprovider", str(probe)],
             env=node_env, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 0 and "2 workers [1 item]" in said and "1 passed" in said, said


@pytest.mark.network
def test_one_bundle_of_two_variants_carries_shared_files_once(project, cache, tmp_path):
    out = tmp_path / "both"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--variant", "fsdp", "--variant", "megatron", "--out",
                 str(out))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["variants"]) == ["fsdp", "megatron"]
    # Without --tests, the tools verlenv itself runs on, no more.
    assert manifest["tests"] is False
    assert {e["distribution"] for e in manifest["files"] if e["origin"] == "tool"} == set(make.TOOL_DISTS)
    serves = {e["distribution"]: e["variants"] for e in manifest["files"] if e["origin"] == "lock"}
    assert serves["six"] == ["fsdp", "megatron"] and serves["packaging"] == ["megatron"]
    assert len(list((out / "wheels").glob("six-*.whl"))) == 1
    for variant in ("fsdp", "megatron"):
        assert ((out / f"tiny-{variant}.linux-64.txt").read_bytes()
                == (project / "locks" / f"tiny-{variant}.linux-64.txt").read_bytes())

    r = _verlenv(project, cache, "install", "--bundle", str(out), "--prefix", str(tmp_path / "none"),
                 env=_no_network_env(tmp_path))
    assert r.returncode == 2 and "holds the variants fsdp, megatron; choose one with --variant" in r.stderr
    assert not (tmp_path / "none").exists()
    for variant, has_packaging in (("fsdp", False), ("megatron", True)):
        prefix = tmp_path / variant
        r = _verlenv(project, cache, "install", "--bundle", str(out), "--variant", variant, "--prefix", str(prefix),
                     env=_no_network_env(tmp_path))
        assert r.returncode == 0, r.stderr
        assert "drift check lock/match: pass" in r.stderr
        listed = _run([UV, "pip", "list", "--python", str(prefix / "bin" / "python"), "--offline"]).stdout
        assert ("packaging" in listed) == has_packaging
        assert json.loads((prefix / install.MARKER).read_text())["variant"] == variant
    with pytest.raises(UserError, match="holds tiny fsdp, megatron, not geo"):
        offline.check(out, "geo")


@pytest.mark.network
def test_without_names_a_source_built_package_of_the_variants(project, cache, tmp_path):
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--without", "flash-attn", "--out", str(tmp_path / "b"))
    assert r.returncode == 2
    assert "--without flash-attn: not a source-built package of tiny-fsdp; valid: none" in r.stderr
    assert not (tmp_path / "b").exists()


def test_parse_size():
    assert parts.parse_size("56MiB") == 56 * 1024**2
    assert parts.parse_size("58M") == 58 * 1024**2
    assert parts.parse_size("100MB") == 100 * 1000**2
    assert parts.parse_size("4096") == 4096
    for bad in ("", "0", "56 parsecs", "-1M"):
        with pytest.raises(ValueError, match="not a size"):
            parts.parse_size(bad)


def _stand_in_wheel(dest: Path) -> Path:
    """A real, minimal wheel standing in for a compiled flash-attn (the cache only hashes and carries it)."""
    wheel = dest / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("flash_attn-2.8.3.post2.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3.post2\n")
    return wheel


def test_find_built_matches_torch_python_cuda_and_archs(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    inputs = {"package": "flash-attn", "version": "2.8.3.post2", "source": "x", "torch": "2.11.0+cu130", "cuda": "13.0",
              "python_tag": "cp312", "cxx11_abi": True, "archs": ["9.0"], "recipe": "r"}
    wheel = _stand_in_wheel(tmp_path)
    wheelcache.store(wheelhouse, "flash-attn", wheelcache.fingerprint(inputs), wheel, {"inputs": inputs})
    both = {**inputs, "archs": ["8.0", "9.0"]}
    wheelcache.store(wheelhouse, "flash-attn", wheelcache.fingerprint(both), wheel, {"inputs": both})
    find = lambda **kw: make.find_built(wheelhouse, "flash-attn", **{"version": "2.8.3.post2", "torch": "2.11.0",  # noqa: E731
                                                                   "cuda": "13.0", "python_tag": "cp312", "archs": None,
                                                                   **kw})
    assert find(archs=["9.0"]).inputs["archs"] == ["9.0"]  # the exact arch set wins over a superset
    assert find(archs=["8.0"]).inputs["archs"] == ["8.0", "9.0"]
    assert find(archs=["10.0"]) is None
    assert find(torch="2.10.0") is None
    assert find(python_tag="cp311") is None
    assert find(cuda="12.8") is None
    assert find().fingerprint == wheelcache.fingerprint(both)


def test_a_carried_wheel_must_hold_a_cubin_for_each_target_gpu(tmp_path):
    """`bundle --gpu b300` takes the b200's build (sm_100 runs on 10.3), and refuses it for an RTX PRO 6000 (sm_120)
    in one line; the cubins are read from the wheel's objects, not from what its record says."""
    from test_cubins import elf_with_fatbin, fatbin_container
    from verlenv import cubins
    from verlenv.catalog import gpus

    so = elf_with_fatbin(tmp_path, fatbin_container([(cubins.KIND_ELF, 90), (cubins.KIND_ELF, 100)]))
    wheel = tmp_path / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(so, "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so")
    built = make.Built("flash-attn", wheel, "0" * 64, "fp", {})
    make.check_runs_on(built, [gpus.profile(g).arch for g in ("h100", "b200", "gb200", "b300")])
    with pytest.raises(UserError) as e:
        make.check_runs_on(built, [gpus.profile("rtx-pro-6000").arch])
    assert str(e.value) == (f"{wheel.name} (fp): flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so has no cubin that "
                            "runs on sm_120; rebuild it for that GPU (verlenv build flash-attn --gpu NAME) or leave it "
                            "out (--without flash-attn)")


def test_a_dry_run_stops_on_a_missing_source_built_wheel_as_the_bundle_does(tmp_path, capsys, monkeypatch):
    """`bundle --gpu h100 --gpu b200 --dry-run` with a wheel cache holding no flash-attn for 9.0;10.0: the dry run
    says so in the bundle's own line, before anything is resolved or fetched (it used to list the rest and total a
    bundle without the wheel)."""
    from verlenv import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.delenv("VERLENV_ROOT", raising=False)
    empty = tmp_path / "wheelhouse"
    assert cli.main(["bundle", "--gpu", "h100", "--gpu", "b200", "--dry-run", "--wheelhouse", str(empty), "--out",
                     str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verlenv bundle: no cached flash-attn 2.8.3.post2 wheel for torch 2.11.0, CUDA 13.0, "
                          f"cp312, archs 9.0;10.0 in {empty}; make it with `verlenv build flash-attn")
    assert err.count("\n") == 1
    assert not (tmp_path / "b").exists()


def test_a_bundle_for_a_grace_gpu_must_be_for_aarch64(tmp_path, capsys, monkeypatch):
    from verlenv import cli

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.delenv("VERLENV_ROOT", raising=False)
    assert cli.main(["bundle", "--gpu", "gb200", "--dry-run", "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err == ("verlenv bundle: --gpu gb200: an NVIDIA GB200 (Grace Blackwell, 186 GB) comes "
                                       "with aarch64 CPUs, and this bundle is for linux-64; give --platform "
                                       "linux-aarch64\n")
    assert not (tmp_path / "b").exists()


def test_a_wheel_several_variants_share_is_carried_and_listed_once(tmp_path):
    """The same flash-attn wheel built once for fsdp and megatron: one row of the dry run, one entry naming both."""
    wheel = _stand_in_wheel(tmp_path)
    shared = make.Built("flash-attn", wheel, make.sha256_file(wheel), "f" * 24, {"archs": ["9.0"]})
    apex = make.Built("apex", wheel, "a" * 64, "a" * 24, {"archs": ["9.0"]})
    lock = tmp_path / "lock.txt"
    options = make.Options({"megatron": lock, "fsdp": lock}, tmp_path / "b", "linux-64", "3.12",
                           built={"fsdp": [shared], "megatron": [shared, apex]})
    once = make._built_once(options)
    assert [(b.name, variants) for b, variants in once.values()] == [("flash-attn", ["fsdp", "megatron"]),
                                                                      ("apex", ["megatron"])]


def test_find_built_matches_a_git_pin_by_its_commit(tmp_path):
    """apex is pinned by a git URL (no version): the commit its build recorded is what must match."""
    wheelhouse = tmp_path / "wheelhouse"
    inputs = {"package": "apex", "version": "0.1", "source": "git:6424da3b:tree-sha256:ab", "torch": "2.11.0+cu130",
              "cuda": "13.0", "python_tag": "cp312", "cxx11_abi": True, "archs": ["9.0"], "recipe": "r"}
    wheelcache.store(wheelhouse, "apex", wheelcache.fingerprint(inputs), _stand_in_wheel(tmp_path), {"inputs": inputs})
    find = lambda commit: make.find_built(wheelhouse, "apex", None, "2.11.0", "13.0", "cp312", ["9.0"], commit=commit)  # noqa: E731
    assert find("6424da3b").inputs["source"].startswith("git:6424da3b:")
    assert find("0123abcd") is None


def test_choice_prefers_the_oldest_fitting_wheel_within_the_glibc_cap():
    """The real file names of llguidance 1.7.6 and cryptography 50.0.2; digests are stand-ins."""
    from verlenv.bundle import fetch
    from verlenv.catalog.pins import LockedPin

    def files(name, names):
        return [fetch.RemoteFile(name, "1", n, f"https://x/{n}", f"{i:064x}", 1,
                                 "sdist" if n.endswith(".tar.gz") else "wheel")
                for i, n in enumerate(names)]

    llguidance = files("llguidance", ["llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl",
                                      "llguidance-1.7.6-cp39-abi3-manylinux_2_31_aarch64.whl",
                                      "llguidance-1.7.6-cp314-cp314t-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                                      "llguidance-1.7.6.tar.gz"])
    pin = LockedPin("llguidance", "1.7.6", tuple(f"sha256:{f.sha256}" for f in llguidance))
    pick = lambda pin, fs, glibc: fetch.choose(pin, fs, fetch.target_tags("linux-64", "3.12", glibc)).filename  # noqa: E731
    assert pick(pin, llguidance, "2.34") == "llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl"
    assert pick(pin, llguidance, "2.28") == "llguidance-1.7.6.tar.gz"
    unlocked = LockedPin("llguidance", "1.7.6",
                         tuple(f"sha256:{f.sha256}" for f in llguidance if "2_31_x86" not in f.filename))
    # A wheel whose hash the lock lacks is never taken.
    assert pick(unlocked, llguidance, "2.34") == "llguidance-1.7.6.tar.gz"

    crypto = files("cryptography", ["cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl",
                                    "cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl"])
    pin = LockedPin("cryptography", "50.0.2", tuple(f"sha256:{f.sha256}" for f in crypto))
    assert pick(pin, crypto, "2.34") == "cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl"
    assert fetch.needs_glibc("cryptography-50.0.2-cp311-abi3-manylinux_2_28_x86_64.whl") == "2.28"
    with pytest.raises(UserError, match="not a glibc version"):
        fetch.target_tags("linux-64", "3.12", "2")


@pytest.mark.network
def test_source_built_wheel_travels_with_its_fingerprint(project, cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VERLENV_CACHE", str(cache))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    wheel = tmp_path / "tinyext-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:  # a real, minimal wheel standing in for a compiled package
        z.writestr("tinyext.py", "VALUE = 1\n")
        z.writestr("tinyext-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinyext\nVersion: 0.1\n")
        z.writestr("tinyext-0.1.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("tinyext-0.1.dist-info/RECORD", "")
    built = make.Built("tinyext", wheel, make.sha256_file(wheel), "f" * 24, {"archs": ["9.0"], "version": "0.1"})
    out = tmp_path / "b"
    options = make.Options({"fsdp": project / "locks" / "tiny-fsdp.linux-64.txt"}, out, "linux-64", "3.12",
                           built={"fsdp": [built]}, tools=False)
    # The dry run lists the source-built wheel it would carry, with its fingerprint and archs, and counts it.
    capsys.readouterr()
    assert make.make(options, dry=True) is None and not out.exists()
    printed = capsys.readouterr().out.splitlines()
    row = next(line for line in printed if "built" in line.split())
    assert row.split()[2:] == ["built", "tinyext==0.1", wheel.name, f"({'f' * 24},", "archs", "9.0)"]
    planned = sum(1 for line in printed if " MiB  " in line)
    assert printed[-1].startswith(f"{planned} files, ")
    manifest = make.make(options)
    entry = next(e for e in manifest["files"] if e["origin"] == "built")
    assert entry["fingerprint"] == "f" * 24 and entry["file"] == "wheels/tinyext-0.1-py3-none-any.whl"
    python, _, _ = offline.install(out, prefix=tmp_path / "env", python=_python312())
    assert _run([python, "-c", "import tinyext; print(tinyext.VALUE)"]).stdout.strip() == "1"


def _kernel_folder(dest: Path) -> Path:
    """A small folder laid out like Triton's cache (one folder per kernel hash), holding real files of this
    project as contents; a real cache needs a GPU run to fill."""
    for i, source in enumerate(sorted(ROOT.glob("recipes/*/recipe.toml"))[:3]):
        folder = dest / (f"{i:02x}" * 16)
        folder.mkdir(parents=True)
        shutil.copy(source, folder / f"kernel-{i}.json")
    return dest


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.network
def test_kernel_cache_travels_with_its_sha256_and_unpacks_offline(project, cache, tmp_path):
    kernels = _kernel_folder(tmp_path / "triton-cache")
    out = tmp_path / "b"
    r = _verlenv(project, cache, "bundle", "--stack", "tiny", "--out", str(out), "--kernel-cache", str(kernels))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(e for e in manifest["files"] if e["origin"] == "kernel-cache")
    assert entry["sha256"] == make.sha256_file(out / entry["file"]) and manifest["kernel_cache"]["files"] == 3
    into = tmp_path / "node-cache"
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--prefix", str(tmp_path / "env"),
                 "--kernel-cache-into", str(into), env=_no_network_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert _files(into) == _files(kernels)
    # A changed cache tar is refused before anything is installed or unpacked.
    tar = out / entry["file"]
    tar.write_bytes(tar.read_bytes()[:-1] + b"\x01")
    r = _verlenv(project, cache, "install", "--bundle", str(out), "--prefix", str(tmp_path / "env2"),
                 "--kernel-cache-into", str(tmp_path / "other"), env=_no_network_env(tmp_path))
    assert r.returncode == 1 and "kernel-cache.tar: sha256 differs from the manifest" in r.stderr
    assert not (tmp_path / "env2").exists() and not (tmp_path / "other").exists()


@pytest.mark.network
def test_kernel_cache_into_needs_a_bundle_that_has_one(project, cache, bundle, tmp_path):
    r = _verlenv(project, cache, "install", "--bundle", str(bundle), "--prefix", str(tmp_path / "env"),
                 "--kernel-cache-into", str(tmp_path / "k"), env=_no_network_env(tmp_path))
    assert r.returncode == 2 and "carries no kernel cache" in r.stderr
    assert not (tmp_path / "env").exists()


def test_kernel_cache_pack_is_reproducible_and_unpack_stays_inside(tmp_path):
    from verlenv.bundle import kernel_cache

    kernels = _kernel_folder(tmp_path / "cache")
    kernel_cache.pack(kernels, tmp_path / "a.tar")
    os.utime(next(kernels.rglob("*.json")), (0, 12345))
    kernel_cache.pack(kernels, tmp_path / "b.tar")
    assert make.sha256_file(tmp_path / "a.tar") == make.sha256_file(tmp_path / "b.tar")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no files"):
        kernel_cache.pack(tmp_path / "empty", tmp_path / "c.tar")
    import tarfile

    evil = tmp_path / "evil.tar"
    with tarfile.open(evil, "w") as tar:
        tar.add(next(kernels.rglob("*.json")), arcname="../escaped.json")
    with pytest.raises(tarfile.TarError):
        kernel_cache.unpack(evil, tmp_path / "into")
    assert not (tmp_path / "escaped.json").exists() and not any((tmp_path / "into").rglob("*.json"))


@pytest.mark.network
def test_bundle_install_repairs_changed_files_offline(project, cache, bundle, tmp_path):
    prefix = tmp_path / "env"
    offline_env = _no_network_env(tmp_path)
    r = _verlenv(project, cache, "install", "--bundle", str(bundle), "--prefix", str(prefix), env=offline_env)
    assert r.returncode == 0, r.stderr
    assert json.loads((prefix / install.MARKER).read_text())["files_check"]["repaired"] == []
    six = next(prefix.glob("lib/python3.12/site-packages/six.py"))
    original = six.read_bytes()
    six.unlink()
    six.write_bytes(original.replace(b"__version__", b"__broken__"))  # a new file, so uv's cache keeps the good one
    r = _verlenv(project, cache, "install", "--bundle", str(bundle), "--prefix", str(prefix), env=offline_env)
    assert r.returncode == 0, r.stderr
    assert f"six: 1 changed, e.g. {six}; reinstalling it from the bundle" in r.stderr
    assert six.read_bytes() == original
    assert json.loads((prefix / install.MARKER).read_text())["files_check"]["repaired"] == ["six"]


@pytest.mark.network
def test_bundle_install_waits_for_the_installer_holding_the_prefix(project, cache, bundle, tmp_path):
    prefix = tmp_path / "env"
    holder = subprocess.Popen([sys.executable, str(ROOT / "tests" / "data" / "programs" / "hold_prefix.py"),
                               str(prefix)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    env = {**_no_network_env(tmp_path), "VERLENV_ROOT": str(project), "VERLENV_CACHE": str(cache),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    second = subprocess.Popen([sys.executable, "-m", "verlenv", "install", "--bundle", str(bundle), "--prefix",
                               str(prefix)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
                              cwd=project)
    err = StreamLines(second.stderr)
    said = err.wait_for(f"{prefix} is being installed by verlenv install (pid {holder.pid}); waiting")
    waiting = second.poll() is None  # it cannot have finished while the lock is held
    holder.stdin.close()
    holder.wait()
    assert second.wait(timeout=600) == 0, err.text()
    assert said and waiting, err.text()


def test_bootstraps_at_once_write_their_launchers_without_taking_each_others_files(tmp_path, monkeypatch):
    """Two variants bootstrapped from one bundle at once: the first's rename waits (an event) until the second has
    written its own temp file and renamed it; neither loses its file (the same names once made one fail)."""
    import os
    import threading

    from verlenv.bundle import bootstrap

    tool = tmp_path / "tool"
    (tool / "bin").mkdir(parents=True)
    second_done, real_replace, errors = threading.Event(), os.replace, []

    def replace(src, dst):
        if threading.current_thread().name == "first":
            assert second_done.wait(60)
        real_replace(src, dst)

    monkeypatch.setattr(bootstrap.os, "replace", replace)

    def run(name):
        try:
            bootstrap.write_launchers(tool, tmp_path / "bundle")
        except Exception as e:  # noqa: BLE001 - the test reports it
            errors.append(e)
        finally:
            if name == "second":
                second_done.set()

    first = threading.Thread(target=run, args=("first",), name="first")
    first.start()
    run("second")
    first.join(60)
    assert errors == [] and not first.is_alive()
    assert sorted(p.name for p in (tool / "bin").iterdir()) == ["nox", "verlenv"]  # no temp file left
    assert all(os.access(tool / "bin" / n, os.X_OK) for n in ("nox", "verlenv"))


def test_the_suite_from_a_bundle_without_test_tools_is_skipped_saying_how_to_carry_them(tmp_path):
    r = _run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "tests"],
             env={**os.environ, "VERLENV_BUNDLE": str(tmp_path)}, cwd=tmp_path)
    said = r.stdout + r.stderr
    assert r.returncode == 0, said
    assert f"{tmp_path} carries no test tools: make the bundle with `verlenv bundle --tests`" in said, said


def _full_disk_place(src: Path, dest: Path) -> None:
    """A test double of make._place on a disk that fills up: half the file lands in the bundle's temp folder, then
    ENOSPC as shutil.copyfile raises it (source first, destination second). No disk can be filled here without
    root, so the failure is injected at the write call."""
    import errno

    with open(src, "rb") as f, open(dest.with_name(f".{dest.name}.tmp"), "wb") as out:
        out.write(f.read(max(1, src.stat().st_size // 2)))
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dest.with_name(f".{dest.name}.tmp")))


def test_a_full_disk_names_the_bundle_folder_and_leaves_nothing_half_written(project, cache, tmp_path, monkeypatch,
                                                                              capsys):
    from verlenv import cli

    monkeypatch.setenv("VERLENV_ROOT", str(project))
    monkeypatch.setenv("VERLENV_CACHE", str(cache))
    monkeypatch.chdir(project)
    monkeypatch.setattr(make, "_place", _full_disk_place)
    out = tmp_path / "bundles" / "tiny"
    assert cli.main(["bundle", "--stack", "tiny", "--out", str(out)]) == 1
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert line.startswith(f"verlenv bundle: --out {out}: no space left on its disk: writing "), line
    assert ".whl (" in line and " MiB needed), " in line and " MiB free there; nothing was left half-written" in line
    assert str(cache) not in line and ".tmp" not in line  # the full target is named, not the cache file read
    assert list((tmp_path / "bundles").iterdir()) == []  # the temp folder and its half file are gone


def test_a_full_disk_while_splitting_names_the_parts_folder(project, cache, tmp_path, monkeypatch, capsys):
    """The bundle is written; its parts are not: the parts folder is named with the bundle's size, and removed."""
    import errno

    from verlenv import cli

    def full_after_a_part(self, data):  # a test double of the part writer: one part lands, then the disk is full
        if self.parts:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data)

    real_write = parts._PartWriter.write
    monkeypatch.setenv("VERLENV_ROOT", str(project))
    monkeypatch.setenv("VERLENV_CACHE", str(cache))
    monkeypatch.chdir(project)
    monkeypatch.setattr(parts._PartWriter, "write", full_after_a_part)
    out = tmp_path / "tiny"
    assert cli.main(["bundle", "--stack", "tiny", "--out", str(out), "--split", "1MiB"]) == 1
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert line.startswith(f"verlenv bundle: --split {out}.parts: no space left on its disk: writing it ("), line
    assert " MiB needed), " in line and " MiB free there; nothing was left half-written" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # the bundle stays; no parts, no temp folder


def test_a_full_disk_elsewhere_names_what_was_written_and_other_errors_pass(tmp_path):
    """ENOSPC filling the download cache, not the bundle's folder, blames the cache; another OSError is untouched."""
    import errno

    from verlenv.bundle import space

    cache_file = tmp_path / "cache" / "files" / "ab12"
    with pytest.raises(UserError) as e, space.reported(tmp_path / "bundles" / "tiny", "--out"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache_file))
    assert str(e.value).startswith(f"{cache_file}: no space left on its disk: writing it, ") and e.value.exit_code
    assert str(e.value).endswith("the --out folder was not written: free space there")
    with pytest.raises(PermissionError), space.reported(tmp_path / "bundles" / "tiny", "--out"):
        raise PermissionError(errno.EACCES, "Permission denied", str(cache_file))
