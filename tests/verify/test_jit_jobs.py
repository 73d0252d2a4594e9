"""MAX_JOBS for the trainers' run-time JIT compiles: GPU visit N's trainers were killed by Ray's memory monitor while
vLLM compiled FlashInfer's GDN prefill with one ~6 GB nvcc job per core (ninja's default)."""

import itertools

import pytest

from test_kernel_scripts import load
from verlenv.catalog import packages
from verlenv.errors import UserError
from verlenv.native.parallelism import SAFETY_FRACTION, SAFETY_MIN_GIB
from verlenv.verify import jit_jobs
from verlenv.verify.jit_jobs import TRAINER_HOST_GIB

CACHES = packages.table().jit_caches


def test_the_rollout_engines_nvcc_jit_says_how_large_its_jobs_are():
    assert CACHES["flashinfer"]["job_gib"] == 6.5 and "vllm" in CACHES["flashinfer"]["used_by"]
    assert jit_jobs.jit_jobs(CACHES, "vllm", 1, 117.0, 16) is not None
    # No row with a job size for this engine: the compiler's own default stands.
    assert jit_jobs.jit_jobs(CACHES, "no-such-engine", 1, 117.0, 16) is None
    unsized = {name: {k: v for k, v in row.items() if k != "job_gib"} for name, row in CACHES.items()}
    assert jit_jobs.jit_jobs(unsized, "vllm", 1, 117.0, 16) is None


def test_visit_ns_host_gets_a_bound_that_fits_it():
    # The H100 host of visit N: 125.85 GB (117.2 GiB), 16 cores, 3 trainers side by side; ninja's default was 18 jobs.
    three = jit_jobs.jit_jobs(CACHES, "vllm", 3, 117.2, 16)
    one = jit_jobs.jit_jobs(CACHES, "vllm", 1, 117.2, 16)
    assert three.max_jobs == 2 and one.max_jobs == 12
    assert "MAX_JOBS=2" in three.why and "3 trainer(s)" in three.why


@pytest.mark.parametrize("trainers", [1, 2, 3, 4, 8])
def test_every_trainer_compiling_at_once_stays_within_the_hosts_memory(trainers):
    for mem, cores in itertools.product([24.0, 64.0, 117.2, 240.0, 1000.0], [2, 16, 64, 128]):
        jobs = jit_jobs.jit_jobs(CACHES, "vllm", trainers, mem, cores).max_jobs
        assert 1 <= jobs <= cores
        held = trainers * (TRAINER_HOST_GIB + jobs * CACHES["flashinfer"]["job_gib"])
        # one job each is the floor, even where the host is too small for the trainers themselves
        assert jobs == 1 or held <= mem - max(SAFETY_MIN_GIB, SAFETY_FRACTION * mem) + 1e-9, (mem, cores, jobs)


def test_the_trainers_get_it_unless_the_user_set_max_jobs():
    trainer = load("verl_trainer")
    assert trainer.trainer_env({"PATH": "/bin"}, jit_max_jobs=3)["MAX_JOBS"] == "3"
    assert trainer.trainer_env({"PATH": "/bin", "MAX_JOBS": "7"}, jit_max_jobs=3)["MAX_JOBS"] == "7"
    assert "MAX_JOBS" not in trainer.trainer_env({"PATH": "/bin"})


def test_a_bad_job_size_is_one_line(tmp_path):
    bad = tmp_path / "packages.toml"
    bad.write_text('[jit_caches.x]\nvar = "X"\ndefault = "~"\njob_gib = -1.0\n')
    with pytest.raises(UserError, match=r"jit_caches\.x\.job_gib must be a positive number of GiB"):
        packages._jit_caches(bad, {"x": {"var": "X", "default": "~", "job_gib": -1.0}})
    with pytest.raises(UserError, match=r"job_gib \(float\)"):
        packages._jit_caches(bad, {"x": {"var": "X", "default": "~", "job_gib": "six"}})
