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
    # Jobs whose memory fits, cores aside: the bound for setup.py files that run several ninjas at once.
    memory_jobs: int


def mem_available_gib(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / (1024 * 1024)
    raise RuntimeError(f"{meminfo} has no MemAvailable line")


def usable_gib(mem_available: float) -> float:
    """Available memory less the safety margin kept free for the OS, the linker and ninja."""
    return mem_available - max(SAFETY_MIN_GIB, SAFETY_FRACTION * mem_available)


def parallelism_for(mem_per_job_gib: float, mem_per_extra_thread_gib: float, n_archs: int,
                    mem_available: float, cores: int) -> Parallelism:
    """Jobs bounded by cores and by memory; spare cores go to nvcc threads (one per arch) if memory allows."""
    usable = usable_gib(mem_available)
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
    return Parallelism(jobs, threads, reason, max(jobs, by_memory))


def split_jobs(jobs: int, memory_jobs: int, cores: int, units_per_extension: int = 0) -> tuple[int, int, str]:
    """(extensions at once, jobs per extension, why) for a setup.py that builds several extensions at once, each
    with a ninja of its own (apex).

    An extension of u units keeps at most min(u, jobs per extension) cores busy, so when most extensions have
    few units (`units_per_extension`, 0 = unknown), filling the cores takes more extensions at once than
    jobs ÷ jobs per extension. Memory is never bet on that: even if every extension ran all its jobs at once,
    their number stays within `memory_jobs`.
    """
    per_extension = max(1, math.isqrt(jobs))
    busy = min(per_extension, units_per_extension) if units_per_extension > 0 else per_extension
    at_once = max(jobs // per_extension, math.ceil(cores / busy))
    at_once = max(1, min(at_once, memory_jobs // per_extension))
    why = (f"{at_once} x {per_extension} jobs at most, within the {memory_jobs} jobs memory allows"
           + (f"; most extensions have {units_per_extension} units, so about {min(cores, at_once * busy)} of "
              f"{cores} cores are busy" if busy < per_extension else ""))
    return at_once, per_extension, why
