"""What the whole suite shares: the skip of GPU tests where no NVIDIA GPU is visible, the default stack's env
(found as every test finds it: $VERLENV_CLUSTER_ENV, else .venv-verl-0.9-fsdp in this checkout) and one real Ray
cluster started from it for the cluster tests that leave it as they found it."""

import functools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = "no NVIDIA GPU visible"


@functools.cache
def gpu_visible() -> bool:
    """nvidia-smi lists a GPU this process may use (CUDA_VISIBLE_DEVICES honoured)."""
    from verlenv import gpus

    return bool(gpus.gpu_details())


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not gpu_visible():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


def default_env_python() -> Path:
    return Path(os.environ.get("VERLENV_CLUSTER_ENV") or ROOT / ".venv-verl-0.9-fsdp" / "bin" / "python")


@pytest.fixture(scope="session")
def env_python() -> str:
    """The default stack's env (`nox -s env` makes it; .ci/run does so before the tests)."""
    python = default_env_python()
    if not python.exists():
        pytest.skip(f"no default env at {python}: make it with `nox -s env` (or set VERLENV_CLUSTER_ENV)")
    return str(python)


@pytest.fixture(scope="session")
def gpu_cluster(env_python):
    """A real Ray cluster on this machine (tests/ray_nodes.py): a CPU head and two worker nodes that Ray gives one GPU
    each (`--num-gpus 1`; none exists here), each with its own place in a job (CUDA_VISIBLE_DEVICES 1 and 0, Slurm
    ids, ranks). A test that adds a node removes it before it ends."""
    import ray_nodes

    one_gpu = ("--num-gpus", "1")
    cluster = ray_nodes.start(env_python, [(env_python, ray_nodes.placed("1", 0), one_gpu),
                                           (env_python, ray_nodes.placed("0", 1), one_gpu)])
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def verl_composed(env_python, tmp_path_factory) -> dict:
    """verl's own Hydra configs as the kernel check and the cluster job compose them, from one run in the default env
    (tests/data/programs/verl_compose.py): {"check": ..., "cluster": ...}."""
    import json
    import subprocess

    out = tmp_path_factory.mktemp("verl-compose") / "out.json"
    kernels = ROOT / "src" / "verlenv" / "verify" / "kernels"
    proc = subprocess.run([env_python, str(ROOT / "tests" / "data" / "programs" / "verl_compose.py"), str(ROOT / "src"),
                           str(kernels), str(out)], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())
