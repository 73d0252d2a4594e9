"""verlenv install: exact installs from a lock, hash refusal, drift check, locally built wheels kept."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verlenv.catalog import stacks
from verlenv.env import install
from verlenv.errors import UserError
from verlenv.lock import locks

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable  # any Python >= 3.11 works for these tiny envs

CATALOG = """
default = "tiny"
[stacks.tiny]
description = "test catalog: one pure-Python pin"
python = "{python}"
cuda = "13.0"
min_driver = "580.65.06"
exclude_newer = "2026-10-15T00:00:00Z"
gpu_archs = ["9.0"]
cxx11_abi = true
toolkit = "pypi"
host_compiler = "gxx=13"
[stacks.tiny.variants.fsdp]
requirements = ["six==1.16.0"]
source_builds = ["tinyext==0.1"]
"""


def _verlenv(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VERLENV_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "verlenv", *args], capture_output=True, text=True, env=env, cwd=root)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root with a one-package catalog and a real uv lock of it (six 1.16.0 from PyPI)."""
    (tmp_path / "stacks.toml").write_text(CATALOG.format(python=".".join(map(str, sys.version_info[:2]))))
    (tmp_path / "locks").mkdir()
    reqs = tmp_path / "in.txt"
    reqs.write_text("six==1.16.0\n")
    out = tmp_path / "resolved.txt"
    subprocess.run(["uv", "pip", "compile", "--no-config", "--generate-hashes", "--quiet", str(reqs), "-o", str(out)],
                   check=True)
    variant = stacks.load(tmp_path / "stacks.toml").variant(None, "fsdp")
    # with the record install checks
    locks.write_lock(tmp_path, variant, "linux-64", out.read_text(), None, "uv (test)")
    return tmp_path


def _tiny_wheel(dest: Path) -> Path:
    """A real, minimal wheel of `tinyext` 0.1, standing in for a locally compiled package."""
    wheel = dest / "tinyext-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tinyext.py", "VALUE = 1\n")
        z.writestr("tinyext-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinyext\nVersion: 0.1\n")
        z.writestr("tinyext-0.1.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("tinyext-0.1.dist-info/RECORD", "")
    return wheel


def test_unknown_stack_is_one_line_exit_2():
    r = _verlenv(ROOT, "install", "--stack", "nope")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "unknown stack 'nope'" in r.stderr and "verl-0.9" in r.stderr and "verl-0.7" in r.stderr


def test_unknown_variant_is_one_line_exit_2():
    r = _verlenv(ROOT, "install", "--variant", "deepspeed")
    assert r.returncode == 2 and "valid: fsdp, megatron" in r.stderr


def test_missing_lock_is_one_line(tmp_path: Path):
    (tmp_path / "stacks.toml").write_text(CATALOG.format(python="3.11"))
    variant = stacks.load(tmp_path / "stacks.toml").variant("tiny", "fsdp")
    with pytest.raises(UserError, match="no lock for tiny-fsdp"):
        install.lock_path(tmp_path, variant)


@pytest.mark.network
def test_install_exact_then_drift_check_passes(project: Path):
    prefix = project / "env"
    r = _verlenv(project, "install", "--prefix", str(prefix), "--python", PY)
    assert r.returncode == 0, r.stderr
    assert "drift check lock/match: pass" in r.stderr
    # Bytecode was compiled at install (not left to each process's first import), and the drift check allows it.
    assert list(prefix.glob("lib/python*/site-packages/__pycache__/six.*.pyc"))
    marker = json.loads((prefix / install.MARKER).read_text())
    assert marker["lock"] == "locks/tiny-fsdp.linux-64.txt"
    # Something installed over the lock: the drift check must fail.
    subprocess.run(["uv", "pip", "install", "--python", str(prefix / "bin" / "python"), "--no-config", "six==1.17.0"],
                   check=True, capture_output=True)
    variant = stacks.load(project / "stacks.toml").variant(None, "fsdp")
    from verlenv.verify.runner import lock_drift

    results = lock_drift(str(prefix / "bin" / "python"), stacks.load(project / "stacks.toml"), variant,
                         install.lock_path(project, variant))
    match = next(r for r in results if r.name == "lock/match")
    assert match.status == "fail" and "six 1.17.0, want 1.16.0" in match.reason


@pytest.mark.network
def test_hash_mismatch_refuses_and_leaves_no_env(project: Path):
    """A lock recorded as written by `verlenv lock` whose hashes no published file has: uv refuses it."""
    path = project / "locks" / "tiny-fsdp.linux-64.txt"
    text = path.read_text()
    first_hash = text.split("--hash=sha256:")[1][:64]
    text = text.replace(first_hash, "0" * 64)
    second = text.split("--hash=sha256:")[2][:64] if text.count("--hash=") > 1 else None
    if second:
        text = text.replace(second, "1" * 64)
    variant = stacks.load(project / "stacks.toml").variant(None, "fsdp")
    locks.write_lock(project, variant, "linux-64", text, None, "uv (test)")
    prefix = project / "env"
    r = _verlenv(project, "install", "--prefix", str(prefix), "--python", PY)
    assert r.returncode == 1
    assert "nothing was marked installed" in r.stderr
    assert not prefix.exists(), "a half-made env was left behind"


@pytest.mark.network
def test_resync_keeps_locally_built_wheels(project: Path, tmp_path: Path):
    prefix = project / "env"
    assert _verlenv(project, "install", "--prefix", str(prefix), "--python", PY).returncode == 0
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    python = prefix / "bin" / "python"
    subprocess.run(["uv", "pip", "install", "--python", str(python), "--no-config", "--no-deps",
                    str(_tiny_wheel(wheels))], check=True, capture_output=True)
    r = _verlenv(project, "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    assert subprocess.run([str(python), "-c", "import tinyext"]).returncode == 0, "sync removed the built package"
    # Without the wheel file it cannot be kept: the sync removes it and says how to get it back.
    shutil.rmtree(wheels)
    r = _verlenv(project, "install", "--prefix", str(prefix))
    assert "verlenv build tinyext" in r.stderr
    assert subprocess.run([str(python), "-c", "import tinyext"], capture_output=True).returncode != 0
