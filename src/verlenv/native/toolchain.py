"""The toolchain: a CUDA_HOME whose nvcc matches the env's torch, and a host compiler nvcc accepts.

An explicit $CUDA_HOME is used or refused, never replaced; so is, without one, the toolkit a bundle carries (it
stands for the CUDA_HOME its maker gave). Otherwise the candidates are the active conda prefix,
a CUDA_HOME assembled from the PyPI CUDA wheels in the env, and the system's toolkits; the first whose nvcc has
torch's CUDA major.minor wins. Without one, the newest nvcc of torch's CUDA major is taken, with a warning:
torch's cpp_extension refuses only a major mismatch (a minor one it warns about), and flash-attn's own release
wheels are built with one nvcc per major for every torch of it (2.8.3's setup.py: 12.3 for all CUDA 12 torches).
A different major is never taken. A caller whose package refuses a minor mismatch itself (apex's setup.py) asks
for the exact minor.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import UserError
from verlenv.fsutil import cache_dir, write_atomic

TARGET_TRIPLE = "x86_64-linux"
# Where NVIDIA's installers put toolkits (cuda-X.Y, and cuda: a link to one of them).
NVIDIA_INSTALL_DIR = Path("/usr/local")
# Layout 1 pointed targets/<triple>/lib at the temp folder it was made in, a link that broke on rename.
PYPI_CUDA_HOME_LAYOUT = 2
# lib64/stubs/libcuda.so of a run-time CUDA_HOME: FlashInfer's JIT links `-L$CUDA_HOME/lib64/stubs -lcuda`
# (flashinfer/jit/cpp_ext.py), and the PyPI wheels ship no driver stub (`ld: cannot find -lcuda`). A linker script
# that adds nothing: the link succeeds, and a driver symbol a module calls directly stays undefined until it loads
# (NVIDIA's stub would add libcuda.so.1 as a needed library instead).
LIBCUDA_LINK_STUB = "/* verlenv: libcuda at link time only; the driver's libcuda.so.1 serves the run */\n"

# Newest gcc major each nvcc release accepts (CUDA installation guides; nvcc's crt/host_config.h, read for 12.4 and
# 12.5 in Debian's nvidia-cuda-dev packages).
MAX_GCC_FOR_CUDA = {"12.4": 13, "12.5": 13, "12.8": 14, "12.9": 14, "13.0": 15}

# Run in the env: its torch imported, the versions and folders a build needs.
_TORCH_PROBE = Path(__file__).with_name("env_programs") / "torch_info.py"


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
    nvcc_version: str  # major.minor, as torch compares it
    source: str  # "CUDA_HOME", "bundle", "conda", "pypi", "system"
    reason: str
    host_cxx: str
    host_cxx_version: str
    env: dict[str, str] = field(default_factory=dict)
    nvcc_release: str | None = None  # the full release, e.g. 12.5.40 (nvcc's "V12.5.40")
    torch_cuda: str | None = None  # torch's CUDA major.minor the nvcc was chosen for
    # One line, set when the nvcc's minor differs from torch's: both versions and why that is safe.
    warning: str | None = None

    @property
    def match(self) -> str:
        return "exact" if self.nvcc_version == self.torch_cuda else "same major"

    def describe(self) -> str:
        nvcc = f"nvcc {self.nvcc_release or self.nvcc_version}"
        if self.match != "exact":
            nvcc += f" for torch's CUDA {self.torch_cuda}, same major"
        return (
            f"CUDA_HOME={self.cuda_home} ({nvcc}, from {self.source}: {self.reason}); "
            f"host compiler {self.host_cxx} {self.host_cxx_version}"
        )


def include_dirs(cuda_home: str) -> list[Path]:
    """The folders nvcc searches for a toolkit header: CUDA_HOME/include and its targets' (a conda or PyPI layout
    keeps some headers only under targets/<arch>-linux/include)."""
    root = Path(cuda_home)
    return [root / "include", *sorted(root.glob("targets/*/include"))]


def missing_headers(cuda_home: str, headers: Iterable[str]) -> list[str]:
    """The headers no include folder of this CUDA_HOME has."""
    dirs = include_dirs(cuda_home)
    return [h for h in headers if not any((d / h).is_file() for d in dirs)]


# Where torch's files are and what they are now, without importing it (a few ms, where importing torch takes
# seconds): the key of the probe's answer kept in the cache. A reinstall or rebuild of torch changes an inode, size or
# mtime here, and so the key.
_TORCH_FILES_PROBE = Path(__file__).with_name("env_programs") / "torch_files.py"


def _torch_cache_file(python: str) -> Path | None:
    """The cache file of the torch probe's answer for this interpreter's torch as its files are now; None where
    they cannot be read (no torch, an interpreter that is not one)."""
    try:
        out = subprocess.run([python, str(_TORCH_FILES_PROBE)], capture_output=True, text=True, timeout=60)
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if not isinstance(found, dict) or not found.get("torch_root") or not found.get("files"):
        return None
    key = hashlib.sha256(json.dumps([str(Path(python).resolve()), found], sort_keys=True).encode()).hexdigest()
    return cache_dir() / "torch-info" / f"{key[:32]}.json"


def torch_info(python: str) -> TorchInfo:
    """Ask the env's own interpreter about its torch (the tool need not share that env). The answer is kept in
    verlenv's cache under a key of torch's files: the next build of the same env does not import torch again."""
    cache = _torch_cache_file(python)
    if cache is not None:
        try:
            return TorchInfo(**json.loads(cache.read_text()))
        except (OSError, ValueError, TypeError):
            pass  # not there yet, or unreadable: asked again below, and written anew
    info = _ask_torch(python)
    if cache is not None:
        try:
            write_atomic(cache, json.dumps(info.__dict__, indent=1) + "\n")
        except OSError:
            pass  # a read-only cache: every build asks again
    return info


def _ask_torch(python: str) -> TorchInfo:
    try:
        out = subprocess.run([python, str(_TORCH_PROBE)], capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        raise UserError(f"no Python interpreter at {python}") from None
    except subprocess.CalledProcessError as e:
        last = (e.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"torch does not import in {python}: {last}; install the env first (verlenv install)") from None
    return TorchInfo(**json.loads(out.strip().splitlines()[-1]))


def parse_nvcc_version(banner: str) -> tuple[str, str | None] | None:
    """(major.minor, full release) from `nvcc --version`'s text: "release 12.5, V12.5.40" -> ("12.5", "12.5.40")."""
    m = re.search(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?", banner)
    return (m.group(1), m.group(2)) if m else None


def nvcc_release(nvcc: Path) -> tuple[str, str | None] | None:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_nvcc_version(out)


def nvcc_version(nvcc: Path) -> str | None:
    found = nvcc_release(nvcc)
    return found[0] if found else None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _major(version: str) -> str:
    return version.split(".")[0]


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def minor_mismatch_warning(nvcc: str, torch: str, cuda: str, why: str) -> str:
    """The one line said when an nvcc of torch's CUDA major but another minor builds the extension."""
    return (f"nvcc {nvcc} is not torch {torch}'s CUDA {cuda} ({why}); the same major is safe: torch's cpp_extension "
            f"refuses only a major mismatch, and the extension links libcudart.so.{_major(cuda)}, which torch's own "
            f"CUDA {cuda} runtime provides")


def _candidate_conda(env: dict[str, str]) -> list[tuple[str, Path, str]]:
    prefix = env.get("CONDA_PREFIX")
    return [("conda", Path(prefix), f"active conda prefix {prefix}")] if prefix else []


def _pypi_cuda_root(purelib: str) -> Path | None:
    root = Path(purelib) / "nvidia" / "cu13"
    return root if (root / "bin" / "nvcc").exists() else None


def pypi_cuda_home_path(cu_root: Path, dest_parent: Path, link_stub: bool = False) -> Path:
    """Where assemble_pypi_cuda_home puts the CUDA_HOME of these wheels (nothing is made)."""
    # The layout version is part of the key: a home made by an older layout is never reused.
    stub = ":libcuda-link-stub" if link_stub else ""
    key = hashlib.sha256(f"{cu_root.resolve()}:layout-{PYPI_CUDA_HOME_LAYOUT}{stub}".encode()).hexdigest()[:12]
    return dest_parent / f"cuda-home-{key}"


def assemble_pypi_cuda_home(cu_root: Path, dest_parent: Path, link_stub: bool = False) -> Path:
    """A CUDA_HOME of symlinks over the PyPI CUDA wheels, in the layout torch and nvcc.profile expect.

    The wheels ship `nvidia/cu13/{bin,include,lib,nvvm}`; nvcc.profile looks under
    `targets/x86_64-linux/{include,lib}` and torch links `lib64/libcudart.so`, which the wheel ships
    only under its SONAME. Made in a temp dir and renamed into place, so a half-made one never exists.
    link_stub: with `lib64/stubs/libcuda.so` for a JIT compiler that links -lcuda at run time (LIBCUDA_LINK_STUB).
    """
    dest = pypi_cuda_home_path(cu_root, dest_parent, link_stub)
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
        if link_stub:
            (lib64 / "stubs").mkdir()
            (lib64 / "stubs" / "libcuda.so").write_text(LIBCUDA_LINK_STUB)
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


def runtime_cuda_home(purelib: str, prefix: Path, make: bool = True) -> Path | None:
    """The CUDA_HOME an env's run-time JIT compilers use (SGLang's tvm-ffi kernels, FlashInfer): its PyPI CUDA
    wheels assembled inside the env, with the libcuda link stub. None when the env has no PyPI nvcc; make=False:
    where it is (or would be), nothing made."""
    cu_root = _pypi_cuda_root(purelib)
    if cu_root is None:
        return None
    parent = Path(prefix) / "verlenv"
    if make:
        return assemble_pypi_cuda_home(cu_root, parent, link_stub=True)
    return pypi_cuda_home_path(cu_root, parent, link_stub=True)


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
        version = subprocess.run([cxx, "-dumpfullversion", "-dumpversion"], capture_output=True,
                                 text=True).stdout.strip()
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


def _candidates(env: dict[str, str], info: TorchInfo) -> list[tuple[str, Path, str]]:
    """(source, root, reason) of every toolkit to look at, in order of preference at equal versions."""
    candidates = _candidate_conda(env)
    if cu_root := _pypi_cuda_root(info.purelib):
        candidates.append(("pypi", cu_root, f"PyPI CUDA wheels in {cu_root}"))
    # NVIDIA's installers make /usr/local/cuda-X.Y (and /usr/local/cuda, a link to one); distributions put nvcc on
    # PATH (Debian's nvidia-cuda-toolkit: /usr/bin/nvcc, so /usr).
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    systems = [NVIDIA_INSTALL_DIR / "cuda", *sorted(NVIDIA_INSTALL_DIR.glob("cuda-*")),
               *([Path(on_path).parent.parent] if on_path else [])]
    known = {root.resolve() for _, root, _ in candidates}
    for system in systems:
        if system.resolve() not in known:
            known.add(system.resolve())
            candidates.append(("system", system, f"system toolkit {system}"))
    return candidates


def _toolchain(source: str, root: Path, reason: str, found: tuple[str, str | None], info: TorchInfo,
               cache_dir: Path, env: dict[str, str], warning: str | None, link_stub: bool = False) -> Toolchain:
    extra: dict[str, str] = {}
    cuda_home = root
    if source == "pypi":
        cuda_home = assemble_pypi_cuda_home(root, cache_dir, link_stub)
    elif source == "conda":
        extra = _conda_env_additions(root)
    cxx, cxx_version = host_compiler(env)
    check_host_compiler(found[0], cxx, cxx_version)  # the limit is the nvcc's own, not torch's CUDA's
    extra |= {"CUDA_HOME": str(cuda_home), "PATH": _prepend(str(cuda_home / "bin"), env.get("PATH"))}
    return Toolchain(str(cuda_home), found[0], source, reason, cxx, cxx_version, extra, nvcc_release=found[1],
                     torch_cuda=_major_minor(info.cuda), warning=warning)


# A toolkit given rather than found: how a message names it, the reason recorded, why its minor may differ, and what
# to do when it does not fit ({toolkit}: the toolkit that would).
GIVEN = {
    "CUDA_HOME": ("CUDA_HOME={root}", "set explicitly", "CUDA_HOME set explicitly",
                  "point CUDA_HOME at {toolkit} or unset it"),
    "bundle": ("the bundle's toolkit {root}", "carried in the bundle", "the toolkit the bundle carries",
               "set CUDA_HOME to {toolkit}, or bundle one with `verlenv bundle --toolkit DIR`"),
}


def resolve(python: str, cache_dir: Path, env: dict[str, str] | None = None,
            exact_minor_for: str | None = None, toolkit: Path | None = None,
            link_stub: bool = False) -> tuple[TorchInfo, Toolchain]:
    """Find or make a CUDA_HOME for the env of `python`; refuse with one line when nothing fits.

    `exact_minor_for` names a package that refuses an nvcc of another minor than torch's (apex): then only the
    exact major.minor is taken. `toolkit`: the CUDA_HOME a bundle carries, taken as an explicit one when no
    CUDA_HOME is set. `link_stub`: a CUDA_HOME assembled from PyPI's wheels gets lib64/stubs/libcuda.so, for a build
    that links -lcuda (a toolkit's own has NVIDIA's stub).
    """
    env = dict(os.environ if env is None else env)
    check_explicit_cuda_home(env)
    info = torch_info(python)
    if not info.cuda:
        raise UserError(f"torch {info.torch} in {python} is a CPU build; a CUDA build of torch is needed")
    want = _major_minor(info.cuda)
    if env.get("CUDA_HOME"):
        return info, _explicit(Path(env["CUDA_HOME"]), info, want, cache_dir, env, exact_minor_for)
    if toolkit is not None:
        return info, _explicit(Path(toolkit), info, want, cache_dir, env, exact_minor_for, given="bundle")
    seen: list[str] = []
    same_major: list[tuple[tuple[str, str | None], str, Path, str]] = []
    for source, root, reason in _candidates(env, info):
        nvcc = root / "bin" / "nvcc"
        found = nvcc_release(nvcc) if nvcc.exists() else None
        seen.append(f"{root}: {'nvcc ' + found[0] if found else 'no nvcc'}")
        if found and found[0] == want:
            return info, _toolchain(source, root, reason, found, info, cache_dir, env, None, link_stub)
        if found and _major(found[0]) == _major(want):
            same_major.append((found, source, root, reason))
    if same_major and not exact_minor_for:
        # The newest of the major; at equal versions the first in the order of preference.
        found, source, root, reason = max(same_major, key=lambda c: _version_key(c[0][0]))
        warning = minor_mismatch_warning(found[0], info.torch, want, f"no nvcc {want} found")
        return info, _toolchain(source, root, reason, found, info, cache_dir, env, warning, link_stub)
    looked = "; ".join(seen) or "nothing"
    if exact_minor_for:
        raise UserError(f"no CUDA {want} toolkit for torch {info.torch}: {exact_minor_for} needs nvcc {want} exactly "
                        f"(its build refuses another minor); looked at: {looked}. {_install_hint(want, exact=True)}")
    raise UserError(f"no CUDA {_major(want)}.x toolkit for torch {info.torch} (needs nvcc {_major(want)}.x, "
                    f"{want} preferred); looked at: {looked}. {_install_hint(want, exact=False)}")


def _explicit(root: Path, info: TorchInfo, want: str, cache_dir: Path, env: dict[str, str],
              exact_minor_for: str | None, given: str = "CUDA_HOME") -> Toolchain:
    """A toolkit given (the user's CUDA_HOME, a bundle's): taken if its nvcc has torch's major (and minor if the
    package needs it), else refused."""
    name, reason, why, fix = GIVEN[given]
    name = name.format(root=root)
    found = nvcc_release(root / "bin" / "nvcc")
    if found is None:
        raise UserError(f"{name}: bin/nvcc does not report a release (nvcc --version); "
                        f"{fix.format(toolkit='a working CUDA toolkit')}")
    if _major(found[0]) != _major(want):
        raise UserError(f"{name} has nvcc {found[0]} but torch {info.torch} was built with CUDA {info.cuda}; "
                        f"a different CUDA major never works: "
                        f"{fix.format(toolkit=f'a CUDA {_major(want)}.x toolkit ({want} preferred)')}")
    if found[0] == want:
        return _toolchain(given, root, reason, found, info, cache_dir, env, None)
    if exact_minor_for:
        raise UserError(f"{name} has nvcc {found[0]} but {exact_minor_for} needs nvcc {want} exactly, torch "
                        f"{info.torch}'s CUDA (its build refuses another minor); "
                        f"{fix.format(toolkit=f'a {want} toolkit')}")
    warning = minor_mismatch_warning(found[0], info.torch, want, why)
    return _toolchain(given, root, reason, found, info, cache_dir, env, warning)


def _install_hint(want: str, exact: bool) -> str:
    if want.startswith("13"):
        return "Install the PyPI nvcc wheels of the lock (verlenv install)"
    conda = f"Install conda-forge cuda-nvcc={want} (conda-lock install) and activate that env"
    if exact:
        return conda
    return (f"{conda}, or set CUDA_HOME to any CUDA {_major(want)}.x toolkit "
            "(scripts/debian-cuda-home.sh makes one from Debian's packages)")

