"""The toolchain: a CUDA_HOME whose nvcc matches the env's torch, and a host compiler nvcc accepts.

Order of search (the first that matches torch's CUDA major.minor wins):
explicit $CUDA_HOME, the active conda prefix, a CUDA_HOME assembled from the PyPI CUDA wheels in the
env, the system toolkit. apex refuses a minor mismatch and torch a major one, so we demand both.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import UserError

TARGET_TRIPLE = "x86_64-linux"
# Layout 1 pointed targets/<triple>/lib at the temp folder it was made in, a link that broke on rename.
PYPI_CUDA_HOME_LAYOUT = 2

# Newest gcc major each nvcc release accepts (CUDA installation guides; nvcc's host_config.h).
MAX_GCC_FOR_CUDA = {"12.8": 14, "12.9": 14, "13.0": 15}

_TORCH_PROBE = r"""
import json, sys, sysconfig, torch
print(json.dumps({
    "python": sys.executable,
    "python_tag": "cp%d%d" % sys.version_info[:2],
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    "torch_lib": str(__import__("pathlib").Path(torch.__file__).parent / "lib"),
    "purelib": sysconfig.get_paths()["purelib"],
}))
"""


@dataclass(frozen=True)
class TorchInfo:
    python: str
    python_tag: str
    torch: str
    cuda: str | None
    cxx11_abi: bool
    torch_lib: str
    purelib: str


@dataclass
class Toolchain:
    cuda_home: str
    nvcc_version: str
    source: str  # "CUDA_HOME", "conda", "pypi", "system"
    reason: str
    host_cxx: str
    host_cxx_version: str
    env: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"CUDA_HOME={self.cuda_home} (nvcc {self.nvcc_version}, from {self.source}: {self.reason}); "
            f"host compiler {self.host_cxx} {self.host_cxx_version}"
        )


def torch_info(python: str) -> TorchInfo:
    """Ask the env's own interpreter about its torch (the tool need not share that env)."""
    try:
        out = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        raise UserError(f"no Python interpreter at {python}") from None
    except subprocess.CalledProcessError as e:
        last = (e.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"torch does not import in {python}: {last}; install the env first (verlenv install)") from None
    return TorchInfo(**json.loads(out.strip().splitlines()[-1]))


def nvcc_version(nvcc: Path) -> str | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _candidate_conda(env: dict[str, str]) -> list[tuple[str, Path, str]]:
    prefix = env.get("CONDA_PREFIX")
    return [("conda", Path(prefix), f"active conda prefix {prefix}")] if prefix else []


def _pypi_cuda_root(purelib: str) -> Path | None:
    root = Path(purelib) / "nvidia" / "cu13"
    return root if (root / "bin" / "nvcc").exists() else None


def assemble_pypi_cuda_home(cu_root: Path, dest_parent: Path) -> Path:
    """A CUDA_HOME of symlinks over the PyPI CUDA wheels, in the layout torch and nvcc.profile expect.

    The wheels ship `nvidia/cu13/{bin,include,lib,nvvm}`; nvcc.profile looks under
    `targets/x86_64-linux/{include,lib}` and torch links `lib64/libcudart.so`, which the wheel ships
    only under its SONAME. Made in a temp dir and renamed into place, so a half-made one never exists.
    """
    # The layout version is part of the key: a home made by an older layout is never reused.
    key = hashlib.sha256(f"{cu_root.resolve()}:layout-{PYPI_CUDA_HOME_LAYOUT}".encode()).hexdigest()[:12]
    dest = dest_parent / f"cuda-home-{key}"
    if (dest / "bin" / "nvcc").exists():
        return dest
    dest_parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest_parent, prefix=".cuda-home-"))
    try:
        for name in ("bin", "nvvm", "include"):
            (tmp / name).symlink_to(cu_root / name)
        lib64 = tmp / "lib64"
        lib64.mkdir()
        for so in (cu_root / "lib").iterdir():
            (lib64 / so.name).symlink_to(so)
        sonames = sorted((cu_root / "lib").glob("libcudart.so.*"))
        if sonames and not (lib64 / "libcudart.so").exists():
            (lib64 / "libcudart.so").symlink_to(sonames[0])
        (tmp / "lib").symlink_to("lib64")
        targets = tmp / "targets" / TARGET_TRIPLE
        targets.mkdir(parents=True)
        (targets / "include").symlink_to(cu_root / "include")
        (targets / "lib").symlink_to(Path("..", "..", "lib64"))  # relative: tmp is renamed below
        os.replace(tmp, dest)
    except FileExistsError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished it first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _conda_env_additions(prefix: Path) -> dict[str, str]:
    # conda-forge's split CUDA packages keep headers/libs under targets/<triple>/, which torch does not search.
    inc = prefix / "targets" / TARGET_TRIPLE / "include"
    lib = prefix / "targets" / TARGET_TRIPLE / "lib"
    extra = {}
    if inc.is_dir():
        extra["CPATH"] = _prepend(str(inc), os.environ.get("CPATH"))
    if lib.is_dir():
        extra["LIBRARY_PATH"] = _prepend(f"{lib}:{lib / 'stubs'}", os.environ.get("LIBRARY_PATH"))
    return extra


def _prepend(value: str, existing: str | None) -> str:
    return f"{value}:{existing}" if existing else value


def host_compiler(env: dict[str, str]) -> tuple[str, str]:
    cxx = env.get("CUDAHOSTCXX") or env.get("CXX") or shutil.which("g++") or "g++"
    try:
        version = subprocess.run([cxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True).stdout.strip()
    except OSError:
        raise UserError(f"no host C++ compiler ({cxx} not found); install gcc/g++ (conda: gxx, Debian: g++)") from None
    return cxx, version


def check_host_compiler(cuda: str, cxx: str, version: str) -> None:
    major = int(version.split(".")[0]) if version else 0
    limit = MAX_GCC_FOR_CUDA.get(cuda)
    if "clang" in Path(cxx).name:
        return
    if limit and major > limit:
        raise UserError(
            f"host compiler {cxx} is gcc {version}, newer than nvcc {cuda} accepts (gcc <= {limit}); "
            f"set CXX/CUDAHOSTCXX to a gcc {limit} or older (conda: gxx={limit})"
        )


def check_explicit_cuda_home(env: dict[str, str]) -> None:
    """A CUDA_HOME the user set is used or refused, never silently replaced by another toolkit."""
    home = env.get("CUDA_HOME")
    if not home:
        return
    if not Path(home).is_dir():
        raise UserError(f"CUDA_HOME={home}: no such directory; point it at a CUDA toolkit (with bin/nvcc) or unset it")
    if not (Path(home) / "bin" / "nvcc").is_file():
        raise UserError(f"CUDA_HOME={home}: has no bin/nvcc; point it at a CUDA toolkit (with bin/nvcc) or unset it")


def resolve(python: str, cache_dir: Path, env: dict[str, str] | None = None) -> tuple[TorchInfo, Toolchain]:
    """Find or make a CUDA_HOME for the env of `python`; refuse with one line when nothing matches."""
    env = dict(os.environ if env is None else env)
    check_explicit_cuda_home(env)
    info = torch_info(python)
    if not info.cuda:
        raise UserError(f"torch {info.torch} in {python} is a CPU build; a CUDA build of torch is needed")
    want = _major_minor(info.cuda)
    candidates: list[tuple[str, Path, str]] = []
    if env.get("CUDA_HOME"):
        candidates.append(("CUDA_HOME", Path(env["CUDA_HOME"]), "set explicitly"))
    candidates += _candidate_conda(env)
    if cu_root := _pypi_cuda_root(info.purelib):
        candidates.append(("pypi", cu_root, f"PyPI CUDA wheels in {cu_root}"))
    for system in (Path("/usr/local/cuda"), *(Path(p).parent.parent for p in [shutil.which("nvcc", path=env.get("PATH"))] if p)):
        candidates.append(("system", system, f"system toolkit {system}"))
    seen: list[str] = []
    for source, root, reason in candidates:
        nvcc = root / "bin" / "nvcc"
        found = nvcc_version(nvcc) if nvcc.exists() else None
        seen.append(f"{root}: {'nvcc ' + found if found else 'no nvcc'}")
        if found != want:
            if source == "CUDA_HOME" and found:
                raise UserError(
                    f"CUDA_HOME={root} has nvcc {found} but torch {info.torch} was built with CUDA {info.cuda}; "
                    f"point CUDA_HOME at a {want} toolkit or unset it"
                )
            continue
        extra: dict[str, str] = {}
        cuda_home = root
        if source == "pypi":
            cuda_home = assemble_pypi_cuda_home(root, cache_dir)
        elif source == "conda":
            extra = _conda_env_additions(root)
        cxx, cxx_version = host_compiler(env)
        check_host_compiler(want, cxx, cxx_version)
        extra |= {"CUDA_HOME": str(cuda_home), "PATH": _prepend(str(cuda_home / "bin"), env.get("PATH"))}
        return info, Toolchain(str(cuda_home), found, source, reason, cxx, cxx_version, extra)
    raise UserError(
        f"no CUDA {want} toolkit for torch {info.torch} (needs nvcc {want}); looked at: {'; '.join(seen) or 'nothing'}. "
        + ("Install the PyPI nvcc wheels of the lock (verlenv install)" if want.startswith("13")
           else f"Install conda-forge cuda-nvcc={want} (conda-lock install) and activate that env")
    )
