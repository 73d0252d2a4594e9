"""How many parallel nvcc jobs each of verify's trainers may give a run-time JIT compile (MAX_JOBS).

A JIT compiler inside the rollout engine (FlashInfer's, under vLLM) builds its kernels at the first step with one
job per core unless MAX_JOBS says otherwise; each job of a large CUTLASS kernel holds ~6 GB of host memory, so on a
16-core host one trainer's compile alone filled 126 GB and Ray's memory monitor killed the trainers (GPU visit N).
The bound is the host's available memory less what the trainers themselves hold, shared by the trainers that may
compile at once."""

import os
from dataclasses import dataclass

from verlenv.native.parallelism import mem_available_gib, usable_gib

# Host memory one trainer holds besides its JIT compiles (Ray, verl's workers, the rollout engine, the actor): at
# most 20 GiB each in visit N (119.8 GB in use with 3 trainers, 56.9 GB of it ten of the compile's cicc jobs).
TRAINER_HOST_GIB = 20.0


@dataclass(frozen=True)
class JitJobs:
    max_jobs: int
    why: str


def jit_jobs(caches: dict, rollout: str, trainers: int, mem_available: float, cores: int) -> JitJobs | None:
    """MAX_JOBS for each of `trainers` side by side, from the largest job_gib of the rollout's nvcc JIT caches
    (data/packages.toml); None when none of them says how large its jobs are."""
    sizes = [row["job_gib"] for row in caches.values()
             if row.get("nvcc") and "job_gib" in row and rollout in row.get("used_by", ())]
    if not sizes:
        return None
    job_gib, trainers = max(sizes), max(1, trainers)
    usable = usable_gib(mem_available) - trainers * TRAINER_HOST_GIB
    jobs = int(usable // job_gib) if usable > 0 else 0
    per_trainer = max(1, min(cores, jobs) // trainers)
    why = (f"{mem_available:.0f} GiB available less the safety margin and {trainers} trainer(s) x "
           f"{TRAINER_HOST_GIB:g} GiB, "
           f"{job_gib:g} GiB per nvcc job, {cores} cores: MAX_JOBS={per_trainer} for each trainer's run-time JIT")
    return JitJobs(per_trainer, why)


def host_available_gib() -> float | None:
    """This host's available memory (GiB), None where it cannot say (no /proc/meminfo)."""
    try:
        return mem_available_gib()
    except (OSError, RuntimeError):
        return None


def for_host(caches: dict, rollout: str, trainers: int, mem: float | None) -> JitJobs | None:
    """jit_jobs on this host's cores with `mem` GiB available (host_available_gib); None where that is unknown."""
    if mem is None:  # the compiler's own default stands
        return None
    return jit_jobs(caches, rollout, trainers, mem, os.cpu_count() or 1)
