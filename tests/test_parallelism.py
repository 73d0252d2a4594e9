"""MAX_JOBS and nvcc threads for given memory and core figures, using the recipes' own memory per job."""

from pathlib import Path

import pytest

from verlenv.native import recipes
from verlenv.native.parallelism import SAFETY_FRACTION, SAFETY_MIN_GIB, mem_available_gib, parallelism_for, split_jobs

REPO = Path(__file__).resolve().parent.parent


def usable(mem: float) -> float:
    return mem - max(SAFETY_MIN_GIB, SAFETY_FRACTION * mem)


def peak_of(mem_per_job: float, per_extra_thread: float, jobs: int, threads: int) -> float:
    """Worst case: every job at its measured peak, each extra nvcc thread adding its share."""
    return jobs * (mem_per_job + (threads - 1) * per_extra_thread)


def peak(recipe: recipes.Recipe, jobs: int, threads: int) -> float:
    return peak_of(recipe.mem_per_job_gib, recipe.mem_per_extra_thread_gib, jobs, threads)


@pytest.fixture(scope="module")
def flash_attn() -> recipes.Recipe:
    return recipes.load(REPO, "flash-attn")


@pytest.mark.parametrize("mem, cores", [(24, 2), (128, 16), (64, 64), (880, 128), (16, 8)])
def test_flash_attn_jobs_never_exceed_usable_memory_or_cores(flash_attn, mem, cores):
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 2, mem, cores)
    assert 1 <= p.jobs <= cores and 1 <= p.threads <= 2
    assert p.jobs * p.threads <= cores
    assert peak(flash_attn, p.jobs, p.threads) <= usable(mem)  # zero OOM by construction
    # ...and no spare capacity left: one more job would break a bound.
    assert p.jobs == cores or peak(flash_attn, p.jobs + 1, 1) > usable(mem)


@pytest.mark.parametrize("n_archs", [1, 2, 3, 4])  # 4: flash-attn's own default, 80;90;100;120
@pytest.mark.parametrize("mem, cores", [(24, 2), (128, 16), (64, 64), (16, 8)])
def test_more_archs_never_push_the_jobs_past_memory(flash_attn, mem, cores, n_archs):
    """More archs lengthen each nvcc job (its archs compile one after another) without raising its peak; only the
    threads that compile them side by side cost memory, and they are counted: a Blackwell build (2-4 archs) stays
    within the same usable memory as the sm_90 one."""
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, n_archs, mem, cores)
    assert 1 <= p.threads <= n_archs and p.jobs * p.threads <= cores
    assert peak(flash_attn, p.jobs, p.threads) <= usable(mem)
    one = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 1, mem, cores)
    assert p.jobs <= one.jobs  # an arch more never means more jobs


def test_24_gib_2_cores_runs_two_flash_attn_jobs(flash_attn):
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 2, 24, 2)
    assert (p.jobs, p.threads) == (2, 1)
    assert "bound by cores" in p.reason


def test_128_gib_16_cores_runs_sixteen_flash_attn_jobs(flash_attn):
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 2, 128, 16)
    assert (p.jobs, p.threads) == (16, 1)
    assert peak(flash_attn, 16, 1) <= usable(128)


def test_many_cores_little_memory_is_bound_by_memory(flash_attn):
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 2, 64, 64)
    assert p.jobs == int(usable(64) // flash_attn.mem_per_job_gib) < 64
    assert "bound by memory" in p.reason


def test_tight_memory_still_builds_with_one_job(flash_attn):
    p = parallelism_for(flash_attn.mem_per_job_gib, flash_attn.mem_per_extra_thread_gib, 2, 4, 16)
    assert (p.jobs, p.threads) == (1, 1)
    assert "memory is tight" in p.reason


def test_spare_cores_become_nvcc_threads_up_to_one_per_arch():
    # Light units on 8 cores with plenty of memory: jobs fill the cores, no core is left for threads.
    p = parallelism_for(1, 0.5, 4, 256, 8)
    assert (p.jobs, p.threads) == (8, 1)
    # Memory allows 2 jobs of 8 GiB on 16 cores: spare cores become threads, capped by the 3 archs.
    p = parallelism_for(8, 0.5, 3, 24, 16)
    assert (p.jobs, p.threads) == (2, 3)
    assert peak_of(8, 0.5, p.jobs, p.threads) <= usable(24)
    # One arch: nothing to split, one thread.
    assert parallelism_for(8, 0.5, 1, 24, 16).threads == 1


def test_threads_stop_when_their_memory_runs_out():
    p = parallelism_for(8, 2, 4, 24, 16)
    assert (p.jobs, p.threads) == (2, 2)
    assert peak_of(8, 2, p.jobs, p.threads) <= usable(24) < peak_of(8, 2, p.jobs, p.threads + 1)


@pytest.mark.parametrize("jobs", range(1, 65))
def test_split_jobs_of_a_total_the_user_gave_stays_within_it(jobs):
    at_once, per_extension, _ = split_jobs(jobs, jobs, jobs)
    assert at_once >= 1 and per_extension >= 1
    assert at_once * per_extension <= jobs
    assert at_once >= per_extension  # apex-like packages: many extensions of few files
    assert (at_once + 1) * per_extension > jobs  # no job slot wasted on a whole extension


@pytest.mark.parametrize("cores", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("gib", [4, 24, 64, 128, 512])
@pytest.mark.parametrize("units", [0, 1, 2, 3, 8])
def test_split_jobs_never_bets_memory_on_few_units(cores, gib, units):
    """Even if every extension ran all its jobs at once, their memory stays within the usable memory."""
    p = parallelism_for(2.5, 0, 1, gib, cores)
    at_once, per_extension, _ = split_jobs(p.jobs, p.memory_jobs, cores, units)
    assert at_once >= 1 and per_extension >= 1
    assert at_once * per_extension * 2.5 <= max(usable(gib), 2.5 * p.jobs)
    plain = split_jobs(p.jobs, p.jobs, p.jobs)
    assert at_once * per_extension >= plain[0] * plain[1]  # never fewer job slots than the plain split


def test_split_jobs_examples():
    assert split_jobs(1, 1, 1)[:2] == (1, 1)
    assert split_jobs(2, 2, 2)[:2] == (2, 1)
    assert split_jobs(16, 16, 16)[:2] == (4, 4)
    # The 16-core, 125 GiB H100 host, apex at 2.5 GiB per job: 42 jobs fit in memory; most extensions have 2
    # units, so 8 extensions x 4 jobs keep about 16 cores busy (worst case 32 jobs, 80 GiB).
    assert split_jobs(16, 42, 16, 2)[:2] == (8, 4)
    assert split_jobs(16, 20, 16, 2)[:2] == (5, 4)  # memory caps it
    assert split_jobs(16, 42, 16, 0)[:2] == (4, 4)  # units unknown: the plain split
    assert split_jobs(2, 7, 2, 2)[:2] == (2, 1)  # the 2-core CPU machine


def test_mem_available_reads_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   12582912 kB\n")
    assert mem_available_gib(meminfo) == 12.0
    assert 0 < mem_available_gib() < 4096  # this machine's own
