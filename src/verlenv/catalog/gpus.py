"""GPU profiles (data in data/gpus.toml) and detection of the GPUs this machine has."""

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from verlenv import cubins
from verlenv.errors import UserError
from verlenv.fsutil import packaged_table

DATA = Path(__file__).parents[1] / "data" / "gpus.toml"


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
    # The arch source builds compile for (b300: 10.0, whose cubins run on 10.3); the driver that first knows the GPU;
    # the CPU it comes with (gb200: aarch64, the linux-aarch64 lock).
    build_arch: str = ""
    min_driver: str = ""
    machine: str = "x86_64"

    def matches(self, name: str) -> bool:
        return any(m.lower() in name.lower() for m in self.match)

    def driver_floor(self, stack_min_driver: str) -> str:
        """The driver this GPU needs under a stack: the higher of its own floor and the stack's CUDA's."""
        def key(v: str) -> tuple[int, ...]:
            return tuple(int(p) for p in v.split(".") if p.isdigit())
        return max((d for d in (self.min_driver, stack_min_driver) if d), key=key, default="")

    def match_length(self, name: str) -> int:
        """The longest of this profile's `match` strings in `name` (0: none): "NVIDIA GB200" is gb200's, not b200's."""
        return max((len(m) for m in self.match if m.lower() in name.lower()), default=0)

    def for_checks(self, gpu_count: int) -> dict:
        """What a kernel check script receives as --profile (JSON-ready)."""
        return {"key": self.key, "title": self.title, "arch": self.arch, "fp8": self.fp8,
                "memory_gib": list(self.memory_gib), "gpu_count": gpu_count, "thresholds": self.thresholds,
                "runs_cubins": cubin_names_for(self.arch)}


# Top-level tables of gpus.toml that are not profiles.
NOT_PROFILES = ("defaults",)


def profiles() -> dict[str, GpuProfile]:
    data = packaged_table(DATA)
    shared = data.get("defaults", {}).get("thresholds", {})
    out = {}
    for key, t in data.items():
        if key in NOT_PROFILES:
            continue
        known = {"title", "match", "arch", "memory_gib", "fp8", "thresholds", "build_arch", "min_driver", "machine"}
        out[key] = GpuProfile(key, t["title"], tuple(t["match"]), t["arch"], tuple(t["memory_gib"]), bool(t["fp8"]),
                              {k: v for k, v in t.items() if k not in known}, {**shared, **t.get("thresholds", {})},
                              t.get("build_arch", t["arch"]), t.get("min_driver", ""), t.get("machine", "x86_64"))
    return out


def cubin_names_for(arch: str) -> list[str]:
    """Every cubin name (sm_100, sm_100f, sm_103a...) that runs on a device of `arch`, by data/gpu_code.toml's rules:
    what torch.cuda.get_arch_list() must share with it."""
    major = cubins.sm_of(arch) // 10
    # `a` code exists from sm_90 on, `f` code from sm_100 on.
    names = [cubins.FatbinEntry("elf", sm, suffix) for sm in range(major * 10, major * 10 + 10)
             for suffix in ("", *("a" for _ in [0] if sm >= 90), *("f" for _ in [0] if sm >= 100))]
    return [e.name for e in names if cubins.runs_on(e, arch)]


def nearest_profile(arch: str) -> GpuProfile | None:
    """The profile whose build a GPU of compute capability `arch` runs (its cubins run there; the closest arch first),
    else the profile of the closest arch."""
    sm, all_ = cubins.sm_of(arch), list(profiles().values())
    if not all_:
        return None
    runs = [p for p in all_ if cubins.runs_on(cubins.FatbinEntry("elf", cubins.sm_of(p.build_arch)), arch)]
    return min(runs or all_, key=lambda p: (abs(cubins.sm_of(p.arch) - sm), p.key))


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
    """The profile whose `match` names this GPU most precisely (the longest match); None if none does."""
    found = [p for p in profiles().values() if p.matches(name)]
    return max(found, key=lambda p: p.match_length(name)) if found else None


def select_profile(requested: str, gpus: list[Gpu], force: bool = False) -> GpuProfile | None:
    """The profile to verify against; None for 'auto' on a machine without a GPU (static checks only)."""
    names = sorted({g.name for g in gpus})
    if requested == "auto":
        if not gpus:
            return None
        found = {g.name: profile_for_name(g.name) for g in gpus}
        unknown = next((g for g in gpus if found[g.name] is None), None)
        if unknown is not None:
            near = nearest_profile(unknown.compute_capability) if _is_arch(unknown.compute_capability) else None
            hint = (f"nearest: {near.key} (sm {near.arch}); check against it with --gpu {near.key} --force"
                    if near else "name one with --gpu NAME --force to check against it anyway")
            raise UserError(f"no GPU profile for {unknown.name} (compute capability {unknown.compute_capability}); "
                            f"{hint}; valid: {', '.join(profiles())}")
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


def _is_arch(text: str) -> bool:
    major, dot, minor = text.partition(".")
    return bool(dot) and major.isdigit() and minor.isdigit() and len(minor) == 1


def archs_for(targets: list[str]) -> list[str]:
    """Build archs for --gpu values (each profile's build_arch); 'auto' = the visible GPUs (several -> the union)."""
    archs: set[str] = set()
    for target in targets:
        if target != "auto":
            archs.add(profile(target).build_arch)
            continue
        gpus = visible_gpus()
        if not gpus:
            if sys.stdin.isatty():
                answer = input(f"no GPU visible; build for which GPU ({', '.join(profiles())})? ").strip()
                archs.add(profile(answer).build_arch)
                continue
            raise UserError(f"no GPU visible for --gpu auto; name the target: --gpu {'|'.join(profiles())}")
        for name, cap in gpus:
            known = profile_for_name(name)
            archs.add(known.build_arch if known and known.arch == cap else cap)
    return sorted(archs, key=lambda a: float(a))
