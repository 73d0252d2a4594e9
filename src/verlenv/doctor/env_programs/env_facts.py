"""Facts of the environment whose python runs this (verlenv doctor, doctor/facts.py): the interpreter, its
site folders, torch located (never imported), glibc, the libstdc++ the loader finds, every distribution on sys.path
(those a name's earlier install shadows apart) and the environment markers. Standard library only; no arguments;
prints one JSON object.

    python env_facts.py
"""

import json
import os
import platform
import re
import site
import sys
import sysconfig
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



def main():
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


if __name__ == "__main__":
    main()
