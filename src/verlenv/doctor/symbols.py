"""C++ symbols of shared objects: what an extension needs, what torch provides, and what the names mean."""

import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# Mangled names whose outermost namespace belongs to torch (c10::, at::, torch::, caffe2::), incl. vtables.
TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[KVR]*(?:3c10|2at|5torch|6caffe2)")
# torch's own shared libraries that extensions link against (DT_NEEDED names, without version suffix).
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so")


def _elf(path: Path):
    f = open(path, "rb")
    try:
        return f, ELFFile(f)
    except ELFError:
        f.close()
        raise


def needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a shared object ([] when it is not an ELF file)."""
    try:
        f, elf = _elf(path)
    except (ELFError, OSError):
        return []
    with f:
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                return [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    return []


def _dynsym(path: Path):
    try:
        f, elf = _elf(path)
    except ELFError:
        return None, None
    section = elf.get_section_by_name(".dynsym")
    return f, section


def undefined(path: Path) -> set[str]:
    """Names the object needs from others: undefined, non-weak dynamic symbols."""
    f, section = _dynsym(path)
    if section is None:
        return set()
    with f:
        return {
            s.name for s in section.iter_symbols()
            if s.name and s["st_shndx"] == "SHN_UNDEF" and s["st_info"]["bind"] == "STB_GLOBAL"
        }


def defined(path: Path) -> set[str]:
    """Names the object exports: defined global or weak dynamic symbols."""
    f, section = _dynsym(path)
    if section is None:
        return set()
    with f:
        return {
            s.name for s in section.iter_symbols()
            if s.name and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        }


def unresolved(so: Path, providers: Iterable[Path], only: re.Pattern | None = None) -> list[str]:
    """Undefined symbols of `so` (those matching `only`, if given) that no provider library defines."""
    wanted = {s for s in undefined(Path(so)) if only is None or only.search(s)}
    for lib in providers:
        if not wanted:
            break
        wanted -= exported(Path(lib), wanted)
    return sorted(wanted)


def demangle(names: list[str]) -> dict[str, str]:
    """Readable C++ names via c++filt; names it cannot read (or no c++filt) map to themselves."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    lines = out.splitlines()
    if len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines))


def abi_hint(symbol: str, readable: str | None = None) -> str:
    """What a missing mangled name says about how the extension was built (`readable`: its demangled form)."""
    text = readable if readable and readable != symbol else ""
    if "__cxx11" in symbol or "B5cxx11" in symbol:
        return ("it uses the C++11 std::string ABI: likely built with _GLIBCXX_USE_CXX11_ABI=1 for a torch without it "
                "(or for another torch release)")
    if re.search(r"std::(?:basic_)?string\b", text) or (not text and re.search(r"(?:RK|E)S[sb]", symbol)):
        return ("it uses the pre-C++11 std::string ABI: likely a _GLIBCXX_USE_CXX11_ABI=0 (cxx11abiFALSE) build "
                "on a torch with the C++11 ABI")
    return "this torch does not export it: the extension was built against another torch release"


def exported(lib: Path, names: Iterable[str]) -> set[str]:
    """Which of `names` the library defines, looked up in its symbol hash table: no scan of every symbol,
    which takes seconds on libtorch_cpu.so. Falls back to `defined` for libraries without a hash table."""
    names = set(names)
    try:
        f, elf = _elf(Path(lib))
    except (ELFError, OSError):
        return set()
    with f:
        table = elf.get_section_by_name(".gnu.hash") or elf.get_section_by_name(".hash")
        if table is None or not hasattr(table, "get_symbol"):
            return names & defined(Path(lib))
        found = set()
        for name in names:
            s = table.get_symbol(name)
            if s is not None and s["st_shndx"] != "SHN_UNDEF" and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK"):
                found.add(name)
        return found
