"""Which GPU archs a shared object carries code for: read its `.nv_fatbin` section.

A fatbin section is a run of fatbin containers (magic 0xBA55ED50), each a list of entries with a
header naming the kind (PTX or ELF cubin) and the SM arch. Reading the header needs no cuobjdump and
works on compressed entries too.
"""

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "elf" (cubin) or "ptx"
    sm: int  # e.g. 90


def fatbin_entries(data: bytes) -> list[FatbinEntry]:
    entries = []
    offset = 0
    while offset + 16 <= len(data):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            offset += 8  # containers are 8-byte aligned; skip padding
            continue
        pos, end = offset + header_size, offset + header_size + fat_size
        while pos + 32 <= end:
            kind, _unk, entry_header, size = struct.unpack_from("<HHIQ", data, pos)
            arch = struct.unpack_from("<I", data, pos + 28)[0]
            if kind in (KIND_PTX, KIND_ELF):
                entries.append(FatbinEntry("elf" if kind == KIND_ELF else "ptx", arch))
            if entry_header == 0:
                break
            pos += entry_header + size
        offset = end
    return entries


def shared_object_archs(path: Path) -> list[FatbinEntry]:
    with open(path, "rb") as f:
        try:
            elf = ELFFile(f)
        except ELFError:
            return []
        section = elf.get_section_by_name(".nv_fatbin")
        return fatbin_entries(section.data()) if section is not None else []


def cubin_archs(entries: list[FatbinEntry]) -> set[int]:
    return {e.sm for e in entries if e.kind == "elf"}


def wheel_shared_objects(wheel: Path, dest: Path) -> list[Path]:
    """Extract the wheel's shared objects into dest (a temp dir) and return their paths."""
    out = []
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".so") or ".so." in name:
                out.append(Path(z.extract(name, dest)))
    return out


def sm_of(arch: str) -> int:
    """'9.0' or '90' -> 90."""
    return int(arch.replace(".", "")) if "." in arch else int(arch)


def missing_archs(objects: list[Path], archs: list[str]) -> dict[str, list[int]]:
    """Per CUDA shared object, the requested archs that have no cubin in it; {} means all present."""
    want = {sm_of(a) for a in archs}
    missing = {}
    for so in objects:
        entries = shared_object_archs(so)
        if not entries:
            continue  # not a CUDA object (e.g. a pure C++ helper)
        lacking = sorted(want - cubin_archs(entries))
        if lacking:
            missing[str(so)] = lacking
    return missing
