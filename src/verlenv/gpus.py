"""GPU profiles (data in data/gpus.toml) and detection of the GPUs this machine has."""

import subprocess
import sys
import tomllib
from dataclasses import dataclass
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

    def matches(self, name: str) -> bool:
        return any(m.lower() in name.lower() for m in self.match)


def profiles() -> dict[str, GpuProfile]:
    data = tomllib.loads(resources.files("verlenv").joinpath("data/gpus.toml").read_text())
    out = {}
    for key, t in data.items():
        known = {"title", "match", "arch", "memory_gib", "fp8"}
        out[key] = GpuProfile(key, t["title"], tuple(t["match"]), t["arch"], tuple(t["memory_gib"]), bool(t["fp8"]),
                              {k: v for k, v in t.items() if k not in known})
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


def profile_for_name(name: str) -> GpuProfile | None:
    return next((p for p in profiles().values() if p.matches(name)), None)


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
