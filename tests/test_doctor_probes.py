"""`verlenv doctor` without a log: live probes run on real conditions made in the test.

Real: g++-built shared objects read with pyelftools, the system's libc/libstdc++, nvcc, uv venvs, PyPI
packages (network tests), rlimits. Test doubles, named where used: a torch package skeleton (torch cannot
be installed here), stand-in libcuda.so.1 files, and the driver version (VERLENV_TEST_DRIVER_VERSION).
"""

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.catalog import stacks
from verlenv.cli import main
from verlenv.doctor import facts as facts_mod, probes, symbols

ROOT = Path(__file__).parent.parent
PY311 = shutil.which("python3.11") or "/root/.pyenv/versions/3.11.7/bin/python3.11"
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build real shared objects")
needs_nvcc = pytest.mark.skipif(probes.find_nvcc(dict(os.environ), []) is None, reason="needs nvcc")
needs_uv = pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv to make venvs")

# A stand-in for libc10.so: the C++11-ABI torch 2.8+ surface that extensions call into.
PROVIDER = """
#include <string>
namespace c10 {
struct SourceLocation { const char* function; const char* file; unsigned line; };
struct Error { Error(SourceLocation loc, std::string msg); };
Error::Error(SourceLocation, std::string) {}
void present(int) {}
namespace cuda { void SetDevice(signed char) {} }
}
"""
# An extension compiled for an older torch with the pre-C++11 ABI: needs Error(SourceLocation, std::string[Ss])
# and SetDevice(int), neither of which the provider defines.
STALE_EXTENSION = """
#include <cstdio>
#include <string>
namespace c10 {
struct SourceLocation { const char* function; const char* file; unsigned line; };
struct Error { Error(SourceLocation loc, std::string msg); };
void present(int);
void definitely_missing(int);
namespace cuda { void SetDevice(int); }
}
extern "C" void entry() {
  c10::present(1);
  c10::definitely_missing(2);
  c10::cuda::SetDevice(0);
  c10::Error(c10::SourceLocation{"f", "x.cpp", 1}, std::string("boom"));
  std::printf("%s\\n", std::string("x").c_str());
}
"""
GOOD_EXTENSION = """
namespace c10 { void present(int); namespace cuda { void SetDevice(signed char); } }
extern "C" void entry() { c10::present(1); c10::cuda::SetDevice(0); }
"""


def gxx(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".cpp")
    src.write_text(source)
    # Libraries after the source: the linker only keeps a -l that resolves something already seen.
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", str(src), *flags, "-o", str(out)], check=True)
    return out


def system_lib(name: str) -> Path:
    return Path(subprocess.run(["g++", f"-print-file-name={name}"], capture_output=True, text=True,
                               check=True).stdout.strip())


@needs_gxx
def test_unresolved_symbols_of_a_real_shared_object(tmp_path):
    provider = gxx(tmp_path / "libc10.so", PROVIDER)
    ext = gxx(tmp_path / "ext.so", STALE_EXTENSION, "-D_GLIBCXX_USE_CXX11_ABI=0", f"-L{tmp_path}", "-lc10")
    real_libs = [system_lib(n) for n in ("libstdc++.so.6", "libc.so.6", "libm.so.6", "libgcc_s.so.1")]
    assert all(p.is_file() for p in real_libs)
    missing = symbols.unresolved(ext, [provider, *real_libs])
    assert missing == sorted([
        "_ZN3c1018definitely_missingEi",
        "_ZN3c104cuda9SetDeviceEi",
        "_ZN3c105ErrorC1ENS_14SourceLocationESs",
    ])
    # Without the provider, what it defines becomes unresolved too; printf and std::string stay resolved by
    # libc/libstdc++.
    assert "_ZN3c107presentEi" in symbols.unresolved(ext, real_libs)
    # Restricted to torch's namespaces, the C library is not even consulted.
    assert symbols.unresolved(ext, [provider], only=symbols.TORCH_SYMBOL) == missing
    assert symbols.needed(ext)[:1] == ["libc10.so"]
    readable = symbols.demangle(missing)
    if shutil.which("c++filt"):
        assert readable["_ZN3c104cuda9SetDeviceEi"] == "c10::cuda::SetDevice(int)"
    assert "pre-C++11" in symbols.abi_hint("_ZN3c105ErrorC1ENS_14SourceLocationESs",
                                           readable["_ZN3c105ErrorC1ENS_14SourceLocationESs"])


@needs_gxx
def test_struct_readings_of_symbols_and_links_are_pyelftools_own(tmp_path):
    """The doctor reads symbol tables and DT_NEEDED with struct (pyelftools took seconds an env): on real objects
    (libstdc++, libc, libm, a g++-built extension) each reading equals pyelftools' symbol-by-symbol one."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    provider = gxx(tmp_path / "libc10.so", PROVIDER)
    ext = gxx(tmp_path / "ext.so", STALE_EXTENSION, f"-L{tmp_path}", "-lc10")
    objects = [ext, provider, *(system_lib(n) for n in ("libstdc++.so.6", "libc.so.6", "libm.so.6"))]
    linked = {}
    for path in objects:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            binds = {symbols.STB_GLOBAL: "STB_GLOBAL", symbols.STB_WEAK: "STB_WEAK"}  # what the doctor tells apart
            slow = [(s.name, s["st_info"]["bind"] if s["st_info"]["bind"] in binds.values() else "other",
                     s["st_shndx"] == "SHN_UNDEF") for s in dynsym.iter_symbols()]
            fast = [(name, binds.get(bind, "other"), shndx == symbols.SHN_UNDEF)
                    for name, bind, shndx in symbols._symbols(elf, dynsym)]
            assert slow == fast, path
            assert len(slow) == len(fast) > 5, path
            dynamic = elf.get_section_by_name(".dynamic")
            assert isinstance(dynamic, DynamicSection)
            links = tuple(t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED")
            f.seek(0)
            assert symbols._needed64(f) == links, path
            linked[path] = links
    assert "libc10.so" in linked[ext] and "libc.so.6" in linked[objects[2]]  # libstdc++ links libc
    assert symbols.needed(ext) == list(linked[ext]) and symbols.versioned_needs(ext)  # glibc's versions, at least
    assert symbols.exported(provider, ["_ZN3c107presentEi", "_ZN3c10nothereEi"]) == {"_ZN3c107presentEi"}


TORCH_VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.11.0'
debug = False
cuda: Optional[str] = '13.0'
git_version = '70d99e998b4955e0049d6b1d2ee9ce0a7f1b3d14'
hip: Optional[str] = None
xpu: Optional[str] = None
"""


def make_venv(path: Path) -> Path:
    subprocess.run(["uv", "venv", "-q", "-p", PY311, str(path)], check=True,
                   env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    return Path(facts_mod.gather(python).site_packages[0])


@pytest.fixture(scope="module")
def torch_env(tmp_path_factory):
    """A venv with a torch skeleton (test double of torch's files), a stale extension and a good one."""
    if shutil.which("uv") is None or shutil.which("g++") is None:
        pytest.skip("needs uv and g++")
    root = tmp_path_factory.mktemp("torch-env")
    python = make_venv(root / "venv")
    sp = site_packages(python)
    torch = sp / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text(TORCH_VERSION_PY)
    info = sp / "torch-2.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n")
    gxx(torch / "lib" / "libc10.so", PROVIDER)
    stale = gxx(sp / "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so", STALE_EXTENSION,
                "-D_GLIBCXX_USE_CXX11_ABI=0", f"-L{torch / 'lib'}", "-lc10")
    (sp / "good_ext").mkdir()
    good = gxx(sp / "good_ext" / "_C.so", GOOD_EXTENSION, f"-L{torch / 'lib'}", "-lc10")
    # One build per torch release, as torch_c_dlpack_ext ships them: the torch24 build is not loaded on 2.11.
    (sp / "addon").mkdir()
    other = gxx(sp / "addon" / "libaddon_torch24-cuda.so", STALE_EXTENSION, "-D_GLIBCXX_USE_CXX11_ABI=0",
                f"-L{torch / 'lib'}", "-lc10")
    return {"python": python, "site": sp, "stale": stale, "good": good, "other": other}


def test_facts_locate_torch_without_importing_it(torch_env):
    facts = facts_mod.gather(torch_env["python"])
    assert facts.torch["cuda"] == "13.0" and facts.torch["version"] == "2.11.0"
    assert facts.dist("torch").version == "2.11.0"
    assert facts.site_packages == [str(torch_env["site"])]


def test_stale_torch_extension_is_found(torch_env):
    facts = facts_mod.gather(torch_env["python"])
    found = probes.torch_extensions(facts.site_packages, facts.torch["root"])
    assert set(found) == {torch_env["stale"], torch_env["good"], torch_env["other"]}
    r = probes.probe_torch_extensions(facts)
    assert (r.status, r.failure_id) == ("problem", "F1")
    assert list(r.details["broken"]) == [str(torch_env["stale"])]
    assert r.details["other_releases"] == [str(torch_env["other"])]
    assert "_ZN3c104cuda9SetDeviceEi" in r.details["broken"][str(torch_env["stale"])]
    assert "1 of 2 torch extensions" in r.summary and "pre-C++11" in r.summary
    assert "verlenv build flash-attn" in " ".join(r.fix)


def test_no_torch_skips_with_a_reason(tmp_path):
    facts = facts_mod.gather(sys.executable)
    if facts.torch:
        pytest.skip("the test interpreter has torch")
    for r in (probes.probe_torch_extensions(facts), probes.probe_nvcc_vs_torch(None, None, False)):
        assert r.status == "skipped" and "torch is not installed" in r.summary


@needs_nvcc
def test_nvcc_against_torch_cuda_with_the_real_nvcc():
    nvcc = probes.find_nvcc(dict(os.environ), [])
    release = probes.nvcc_release(nvcc)
    assert release and release.count(".") == 1
    assert probes.probe_nvcc_vs_torch(release, nvcc, True).status == "ok"
    other = "12.8" if release != "12.8" else "13.0"
    r = probes.probe_nvcc_vs_torch(other, nvcc, True)
    assert (r.status, r.failure_id) == ("problem", "F5") and other in r.summary
    assert probes.probe_nvcc_vs_torch(None, nvcc, True).status == "skipped"  # a CPU torch
    assert probes.probe_nvcc_vs_torch("13.0", None, True).status == "skipped"


@needs_nvcc
def test_host_compiler_ground_truth_is_a_real_compile():
    nvcc = probes.find_nvcc(dict(os.environ), [])
    assert probes.probe_host_compiler(nvcc, dict(os.environ)).status == "ok"
    broken = probes.probe_host_compiler(nvcc, {**os.environ, "NVCC_CCBIN": "/nonexistent/g++-99"})
    assert broken.status == "problem" and broken.failure_id in ("F4", "F6c") and "g++-99" in broken.summary


def test_driver_against_the_stack(monkeypatch):
    cat = stacks.load(ROOT / "stacks.toml")
    new, old = cat.stack("verl-0.9"), cat.stack("verl-0.7")
    # The driver version cannot be changed on this machine: VERLENV_TEST_DRIVER_VERSION is the test double.
    version, _, source = probes.read_driver({probes.TEST_DRIVER_ENV: "575.51.03"})
    assert (version, source) == ("575.51.03", f"{probes.TEST_DRIVER_ENV} (test double)")
    r = probes.probe_driver(version, ["NVIDIA H100 80GB HBM3"], source, new, cat)
    assert (r.status, r.failure_id) == ("problem", "F15")
    assert any("cuda-compat-13-0" in f for f in r.fix) and any("--stack verl-0.7" in f for f in r.fix)
    assert probes.probe_driver("580.65.06", [], source, new, cat).status == "ok"
    assert probes.probe_driver("575.51.03", [], source, old, cat).status == "ok"
    assert probes.probe_driver("535.183.01", [], source, old, cat).status == "problem"
    assert probes.probe_driver(None, [], "", new, cat).status == "skipped"
    assert probes.probe_driver("580.65.06", [], source, None, None).status == "skipped"


def test_driver_version_from_proc_formats():
    # /proc/driver/nvidia/version as the proprietary and the open kernel modules write it.
    assert probes.parse_proc_driver(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n") == "535.183.01"
    assert probes.parse_proc_driver(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
        "(dvs-builder@U22-I3-AF03-09-1)\n"
    ) == "580.65.06"
    assert probes.parse_proc_driver("no driver here") is None


def test_this_machine_without_a_driver_is_skipped_not_flagged():
    environ = {k: v for k, v in os.environ.items() if k != probes.TEST_DRIVER_ENV}
    driver, _, _ = probes.read_driver(environ)
    if driver is not None:
        pytest.skip("this machine has an NVIDIA driver")
    ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    assert probes.probe_triton_libcuda(environ, ldconfig, driver_present=False).status == "skipped"


def test_libcuda_for_triton(tmp_path):
    # Stand-in files named as the driver and toolkit name theirs: the probe reads names and places, not content.
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    driver = tmp_path / "driver"
    shim = tmp_path / "shim"
    for d in (stubs, driver, shim):
        d.mkdir(parents=True)
    (stubs / "libcuda.so").write_bytes(b"")
    (driver / "libcuda.so.1").write_bytes(b"")
    (shim / "libcuda.so.1").symlink_to(stubs / "libcuda.so")
    cache = f"\tlibcuda.so.1 (libc6,x86-64) => {driver / 'libcuda.so.1'}\n"

    def probe(environ, ldconfig):
        return probes.probe_triton_libcuda(environ, ldconfig, driver_present=True, search_dirs=[])

    # The diaries' workaround gone wrong: a libcuda.so.1 that is the stub, first on LD_LIBRARY_PATH.
    r = probe({"LD_LIBRARY_PATH": str(shim)}, cache)
    assert (r.status, r.failure_id) == ("problem", "S6") and "stub" in r.summary
    assert probe({}, "").failure_id == "S6"
    # The driver is visible but the unversioned libcuda.so that -lcuda needs is not: `cannot find -lcuda`.
    r = probe({}, cache)
    assert (r.status, r.failure_id) == ("problem", "F10") and any(str(driver) in f for f in r.fix)
    # Linking against the stub is fine; the loader still picks the driver at run time.
    assert probe({"TRITON_LIBCUDA_PATH": str(stubs)}, cache).status == "ok"
    (driver / "libcuda.so").symlink_to("libcuda.so.1")
    ok = probe({}, cache)
    assert ok.status == "ok" and ok.details == {"loaded": str(driver / "libcuda.so.1"),
                                                "link": str(driver / "libcuda.so")}
    assert probes.probe_triton_libcuda({}, cache, driver_present=False).status == "skipped"


def test_libcuda_lookup_on_a_real_gpu_host_cache():
    # `ldconfig -p | grep libcuda.so` of an H200 host (driver 580.159.04): two copies, the loader takes the first.
    cache = ("\tlibcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1\n"
             "\tlibcuda.so.1 (libc6,x86-64) => /lib/libcuda.so.1\n"
             "\tlibcuda.so (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so\n"
             "\tlibcuda.so (libc6,x86-64) => /lib/libcuda.so\n")
    assert probes.loaded_libcuda({}, cache) == Path("/usr/local/nvidia/lib64/libcuda.so.1")
    assert probes.triton_link_dirs({}, cache, [])[:2] == [Path("/usr/local/nvidia/lib64"), Path("/lib")]
    assert (probes.triton_link_dirs({"TRITON_LIBCUDA_PATH": "/opt/x"}, cache, ["/usr/lib"])
            == [Path("/opt/x"), Path("/usr/lib")])


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_linker_search_dirs_of_the_real_compiler():
    dirs = probes.linker_search_dirs()
    assert dirs and any(Path(d).is_dir() for d in dirs)


def test_thread_limits():
    inf = resource.RLIM_INFINITY
    assert probes.probe_threads(inf, 2, {}).status == "ok"
    r = probes.probe_threads(4096, 2, {})
    assert (r.status, r.failure_id) == ("problem", "S3") and "4096" in r.summary
    assert probes.probe_threads(inf, 128, {}).status == "problem"
    assert probes.probe_threads(inf, 128, {"OMP_NUM_THREADS": "1"}).status == "ok"


def test_real_nproc_limit_reaches_the_probe_through_the_cli(tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("hard nproc limit below the value the test sets")

    def lower():
        resource.setrlimit(resource.RLIMIT_NPROC, (4096, hard))

    report = cli(["--json", "--only", "threads"], preexec_fn=lower)
    assert [p["probe"] for p in report["probes"]] == ["threads"]
    threads = next(p for p in report["probes"] if p["probe"] == "threads")
    assert threads["status"] == "problem" and threads["id"] == "S3" and "4096" in threads["summary"]


def cli(args, python=None, env=None, **kw) -> dict:
    cmd = [sys.executable, "-m", "verlenv", "doctor", *args] + (["--python", str(python)] if python else [])
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}, check=False,
                       **kw)
    assert p.returncode in (0, 1), p.stderr
    report = json.loads(p.stdout)
    report["returncode"] = p.returncode
    return report


def by_probe(report) -> dict:
    return {p["probe"]: p for p in report["probes"]}


def write_lock(path: Path, pins: dict[str, str]) -> Path:
    # The format `uv pip compile --generate-hashes` writes: `name==version \`, hash lines, `# via` comments.
    lines = ["# This file was autogenerated by uv via the following command:",
             "#    uv pip compile --generate-hashes requirements.in -o lock.txt"]
    for name, version in pins.items():
        lines += [f"{name}=={version} \\", "    --hash=sha256:" + "0" * 64, "    # via -r requirements.in"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_probes_the_torch_env(torch_env, tmp_path):
    lock = write_lock(tmp_path / "same.txt", {"torch": "2.11.0", "filelock": "3.20.0"})
    report = cli(["--json", "--lock", str(lock)], python=torch_env["python"])
    probes_ = by_probe(report)
    assert report["returncode"] == 1
    assert probes_["torch-extensions"]["status"] == "problem" and probes_["torch-extensions"]["id"] == "F1"
    assert probes_["lock-drift"]["status"] == "ok"
    if shutil.which("nvcc") and probes.nvcc_release(Path(shutil.which("nvcc"))) == "13.0":
        assert probes_["nvcc-vs-torch"]["status"] == "ok"
    drift = write_lock(tmp_path / "drift.txt", {"torch": "2.10.0", "nvidia-cudnn-cu13": "9.19.0.56"})
    lock_probe = probes.probe_lock_drift(facts_mod.gather(torch_env["python"]), drift)
    assert (lock_probe.status, lock_probe.failure_id) == ("problem", "F7")
    assert lock_probe.details["drift"] == {"torch": "2.11.0 (lock: 2.10.0)"}
    assert lock_probe.details["missing"] == ["nvidia-cudnn-cu13"]


def test_cli_bad_input_exits_2(tmp_path, capsys):
    for args in (["--python", str(tmp_path / "no-python")], ["--lock", str(tmp_path / "no.lock")],
                 ["--stack", "no-such-stack"], ["--stack", "verl-0.9", "--variant", "nope"], ["--only", "thread"]):
        assert main(["doctor", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("verlenv doctor:"), err


def test_missing_lock_of_a_stack_is_skipped(tmp_path):
    (tmp_path / "stacks.toml").write_text((ROOT / "stacks.toml").read_text())
    lock, reason = probes.select_lock(tmp_path, "verl-0.9", "fsdp", None)
    assert lock is None and "verl-0.9-fsdp.linux-64.txt does not exist" in reason
    r = probes.probe_lock_drift(facts_mod.gather(sys.executable), lock, reason)
    assert r.status == "skipped" and r.summary == reason
    assert probes.select_lock(tmp_path, None, None, None)[0] is None


def test_lock_parser_on_the_project_locks():
    cat = stacks.load(ROOT / "stacks.toml")
    locks = [(v, cat.root / "locks" / f"{v.key}.linux-64.txt") for v in cat.all_variants()]
    if not any(lock.is_file() for _, lock in locks):
        pytest.skip("no locks/ in this checkout")
    for variant, lock in locks:
        pins = probes.read_lock(lock)
        torch = next(r for r in variant.requirements if r.startswith("torch=="))
        assert pins["torch"] == torch.split("==")[1], lock.name
        assert len(pins) > 100


def test_lock_parser_reads_pins_and_rejects_other_files(tmp_path):
    lock = write_lock(tmp_path / "l.txt", {"Torch": "2.11.0", "nvidia_nccl_cu13": "2.28.9"})
    assert probes.read_lock(lock) == {"torch": "2.11.0", "nvidia-nccl-cu13": "2.28.9"}
    (tmp_path / "notes.txt").write_text("just words\n")
    with pytest.raises(Exception, match="no `name==version` lines"):
        probes.read_lock(tmp_path / "notes.txt")


def nvidia_like_apex(sp: Path, with_extensions: bool) -> None:
    """Test double of an installed NVIDIA apex: its package files and dist-info, optionally its .so names."""
    (sp / "apex").mkdir()
    (sp / "apex" / "__init__.py").write_text("import logging\nimport warnings\n\nimport torch\n")
    info = sp / "apex-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apex\nVersion: 0.1\nRequires-Dist: packaging>20.6\n")
    record = ["apex/__init__.py,,"]
    if with_extensions:
        for name in ("amp_C", "fused_layer_norm_cuda", "apex_C"):
            (sp / f"{name}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
            record.append(f"{name}.cpython-311-x86_64-linux-gnu.so,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


@needs_uv
@needs_gxx
def test_a_core_needing_a_newer_cuda_library_is_found(tmp_path):
    """TE-cu13 2.16.1's failure in small: its core binds a cuBLASLt symbol the env's nvidia-cublas lacks."""
    from test_verify_static import core_library, versioned_cuda_library

    python = make_venv(tmp_path / "venv")
    sp = site_packages(python)
    lib_dir = sp / "nvidia" / "cu13" / "lib"
    newer = versioned_cuda_library(lib_dir, ("cublasLtCreate", "cublasLtGroupedMatrixLayoutInit_internal"))
    (sp / "transformer_engine").mkdir()
    core = core_library(sp / "transformer_engine", newer,
                        ("cublasLtCreate", "cublasLtGroupedMatrixLayoutInit_internal"))
    facts = facts_mod.gather(python)
    assert probes.cuda_library_users(facts.site_packages) == [core]
    good = probes.probe_cuda_libraries(facts)
    assert good.status == "ok" and good.details["objects"] == 1, good.summary
    versioned_cuda_library(lib_dir, ("cublasLtCreate",))  # the older cuBLAS torch pins
    r = probes.probe_cuda_libraries(facts)
    assert (r.status, r.failure_id) == ("problem", "F8")
    assert r.details["broken"] == {str(core): {"libcublasLt.so.13": ["cublasLtGroupedMatrixLayoutInit_internal"]}}
    assert "cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13" in r.summary


@needs_uv
@pytest.mark.parametrize("with_extensions", [False, True])
def test_nvidia_apex_with_and_without_extensions(tmp_path, with_extensions):
    python = make_venv(tmp_path / "venv")
    nvidia_like_apex(site_packages(python), with_extensions)
    r = probes.probe_apex(facts_mod.gather(python))
    if with_extensions:
        assert r.status == "ok" and r.details["extensions"] == ["amp_C", "apex_C", "fused_layer_norm_cuda"]
    else:
        assert (r.status, r.failure_id) == ("problem", "F6b")


def test_pip_of_another_interpreter(tmp_path):
    base_bin = Path(sys.base_prefix) / "bin"
    base_pip = base_bin / "pip"
    if not base_pip.is_file() or not base_pip.read_text(errors="replace").startswith("#!"):
        pytest.skip("the base interpreter has no pip script")
    path = f"{base_bin}:/usr/bin:/bin"
    base_python = next(p for p in (base_bin / "python3", base_bin / "python") if p.exists())
    assert probes.probe_pip(facts_mod.gather(base_python), {"PATH": path}).status == "ok"
    other = probes.probe_pip(facts_mod.gather(sys.executable), {"PATH": path})
    # A hazard for the next install by hand, not a fault of the env: a warning, which does not fail the run.
    assert (other.status, other.failure_id) == ("warning", "S4") and str(base_bin.parent) in other.summary
    # A venv whose interpreter is gone: its pip launcher (pip's own script, pointed at the venv) cannot start.
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    launcher = tmp_path / "venv" / "bin" / "pip"
    body = base_pip.read_text().split("\n", 1)[1]
    launcher.write_text(f"#!{tmp_path / 'venv' / 'bin' / 'python'}\n{body}")
    launcher.chmod(0o755)
    for exe in (tmp_path / "venv" / "bin").glob("python*"):
        exe.unlink()
    gone = probes.probe_pip(facts_mod.gather(sys.executable), {"PATH": f"{launcher.parent}:/usr/bin:/bin"})
    assert (gone.status, gone.failure_id) == ("warning", "S4") and "bad interpreter" in gone.summary


@pytest.mark.network
@needs_uv
def test_pypi_apex_impostor_in_a_real_venv(tmp_path):
    python = make_venv(tmp_path / "venv")
    # --no-deps: the impostor's own files are what the probe reads; its Pyramid dependencies add nothing.
    subprocess.run(["uv", "pip", "install", "-q", "-p", str(python), "--no-deps", "apex==0.9.10.dev0"], check=True)
    report = cli(["--json"], python=python)
    apex = by_probe(report)["apex"]
    assert apex["status"] == "problem" and apex["id"] == "F6a" and "Pyramid" in apex["summary"]
    assert report["returncode"] == 1


@pytest.mark.network
@needs_uv
def test_numpy_and_cuda_majors_with_real_pypi_packages(tmp_path):
    python = make_venv(tmp_path / "venv")
    # verl 0.7.1 requires numpy<2; the two CUDA runtimes are the cu12 and the cu13 (nvidia/cu13) wheels.
    subprocess.run(["uv", "pip", "install", "-q", "-p", str(python), "--no-deps", "verl==0.7.1", "numpy==2.2.6",
                    "nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cuda-runtime==13.0.96"], check=True)
    facts = facts_mod.gather(python)
    numpy = probes.probe_numpy(facts)
    assert (numpy.status, numpy.failure_id) == ("problem", "F11")
    assert any(c.startswith("verl 0.7.1 requires numpy<2") for c in numpy.details["conflicts"])
    majors = probes.probe_cuda_majors(facts)
    assert (majors.status, majors.failure_id) == ("problem", "F15")
    assert set(majors.details["majors"]) == {"12", "13"}
    subprocess.run(["uv", "pip", "uninstall", "-q", "-p", str(python), "nvidia-cuda-runtime-cu12", "verl"], check=True)
    facts = facts_mod.gather(python)
    assert probes.probe_numpy(facts).status == "ok"
    assert probes.probe_cuda_majors(facts).status == "ok"


@pytest.mark.network
@needs_uv
def test_lock_parser_on_a_real_uv_lock(tmp_path):
    (tmp_path / "requirements.in").write_text("packaging==24.2\n")
    subprocess.run(["uv", "pip", "compile", "-q", "--generate-hashes", "--python-version", "3.12",
                    str(tmp_path / "requirements.in"), "-o", str(tmp_path / "lock.txt")], check=True)
    assert probes.read_lock(tmp_path / "lock.txt") == {"packaging": "24.2"}


@pytest.mark.skipif(not os.environ.get("VERLENV_DOCTOR_ENV"),
                    reason="set VERLENV_DOCTOR_ENV to the python of an installed stack env")
def test_an_installed_stack_env():
    # e.g. VERLENV_DOCTOR_ENV=.venv-verl-0.9-fsdp/bin/python after `verlenv install --stack verl-0.9 --variant fsdp`
    report = cli(["--json", "--stack", "verl-0.9", "--variant", "fsdp",
                  "--only", "torch-extensions,lock-drift,numpy,cuda-majors"], python=os.environ["VERLENV_DOCTOR_ENV"])
    found = by_probe(report)
    assert {name: p["status"] for name, p in found.items()} == {
        "torch-extensions": "ok", "lock-drift": "ok", "numpy": "ok", "cuda-majors": "ok"}, found


def test_a_file_vanishing_under_one_probe_skips_that_probe_only(monkeypatch):
    """`doctor --ray` on a live node: a probe whose file vanished is skipped with the reason, the others run."""
    def vanished(facts):  # stand-in for the race: the file the probe found is gone when it reads it
        raise FileNotFoundError(2, "No such file or directory", "/env/lib/python3.12/site-packages/apex/__init__.py")

    monkeypatch.setattr(probes, "probe_apex", vanished)
    results = {r.name: r for r in probes.run_all(facts_mod.gather(sys.executable), only=["apex", "threads"])}
    assert results["apex"].status == "skipped"
    assert results["apex"].summary.startswith("a file changed or vanished while probed ([Errno 2] No such file")
    assert results["threads"].status in ("ok", "problem")
