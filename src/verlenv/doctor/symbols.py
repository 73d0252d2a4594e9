"""C++ symbols of shared objects: what an extension needs, what torch provides, and what the names mean."""

import array
import functools
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# Mangled names whose outermost namespace belongs to torch (c10::, at::, torch::, caffe2::), incl. vtables.
TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[KVR]*(?:3c10|2at|5torch|6caffe2)")
# Names an extension takes from torch: the C++ namespaces above, and the C entry points of torch's stable ABI.
TORCH_ABI_SYMBOL = re.compile(rf"{TORCH_SYMBOL.pattern}|^(?:aoti_torch_|torch_)")
# torch's own shared libraries that extensions link against (DT_NEEDED names, without version suffix).
TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so")


@contextmanager
def _elf(path: Path) -> Iterator[ELFFile | None]:
    """The parsed ELF file, or None when `path` is unreadable or not ELF."""
    with ExitStack() as stack:
        try:
            f = stack.enter_context(open(path, "rb"))
            elf = ELFFile(f)
        except (OSError, ELFError):
            elf = None
        yield elf


def _section(elf: ELFFile, name: str):
    """The section called `name`, or None, making no other section: pyelftools' get_section_by_name first makes
    every section to map their names, GNU hash tables included (a whole second on torch's libraries, and a doctor
    looks at a thousand objects)."""
    if not all(hasattr(elf, f) for f in ("_get_section_header", "_get_section_name", "_make_section")):
        return elf.get_section_by_name(name)  # a pyelftools without these internals: slower, the same answer
    for i in range(elf.num_sections()):
        header = elf._get_section_header(i)
        if elf._get_section_name(header) == name:
            return elf._make_section(header)
    return None


def needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a shared object ([] when it is not an ELF file)."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    # The doctor's probes walk the same objects more than once: each is read once while it stays the same file.
    return list(_needed(str(path), st.st_ino, st.st_size, st.st_mtime_ns))


# ELF64 little-endian headers (x86_64, aarch64): the file header, a section header, a dynamic entry.
_EHDR64 = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR64 = struct.Struct("<IIQQQQIIQQ")
_DYN64 = struct.Struct("<qQ")
SHT_DYNAMIC, DT_NEEDED = 6, 1


def _needed64(f) -> tuple[str, ...] | None:
    """DT_NEEDED of an ELF64 little-endian file read with struct (pyelftools takes a few ms a file, and a doctor reads
    every shared object of the env); None for any other layout, which pyelftools then reads."""
    head = f.read(_EHDR64.size)
    if len(head) < _EHDR64.size or head[:4] != b"\x7fELF":
        return ()
    *_, shoff, _, _, _, _, shentsize, shnum, _ = _EHDR64.unpack(head)
    if head[4] != 2 or head[5] != 1 or not shoff or not shnum or shentsize != _SHDR64.size:
        return None
    f.seek(shoff)
    headers = list(_SHDR64.iter_unpack(f.read(shnum * shentsize)))
    dynamic = next((h for h in headers if h[1] == SHT_DYNAMIC), None)
    if dynamic is None:
        return ()
    f.seek(dynamic[4])
    entries = f.read(dynamic[5])
    strtab = headers[dynamic[6]]
    f.seek(strtab[4])
    strings = f.read(strtab[5])
    entries = entries[:len(entries) - len(entries) % _DYN64.size]
    return tuple(strings[v:strings.find(b"\0", v)].decode(errors="replace")
                 for tag, v in _DYN64.iter_unpack(entries) if tag == DT_NEEDED)


@functools.lru_cache(maxsize=4096)
def _needed(path: str, inode: int, size: int, mtime_ns: int) -> tuple[str, ...]:
    try:
        with open(path, "rb") as f:
            fast = _needed64(f)
    except (OSError, struct.error, IndexError):
        fast = None
    if fast is not None:
        return fast
    with _elf(Path(path)) as elf:
        section = _section(elf, ".dynamic") if elf else None
        if isinstance(section, DynamicSection):
            return tuple(t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED")
    return ()


# Elf64_Sym, little-endian: st_name, st_info, st_other, st_shndx, st_value, st_size. pyelftools parses a symbol at
# a time (seconds for a doctor's few dozen extensions, with tens of thousands of symbols each); struct reads the
# whole table at once, for the ELF class every supported platform (x86_64, aarch64) uses.
_SYM64 = struct.Struct("<IBBHQQ")
STB_GLOBAL, STB_WEAK, SHN_UNDEF = 1, 2, 0
_BINDINGS = {"STB_GLOBAL": STB_GLOBAL, "STB_WEAK": STB_WEAK}  # pyelftools' names of the two the doctor tells apart


def _symbols(elf: ELFFile, dynsym) -> list[tuple[str, int, int]]:
    """(name, binding, section index) of each entry of a symbol table, in table order."""
    if elf.elfclass != 64 or not elf.little_endian or dynsym["sh_entsize"] != _SYM64.size:
        return [(s.name, _BINDINGS.get(s["st_info"]["bind"], 0), SHN_UNDEF if s["st_shndx"] == "SHN_UNDEF" else -1)
                for s in dynsym.iter_symbols()]
    strings = elf.get_section(dynsym["sh_link"]).data()
    out = []
    for name, info, _, shndx, _, _ in _SYM64.iter_unpack(dynsym.data()):
        out.append((strings[name:strings.find(b"\0", name)].decode(errors="replace") if name else "", info >> 4,
                    shndx))
    return out


def _dynamic_symbols(path: Path) -> list[tuple[str, int, int]]:
    with _elf(path) as elf:
        section = _section(elf, ".dynsym") if elf else None
        return _symbols(elf, section) if section else []


def undefined(path: Path) -> set[str]:
    """Names the object needs from others: undefined, non-weak dynamic symbols."""
    return {name for name, bind, shndx in _dynamic_symbols(path) if name and shndx == SHN_UNDEF and bind == STB_GLOBAL}


def defined(path: Path) -> set[str]:
    """Names the object exports: defined global or weak dynamic symbols."""
    return {name for name, bind, shndx in _dynamic_symbols(path)
            if name and shndx != SHN_UNDEF and bind in (STB_GLOBAL, STB_WEAK)}


def unresolved(so: Path, providers: Iterable[Path], only: re.Pattern | None = None) -> list[str]:
    """Undefined symbols of `so` (those matching `only`, if given) that no provider library defines."""
    wanted = {s for s in undefined(Path(so)) if only is None or only.search(s)}
    # The libraries `so` links first, as the loader looks: most names are found there, and fewer lookups are made.
    links = {name.split(".so")[0] for name in needed(Path(so))}
    for lib in sorted(providers, key=lambda p: Path(p).name.split(".so")[0] not in links):
        if not wanted:
            break
        wanted -= exported(Path(lib), wanted)
    return sorted(wanted)


def versioned_needs(path: Path) -> dict[str, set[str]]:
    """Undefined symbols bound to a version of a named library (`sym@libcublasLt.so.13`), by that library's
    file name: the loader looks each one up in exactly that library. {} for objects without version needs."""
    with _elf(Path(path)) as elf:
        if elf is None:
            return {}
        dynsym, versym = _section(elf, ".dynsym"), _section(elf, ".gnu.version")
        verneed = _section(elf, ".gnu.version_r")
        if not (dynsym and versym and verneed):
            return {}
        library = {aux["vna_other"]: need.name for need, auxes in verneed.iter_versions() for aux in auxes}
        # .gnu.version: one half-word per symbol table entry, in the ELF's byte order.
        versions = array.array("H", versym.data())
        if elf.little_endian != (sys.byteorder == "little"):
            versions.byteswap()
        out: dict[str, set[str]] = {}
        for (name, _, shndx), ndx in zip(_symbols(elf, dynsym), versions):
            # Index 0/1: local/global, no version; bit 15 marks a hidden version.
            if name and shndx == SHN_UNDEF and ndx > 1 and (lib := library.get(ndx & 0x7FFF)):
                out.setdefault(lib, set()).add(name)
        return out


def version_needs(path: Path) -> dict[str, set[str]]:
    """Symbol versions the object asks of each library it links, by the library's file name
    (libc.so.6 -> {GLIBC_2.34, ...}, libstdc++.so.6 -> {GLIBCXX_3.4.30, ...}): the loader refuses a library
    that does not define them (`version `GLIBC_2.34' not found`). {} for objects without version needs."""
    with _elf(Path(path)) as elf:
        section = _section(elf, ".gnu.version_r") if elf else None
        if section is None:
            return {}
        return {need.name: {aux.name for aux in auxes} for need, auxes in section.iter_versions()}


def version_defs(path: Path) -> set[str]:
    """Symbol versions a library defines (libstdc++.so.6: GLIBCXX_3.4 ... GLIBCXX_3.4.30, CXXABI_1.3 ...)."""
    with _elf(Path(path)) as elf:
        section = _section(elf, ".gnu.version_d") if elf else None
        return {aux.name for _, auxes in section.iter_versions() for aux in auxes} if section else set()


# CUDA libraries an env takes from PyPI's nvidia-* wheels (never the driver's libcuda): a binary built against a
# newer one than the env pins dies at import with `undefined symbol: X, version libcublasLt.so.13`.
CUDA_LIBRARY = re.compile(r"^lib(?:cublas|cublasLt|cudart|cudnn\w*|cufft|curand|cusolver|cusparse|cusparseLt|nccl|"
                          r"nvrtc|nvJitLink|nvshmem\w*|cufile|cupti)\.so\.\d+$")


def cuda_library_dirs(site_packages: Path) -> list[Path]:
    """Where an env's CUDA libraries live: torch/lib and the nvidia-* wheels' lib folders."""
    return [d for d in (site_packages / "torch" / "lib", *sorted(site_packages.glob("nvidia/*/lib"))) if d.is_dir()]


def cuda_library_gaps(so: Path, lib_dirs: Iterable[Path],
                      ) -> tuple[dict[str, Path], dict[str, set[str]], dict[str, list[str]]]:
    """For the CUDA libraries `so` binds versioned symbols to and that `lib_dirs` hold: (library -> file, library ->
    symbols needed, library -> symbols that file lacks). Libraries the env does not ship are left out."""
    needs = {lib: names for lib, names in versioned_needs(so).items() if CUDA_LIBRARY.match(lib)}
    lib_dirs = list(lib_dirs)
    found = {lib: next((d / lib for d in lib_dirs if (d / lib).is_file()), None) for lib in needs}
    found = {lib: path for lib, path in found.items() if path is not None}
    missing = {lib: sorted(needs[lib] - exported(path, needs[lib])) for lib, path in found.items()}
    return found, {lib: needs[lib] for lib in found}, {lib: names for lib, names in missing.items() if names}


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
    """Which of `names` the library defines. A doctor asks torch's and the CUDA libraries again for each extension:
    each library's exports are read once while it stays the same file."""
    try:
        st = os.stat(lib)
    except OSError:
        return set()
    return set(names) & _exports(str(lib), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _exports(path: str, inode: int, size: int, mtime_ns: int) -> frozenset[str]:
    return frozenset(defined(Path(path)))
