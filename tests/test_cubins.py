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


def fatbin_container(entries: list[tuple[int, int]], payload: int = 40) -> bytes:
    """Test double: a fatbin container written per its header layout, entries of (kind, sm) with dummy payloads."""
    body = b""
    for kind, sm in entries:
        header = bytearray(ENTRY_HEADER)
        struct.pack_into("<HHIQ", header, 0, kind, 0x0101, ENTRY_HEADER, payload)
        struct.pack_into("<I", header, 28, sm)
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
