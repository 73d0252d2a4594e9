"""What the whole suite shares: the skip of GPU tests where no NVIDIA GPU is visible, and the default stack's env
(found as every test finds it: $VERLENV_CLUSTER_ENV, else .venv-verl-0.9-fsdp in this checkout)."""

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
