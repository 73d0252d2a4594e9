"""What the whole suite shares: the skip of GPU tests where no NVIDIA GPU is visible, the default stack's env
(found as every test finds it: $VERLENV_CLUSTER_ENV, else .venv-verl-0.9-fsdp in this checkout) and one real Ray
cluster started from it for the cluster tests, which leave its nodes as they found them."""

import functools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = "no NVIDIA GPU visible"


@functools.cache
def gpu_visible() -> bool:
    """nvidia-smi lists a GPU this process may use (CUDA_VISIBLE_DEVICES honoured)."""
    from verlenv.catalog import gpus

    return bool(gpus.gpu_details())


# How the suite spreads over pytest-xdist workers (`nox -s tests` runs `-n auto`; `-- -n 0`, one process): a module's
# tests stay on one worker, so its module-scoped fixtures (a venv, a Ray cluster, a build) are made once; these
# scopes join modules that must also share one worker:
# - "ray": every module that starts Ray clusters on this machine's loopback addresses (127.0.0.2, .3, ...), and so
#   the session's one cluster (gpu_cluster) and verl's composed configs (verl_composed) are made once, and no two
#   clusters start at once on two cores. (verify's 300 s all-reduce timed out in test_cluster_placement on
#   2026-11-28 and 2026-11-29: Ray's workers ran at nice 15, behind the other worker's tests; test clusters now run
#   them at nice 0, tests/ray_nodes.py.)
# - "gpu": the GPU tests share the one visible GPU, as verify's checks do: one at a time.
# (pytest-xdist's own `--dist loadgroup` reads marks by a node id attribute pytest 9.2 no longer has.)
XDIST_SCOPES = {
    "ray": ("test_cluster_placement", "test_cluster_trainer", "test_verl_trainer_check", "test_cluster_ray",
            "test_cluster_doctor_logs", "test_cluster_compare", "test_verl_own_ray"),
    "gpu": ("test_kernel_scripts", "test_check_sglang", "test_cluster_allreduce_gpu"),
}
# The longest scopes, longest first (`--durations` of a 2-worker run, 2026-11-28: the Ray modules ≈ 1000 s together,
# then 250, 220, 176 s): the workers start with them, so that no long one is left to run alone at the end.
XDIST_FIRST = ("ray", "tests/lock/test_lock.py", "tests/bundle/test_bundle_build_inputs.py",
               "tests/native/test_build_extension.py")


def xdist_scope(nodeid: str) -> str:
    """The worker scope of a test: its module's, or the scope that joins that module with others."""
    path = nodeid.partition("::")[0]
    module = Path(path).stem
    return next((scope for scope, modules in XDIST_SCOPES.items() if module in modules), path)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: absent where it is not installed
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    # The scopes in this conftest's order (the longest first), not pytest-xdist's default: most tests first.
    config.option.loadscopereorder = False

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ByScope(config, log)


def xdist_order(nodeids: list[str]) -> list[str]:
    """The longest scopes first, then each scope's tests together where the scope's first test was; a scope's own
    tests keep their order."""
    rank = {scope: i for i, scope in enumerate(XDIST_FIRST)}
    scope = {nodeid: xdist_scope(nodeid) for nodeid in nodeids}
    seen = {s: i for i, s in enumerate(dict.fromkeys(scope.values()))}  # each scope's place of first appearance
    return sorted(nodeids, key=lambda n: (rank.get(scope[n], len(rank)), seen[scope[n]]))


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: every worker collects and orders alike, as required
        order = {nodeid: i for i, nodeid in enumerate(xdist_order([item.nodeid for item in items]))}
        items.sort(key=lambda item: order[item.nodeid])
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


# Session fixtures that keep processes running, stopped right after the last test that uses them instead of at the
# session's end: an idle three-node Ray cluster takes about a tenth of a core (each node's log monitor, dashboard
# agent, raylet), which the rest of the suite, most of it, would pay for on two cores.
STOPPED_AFTER_LAST_USER: dict[str, object] = {}  # fixture name -> what it yielded, while it runs
_last_user: dict[str, str] = {}  # fixture name -> node id of the last collected test that uses it


def pytest_collection_finish(session):
    _last_user.clear()
    for item in session.items:  # in run order: a worker's order too (xdist_order), its scopes whole
        for name in getattr(item, "fixturenames", ()):
            _last_user[name] = item.nodeid


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    for name in [n for n in STOPPED_AFTER_LAST_USER if _last_user.get(n) == item.nodeid]:
        STOPPED_AFTER_LAST_USER.pop(name).stop()


@pytest.fixture(scope="session")
def gpu_cluster(env_python):
    """A real Ray cluster on this machine (tests/ray_nodes.py): a CPU head and two worker nodes that Ray gives one GPU
    each (`--num-gpus 1`; none exists here), each with its own place in a job (CUDA_VISIBLE_DEVICES 1 and 0, Slurm
    ids, ranks). A test that adds a node removes it before it ends. Its first user, test_cluster_doctor_logs, reads
    the session logs of a healthy job and leaves one failure's line in a worker's log, which no later user reads
    (tests/test_suite_scopes.py holds that order). Stopped after its last test (STOPPED_AFTER_LAST_USER)."""
    import ray_nodes

    one_gpu = ("--num-gpus", "1")
    cluster = ray_nodes.start(env_python, [(env_python, ray_nodes.placed("1", 0), one_gpu),
                                           (env_python, ray_nodes.placed("0", 1), one_gpu)])
    STOPPED_AFTER_LAST_USER["gpu_cluster"] = cluster
    try:
        yield cluster
    finally:
        STOPPED_AFTER_LAST_USER.pop("gpu_cluster", None)
        cluster.stop()  # stopping twice is harmless: no process of it is left to kill


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
