"""The real builder compiles a real torch CUDA extension with the PyPI CUDA 13.0 toolchain (no GPU needed).

The package is tests/data/ext/cuda-ext-probe, built through the test catalog tests/data/ext/stacks.toml,
for sm_80 and sm_90; then the cache must answer a second run without compiling, and a changed input
must give a new fingerprint and a rebuild.
"""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_build_env import DATA, build_until, clean_build_env, run_probe_binding, torch_python
from verlenv import cubins
from verlenv.catalog import stacks
from verlenv.native import build, ninja_stats, sources, wheelcache

pytestmark = [pytest.mark.slow, pytest.mark.network]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "cuda-ext-probe"


@pytest.fixture(scope="module")
def env():
    with pytest.MonkeyPatch.context() as mp:
        clean_build_env(mp)
        yield torch_python()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A copy of the test catalog (the tests edit its recipes), with the project's flash-attn recipe."""
    dest = tmp_path_factory.mktemp("catalog") / "ext"
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "recipes" / "flash-attn", dest / "recipes" / "flash-attn")
    return dest


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("build")
    return {"wheelhouse": base / "wheelhouse", "work": base / "work"}


def run_build(root: Path, python: str, dirs: dict, archs: list[str]) -> tuple[build.BuildResult, float]:
    variant = stacks.load(root / "stacks.toml").variant(None, "fsdp")
    started = time.monotonic()
    result = build.build_one(root, variant, PACKAGE, python, archs, dirs["wheelhouse"], dirs["work"])
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def first(root, env, dirs):
    result, wall = run_build(root, env, dirs, ["8.0", "9.0"])
    print(f"first build of {PACKAGE} for sm_80+sm_90: {wall:.1f} s", file=sys.stderr)
    return result


def extension_so(wheel: Path, dest: Path) -> Path:
    objects = cubins.wheel_shared_objects(wheel, dest)
    assert [o.name.split(".")[0] for o in objects] == ["cuda_ext_probe"]
    return objects[0]


def test_first_build_compiles_cubins_for_sm80_and_sm90(first, dirs, tmp_path):
    assert not first.cached
    folder = dirs["wheelhouse"] / PACKAGE / first.fingerprint
    assert first.wheel.parent == folder and first.wheel.is_file()
    entry = json.loads((folder / wheelcache.ENTRY_FILE).read_text())
    assert entry["wheel_sha256"] == sources.sha256_file(first.wheel)
    assert list(entry["cubins"].values()) == [[80, 90]]
    assert entry["inputs"]["archs"] == ["8.0", "9.0"]
    assert entry["toolchain"]["nvcc"] == "13.0" and entry["toolchain"]["source"] == "pypi"
    assert entry["ninja"]["units"] == 2  # probe.cpp and probe_kernel.cu
    # The entry keeps ninja's log, and its figures can be derived again from it.
    [kept] = list((folder / "ninja").glob("*.ninja_log"))
    shutil.copy(kept, tmp_path / ".ninja_log")
    assert ninja_stats.ninja_stats(tmp_path, entry["parallelism"]["cores"]) == entry["ninja"]
    so = extension_so(first.wheel, tmp_path)
    assert cubins.cubin_archs(cubins.shared_object_archs(so)) == {80, 90}


def test_built_extension_imports_and_runs_on_cpu(first, env, tmp_path):
    lines = run_probe_binding(env, first.wheel, tmp_path / "site")
    assert lines[0] == "[800, 900]"  # the kernel's own __CUDA_ARCH_LIST__
    assert "must be CUDA tensors" in lines[1]  # the binding's check ran: the .so and libtorch link up


def test_cubin_scan_agrees_with_cuobjdump(first, tmp_path):
    tools = tmp_path / "cuobjdump"
    r = subprocess.run(["uv", "pip", "install", "-q", "--target", str(tools), "nvidia-cuda-cuobjdump"],
                       capture_output=True, text=True)
    exe = next(tools.glob("nvidia/*/bin/cuobjdump"), None)
    if r.returncode != 0 or exe is None:
        pytest.skip(f"nvidia-cuda-cuobjdump did not install: {r.stderr.strip()[-200:]}")
    so = extension_so(first.wheel, tmp_path / "so")
    listing = subprocess.run([str(exe), "--list-elf", str(so)], capture_output=True, text=True, check=True).stdout
    from_cuobjdump = {int(m) for m in re.findall(r"\.sm_(\d+)\.cubin", listing)}
    assert from_cuobjdump == cubins.cubin_archs(cubins.shared_object_archs(so)) == {80, 90}


def cpu_seconds() -> float:
    """CPU time of this process and its finished children: what the builder itself spent, load or not."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def test_second_run_is_a_cache_hit_without_compiling(first, root, env, dirs):
    trees_before = sorted(dirs["work"].glob("build-*"))
    cpu_before = cpu_seconds()
    again, wall = run_build(root, env, dirs, ["9.0", "8.0"])
    cpu = cpu_seconds() - cpu_before
    print(f"second run (cache hit): {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)
    assert again.cached and again.fingerprint == first.fingerprint and again.wheel == first.wheel
    assert sorted(dirs["work"].glob("build-*")) == trees_before  # no build tree was even made: nothing compiled


def test_fewer_archs_is_a_new_fingerprint_and_a_build_for_those_archs_only(first, root, dirs, tmp_path):
    """A miss, and a build whose compiles target sm_90 alone: stopped once ninja's build file is written (the first
    build already compiled both archs and proved their cubins; compiling again would prove nothing more)."""
    work = tmp_path / "work"

    def ninja_file_written(w: Path) -> bool:  # torch writes it in one go, its flags before its rules
        found = next(w.glob("build-*/src/*/build/**/build.ninja"), None)
        return found is not None and "rule compile" in found.read_text()

    build_until(root, (None, "fsdp"), PACKAGE, ["9.0"], work, dirs["wheelhouse"], None, ninja_file_written)
    (tree,) = work.glob(f"build-{PACKAGE}-*")
    assert not tree.name.startswith(f"build-{PACKAGE}-{first.fingerprint[:8]}-")  # another fingerprint: a miss
    ninja = next(tree.glob("src/*/build/**/build.ninja")).read_text()
    assert "-gencode=arch=compute_90,code=sm_90" in ninja and "compute_80" not in ninja
    assert wheelcache.lookup(dirs["wheelhouse"], PACKAGE, first.fingerprint) is not None  # the old entry stays
    assert len(list(dirs["wheelhouse"].rglob(wheelcache.ENTRY_FILE))) == 1  # and the stopped one left none


def run_cli(root: Path, python: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "MAX_JOBS", "VIRTUAL_ENV")}
    return subprocess.run([sys.executable, "-m", "verlenv", "build", "--python", python, "--no-install", *args],
                          capture_output=True, text=True, cwd=root, env={**env, "VERLENV_ROOT": str(root)})


def test_sdist_hash_mismatch_is_refused_and_leaves_nothing(root, env, tmp_path):
    fake = tmp_path / "flash_attn-2.8.3.post2.tar.gz"
    fake.write_bytes(b"not the sdist the recipe pins")
    wheelhouse = tmp_path / "wheelhouse"
    r = run_cli(root, env, "flash-attn", "--archs", "9.0", "--source", str(fake), "--wheelhouse", str(wheelhouse))
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("verlenv build:")]
    assert len(errors) == 1 and "does not match the recipe's" in errors[0] and "Traceback" not in r.stderr
    assert not list(wheelhouse.rglob(wheelcache.ENTRY_FILE)) and not list(wheelhouse.rglob("*.whl"))
    assert not [p for p in (root / ".verlenv" / "sources").rglob("*") if p.is_file()]  # no unverified file kept


def test_changed_source_tree_is_refused(root, env, tmp_path):
    copy = tmp_path / "ext"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".verlenv"))
    (copy / PACKAGE / "probe_kernel.cu").write_text("// tampered\n")
    wheelhouse = tmp_path / "wheelhouse"
    r = run_cli(copy, env, PACKAGE, "--archs", "9.0", "--wheelhouse", str(wheelhouse))
    assert r.returncode == 2 and "tree digest" in r.stderr and "refusing to build" in r.stderr
    assert not list(wheelhouse.rglob(wheelcache.ENTRY_FILE))
