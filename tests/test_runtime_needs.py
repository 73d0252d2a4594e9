"""What a package needs at run time from outside its wheels (data/packages.toml: system_libraries, jit), checked as
verl's workers would meet it: the system's own loader on real libraries, and the JIT tools found by tvm-ffi's and
FlashInfer's rules from the variables and PATH of the env's python; nvcc and gcc versions from test doubles that
print what real ones print (no gcc 13 or 16 is installed here), ninja real."""

import shutil
import sys
from pathlib import Path

import pytest

from test_toolchain import NVCC_12_8, NVCC_13_0, fake_compiler, toolkit
from verlenv.catalog import packages
from verlenv.catalog.packages import Jit, Package
from verlenv.errors import UserError
from verlenv.verify import static
from verlenv.verify.static import Scope

SGLANG = packages.table().packages["sglang"]
SCOPE = Scope(frozenset({"sglang"}))
NINJA = shutil.which("ninja")


def tools(tmp_path: Path, gcc: str, nvcc: str = NVCC_13_0, ninja: bool = True) -> dict[str, str]:
    """A CUDA_HOME and a PATH holding gcc and c++ of one version (and this machine's ninja), as the env shows them."""
    home = toolkit(tmp_path / "cuda", nvcc)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = Path(fake_compiler(bin_dir, gcc))
    shutil.copy(fake, bin_dir / "gcc")
    fake.rename(bin_dir / "c++")
    if ninja and NINJA:
        (bin_dir / "ninja").symlink_to(NINJA)
    return {"CUDA_HOME": str(home), "PATH": str(bin_dir), "CXX": None, "NVCC_CCBIN": None, "CUDA_PATH": None}


def test_the_sglang_row_needs_libnuma_and_a_jit_toolchain():
    assert dict(SGLANG.system_libraries)["libnuma.so.1"].startswith("Debian/Ubuntu: apt-get install libnuma1")
    assert SGLANG.jit.tools == ("nvcc", "gcc", "c++", "ninja") and SGLANG.jit.min_gcc == 13
    assert "sgl-project/sglang#26444" in SGLANG.jit.why and "gcc 12.2 and nvcc 13.0.88" in SGLANG.jit.why


def test_a_system_library_is_found_by_the_loader_or_named_with_how_to_install_it():
    libs = static.probe_runtime(sys.executable, ["libc.so.6", "libverlenv-absent.so.1"])["libs"]
    assert libs["libc.so.6"] is None and "libverlenv-absent.so.1: cannot open shared object file" in \
        libs["libverlenv-absent.so.1"]
    row = Package("demo", ("demo",), system_libraries=(("libc.so.6", "always there"),
                                                       ("libverlenv-absent.so.1", "apt-get install libabsent1")))
    ok, missing = static.check_system_libraries(row, libs, Scope(frozenset({"demo"})))
    assert (ok.name, ok.status) == ("libs/libc.so.6", "pass")
    assert (missing.name, missing.status, missing.required) == ("libs/libverlenv-absent.so.1", "fail", True)
    assert missing.reason.endswith("demo needs it from the system: apt-get install libabsent1")
    assert "\n" not in missing.reason


@pytest.mark.skipif(NINJA is None, reason="ninja is not installed")
@pytest.mark.parametrize("gcc, status, said", [
    ("13.3.0", "pass", "nvcc 13.0.88, gcc 13.3.0, c++ 13.3.0, ninja "),
    ("15.2.0", "pass", "gcc 15.2.0"),
    ("12.2.0", "warn", "nvcc's host compiler is gcc 12.2.0"),
    ("16.1.0", "fail", "nvcc 13.0.88 refuses gcc 16.1.0"),
])
def test_the_jit_toolchain_is_judged_by_nvccs_limits_and_the_packages_floor(tmp_path, gcc, status, said):
    r = static.check_jit(SGLANG, tools(tmp_path, gcc), "13.0", SCOPE)
    assert (r.name, r.status) == ("jit/sglang", status) and said in r.reason, r.reason
    if status == "warn":  # the row's why: the upstream fix and what is not measured
        assert "sgl-project/sglang#26444" in r.reason
    assert r.numbers["tools"]["nvcc"] == str(tmp_path / "cuda" / "bin" / "nvcc")


def test_missing_tools_and_another_cuda_major_fail_in_one_line(tmp_path):
    env = tools(tmp_path / "a", "13.3.0", ninja=False)
    r = static.check_jit(SGLANG, env, "13.0", SCOPE)
    assert r.status == "fail" and "its builds find no ninja (put the env's bin" in r.reason and "\n" not in r.reason
    env = {**tools(tmp_path / "b", "13.3.0"), "CUDA_HOME": None}
    env["PATH"] = str(tmp_path / "b" / "bin")  # no nvcc on PATH, and /usr/local/cuda is tvm-ffi's last guess
    r = static.check_jit(SGLANG, env, "13.0", SCOPE)
    if not Path("/usr/local/cuda/bin/nvcc").exists():
        assert r.status == "fail" and "find no nvcc (set CUDA_HOME" in r.reason
    r = static.check_jit(SGLANG, tools(tmp_path / "c", "13.3.0", nvcc=NVCC_12_8), "13.0", SCOPE)
    assert r.status == "fail" and "nvcc 12.8.93" in r.reason and "one CUDA major per env" in r.reason


def test_nvcc_ccbin_names_the_host_compiler(tmp_path):
    env = tools(tmp_path / "a", "12.2.0")
    newer = tmp_path / "gcc13"
    newer.mkdir()
    Path(fake_compiler(newer, "13.3.0")).rename(newer / "gcc")
    assert static.check_jit(SGLANG, {**env, "NVCC_CCBIN": str(newer)}, "13.0", SCOPE).status == "pass"


@pytest.mark.parametrize("row, complaint", [
    ({"tools": ["nvcc", "clang"]}, "jit.tools: 'clang'; valid: nvcc, gcc, c++, ninja"),
    ({"tools": ["nvcc"], "min_gcc": 13}, "jit.why must say why gcc >= 13 is needed"),
    ({"tools": ["nvcc"], "min_gcc": "13", "why": "x"}, "jit.min_gcc must be a gcc major version"),
    ({"tools": ["nvcc"], "cxx": "g++"}, "jit must be a table of tools, min_gcc and why"),
])
def test_a_bad_jit_row_is_one_line(row, complaint):
    with pytest.raises(UserError) as e:
        packages.parse(Path("packages.toml"), {"packages": {"demo": {"jit": row}}})
    assert complaint in str(e.value) and "\n" not in str(e.value)


def test_a_bad_system_library_row_is_one_line():
    with pytest.raises(UserError, match="system_libraries must be a table of soname"):
        packages.parse(Path("packages.toml"), {"packages": {"demo": {"system_libraries": ["libnuma.so.1"]}}})


def test_packages_without_run_time_needs_add_no_check():
    installed = {"torch": ["2.11.0"], "sglang": ["0.5.12"]}
    assert static.check_runtime_needs(sys.executable, {"torch": ["2.11.0"]}, None, SCOPE) == []
    skipped = Scope(frozenset({"sglang"}), skipped=frozenset({"sglang"}))
    assert static.check_runtime_needs(sys.executable, installed, None, skipped) == []
    assert Jit(("nvcc",)).min_gcc is None
