"""How many compile jobs (and nvcc threads per job) fit in this machine's memory and cores."""

import math
from dataclasses import dataclass
from pathlib import Path

# Keep this share of available memory free for the OS, the linker and ninja itself.
SAFETY_FRACTION = 0.15
SAFETY_MIN_GIB = 1.5


@dataclass(frozen=True)
class Parallelism:
    jobs: int
    threads: int
    reason: str


def mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1024 * 1024)
    raise RuntimeError(f"{meminfo} has no MemAvailable line")


def parallelism_for(mem_per_job_gib: float, mem_per_extra_thread_gib: float, n_archs: int,
                    mem_available: float, cores: int) -> Parallelism:
    """Jobs bounded by cores and by memory; spare cores go to nvcc threads (one per arch) if memory allows."""
    usable = mem_available - max(SAFETY_MIN_GIB, SAFETY_FRACTION * mem_available)
    by_memory = int(usable // mem_per_job_gib) if usable > 0 else 0
    jobs = max(1, min(cores, by_memory))
    threads = 1
    while (threads < n_archs and jobs * (threads + 1) <= cores
           and jobs * (mem_per_job_gib + threads * mem_per_extra_thread_gib) <= usable):
        threads += 1
    limit = "memory" if by_memory < cores else "cores"
    reason = (f"{mem_available:.1f} GiB available, {usable:.1f} GiB usable after the safety margin, "
              f"{mem_per_job_gib:g} GiB per job, {cores} cores: {jobs} jobs (bound by {limit})"
              + (", one job only: memory is tight" if by_memory < 1 else "")
              + f", {threads} nvcc thread(s) per job for {n_archs} arch(s)")
    return Parallelism(jobs, threads, reason)


def split_jobs(jobs: int) -> tuple[int, int]:
    """(extensions at once, jobs per extension) whose product stays within `jobs`; most go to extensions,
    since a package like apex has many extensions of a few files each."""
    per_extension = max(1, math.isqrt(jobs))
    return max(1, jobs // per_extension), per_extension
