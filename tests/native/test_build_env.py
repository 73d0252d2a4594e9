"""The build-test env: a venv with PyPI torch 2.11.0 (CUDA 13.0) and the PyPI CUDA 13.0 compiler.

Made once under $VERLENV_TEST_ENV (default ~/.cache/verlenv-test/torch211) and reused while its pins
match; uv's cache makes a remake quick. The builder's slow tests compile real extensions in it.
"""

import fcntl
import functools
import glob
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verlenv.fsutil import write_atomic
from verlenv.native import proctree
from waiting import GUARD_S, until

PYTHON = "3.12"
PINS = (
    "torch==2.11.0",
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-runtime==13.0.96",
    "ninja==1.13.2",
    "setuptools==81.0.0",
    "wheel==0.48.0",
    "pip==26.3",
    "packaging==26.3",
    "psutil==7.2.2",
)
MARKER = ".verlenv-test-pins"
DATA = Path(__file__).parents[1] / "data" / "ext"


def env_dir() -> Path:
    return Path(os.environ.get("VERLENV_TEST_ENV") or Path.home() / ".cache" / "verlenv-test" / "torch211")


def base_python() -> str:
    """A Python 3.12 to make the env from: $VERLENV_TEST_PYTHON, python3.12 on PATH, or pyenv's."""
    if chosen := os.environ.get("VERLENV_TEST_PYTHON"):
        return chosen
    for candidate in (shutil.which("python3.12"),
                      *sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12")))):
        check = "import sys; assert sys.version_info[:2] == (3, 12)"
        if candidate and subprocess.run([candidate, "-c", check], capture_output=True).returncode == 0:
            return candidate
    pytest.fail("no Python 3.12 for the build-test env; set VERLENV_TEST_PYTHON")


@functools.cache
def torch_python() -> str:
    """The env's interpreter; the env is (re)made only when its recorded pins differ from PINS."""
    env = env_dir()
    python = env / "bin" / "python"
    want = "\n".join((f"python {PYTHON}", *PINS)) + "\n"
    marker = env / MARKER
    env.parent.mkdir(parents=True, exist_ok=True)
    # One maker at a time: test runs on this machine (a clean clone's CI beside a checkout's) share the env.
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and marker.is_file() and marker.read_text() == want:
            return str(python)
        shutil.rmtree(env, ignore_errors=True)
        for cmd in (["uv", "venv", "-q", "--python", base_python(), str(env)],
                    ["uv", "pip", "install", "-q", "--python", str(python), *PINS]):
            r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
            if r.returncode != 0:
                pytest.fail(f"cannot make the build-test env ({' '.join(cmd[:3])}): {r.stderr.strip()[-500:]}")
        write_atomic(marker, want)
    return str(python)


def run_probe_binding(python: str, wheel: Path, dest: Path) -> list[str]:
    """The probe's wheel unpacked into dest and its binding called by `python` on CPU tensors: the lines it prints,
    the kernel's own __CUDA_ARCH_LIST__, then the binding's error (its check ran, so the .so linked up with torch)."""
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest)
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(dest)!r})\n"
        "import cuda_ext_probe\n"
        "print(torch.ops.cuda_ext_probe.compiled_archs())\n"
        "try:\n"
        "    torch.ops.cuda_ext_probe.axpy(torch.ones(4), torch.ones(4), 2.0)\n"
        "except RuntimeError as e:\n"
        "    print(str(e).splitlines()[0])\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def clean_build_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder reads these from the environment; the tests decide them."""
    for var in ("CUDA_HOME", "CONDA_PREFIX", "VIRTUAL_ENV", "MAX_JOBS", "NVCC_THREADS", "TORCH_CUDA_ARCH_LIST",
                "CXX", "CUDAHOSTCXX", "VERLENV_ROOT"):
        monkeypatch.delenv(var, raising=False)


def kill_session(sid: int) -> None:
    """SIGKILL every live process of session `sid` (a builder started with start_new_session=True).

    Killing its process group is not enough: ninja puts each compile command in a group of its own.
    """
    def none_left() -> bool:
        pids = [pid for pid, (state, session) in _processes().items() if session == sid and state != "Z"]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not pids

    assert until(none_left, every_s=0.1), f"processes of session {sid} survive SIGKILL"


def _processes() -> dict[int, tuple[str, int]]:
    """pid -> (state, session id)."""
    return {pid: (fields[0], int(fields[3])) for pid, fields in proctree.proc_stats().items()}


@pytest.mark.slow
@pytest.mark.network
def test_env_has_a_cuda_13_0_torch_and_nvcc_13_0():
    python = torch_python()
    probe = "import torch, json; print(json.dumps([torch.__version__, torch.version.cuda]))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '["2.11.0+cu130", "13.0"]'
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    nvcc = subprocess.run([f"{purelib}/nvidia/cu13/bin/nvcc", "--version"], capture_output=True, text=True).stdout
    assert "release 13.0" in nvcc


def build_until(root: Path, variant: tuple[str | None, str], package: str, archs: list[str], work: Path,
                wheelhouse: Path, source: str | None, stop_when, guard_s: float = GUARD_S) -> tuple[str, str]:
    """Run the real builder on a recipe of the catalog at root in a subprocess; kill it once stop_when(work) holds
    (what it watches is whole by then: a condition on a file's content, not on its existence).

    Returns (the builder's stderr, the build log): enough to check what setup.py made of the recipe without paying
    for a whole compile.
    """
    code = (f"from pathlib import Path\nfrom verlenv.catalog import stacks\nfrom verlenv.native import build\n"
            f"variant = stacks.load(Path({str(root / 'stacks.toml')!r})).variant(*{variant!r})\n"
            f"build.build_one(Path({str(root)!r}), variant, {package!r}, {torch_python()!r}, {archs!r}, "
            f"Path({str(wheelhouse)!r}), Path({str(work)!r}), source={f'Path({source!r})' if source else None})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert until(lambda: proc.poll() is not None or stop_when(work), guard_s, every_s=0.5), "no such point"
        assert proc.poll() is None, f"the build ended first: {proc.stderr.read()[-3000:]}"
    finally:
        kill_session(proc.pid)  # the builder, pip, ninja and every compile under them
        stderr = proc.communicate()[1]
    return stderr, next(work.glob(f"build-{package}-*/build.log")).read_text(errors="replace")
