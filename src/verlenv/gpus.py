"""GPU profiles (data in data/gpus.toml) and detection of the GPUs this machine has."""

import os
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


def _smi(fields: str, environ=None) -> list[list[str]]:
    """nvidia-smi's --query-gpu `fields` of each GPU this process may use: every GPU nvidia-smi lists, narrowed
    to CUDA_VISIBLE_DEVICES (indexes or GPU-UUID prefixes, in its order) where that is set, as Slurm's GPU
    binding and one Ray node per GPU set it; nvidia-smi itself ignores the variable."""
    environ = os.environ if environ is None else environ
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu=index,uuid,{fields}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    width = fields.count(",") + 3
    rows = [cells for line in out.stdout.splitlines() if len(cells := [c.strip() for c in line.split(",")]) == width]
    wanted = environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is None:
        return [r[2:] for r in rows]
    chosen = []
    for token in (t.strip() for t in wanted.split(",")):
        # CUDA stops at the first entry it cannot resolve; so does this.
        match = next((r for r in rows if (token.isdigit() and r[0] == token)
                      or (token.startswith("GPU-") and r[1].startswith(token))), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return [r[2:] for r in chosen]


def visible_gpus() -> list[tuple[str, str]]:
    """(name, compute capability) of each visible GPU, from nvidia-smi; [] when there is none."""
    return [(cells[0], cells[1]) for cells in _smi("name,compute_cap")]


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str
    memory_mib: int | None
    driver: str | None


def gpu_details() -> list[Gpu]:
    """Name, compute capability, memory and driver of each visible GPU, from nvidia-smi; [] when none."""
    return [Gpu(c[0], c[1], int(c[2]) if c[2].isdigit() else None, c[3] or None)
            for c in _smi("name,compute_cap,memory.total,driver_version")]


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
