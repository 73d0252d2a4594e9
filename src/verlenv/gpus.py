"""GPU profiles (data in data/gpus.toml) and detection of the GPUs this machine has."""

import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from verlenv.errors import UserError


@dataclass(frozen=True)
class GpuProfile:
    key: str
    title: str
    match: tuple[str, ...]
    arch: str
    memory_gib: tuple[int, ...]
    fp8: bool
    extra: dict
    # Error bounds and throughput floors for the kernel checks (shared defaults merged in).
    thresholds: dict = field(default_factory=dict)

    def matches(self, name: str) -> bool:
        return any(m.lower() in name.lower() for m in self.match)

    def for_checks(self, gpu_count: int) -> dict:
        """What a kernel check script receives as --profile (JSON-ready)."""
        return {"key": self.key, "title": self.title, "arch": self.arch, "fp8": self.fp8,
                "memory_gib": list(self.memory_gib), "gpu_count": gpu_count, "thresholds": self.thresholds}


# Top-level tables of gpus.toml that are not profiles.
NOT_PROFILES = ("defaults",)


def profiles() -> dict[str, GpuProfile]:
    data = tomllib.loads(resources.files("verlenv").joinpath("data/gpus.toml").read_text())
    shared = data.get("defaults", {}).get("thresholds", {})
    out = {}
    for key, t in data.items():
        if key in NOT_PROFILES:
            continue
        known = {"title", "match", "arch", "memory_gib", "fp8", "thresholds"}
        out[key] = GpuProfile(key, t["title"], tuple(t["match"]), t["arch"], tuple(t["memory_gib"]), bool(t["fp8"]),
                              {k: v for k, v in t.items() if k not in known}, {**shared, **t.get("thresholds", {})})
    return out


def profile(key: str) -> GpuProfile:
    all_ = profiles()
    if key not in all_:
        raise UserError(f"unknown GPU {key!r}; valid: {', '.join(all_)}")
    return all_[key]


def visible_gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each visible GPU, from nvidia-smi; [] when there is none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [tuple(x.strip() for x in line.split(",", 1)) for line in out.stdout.splitlines() if "," in line]


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str
    memory_mib: int | None
    driver: str | None


def gpu_details() -> list[Gpu]:
    """Name, compute capability, memory and driver of each visible GPU, from nvidia-smi; [] when none."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,memory.total,driver_version",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            memory = int(cells[2]) if cells[2].isdigit() else None
            gpus.append(Gpu(cells[0], cells[1], memory, cells[3] or None))
    return gpus


def profile_for_name(name: str) -> GpuProfile | None:
    return next((p for p in profiles().values() if p.matches(name)), None)


def select_profile(requested: str, gpus: list[Gpu], force: bool = False) -> GpuProfile | None:
    """The profile to verify against; None for 'auto' on a machine without a GPU (static checks only)."""
    names = sorted({g.name for g in gpus})
    if requested == "auto":
        if not gpus:
            return None
        found = {g.name: profile_for_name(g.name) for g in gpus}
        unknown = [n for n, p in found.items() if p is None]
        if unknown:
            raise UserError(f"no GPU profile for {', '.join(unknown)}; valid: {', '.join(profiles())} "
                            "(name one with --gpu NAME --force to check against it anyway)")
        keys = sorted({p.key for p in found.values()})
        if len(keys) > 1:
            raise UserError(f"GPUs of different kinds are visible ({', '.join(names)}); "
                            "limit CUDA_VISIBLE_DEVICES to one kind")
        return profile(keys[0])
    wanted = profile(requested)
    if force:
        return wanted
    if not gpus:
        raise UserError(f"--gpu {requested}: no GPU is visible on this machine; use --gpu auto for the static checks "
                        f"only, or --force to check against the {requested} profile without one")
    others = [g.name for g in gpus if not wanted.matches(g.name)]
    if others:
        there = profile_for_name(others[0])
        hint = f"--gpu {there.key} or --gpu auto" if there else "--gpu auto"
        raise UserError(f"--gpu {requested}: this machine has {', '.join(sorted(set(others)))}, not an "
                        f"{wanted.title}; use {hint}, or --force")
    return wanted


def archs_for(targets: list[str]) -> list[str]:
    """Build archs for --gpu values; 'auto' = the visible GPUs (several -> the union)."""
    archs: set[str] = set()
    for target in targets:
        if target != "auto":
            archs.add(profile(target).arch)
            continue
        gpus = visible_gpus()
        if not gpus:
            if sys.stdin.isatty():
                answer = input(f"no GPU visible; build for which GPU ({', '.join(profiles())})? ").strip()
                archs.add(profile(answer).arch)
                continue
            raise UserError(f"no GPU visible for --gpu auto; name the target: --gpu {'|'.join(profiles())}")
        for _name, cap in gpus:
            archs.add(cap)
    return sorted(archs, key=lambda a: float(a))
