"""Facts about a Python environment, gathered by running a small stdlib-only script in its interpreter.

The doctor itself need not share the environment it examines: torch is located, never imported.
The distributions are those on the interpreter's sys.path, so a `--system-site-packages` venv's include
its base's; where a name is installed in several sys.path entries, the first one is what imports and the
later ones are listed apart as shadowed.
"""

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.errors import UserError

SCRIPT = r"""
import json, os, platform, re, site, sys, sysconfig
from importlib import metadata, util


def full_version(info):
    v = f"{info.major}.{info.minor}.{info.micro}"
    return v if info.releaselevel == "final" else v + info.releaselevel[0] + str(info.serial)


def torch_facts():
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    cuda = None
    try:
        text = open(os.path.join(root, "version.py")).read()
        m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        cuda = m.group(1) if m else None
    except OSError:
        pass
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        version = None
    return {"root": root, "lib": os.path.join(root, "lib"), "cuda": cuda, "version": version}


def glibc():
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    except (AttributeError, ValueError, OSError):
        return None
    return version if name == "glibc" else None


def loaded_libstdcxx():
    # The libstdc++ this interpreter's loader finds (its RPATH, LD_LIBRARY_PATH, the cache), as an import would.
    import ctypes
    try:
        ctypes.CDLL("libstdc++.so.6")
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith("libstdc++.so"):
                    return fields[-1]
    except OSError:
        return None
    return None


dists, shadowed, first_location = [], [], {}
# In sys.path order: the first folder that holds a name is the one its import finds.
for d in metadata.distributions():
    name = d.metadata["Name"]
    if not name:
        continue
    location = str(d.locate_file(""))
    entry = {"name": name, "version": d.version, "requires": d.requires or [], "location": location}
    if name.lower() == "apex":
        entry["files"] = [str(p) for p in (d.files or [])]
    # Two installs in one folder stay listed together: one went over the other.
    key = re.sub(r"[-_.]+", "-", name).lower()
    (dists if first_location.setdefault(key, location) == location else shadowed).append(entry)

paths = sysconfig.get_paths()
site_dirs = []
for p in [paths.get("purelib"), paths.get("platlib"), *getattr(site, "getsitepackages", lambda: [])()]:
    if p and os.path.isdir(p) and p not in site_dirs:
        site_dirs.append(p)

print(json.dumps({
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": sys.base_prefix,
    "version": platform.python_version(),
    "site_packages": site_dirs,
    "torch": torch_facts(),
    "glibc": glibc(),
    "libstdcxx": loaded_libstdcxx(),
    "distributions": dists,
    "shadowed": shadowed,
    "markers": {
        "implementation_name": sys.implementation.name,
        "implementation_version": full_version(sys.implementation.version),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    },
}))
"""


@dataclass
class Dist:
    name: str
    version: str
    requires: list[str]
    location: str
    files: list[str] = field(default_factory=list)


@dataclass
class EnvFacts:
    executable: str
    prefix: str
    base_prefix: str
    version: str
    site_packages: list[str]
    torch: dict | None
    # What imports: one folder per name (two installs there if one went over the other).
    distributions: list[Dist]
    markers: dict[str, str]
    # Installs of the same names in later sys.path entries, e.g. a base's under a venv's: never imported.
    shadowed: list[Dist] = field(default_factory=list)
    glibc: str | None = None  # the node's C library release, as this interpreter sees it ("2.36"; None: not glibc)
    libstdcxx: str | None = None  # the libstdc++.so.6 file this interpreter loads

    def dist(self, name: str) -> Dist | None:
        want = _canon(name)
        return next((d for d in self.distributions if _canon(d.name) == want), None)


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def gather(python: str | Path, timeout: float = 120) -> EnvFacts:
    """Facts of the environment of interpreter `python`."""
    try:
        proc = subprocess.run([str(python), "-c", SCRIPT], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise UserError(f"--python {python}: no such interpreter") from None
    except PermissionError:
        raise UserError(f"--python {python}: not executable") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"--python {python}: gave no answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--python {python}: could not inspect this interpreter ({last})")
    data = json.loads(proc.stdout)
    data["distributions"] = [Dist(**d) for d in data["distributions"]]
    data["shadowed"] = [Dist(**d) for d in data["shadowed"]]
    return EnvFacts(**data)
