"""The Nix toolchain shell.

flake.nix is evaluated by real Nix against a test double of nixpkgs (tests/nix/nixpkgs-test-double.nix),
since nixpkgs itself cannot be fetched or evaluated here; flake.lock's pin is checked as data; the shell
hook's driver and CUDA_HOME code runs for real in bash over fixture directory trees.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from datetime import datetime, timezone
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
NIX = REPO / "nix"
SYSTEMS = ("x86_64-linux", "aarch64-linux")

needs_nix = pytest.mark.skipif(
    shutil.which("nix-instantiate") is None,
    reason="nix-instantiate is not installed (Debian: apt-get install -y nix-bin)",
)
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")

# The flake's outputs function, applied to the nixpkgs test double; `self` is the outputs themselves.
EVAL_FLAKE = """
{ repo, system }:
let
  flake = import (/. + repo + "/flake.nix");
  nixpkgs = import (/. + repo + "/tests/nix/nixpkgs-test-double.nix");
  outputs = flake.outputs { self = outputs; inherit nixpkgs; };
  pkgs = nixpkgs.legacyPackages.${system};
  shell = outputs.devShells.${system}.default;
in
removeAttrs shell [ "passthru" ] // {
  packages = map (p: p.name) shell.packages;
  condaLockText = shell.passthru.condaLock.text;
  cxxRuntimeCommand = shell.passthru.cxxRuntime.buildCommand;
  cxxRuntime = shell.passthru.cxxRuntime.outPath;
  flakeInputs = flake.inputs;
  systems = builtins.attrNames outputs.devShells;
  testDouble = {
    python312 = pkgs.python312.outPath;
    gcc13 = pkgs.gcc13.outPath;
    defaultCompilerLib = pkgs.stdenv.cc.cc.lib.outPath;
  };
}
"""


def nix_eval(system: str = "x86_64-linux") -> dict:
    # The dummy store has no paths and accepts no writes: evaluation must not need nixpkgs or build anything.
    r = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--option", "store", "dummy://",
         "--argstr", "repo", str(REPO), "--argstr", "system", system, "--expr", EVAL_FLAKE],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def shell() -> dict:
    return nix_eval()


def run_bash(script: str, env: dict[str, str], cwd: Path) -> tuple[dict[str, str], str]:
    """Run `script` in bash, then return the environment it leaves and what it printed."""
    dump = (f"export VERLENV_DRIVER_NOTE VERLENV_CUDA_NOTE; {sys.executable} -c "
            "'import json, os; print(json.dumps(dict(os.environ)))'")
    r = subprocess.run(["bash", "-c", f"{script}\n{dump}"], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    *printed, last = r.stdout.rstrip("\n").split("\n")
    return json.loads(last), "\n".join(printed) + r.stderr


def base_env(**extra: str) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LD_LIBRARY_PATH": "/prior/lib"}
    env.update(extra)
    return env


def touch(path: Path, text: str = "", mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def driver_tree(tmp_path: Path) -> Path:
    """Test fixture: fake driver libraries, a CUDA stubs dir, and a container dir whose libcuda is the stub."""
    root = tmp_path / "host"
    real = root / "usr/lib64"
    for name in ("libcuda.so.1", "libcuda.so.580.65.06", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"):
        touch(real / name, "fixture: driver library")
    # A toolkit runtime and glibc in the same distro dir must not be exposed.
    touch(real / "libcudart.so.12", "fixture: toolkit runtime")
    touch(real / "libc.so.6", "fixture: glibc")
    stub = touch(root / "usr/local/cuda/lib64/stubs/libcuda.so", "fixture: stub")
    # A -dev style unversioned name that points at the stub.
    (real / "libcuda.so").symlink_to(stub)
    masked = root / "container/lib"
    masked.mkdir(parents=True)
    (masked / "libcuda.so.1").symlink_to(stub)
    return root


# ---------------------------------------------------------------- flake.nix


@needs_nix
def test_flake_nix_parses():
    for path in (REPO / "flake.nix", NIX / "devshell.nix", REPO / "tests/nix/nixpkgs-test-double.nix"):
        r = subprocess.run(["nix-instantiate", "--parse", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{path}: {r.stderr}"


@needs_nix
@pytest.mark.parametrize("system", SYSTEMS)
def test_dev_shell_has_the_toolchain(system):
    shell = nix_eval(system)
    assert shell["systems"] == sorted(SYSTEMS)
    # Names come from the test double: nox must be python312Packages' (the double has no top-level nox).
    for name in ("python3-3.12.12", "uv-0.9.18", "python3.12-nox-2025.11.12", "micromamba-2.4.0",
                 "conda-lock", "ninja-1.13.1", "cmake-4.1.2", "git-2.51.2", "gcc-wrapper-13.4.0"):
        assert name in shell["packages"], f"{name} missing from {shell['packages']}"
    # The shell's own stdenv compiles with gcc 13, not nixpkgs' default gcc (14 in the double).
    assert shell["stdenvCompiler"] == "gcc-wrapper-13.4.0"


@needs_nix
def test_dev_shell_environment(shell):
    assert shell["UV_PYTHON"] == shell["testDouble"]["python312"] + "/bin/python3.12"
    assert shell["UV_PYTHON_DOWNLOADS"] == "never"
    gcc = shell["testDouble"]["gcc13"]
    hook = shell["shellHook"]
    assert f"export CC={gcc}/bin/gcc CXX={gcc}/bin/g++ CUDAHOSTCXX={gcc}/bin/g++" in hook
    # The hook carries the tested scripts verbatim and calls them.
    assert (NIX / "driver-libs.sh").read_text() in hook
    assert (NIX / "cuda-home.sh").read_text() in hook
    assert 'verlenv_use_driver "$verlenv_root"' in hook
    assert 'verlenv_use_cuda_home "$verlenv_root"' in hook
    assert "unset PYTHONPATH" in hook
    for command in ("conda-lock install", "nox -s build", "nox -s verify"):
        assert command in hook


@needs_nix
def test_cxx_runtime_exposes_only_libstdcxx_and_libgomp(shell):
    # From the default (newest) compiler: older libstdc++ would break nixpkgs' C++ tools built with it.
    lib = shell["testDouble"]["defaultCompilerLib"] + "/lib"
    linked = re.findall(r"(\S+/lib/\S+\.so\.\d+)", shell["cxxRuntimeCommand"])
    assert linked == [f"{lib}/libstdc++.so.6", f"{lib}/libgomp.so.1"]
    assert f'export LD_LIBRARY_PATH="{shell["cxxRuntime"]}/lib' in shell["shellHook"]


@needs_nix
def test_conda_lock_is_pinned_inside_the_projects_range(shell):
    assert shell["condaLockText"] == (NIX / "conda-lock.sh").read_text()
    pinned = shell["VERLENV_CONDA_LOCK_VERSION"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned)
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [Requirement(d).specifier for d in deps if Requirement(d).name == "conda-lock"]
    assert pinned in spec, f"conda-lock {pinned} is outside pyproject's {spec}"
    datetime.fromisoformat(shell["VERLENV_TOOLS_EXCLUDE_NEWER"])


# ---------------------------------------------------------------- flake.lock


def test_flake_lock_pins_a_nixpkgs_release_branch():
    lock = json.loads((REPO / "flake.lock").read_text())
    assert lock["version"] == 7 and lock["root"] == "root"
    assert lock["nodes"]["root"]["inputs"] == {"nixpkgs": "nixpkgs"}
    node = lock["nodes"]["nixpkgs"]
    locked, original = node["locked"], node["original"]
    assert {k: locked[k] for k in ("type", "owner", "repo")} == {"type": "github", "owner": "NixOS", "repo": "nixpkgs"}
    assert re.fullmatch(r"[0-9a-f]{40}", locked["rev"])
    assert re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", locked["narHash"])
    assert len(base64.b64decode(locked["narHash"].removeprefix("sha256-"))) == 32
    assert isinstance(locked["lastModified"], int)
    when = datetime.fromtimestamp(locked["lastModified"], tz=timezone.utc)
    assert datetime(2025, 1, 1, tzinfo=timezone.utc) < when < datetime.now(timezone.utc)
    assert original["type"] == "github" and original["owner"] == "NixOS" and original["repo"] == "nixpkgs"
    assert re.fullmatch(r"nixos-\d\d\.(05|11)", original["ref"]), original["ref"]


@needs_nix
def test_flake_lock_matches_flake_inputs(shell):
    lock = json.loads((REPO / "flake.lock").read_text())
    assert set(shell["flakeInputs"]) == set(lock["nodes"]["root"]["inputs"])
    ref = lock["nodes"]["nixpkgs"]["original"]["ref"]
    assert shell["flakeInputs"]["nixpkgs"]["url"] == f"github:NixOS/nixpkgs/{ref}"


# ---------------------------------------------------------------- driver discovery (bash)


@needs_bash
def test_driver_libs_link_only_the_real_driver(tmp_path, driver_tree):
    search = ":".join(str(driver_tree / d) for d in ("usr/local/cuda/lib64/stubs", "container/lib", "usr/lib64"))
    project = tmp_path / "project"
    project.mkdir()
    env, _ = run_bash(f'source {NIX}/driver-libs.sh\nverlenv_use_driver "$PWD"', base_env(VERLENV_DRIVER_SEARCH=search),
                      project)

    private = project / ".verlenv/driver-libs"
    assert env["TRITON_LIBCUDA_PATH"] == str(private)
    assert env["LD_LIBRARY_PATH"] == f"{private}:/prior/lib"
    assert str(driver_tree) not in env["LD_LIBRARY_PATH"]
    assert env["VERLENV_DRIVER_NOTE"].startswith(str(driver_tree / "usr/lib64"))
    names = sorted(p.name for p in private.iterdir())
    assert names == ["libcuda.so", "libcuda.so.1", "libcuda.so.580.65.06", "libnvidia-ml.so.1",
                     "libnvidia-ptxjitcompiler.so.1"]
    for link in private.iterdir():
        target = link.resolve()
        assert "stubs" not in target.parts, f"{link.name} -> {target}"
        assert target.parent == driver_tree / "usr/lib64"
    # The stub-backed unversioned name is replaced by one pointing at the real SONAME.
    assert os.readlink(private / "libcuda.so") == "libcuda.so.1"
    assert not list(project.glob(".verlenv/driver-libs.tmp.*"))


@needs_bash
def test_driver_libs_never_fall_back_to_stubs(tmp_path, driver_tree):
    search = ":".join(str(driver_tree / d) for d in ("usr/local/cuda/lib64/stubs", "container/lib"))
    project = tmp_path / "project"
    stale = touch(project / ".verlenv/driver-libs/libcuda.so.1", "left from an earlier shell")
    env, _ = run_bash(f'source {NIX}/driver-libs.sh\nverlenv_use_driver "$PWD"', base_env(VERLENV_DRIVER_SEARCH=search),
                      project)

    assert "TRITON_LIBCUDA_PATH" not in env
    assert env["LD_LIBRARY_PATH"] == "/prior/lib"
    assert env["VERLENV_DRIVER_NOTE"].startswith("no NVIDIA driver")
    assert not stale.parent.exists()


@needs_bash
def test_driver_search_defaults_cover_nixos_and_distros():
    r = subprocess.run(["bash", "-c", f"source {NIX}/driver-libs.sh; echo $VERLENV_DRIVER_SEARCH_DEFAULT"],
                       capture_output=True, text=True, timeout=60)
    dirs = r.stdout.strip().split(":")
    assert dirs[0] == "/run/opengl-driver/lib"
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/local/nvidia/lib64"):
        assert d in dirs
    assert not [d for d in dirs if "stubs" in d or "cuda" in d]


# ---------------------------------------------------------------- CUDA_HOME (bash)


def fake_nvcc(prefix: Path, release: str = "13.0") -> Path:
    """Test double of nvcc: prints the version banner the real one prints."""
    return touch(prefix / "bin/nvcc", f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.88'\n",
                 0o755)


def cuda_home(project: Path, **env: str) -> dict[str, str]:
    out, _ = run_bash(f'source {NIX}/cuda-home.sh\nverlenv_use_cuda_home "$PWD" || true', base_env(**env), project)
    return out


@needs_bash
def test_cuda_home_fallback_order(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    explicit, conda = tmp_path / "cuda-explicit", tmp_path / "conda-env"
    fake_nvcc(explicit)
    fake_nvcc(conda)

    env = cuda_home(project, CUDA_HOME=str(explicit), CONDA_PREFIX=str(conda))
    assert env["CUDA_HOME"] == str(explicit)
    assert env["PATH"].split(":")[0] == f"{explicit}/bin"

    env = cuda_home(project, CONDA_PREFIX=str(conda))
    assert env["CUDA_HOME"] == str(conda)
    assert "conda" in env["VERLENV_CUDA_NOTE"]


@needs_bash
def test_cuda_home_leaves_pypi_wheels_to_verlenv(tmp_path):
    project = tmp_path / "project"
    venv = project / ".venv-verl-0.9-fsdp"
    touch(venv / "bin/python", "#!/bin/sh\nexit 1\n", 0o755)
    fake_nvcc(venv / "lib/python3.12/site-packages/nvidia/cu13")
    env = cuda_home(project)
    # PyPI wheels come before the system toolkit, and need verlenv to assemble a CUDA_HOME.
    assert "CUDA_HOME" not in env
    assert "verlenv toolchain" in env["VERLENV_CUDA_NOTE"]


@needs_bash
@pytest.mark.skipif(Path("/usr/local/cuda/bin/nvcc").exists(), reason="this machine has a system CUDA toolkit")
def test_cuda_home_without_any_nvcc(tmp_path):
    env = cuda_home(tmp_path)
    assert "CUDA_HOME" not in env
    assert env["VERLENV_CUDA_NOTE"].startswith("not set: no nvcc")


def verlenv_bin() -> str:
    exe = Path(sys.executable).parent / "verlenv"
    if not exe.exists() or subprocess.run([exe, "toolchain", "--help"], capture_output=True).returncode != 0:
        pytest.skip("the verlenv command (with its toolchain subcommand) is not installed beside this Python")
    return str(exe.parent)


@needs_bash
def test_cuda_home_respects_verlenv_refusal(tmp_path):
    bindir = verlenv_bin()
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("this Python has torch; the refusal case needs an env without it")
    conda = tmp_path / "conda-env"
    fake_nvcc(conda)
    env = cuda_home(tmp_path, PATH=f"{bindir}:/usr/bin:/bin", VERLENV_PYTHON=sys.executable, CONDA_PREFIX=str(conda))
    # The real `verlenv toolchain` exits 2 (no torch); the hook must not guess the conda nvcc instead.
    assert "CUDA_HOME" not in env
    assert "torch does not import" in env["VERLENV_CUDA_NOTE"]


@needs_bash
@pytest.mark.skipif(shutil.which("g++") is None, reason="no host g++ for verlenv's compiler check")
def test_cuda_home_from_verlenv_toolchain(tmp_path):
    bindir = verlenv_bin()
    # Test double of torch: only what verlenv's probe reads.
    touch(tmp_path / "torch-double/torch/__init__.py",
          "__version__ = '2.11.0+cu130'\n"
          "class version:\n    cuda = '13.0'\n"
          "class _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n")
    python = touch(tmp_path / "env/bin/python",
                   f"#!/bin/sh\nPYTHONPATH={tmp_path}/torch-double exec {sys.executable} \"$@\"\n", 0o755)
    toolkit = tmp_path / "cuda-13.0"
    fake_nvcc(toolkit, "13.0")
    env = cuda_home(tmp_path, PATH=f"{bindir}:/usr/bin:/bin", VERLENV_PYTHON=str(python),
                    CUDA_HOME=str(toolkit), CUDAHOSTCXX=shutil.which("g++"))
    assert env["CUDA_HOME"] == str(toolkit)
    assert env["VERLENV_CUDA_NOTE"] == f"{toolkit} (verlenv toolchain, for {python})"
    assert env["PATH"].split(":")[0] == f"{toolkit}/bin"


# ---------------------------------------------------------------- the whole hook, as evaluated


@needs_nix
@needs_bash
def test_evaluated_shell_hook_runs(tmp_path, driver_tree, shell):
    project = tmp_path / "project"
    project.mkdir()
    env, banner = run_bash(shell["shellHook"], base_env(
        VERLENV_DRIVER_SEARCH=str(driver_tree / "usr/lib64"), PYTHONPATH="/leaks/into/venvs",
        VERLENV_CONDA_LOCK_VERSION=shell["VERLENV_CONDA_LOCK_VERSION"]), project)
    private = project / ".verlenv/driver-libs"
    assert env["TRITON_LIBCUDA_PATH"] == str(private)
    assert env["LD_LIBRARY_PATH"].split(":") == [str(private), shell["cxxRuntime"] + "/lib", "/prior/lib"]
    assert env["CUDAHOSTCXX"] == shell["testDouble"]["gcc13"] + "/bin/g++"
    assert "PYTHONPATH" not in env
    assert env["VERLENV_TOOLS_DIR"] == str(project / ".verlenv/tools")
    assert f"driver:    {driver_tree / 'usr/lib64'}" in banner
    assert "CUDA_HOME: " in banner and "nox -s verify" in banner


# ---------------------------------------------------------------- conda-lock wrapper


@needs_bash
def test_conda_lock_wrapper_needs_the_shell(tmp_path):
    r = subprocess.run(["bash", str(NIX / "conda-lock.sh"), "--version"], env=base_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "VERLENV_CONDA_LOCK_VERSION is not set" in r.stderr


@pytest.mark.network
@pytest.mark.slow
@needs_bash
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not installed")
def test_conda_lock_wrapper_installs_the_pin_once(tmp_path):
    # The caller's environment carries its network settings (certificates, proxies, index).
    env = dict(os.environ, UV_PYTHON=sys.executable, VERLENV_CONDA_LOCK_VERSION="3.0.4",
               VERLENV_TOOLS_EXCLUDE_NEWER="2026-10-15T00:00:00Z", VERLENV_TOOLS_DIR=str(tmp_path / "tools"))
    for attempt in (1, 2):
        r = subprocess.run(["bash", str(NIX / "conda-lock.sh"), "--version"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert "version 3.0.4" in r.stdout
        assert ("installing conda-lock==3.0.4" in r.stderr) == (attempt == 1)
