"""The builder with an nvcc of torch's CUDA major but another minor: Debian's CUDA 12.5 (scripts/debian-cuda-home.sh)
compiles the real probe extension against torch 2.8.0+cu128 (CUDA 12.8), and the extension loads with that torch.

Needs a CUDA 12 toolkit other than 12.8 ($VERLENV_TEST_CUDA12_HOME, default /opt/cuda-12.5-debian) and an env with
torch 2.8.0+cu128 ($VERLENV_TEST_CU128_PYTHON, default the verl-0.7 fsdp env of this checkout); skipped without them.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_build_env import DATA, clean_build_env, run_probe_binding
from verlenv import cubins
from verlenv.bundle import build_inputs
from verlenv.catalog import stacks
from verlenv.native import build, toolchain
from verlenv.native.sources import sha256_file

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "cuda-ext-probe"


@pytest.fixture(scope="module")
def cuda12_home() -> Path:
    home = Path(os.environ.get("VERLENV_TEST_CUDA12_HOME", "/opt/cuda-12.5-debian"))
    found = toolchain.nvcc_version(home / "bin" / "nvcc") if (home / "bin" / "nvcc").exists() else None
    if found is None or not found.startswith("12.") or found == "12.8":
        pytest.skip(f"no CUDA 12.x toolkit other than 12.8 at {home} (make one: scripts/debian-cuda-home.sh)")
    return home


@pytest.fixture(scope="module")
def cu128_python() -> str:
    python = os.environ.get("VERLENV_TEST_CU128_PYTHON", str(REPO / ".venv-verl-0.7-fsdp" / "bin" / "python"))
    probe = "import torch; print(torch.__version__, torch.version.cuda)"
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True) if Path(python).exists() else None
    if r is None or r.returncode != 0 or r.stdout.split()[1:] != ["12.8"]:
        pytest.skip(f"no torch built for CUDA 12.8 at {python} (verlenv install --stack verl-0.7)")
    return python


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("catalog") / "ext"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("__pycache__"))
    base = tmp_path_factory.mktemp("build")
    return {"root": root, "wheelhouse": base / "wheelhouse", "work": base / "work"}


def build_probe(dirs: dict[str, Path], python: str, **kw) -> build.BuildResult:
    variant = stacks.load(dirs["root"] / "stacks.toml").variant(None, "fsdp")  # only names what may be built
    return build.build_one(dirs["root"], variant, PACKAGE, python, ["9.0"], dirs["wheelhouse"], dirs["work"], **kw)


@pytest.fixture(scope="module")
def built(cuda12_home, cu128_python, dirs) -> build.BuildResult:
    with pytest.MonkeyPatch.context() as mp:
        clean_build_env(mp)
        mp.setenv("CUDA_HOME", str(cuda12_home))
        return build_probe(dirs, cu128_python)


def test_the_same_major_nvcc_is_recorded_in_the_fingerprint_and_the_record(built, cuda12_home):
    nvcc = toolchain.nvcc_version(cuda12_home / "bin" / "nvcc")
    inputs, tc = built.record["inputs"], built.record["toolchain"]
    assert (inputs["cuda"], inputs["nvcc"]) == ("12.8", nvcc)
    assert (tc["nvcc"], tc["torch_cuda"], tc["nvcc_match"], tc["source"]) == (nvcc, "12.8", "same major", "CUDA_HOME")
    assert tc["nvcc_release"].startswith(nvcc + ".")
    assert tc["warning"].startswith(f"nvcc {nvcc} is not torch 2.8.0+cu128's CUDA 12.8 (CUDA_HOME set explicitly)")


def test_torch_itself_only_warns_about_the_minor(built):
    """torch's cpp_extension: a major mismatch is an error, a minor one this warning."""
    log = built.wheel.parent / "build.log"  # the cache entry keeps the build's log
    assert "has a minor version mismatch with the version that was used to compile PyTorch (12.8)" in log.read_text()


def test_the_extension_has_sm90_code_and_runs_its_binding_with_torch_2_8(built, cu128_python, tmp_path):
    [so] = cubins.wheel_shared_objects(built.wheel, tmp_path / "so")
    assert cubins.cubin_archs(cubins.shared_object_archs(so)) == {90}
    lines = run_probe_binding(cu128_python, built.wheel, tmp_path / "site")
    assert lines[0] == "[900]"  # nvcc 12.5's own __CUDA_ARCH_LIST__
    assert "must be CUDA tensors" in lines[1]  # the .so loaded and linked up with torch 2.8's libraries


def test_the_toolkit_carried_in_a_bundle_is_taken_by_the_same_rule_and_gives_the_same_build(
        built, cuda12_home, cu128_python, dirs, tmp_path, capsys):
    """The real toolkit, packed as `verlenv bundle --toolkit` packs it and unpacked as the bootstrap does: with no
    CUDA_HOME set the builder takes it, says so with the same-major warning, and finds the wheel the CUDA_HOME build
    made (the same fingerprint: nothing is compiled again)."""
    bundle = tmp_path / "bundle"
    note = build_inputs.pack_toolkit(cuda12_home, bundle / build_inputs.TOOLKIT_FILE)
    tar = bundle / build_inputs.TOOLKIT_FILE
    entry = {"file": build_inputs.TOOLKIT_FILE, "origin": build_inputs.TOOLKIT, "version": note["nvcc"],
             "sha256": sha256_file(tar), "size": tar.stat().st_size}
    home = build_inputs.unpack_toolkit(bundle, {"files": [entry]})
    with pytest.MonkeyPatch.context() as mp:
        clean_build_env(mp)
        again = build_probe(dirs, cu128_python, toolkit=home)
    said = capsys.readouterr().err
    nvcc = toolchain.nvcc_version(cuda12_home / "bin" / "nvcc")
    assert f"toolchain: CUDA_HOME={home} (nvcc {note['nvcc']} for torch's CUDA 12.8, same major, from bundle: " \
           "carried in the bundle)" in said
    assert f"warning: nvcc {nvcc} is not torch 2.8.0+cu128's CUDA 12.8 (the toolkit the bundle carries)" in said
    assert again.cached and again.fingerprint == built.fingerprint
