"""The cubin scan: fatbin headers read from an ELF's .nv_fatbin section (real nvcc output: test_build_extension.py)."""

import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from verlenv import cubins

ENTRY_HEADER = 64


def fatbin_container(entries: list[tuple], payload: int = 40) -> bytes:
    """Test double: a fatbin container written per its header layout, entries of (kind, sm[, suffix]) with dummy
    payloads; the suffix goes into the flags word as nvcc 13.0 writes it (0x1100011 for sm_100a, 0x1200011 for
    sm_100f: read from its own fatbins)."""
    body = b""
    for kind, sm, *suffix in entries:
        header = bytearray(ENTRY_HEADER)
        struct.pack_into("<HHIQ", header, 0, kind, 0x0101, ENTRY_HEADER, payload)
        struct.pack_into("<I", header, 28, sm)
        bits = {"": 0, "a": 1, "f": 2}[suffix[0] if suffix else ""]
        struct.pack_into("<I", header, cubins.FLAGS_OFFSET, 0x1000011 | bits << cubins.SUFFIX_SHIFT)
        body += bytes(header) + b"\xab" * payload
    return struct.pack("<IHHQ", cubins.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_fatbin(tmp_path: Path, section: bytes) -> Path:
    """A copy of a real ELF file with a .nv_fatbin section added by binutils' objcopy."""
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        pytest.skip("objcopy (binutils) is not installed")
    base = Path(sys.executable).resolve()  # any real ELF will do
    (tmp_path / "fatbin.bin").write_bytes(section)
    out = tmp_path / "libprobe.so"
    subprocess.run([objcopy, "--add-section", f".nv_fatbin={tmp_path / 'fatbin.bin'}", str(base), str(out)], check=True)
    return out


def test_entries_of_one_container():
    data = fatbin_container([(cubins.KIND_ELF, 80), (cubins.KIND_ELF, 90), (cubins.KIND_PTX, 90)])
    assert cubins.fatbin_entries(data) == [cubins.FatbinEntry("elf", 80), cubins.FatbinEntry("elf", 90),
                                           cubins.FatbinEntry("ptx", 90)]


def test_containers_separated_by_padding_are_all_read():
    first = fatbin_container([(cubins.KIND_ELF, 80)])
    data = first + b"\0" * 8 + fatbin_container([(cubins.KIND_ELF, 90), (cubins.KIND_PTX, 100)])
    assert cubins.cubin_archs(cubins.fatbin_entries(data)) == {80, 90}
    assert {e.sm for e in cubins.fatbin_entries(data) if e.kind == "ptx"} == {100}


def test_ptx_alone_is_not_a_cubin():
    assert cubins.cubin_archs(cubins.fatbin_entries(fatbin_container([(cubins.KIND_PTX, 90)]))) == set()


def test_a_real_elf_section_is_found_and_read(tmp_path):
    so = elf_with_fatbin(tmp_path, fatbin_container([(cubins.KIND_ELF, 80), (cubins.KIND_PTX, 80)]))
    assert cubins.shared_object_archs(so) == [cubins.FatbinEntry("elf", 80), cubins.FatbinEntry("ptx", 80)]
    # sm_90 was requested but only sm_80 is there (PTX does not count: it JIT-compiles on first use).
    assert cubins.missing_archs([so], ["8.0", "9.0"]) == {str(so): [90]}
    assert cubins.missing_archs([so], ["8.0"]) == {}


def test_objects_without_gpu_code_are_skipped(tmp_path):
    not_elf = tmp_path / "notes.so"
    not_elf.write_text("not an ELF file")
    assert cubins.shared_object_archs(not_elf) == []
    assert cubins.shared_object_archs(Path(sys.executable).resolve()) == []  # a real ELF, no .nv_fatbin
    assert cubins.missing_archs([not_elf, Path(sys.executable).resolve()], ["9.0"]) == {}


def test_wheel_shared_objects_extracts_only_shared_objects(tmp_path):
    wheel = tmp_path / "probe-0.1-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("probe/_C.cpython-312-x86_64-linux-gnu.so", b"\x7fELF")
        z.writestr("probe.libs/libfoo-1234.so.2", b"\x7fELF")
        z.writestr("probe/__init__.py", "")
        z.writestr("probe-0.1.dist-info/RECORD", "")
    found = cubins.wheel_shared_objects(wheel, tmp_path / "out")
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in found) == [
        "probe.libs/libfoo-1234.so.2", "probe/_C.cpython-312-x86_64-linux-gnu.so"]
    assert all(p.is_file() for p in found)


@pytest.mark.parametrize("arch, sm", [("8.0", 80), ("9.0", 90), ("90", 90), ("10.0", 100), ("12.0", 120)])
def test_sm_of(arch, sm):
    assert cubins.sm_of(arch) == sm


def test_arch_and_family_suffixes_are_read_from_the_flags():
    data = fatbin_container([(cubins.KIND_ELF, 100, "f"), (cubins.KIND_ELF, 103, "a"), (cubins.KIND_PTX, 100, "f"),
                             (cubins.KIND_ELF, 120)])
    assert [e.name for e in cubins.fatbin_entries(data)] == ["sm_100f", "sm_103a", "compute_100f", "sm_120"]
    assert cubins.parse_code("sm_100f") == cubins.FatbinEntry("elf", 100, "f")
    assert cubins.parse_code("compute_90") == cubins.FatbinEntry("ptx", 90)
    with pytest.raises(ValueError, match="not a code name"):
        cubins.parse_code("sm100")


# (code, device) -> runs: NVIDIA's rules as data/gpu_code.toml states them.
RUNS = [
    ("sm_100", "10.0", True), ("sm_100", "10.3", True), ("sm_100", "12.0", False), ("sm_100", "9.0", False),
    ("sm_100a", "10.0", True), ("sm_100a", "10.3", False),
    ("sm_100f", "10.3", True), ("sm_103a", "10.3", True), ("sm_103", "10.0", False),
    ("sm_120", "12.1", True), ("sm_120f", "12.1", True), ("sm_120a", "12.1", False), ("sm_121a", "12.0", False),
    ("sm_90", "10.0", False), ("sm_90a", "9.0", True), ("sm_80", "8.9", True), ("sm_80", "9.0", False),
    ("compute_90", "10.3", True), ("compute_103", "10.3", True), ("compute_120", "10.3", False),
    ("compute_100f", "10.3", True), ("compute_100f", "12.0", False), ("compute_100a", "10.3", False),
]


@pytest.mark.parametrize("code, device, runs", RUNS)
def test_which_code_runs_on_which_device(code, device, runs):
    assert cubins.runs_on(cubins.parse_code(code), device) is runs


def test_the_check_takes_family_code_and_fails_a_missing_target(tmp_path):
    so = elf_with_fatbin(tmp_path, fatbin_container([(cubins.KIND_ELF, 90), (cubins.KIND_ELF, 100, "f"),
                                                     (cubins.KIND_PTX, 90)]))
    assert cubins.missing_archs([so], ["10.0", "10.3"]) == {}  # sm_100f runs on the B200 and the B300
    assert cubins.missing_archs([so], ["12.0"]) == {str(so): [120]}  # not on sm_120: no cubin runs there...
    assert cubins.missing_archs([so], ["12.0"], ptx=True) == {}  # ...though compute_90 would JIT there
    assert cubins.missing_archs([so], ["12.1", "8.0"]) == {str(so): [80, 121]}
