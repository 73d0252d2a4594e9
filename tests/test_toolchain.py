"""Toolchain resolution: the PyPI-assembled CUDA_HOME, refusal when no nvcc matches torch, host compiler limits."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_build_env import torch_python
from verlenv.errors import UserError
from verlenv.native import toolchain


def fake_torch_python(folder: Path, cuda: str | None, purelib: Path, torch: str = "2.8.0+cu128") -> str:
    """Test double: an 'interpreter' answering the torch probe as a torch built for `cuda` would."""
    info = {"python": str(folder / "python"), "python_tag": "cp312", "torch": torch, "cuda": cuda,
            "cxx11_abi": True, "torch_lib": str(purelib / "torch" / "lib"), "purelib": str(purelib)}
    script = folder / "fake-torch-python"
    script.write_text(f"#!/bin/sh\necho '{json.dumps(info)}'\n")
    script.chmod(0o755)
    return str(script)


def fake_compiler(folder: Path, version: str) -> str:
    """Test double: a g++ that reports `version` (no such gcc is installed here)."""
    script = folder / "g++"
    script.write_text(f"#!/bin/sh\necho {version}\n")
    script.chmod(0o755)
    return str(script)


NVCC_OUTPUTS = Path(__file__).parent / "data" / "nvcc"
# Real `nvcc --version` texts (tests/data/nvcc/README.md says where each comes from).
NVCC_12_4, NVCC_12_5 = "debian-12.4.131.txt", "debian-12.5.40.txt"
NVCC_12_8, NVCC_13_0 = "conda-forge-12.8.93.txt", "pypi-13.0.88.txt"


def toolkit(folder: Path, output: str) -> Path:
    """Test double: a toolkit root whose bin/nvcc prints a real nvcc's --version text."""
    (folder / "bin").mkdir(parents=True)
    nvcc = folder / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\ncat {NVCC_OUTPUTS / output}\n")
    nvcc.chmod(0o755)
    return folder


@pytest.fixture
def no_nvidia_installs(tmp_path, monkeypatch) -> Path:
    """An empty stand-in for /usr/local, so this machine's own toolkits are no candidates."""
    folder = tmp_path / "usr-local"
    folder.mkdir()
    monkeypatch.setattr(toolchain, "NVIDIA_INSTALL_DIR", folder)
    return folder


def path_to(root: Path) -> str:
    """A PATH whose first nvcc is root's."""
    return f"{root}/bin:/usr/bin:/bin"


def bare_env(**extra: str) -> dict[str, str]:
    """No CUDA_HOME, no conda, a PATH without nvcc: only the candidates the test names."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), **extra}


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


def test_no_matching_toolkit_is_refused_in_one_line(tmp_path, no_nvidia_installs):
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env())
    message = one_line(e)
    assert message.startswith("no CUDA 12.x toolkit for torch 2.8.0+cu128 (needs nvcc 12.x, 12.8 preferred)")
    assert "conda-forge cuda-nvcc=12.8" in message and "scripts/debian-cuda-home.sh" in message
    assert e.value.exit_code == 2
    assert not (tmp_path / "cache").exists()  # nothing assembled for a refused env


@pytest.mark.parametrize("output, expected", [
    (NVCC_12_4, ("12.4", "12.4.131")),
    (NVCC_12_5, ("12.5", "12.5.40")),
    (NVCC_12_8, ("12.8", "12.8.93")),
    (NVCC_13_0, ("13.0", "13.0.88")),
])
def test_real_nvcc_outputs_are_parsed(output, expected):
    assert toolchain.parse_nvcc_version((NVCC_OUTPUTS / output).read_text()) == expected


def test_text_without_a_release_is_no_nvcc_version():
    assert toolchain.parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\n") is None


def test_the_exact_minor_wins_over_a_newer_same_major(tmp_path, no_nvidia_installs):
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(CONDA_PREFIX=str(conda), PATH=path_to(debian)))
    assert (tc.cuda_home, tc.source, tc.nvcc_version, tc.nvcc_release) == (str(conda), "conda", "12.8", "12.8.93")
    assert tc.match == "exact" and tc.warning is None


@pytest.mark.parametrize("conda_output, path_output", [(NVCC_12_4, NVCC_12_5), (NVCC_12_5, NVCC_12_4)])
def test_without_the_exact_minor_the_newest_same_major_is_taken_with_a_warning(tmp_path, no_nvidia_installs,
                                                                              conda_output, path_output):
    conda = toolkit(tmp_path / "conda", conda_output)
    on_path = toolkit(tmp_path / "on-path", path_output)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(CONDA_PREFIX=str(conda), PATH=path_to(on_path)))
    newest = conda if conda_output == NVCC_12_5 else on_path
    assert (tc.cuda_home, tc.nvcc_version, tc.nvcc_release, tc.torch_cuda) == (str(newest), "12.5", "12.5.40", "12.8")
    assert tc.match == "same major" and "for torch's CUDA 12.8, same major" in tc.describe()
    assert "\n" not in tc.warning
    assert tc.warning.startswith("nvcc 12.5 is not torch 2.8.0+cu128's CUDA 12.8 (no nvcc 12.8 found); "
                                 "the same major is safe")
    assert "libcudart.so.12" in tc.warning
    assert tc.env["CUDA_HOME"] == str(newest) and tc.env["PATH"].startswith(f"{newest}/bin:")


def test_nvidia_installs_are_candidates(tmp_path, no_nvidia_installs):
    toolkit(no_nvidia_installs / "cuda-12.4", NVCC_12_4)
    toolkit(no_nvidia_installs / "cuda-12.5", NVCC_12_5)
    (no_nvidia_installs / "cuda").symlink_to("cuda-12.4")
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env())
    assert (tc.cuda_home, tc.source, tc.nvcc_version) == (str(no_nvidia_installs / "cuda-12.5"), "system", "12.5")


def test_another_major_is_never_taken(tmp_path, no_nvidia_installs):
    cuda13 = toolkit(tmp_path / "cuda13", NVCC_13_0)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(PATH=path_to(cuda13)))
    assert "no CUDA 12.x toolkit" in one_line(e) and f"{cuda13}: nvcc 13.0" in str(e.value)
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(cuda13)))
    assert one_line(e) == (f"CUDA_HOME={cuda13} has nvcc 13.0 but torch 2.8.0+cu128 was built with CUDA 12.8; "
                           "a different CUDA major never works: point CUDA_HOME at a CUDA 12.x toolkit "
                           "(12.8 preferred) or unset it")


def test_an_explicit_cuda_home_of_the_same_major_is_used_not_replaced(tmp_path, no_nvidia_installs):
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    debian = toolkit(tmp_path / "debian", NVCC_12_4)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(debian), CONDA_PREFIX=str(conda)))
    assert (tc.cuda_home, tc.source, tc.nvcc_release) == (str(debian), "CUDA_HOME", "12.4.131")
    assert tc.warning.startswith("nvcc 12.4 is not torch 2.8.0+cu128's CUDA 12.8 (CUDA_HOME set explicitly)")


def test_a_package_that_needs_the_exact_minor_refuses_a_same_major_nvcc(tmp_path, no_nvidia_installs):
    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(PATH=path_to(debian)), exact_minor_for="apex")
    message = one_line(e)
    assert message.startswith("no CUDA 12.8 toolkit for torch 2.8.0+cu128: apex needs nvcc 12.8 exactly")
    assert f"{debian}: nvcc 12.5" in message and "debian-cuda-home" not in message
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(debian)), exact_minor_for="apex")
    assert one_line(e).startswith(f"CUDA_HOME={debian} has nvcc 12.5 but apex needs nvcc 12.8 exactly")
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    env = bare_env(CONDA_PREFIX=str(conda), PATH=path_to(debian))
    _, tc = toolchain.resolve(python, tmp_path / "cache", env, exact_minor_for="apex")
    assert tc.cuda_home == str(conda) and tc.warning is None


def test_a_bundles_toolkit_is_taken_as_an_explicit_one(tmp_path, no_nvidia_installs):
    """The CUDA_HOME a bundle carries (`verlenv bundle --toolkit`) follows CUDA_HOME's rules: used before any toolkit
    found, an exact nvcc silently, a same-major one with the warning; a CUDA_HOME set wins over it."""
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    debian = toolkit(tmp_path / "bundle" / ".toolkit", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(CONDA_PREFIX=str(conda)), toolkit=debian)
    assert (tc.cuda_home, tc.source, tc.reason, tc.nvcc_release) == (str(debian), "bundle", "carried in the bundle",
                                                                     "12.5.40")
    assert tc.warning.startswith("nvcc 12.5 is not torch 2.8.0+cu128's CUDA 12.8 (the toolkit the bundle carries); "
                                 "the same major is safe")
    assert tc.env["CUDA_HOME"] == str(debian)
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(), toolkit=conda)
    assert (tc.source, tc.match, tc.warning) == ("bundle", "exact", None)
    _, tc = toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(conda)), toolkit=debian)
    assert (tc.cuda_home, tc.source) == (str(conda), "CUDA_HOME")


def test_a_bundles_toolkit_of_another_major_or_minor_is_refused_in_one_line(tmp_path, no_nvidia_installs):
    cuda13 = toolkit(tmp_path / "cuda13", NVCC_13_0)
    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    with pytest.raises(UserError) as e:  # never replaced by the exact toolkit the machine has
        toolchain.resolve(python, tmp_path / "cache", bare_env(CONDA_PREFIX=str(conda)), toolkit=cuda13)
    assert one_line(e) == (f"the bundle's toolkit {cuda13} has nvcc 13.0 but torch 2.8.0+cu128 was built with CUDA "
                           "12.8; a different CUDA major never works: set CUDA_HOME to a CUDA 12.x toolkit (12.8 "
                           "preferred), or bundle one with `verlenv bundle --toolkit DIR`")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(), exact_minor_for="apex", toolkit=debian)
    assert one_line(e).startswith(f"the bundle's toolkit {debian} has nvcc 12.5 but apex needs nvcc 12.8 exactly")


def test_the_host_compiler_limit_is_the_chosen_nvccs(tmp_path, no_nvidia_installs):
    """gcc 14 is fine for nvcc 12.8 but not for the 12.5 taken in its place (host_config.h: gcc <= 13)."""
    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    gcc14 = fake_compiler(tmp_path, "14.2.0")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(debian), CXX=gcc14))
    assert "gcc 14.2.0, newer than nvcc 12.5 accepts (gcc <= 13)" in one_line(e)


def test_an_explicit_nvcc_that_reports_no_release_is_refused(tmp_path, no_nvidia_installs):
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (broken / "bin" / "nvcc").chmod(0o755)
    conda = toolkit(tmp_path / "conda", NVCC_12_8)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(broken), CONDA_PREFIX=str(conda)))
    assert one_line(e).startswith(f"CUDA_HOME={broken}: bin/nvcc does not report a release")


def test_the_command_prints_the_choice_and_the_warning(tmp_path, no_nvidia_installs):
    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    src = Path(toolchain.__file__).parent.parent
    env = {**bare_env(CUDA_HOME=str(debian)), "PYTHONPATH": str(src)}
    run = lambda *args: subprocess.run([sys.executable, "-m", "verlenv", "toolchain", "--python", python, *args],  # noqa: E731
                                       capture_output=True, text=True, env=env, cwd=tmp_path)
    text = run()
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[1].startswith(f"CUDA_HOME={debian} (nvcc 12.5.40 for torch's CUDA 12.8, same major")
    [warning] = text.stderr.splitlines()
    assert warning.startswith("verlenv toolchain: warning: nvcc 12.5 is not torch 2.8.0+cu128's CUDA 12.8")
    shell = run("--shell")
    assert shell.stdout.splitlines()[0] == f"export CUDA_HOME={debian}" and "warning: nvcc 12.5" in shell.stderr
    decision = json.loads(run("--json").stdout)["toolchain"]
    assert (decision["nvcc_release"], decision["torch_cuda"], decision["match"]) == ("12.5.40", "12.8", "same major")
    assert decision["warning"].startswith("nvcc 12.5 is not torch 2.8.0+cu128's CUDA 12.8")


def test_a_cpu_torch_is_refused(tmp_path):
    python = fake_torch_python(tmp_path, None, tmp_path / "site-packages", torch="2.11.0+cpu")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env())
    assert "is a CPU build" in one_line(e)


def test_an_env_without_torch_is_refused(tmp_path):
    no_site = tmp_path / "python-without-site-packages"
    no_site.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    no_site.chmod(0o755)
    with pytest.raises(UserError) as e:
        toolchain.torch_info(str(no_site))
    assert "torch does not import" in one_line(e) and "No module named 'torch'" in str(e.value)


def test_a_missing_interpreter_is_refused(tmp_path):
    with pytest.raises(UserError) as e:
        toolchain.torch_info(str(tmp_path / "no-such-python"))
    assert "no Python interpreter at" in one_line(e)


@pytest.mark.parametrize("cuda, version", [("13.0", "16.1.0"), ("12.8", "15.2.0")])
def test_a_host_compiler_too_new_is_refused_in_one_line(tmp_path, cuda, version):
    cxx, reported = toolchain.host_compiler({"CXX": fake_compiler(tmp_path, version)})
    assert reported == version
    with pytest.raises(UserError) as e:
        toolchain.check_host_compiler(cuda, cxx, reported)
    message = one_line(e)
    limit = toolchain.MAX_GCC_FOR_CUDA[cuda]
    assert f"gcc {version}" in message and f"gcc <= {limit}" in message and "CXX/CUDAHOSTCXX" in message


@pytest.mark.parametrize("cuda, version", [("13.0", "15.1.0"), ("13.0", "12.2.0"), ("12.8", "14.3.0")])
def test_a_supported_host_compiler_passes(cuda, version):
    toolchain.check_host_compiler(cuda, "g++", version)


def test_this_machines_gcc_is_accepted_for_cuda_13():
    cxx, version = toolchain.host_compiler({})
    toolchain.check_host_compiler("13.0", cxx, version)
    assert version.split(".")[0].isdigit()


def test_a_missing_host_compiler_is_refused(tmp_path):
    with pytest.raises(UserError) as e:
        toolchain.host_compiler({"CXX": str(tmp_path / "no-such-g++")})
    assert "no host C++ compiler" in one_line(e)


@pytest.fixture(scope="module")
def real_env() -> tuple[str, Path]:
    python = torch_python()
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return python, Path(purelib)


@pytest.mark.slow
@pytest.mark.network
def test_pypi_cuda_home_has_the_layout_torch_and_nvcc_expect(real_env, tmp_path):
    _, purelib = real_env
    home = toolchain.assemble_pypi_cuda_home(purelib / "nvidia" / "cu13", tmp_path)
    assert toolchain.nvcc_version(home / "bin" / "nvcc") == "13.0"
    assert (home / "nvvm" / "bin" / "cicc").is_file()
    assert (home / "include" / "cuda_runtime.h").is_file()
    assert (home / "lib64" / "libcudart.so").resolve().name == "libcudart.so.13"
    assert os.readlink(home / "lib") == "lib64"
    assert (home / "targets" / "x86_64-linux" / "include" / "cuda_runtime.h").is_file()
    assert (home / "targets" / "x86_64-linux" / "lib" / "libcudart.so").exists()
    assert toolchain.assemble_pypi_cuda_home(purelib / "nvidia" / "cu13", tmp_path) == home  # made once
    assert [p.name for p in tmp_path.iterdir()] == [home.name]  # no temp folder left
    # nvcc through the symlinked home finds its headers and device compiler: a real compile to a cubin.
    (tmp_path / "k.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n")
    r = subprocess.run([str(home / "bin" / "nvcc"), "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"),
                        str(tmp_path / "k.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"


@pytest.mark.slow
@pytest.mark.network
def test_resolve_picks_the_pypi_nvcc_for_the_cuda_13_torch(real_env, tmp_path):
    python, _ = real_env
    info, tc = toolchain.resolve(python, tmp_path, bare_env())
    assert (info.torch, info.cuda, info.cxx11_abi) == ("2.11.0+cu130", "13.0", True)
    assert (tc.source, tc.nvcc_version) == ("pypi", "13.0")
    assert tc.env["CUDA_HOME"] == tc.cuda_home and tc.env["PATH"].startswith(f"{tc.cuda_home}/bin:")


@pytest.mark.slow
@pytest.mark.network
def test_nvcc_13_is_refused_for_a_cuda_12_8_torch(real_env, tmp_path):
    _, purelib = real_env
    python = fake_torch_python(tmp_path, "12.8", purelib)  # sees the env's real nvcc 13.0 wheels
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env())
    message = one_line(e)
    assert "no CUDA 12.x toolkit" in message and f"{purelib / 'nvidia' / 'cu13'}: nvcc 13.0" in message
    home = toolchain.assemble_pypi_cuda_home(purelib / "nvidia" / "cu13", tmp_path / "homes")
    with pytest.raises(UserError) as e:
        toolchain.resolve(python, tmp_path / "cache", bare_env(CUDA_HOME=str(home)))
    assert one_line(e).startswith(f"CUDA_HOME={home} has nvcc 13.0 but torch 2.8.0+cu128 was built with CUDA 12.8; "
                                  "a different CUDA major never works")


def pypi_cu13(site: Path) -> Path:
    """Test double: the PyPI CUDA 13 wheels' folder of a site-packages (bin/nvcc prints the real PyPI nvcc's
    --version text; an empty libcudart)."""
    root = toolkit(site / "nvidia" / "cu13", NVCC_13_0)
    for name in ("include", "nvvm", "lib"):
        (root / name).mkdir()
    (root / "lib" / "libcudart.so.13").write_bytes(b"")
    return root


def link_minus_lcuda(tmp_path: Path, stubs: Path) -> subprocess.CompletedProcess:
    """FlashInfer's JIT link (flashinfer/jit/cpp_ext.py: -L$cuda_home/lib64/stubs -lcuda) of a module that calls the
    driver, with this machine's real gcc."""
    (tmp_path / "mod.c").write_text("extern int cuInit(unsigned);\nint f(void) { return cuInit(0); }\n")
    subprocess.run(["gcc", "-fPIC", "-c", "mod.c", "-o", "mod.o"], cwd=tmp_path, check=True)
    return subprocess.run(["gcc", "-shared", "mod.o", f"-L{stubs}", "-lcuda", "-o", "mod.so"], cwd=tmp_path,
                          capture_output=True, text=True)


def test_the_run_time_cuda_home_is_made_inside_the_env_and_links_minus_lcuda(tmp_path):
    site, prefix = tmp_path / "site-packages", tmp_path / "env"
    cu_root = pypi_cu13(site)
    where = toolchain.runtime_cuda_home(str(site), prefix, make=False)
    assert where.parent == prefix / "verlenv" and not where.exists()  # make=False only says where
    home = toolchain.runtime_cuda_home(str(site), prefix)
    assert home == where and toolchain.nvcc_version(home / "bin" / "nvcc") == "13.0"
    assert (home / "lib64" / "stubs" / "libcuda.so").read_text() == toolchain.LIBCUDA_LINK_STUB
    assert toolchain.runtime_cuda_home(str(site), prefix) == home  # made once
    # The build's CUDA_HOME of the same wheels is another folder, without the stub (its key is unchanged).
    build_home = toolchain.assemble_pypi_cuda_home(cu_root, prefix / "verlenv")
    assert build_home != home and not (build_home / "lib64" / "stubs").exists()
    assert "cannot find -lcuda" in link_minus_lcuda(tmp_path, build_home / "lib64" / "stubs").stderr
    linked = link_minus_lcuda(tmp_path, home / "lib64" / "stubs")
    assert linked.returncode == 0, linked.stderr
    # The stub adds nothing: cuInit stays for the driver's libcuda.so.1 in the process to serve at load.
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "mod.so")], capture_output=True, text=True).stdout
    assert "libcuda" not in needed
    assert toolchain.runtime_cuda_home(str(tmp_path / "no-wheels"), prefix) is None


def test_torch_is_asked_once_per_install_of_it(tmp_path, monkeypatch):
    """The torch probe's answer is kept in verlenv's cache under a key of torch's files: the next build's toolchain
    does not import torch again, and a torch changed on disk is asked again. (A stand-in torch package, a test
    double: the env's real torch is not this test's to change.)"""
    site, imports = tmp_path / "site", tmp_path / "imports.txt"
    torch = site / "torch"
    (torch / "_C").mkdir(parents=True)
    (torch / "__init__.py").write_text(f"open({str(imports)!r}, 'a').write('imported\\n')\n"
                                       "from torch import _C, version\n__version__ = version.__version__\n")
    (torch / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    (torch / "_C" / "__init__.py").write_text("_GLIBCXX_USE_CXX11_ABI = True\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("VERLENV_CACHE", str(tmp_path / "cache"))

    first = toolchain.torch_info(sys.executable)
    assert (first.torch, first.cuda, first.cxx11_abi, first.torch_lib) == ("2.11.0+cu130", "13.0", True,
                                                                           str(torch / "lib"))
    assert toolchain.torch_info(sys.executable) == first
    assert imports.read_text().splitlines() == ["imported"]

    (torch / "version.py").write_text("__version__ = '2.11.0a0+cu130'\ncuda = '13.0'\n")  # torch rebuilt
    assert toolchain.torch_info(sys.executable).torch == "2.11.0a0+cu130"
    assert imports.read_text().splitlines() == ["imported", "imported"]
