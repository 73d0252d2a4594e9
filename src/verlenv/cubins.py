"""Which GPU archs a shared object carries code for: read its `.nv_fatbin` section.

A fatbin section is a run of fatbin containers (magic 0xBA55ED50), each a list of entries with a
header naming the kind (PTX or ELF cubin) and the SM arch. Reading the header needs no cuobjdump and
works on compressed entries too.
"""

import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from verlenv.fsutil import packaged_table

GPU_CODE = Path(__file__).with_name("data") / "gpu_code.toml"

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
# The entry header's flags word (offset 40) marks arch-specific (`sm_100a`) and family-specific (`sm_100f`, CUDA 12.9+)
# code in bits 20-21: read from nvcc 13.0.88's own fatbins of one kernel built for sm_100, sm_100a, sm_100f,
# compute_100f and sm_120f (tests/native/test_build_extension.py builds the real thing).
FLAGS_OFFSET, SUFFIX_SHIFT = 40, 20
SUFFIXES = {0: "", 1: "a", 2: "f"}


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "elf" (cubin) or "ptx"
    sm: int  # e.g. 90
    suffix: str = ""  # "" (runs on newer minors of its major), "a" (this arch only), "f" (its family)

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'elf' else 'compute'}_{self.sm}{self.suffix}"


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
            flags = struct.unpack_from("<I", data, pos + FLAGS_OFFSET)[0] if entry_header >= FLAGS_OFFSET + 4 else 0
            if kind in (KIND_PTX, KIND_ELF):
                entries.append(FatbinEntry("elf" if kind == KIND_ELF else "ptx", arch,
                                           SUFFIXES.get((flags >> SUFFIX_SHIFT) & 3, "")))
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


def arch_of(sm: int) -> str:
    """100 -> '10.0' (the minor is the last digit, as nvcc numbers them)."""
    return f"{sm // 10}.{sm % 10}"


_CODE = re.compile(r"(sm|compute)_(\d+)([af]?)")


def parse_code(name: str) -> FatbinEntry:
    """'sm_100f' -> FatbinEntry('elf', 100, 'f'); 'compute_90' -> FatbinEntry('ptx', 90)."""
    m = _CODE.fullmatch(name)
    if m is None:
        raise ValueError(f"{name!r} is not a code name like sm_100, sm_100f or compute_90")
    return FatbinEntry("elf" if m[1] == "sm" else "ptx", int(m[2]), m[3])


def rules() -> dict[str, str]:
    """data/gpu_code.toml's [runs_on]: code kind (sm, sm_a, compute_f...) -> the rule naming the devices it runs on."""
    return packaged_table(GPU_CODE)["runs_on"]


def compiles_for(package: str) -> tuple[str, ...]:
    """data/gpu_code.toml's [compiles]: the archs `package`'s arch knob can compile for; () = any."""
    return tuple(packaged_table(GPU_CODE).get("compiles", {}).get(package, ()))


def uncompilable(package: str, archs: list[str]) -> list[str]:
    """The archs `package` cannot compile for ('9.0a' or '9.0+PTX' judged by their base arch)."""
    known = compiles_for(package)
    return [a for a in archs if known and a.split("+")[0].rstrip("af") not in known]


def shipped() -> list[dict]:
    """data/gpu_code.toml's [[shipped]] rows: the code each upstream object carries."""
    return packaged_table(GPU_CODE)["shipped"]


def runs_on(entry: FatbinEntry, device_arch: str) -> bool:
    """Whether this code runs on a device of compute capability `device_arch` ('10.3'), by data/gpu_code.toml."""
    kind = ("sm" if entry.kind == "elf" else "compute") + (f"_{entry.suffix}" if entry.suffix else "")
    (major, minor), (dev_major, dev_minor) = divmod(entry.sm, 10), divmod(sm_of(device_arch), 10)
    rule = rules()[kind]
    if rule == "exact":
        return (dev_major, dev_minor) == (major, minor)
    if rule == "major":
        return dev_major == major and dev_minor >= minor
    if rule == "any-newer":
        return (dev_major, dev_minor) >= (major, minor)
    raise ValueError(f"data/gpu_code.toml: unknown rule {rule!r} for {kind}")


def code_that_runs(entries: list[FatbinEntry], device_arch: str) -> list[str]:
    """The names of the entries (sorted, once each) that run on a device of `device_arch`."""
    return sorted({e.name for e in entries if runs_on(e, device_arch)})


def missing_archs(objects: list[Path], archs: list[str], ptx: bool = False) -> dict[str, list[int]]:
    """Per CUDA shared object, the target devices (compute capabilities) none of its cubins runs on; {} means every
    object has code for each. Arch families count (data/gpu_code.toml): sm_103 takes an sm_100 or sm_100f cubin, sm_121
    an sm_120 or sm_120f one, never sm_90 or sm_100a. `ptx`: PTX counts too (compute_100 for sm_103; it JIT-compiles at
    first use), as for upstream binaries; a source build must hold cubins (flash-attn emits no PTX at all)."""
    missing = {}
    for so in objects:
        found = shared_object_archs(so)
        if not found:
            continue  # not a CUDA object (e.g. a pure C++ helper)
        entries = [e for e in found if ptx or e.kind == "elf"]
        lacking = sorted({sm_of(a) for a in archs if not any(runs_on(e, arch_of(sm_of(a))) for e in entries)})
        if lacking:
            missing[str(so)] = lacking
    return missing
