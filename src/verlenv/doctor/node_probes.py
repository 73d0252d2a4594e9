"""Probes of what a running job meets on its node: the glibc and the libstdc++ the env's libraries need, the NCCL
variables its workers see, the node's memory and Ray's session disk, the Megatron bridge verl imports.

Each takes its inputs as arguments (facts, environment, file contents) so that tests can run it on real objects;
probes.run_all gathers them from the machine (on each node under `doctor --ray`).
"""

import os
import re
import shutil
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

from verlenv.doctor import symbols
from verlenv.doctor.facts import EnvFacts
from verlenv.doctor.probe_result import ProbeResult, ok, problem, skipped, warning

GLIBC_LIBS = re.compile(r"^lib(?:c|m|pthread|dl|rt|resolv|util)\.so\.\d+$")
# manylinux tags name the oldest glibc a wheel runs on: manylinux_2_28, and the older aliases.
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_")
MANYLINUX_ALIASES = {"manylinux1": "2.5", "manylinux2010": "2.12", "manylinux2014": "2.17"}
# Variables that change what NCCL and torch's process groups do: the ones a finding's fix names.
NCCL_VARIABLE = re.compile(r"^(?:NCCL_\w+|TORCH_NCCL_\w+|TORCH_DISTRIBUTED_DEBUG|VLLM_ALLREDUCE_USE_SYMM_MEM|"
                           r"CUDA_LAUNCH_BLOCKING)$")
NAMED_ALWAYS = ("NCCL_NVLS_ENABLE", "VLLM_ALLREDUCE_USE_SYMM_MEM", "NCCL_DEBUG")
RAY_MEMORY_THRESHOLD = 0.95  # Ray's default RAY_memory_usage_threshold
RAY_DISK_THRESHOLD = 0.95  # Ray's default local_fs_capacity_threshold
SHOWN = 3


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text else None
    except InvalidVersion:
        return None


@lru_cache(maxsize=4)
def version_needs_of(site_packages: tuple[str, ...]) -> dict[str, dict[str, set[str]]]:
    """Every shared object under the env's site-packages -> the symbol versions it asks of each library."""
    out = {}
    for sp in site_packages:
        for dirpath, _, filenames in os.walk(sp):
            for fn in filenames:
                if fn.endswith(".so") or ".so." in fn:
                    needs = symbols.version_needs(Path(dirpath) / fn)
                    if needs:
                        out[os.path.join(dirpath, fn)] = needs
    return out


def _newest(versions: Iterable[str], prefix: str) -> Version | None:
    found = [_version(v[len(prefix):]) for v in versions if v.startswith(prefix)]
    return max((v for v in found if v), default=None)


def wheel_glibc(site_packages: Iterable[str]) -> dict[str, str]:
    """distribution folder -> the oldest glibc its WHEEL tags promise to run on (the highest of its tags' floors)."""
    out = {}
    for sp in site_packages:
        for wheel in Path(sp).glob("*.dist-info/WHEEL"):
            floors = []
            for line in wheel.read_text(errors="replace").splitlines():
                if not line.startswith("Tag:"):
                    continue
                tag = line.split(":", 1)[1].strip()
                if m := MANYLINUX.search(tag):
                    floors.append(f"{m.group(1)}.{m.group(2)}")
                floors += [v for alias, v in MANYLINUX_ALIASES.items() if f"{alias}_" in tag]
            if floors:
                out[wheel.parent.name] = min(floors, key=Version)  # any one tag that fits is enough
    return out


def probe_glibc(facts: EnvFacts, needs: dict[str, dict[str, set[str]]] | None = None) -> ProbeResult:
    name = "glibc"
    node = _version(facts.glibc)
    if node is None:
        return skipped(name, "this interpreter's C library is not glibc (or did not say its release)")
    needs = version_needs_of(tuple(facts.site_packages)) if needs is None else needs
    newer = {}
    for so, by_lib in needs.items():
        wanted = _newest((v for lib, vs in by_lib.items() if GLIBC_LIBS.match(lib) for v in vs), "GLIBC_")
        if wanted and wanted > node:
            newer[so] = f"GLIBC_{wanted}"
    tags = {dist: floor for dist, floor in wheel_glibc(facts.site_packages).items() if Version(floor) > node}
    details = {"node_glibc": facts.glibc, "objects": len(needs), "too_new": newer, "wheel_tags": tags}
    if newer or tags:
        listed = [f"{so} needs {v}" for so, v in sorted(newer.items())[:SHOWN]]
        listed += [f"{dist} is tagged for glibc >= {floor}" for dist, floor in sorted(tags.items())[:SHOWN]]
        return problem(name, f"the node's glibc is {facts.glibc}; {len(newer)} shared object(s) and {len(tags)} "
                             f"wheel(s) need a newer one: " + "; ".join(listed), "F39", **details)
    newest = _newest((v for by_lib in needs.values() for lib, vs in by_lib.items() if GLIBC_LIBS.match(lib)
                      for v in vs), "GLIBC_")
    return ok(name, f"glibc {facts.glibc} on this node; the env's {len(needs)} shared objects need at most "
                    f"GLIBC_{newest or '?'}", **details)


def probe_libstdcxx(facts: EnvFacts, needs: dict[str, dict[str, set[str]]] | None = None) -> ProbeResult:
    name = "libstdcxx"
    if not facts.libstdcxx:
        return skipped(name, "this interpreter loads no libstdc++.so.6")
    defined = symbols.version_defs(Path(facts.libstdcxx))
    if not defined:
        return skipped(name, f"{facts.libstdcxx} defines no symbol versions (not a GNU libstdc++?)")
    needs = version_needs_of(tuple(facts.site_packages)) if needs is None else needs
    missing = {}
    for so, by_lib in needs.items():
        lacking = sorted(v for lib, vs in by_lib.items() if lib.startswith("libstdc++.so") for v in vs
                         if v not in defined)
        if lacking:
            missing[so] = lacking
    newest = {p: _newest(defined, p) for p in ("GLIBCXX_", "CXXABI_")}
    has = ", ".join(f"{p}{v}" for p, v in newest.items() if v)
    details = {"loaded": facts.libstdcxx, "newest": has, "missing": missing}
    if missing:
        listed = [f"{so} needs {', '.join(v[-2:])}" for so, v in sorted(missing.items())[:SHOWN]]
        return problem(name, f"the libstdc++ this interpreter loads ({facts.libstdcxx}, up to {has}) lacks versions "
                             f"{len(missing)} shared object(s) need: " + "; ".join(listed), "F40", **details)
    return ok(name, f"loads {facts.libstdcxx} (up to {has}); every shared object of the env finds its versions",
              **details)


def nccl_variables(environ: dict) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if NCCL_VARIABLE.match(k)}


def probe_nccl_env(environ: dict, site_packages: Iterable[str]) -> ProbeResult:
    """The NCCL settings this process (a Ray worker, under `doctor --ray`) sees, and any libnccl that
    LD_LIBRARY_PATH puts before the nvidia-nccl wheel torch was built with."""
    name = "nccl-env"
    seen = nccl_variables(environ)
    wheel = [str(p) for sp in site_packages for p in Path(sp).glob("nvidia/nccl/lib/libnccl.so*")]
    wheel += [str(p) for sp in site_packages for p in Path(sp).glob("nvidia/cu*/lib/libnccl.so*")]
    first = [str(Path(d) / "libnccl.so.2") for d in environ.get("LD_LIBRARY_PATH", "").split(":")
             if d and (Path(d) / "libnccl.so.2").exists()]
    first = [f for f in first if os.path.realpath(f) not in {os.path.realpath(w) for w in wheel}]
    # Named even when unset: the NVLS and symmetric-memory findings' fix is to set them.
    shown = ", ".join([f"{k}={v}" for k, v in seen.items()] + [f"{k} unset" for k in NAMED_ALWAYS if k not in seen])
    details = {"variables": seen, "wheel": wheel, "ld_library_path": first}
    if first and wheel:
        return problem(name, f"LD_LIBRARY_PATH puts {first[0]} before the nvidia-nccl wheel torch pins "
                             f"({wheel[0]}): two NCCL libraries; NCCL variables: {shown}", "F17",
                       [("unset LD_LIBRARY_PATH (or drop the folder holding that libnccl.so.2) in the workers' "
                         "environment"), "check which one loads: NCCL_DEBUG=INFO prints `NCCL version` at start"],
                       **details)
    return ok(name, f"NCCL variables the process sees: {shown}", **details)


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields in bytes."""
    out = {}
    for line in text.splitlines():
        if m := re.match(r"^(\w+):\s+(\d+)\s*kB", line):
            out[m.group(1)] = int(m.group(2)) * 1024
    return out


def probe_memory(meminfo_text: str, environ: dict, cgroup_limit: int | None = None) -> ProbeResult:
    """Host memory against Ray's memory monitor: above its threshold Ray kills the newest worker."""
    name = "memory"
    mem = meminfo(meminfo_text)
    if "MemTotal" not in mem or "MemAvailable" not in mem:
        return skipped(name, "no MemTotal/MemAvailable in /proc/meminfo")
    total = min(mem["MemTotal"], cgroup_limit) if cgroup_limit else mem["MemTotal"]
    used = max(0, mem["MemTotal"] - mem["MemAvailable"])
    try:
        threshold = float(environ.get("RAY_memory_usage_threshold", RAY_MEMORY_THRESHOLD))
    except ValueError:
        threshold = RAY_MEMORY_THRESHOLD
    gib = 1 << 30
    details = {"total_bytes": total, "used_bytes": used, "ray_threshold": threshold,
               "cgroup_limit_bytes": cgroup_limit, "monitor_off": environ.get("RAY_memory_monitor_refresh_ms") == "0"}
    where = f"{used / gib:.1f} of {total / gib:.1f} GiB used" + (" (cgroup limit)" if cgroup_limit else "")
    if used >= threshold * total:
        return problem(name, f"{where}: above Ray's memory threshold {threshold:g}, where its monitor kills the "
                             "newest worker", "F35", **details)
    return ok(name, f"{where}; Ray kills workers above {threshold:g}"
              + (" (its monitor is off here)" if details["monitor_off"] else ""), **details)


def ray_temp_dir(environ: dict) -> Path:
    return Path(environ.get("RAY_TMPDIR") or "/tmp") / "ray"


def probe_ray_disk(folder: Path, usage: tuple[int, int, int] | None, environ: dict) -> ProbeResult:
    """The disk of Ray's session folder against local_fs_capacity_threshold, above which objects cannot spill."""
    name = "ray-disk"
    if usage is None:
        return skipped(name, f"no disk at {folder}")
    total, used, _ = usage
    try:
        threshold = float(environ.get("RAY_local_fs_capacity_threshold", RAY_DISK_THRESHOLD))
    except ValueError:
        threshold = RAY_DISK_THRESHOLD
    share = used / total if total else 0.0
    details = {"folder": str(folder), "total_bytes": total, "used_bytes": used, "threshold": threshold}
    where = f"{folder}: {share:.0%} of {total / (1 << 30):.0f} GiB used"
    if share >= threshold:
        return problem(name, f"{where}, at or above Ray's limit {threshold:.0%}: objects that must spill cannot be "
                             "created", "F36", **details)
    return ok(name, f"{where} (Ray refuses to spill above {threshold:.0%})", **details)


def disk_usage(folder: Path) -> tuple[int, int, int] | None:
    """shutil.disk_usage of the folder, or of its nearest existing parent (Ray may not have run here yet)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return tuple(shutil.disk_usage(candidate))
    return None


def ray_instances(proc: Path = Path("/proc")) -> list[dict]:
    """The Ray instances alive on this host, one GCS server process each: its pid, owner and session folder."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")]
            uid = entry.stat().st_uid
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "gcs_server":
            logs = next((a.split("=", 1)[1] for a in argv if a.startswith("--log_dir=")), None)
            found.append({"pid": int(entry.name), "uid": uid, "session": logs and str(Path(logs).parent)})
    return sorted(found, key=lambda i: i["pid"])


def probe_ray_instances(instances: list[dict], facts: EnvFacts) -> ProbeResult:
    """Several Ray instances on one host: verl jobs in two of them can share one weight-sync socket path, named by
    the Ray job id, which is 01000000 for the first job of every instance (docs/reference.md, "Two verl jobs on one
    host"). The Ray verify starts for each of its trainers gives that trainer an id of its own."""
    name = "ray-instances"
    if facts.dist("verl") is None:
        return skipped(name, "no verl in this env")
    details = {"instances": instances}
    if len(instances) < 2:
        return ok(name, f"{len(instances)} Ray instance(s) on this host: a verl job started now has its weight-sync "
                        "socket to itself", **details)
    pids = ", ".join(str(i["pid"]) for i in instances[:SHOWN]) + (", ..." if len(instances) > SHOWN else "")
    return warning(name, f"{len(instances)} Ray instances on this host (GCS server pids {pids}): verl jobs in two of "
                         "them share one weight-sync socket path (/tmp/rl-colocate-zmq-01000000-replica-0-rank-0.sock "
                         "for each instance's first job), and two syncs at once hang one job and give another job's "
                         "weights to a rollout", "F70",
                   fix=["start one Ray on the node first (ray start --head): every verl job started after it joins "
                        "it under a job id of its own",
                        "or run one verl job at a time on this host"], **details)


def probe_megatron(facts: EnvFacts) -> ProbeResult:
    """Which bridge verl's Megatron actor can build through here: Megatron-Bridge (verl's default) or mbridge
    (actor.megatron.vanilla_mbridge=True)."""
    name = "megatron"
    core = facts.dist("megatron-core")
    if core is None:
        return skipped(name, "no megatron-core in this env (an fsdp env): the Megatron actor needs a megatron env")
    bridge, mbridge = facts.dist("megatron-bridge"), facts.dist("mbridge")
    details = {"megatron-core": core.version, "megatron-bridge": bridge and bridge.version,
               "mbridge": mbridge and mbridge.version}
    if bridge:
        return ok(name, f"megatron-core {core.version} with Megatron-Bridge {bridge.version} (verl's default bridge)",
                  **details)
    if mbridge:
        return warning(name, f"megatron-core {core.version} with mbridge {mbridge.version} and no Megatron-Bridge: "
                             "verl's Megatron actor needs actor_rollout_ref.actor.megatron.vanilla_mbridge=True here",
                       "F44", **details)
    return problem(name, f"megatron-core {core.version} without Megatron-Bridge or mbridge: verl's Megatron actor "
                         "cannot build its model (verlenv's megatron env: `verlenv build megatron-bridge` adds its "
                         "source-built Megatron-Bridge)", "F44", **details)
