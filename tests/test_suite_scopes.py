"""How the suite spreads over pytest-xdist workers (conftest.XDIST_SCOPES): the modules that use one of the session's
expensive fixtures, or the GPU, share one worker; any other module keeps its tests on a worker of its own."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import XDIST_FIRST, XDIST_SCOPES, xdist_order, xdist_scope

TESTS = Path(__file__).parent
# Session fixtures made once per worker that asks for them: a Ray cluster, a verl run in the default env.
SHARED = ("gpu_cluster", "verl_composed")


def uses(fixture: str) -> set[str]:
    """The test modules with a function (a test or a fixture) that takes `fixture` as an argument."""
    out = set()
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and fixture in {a.arg for a in node.args.args}:
                out.add(path.stem)
    return out


def gpu_marked() -> set[str]:
    marked = re.compile(r"^@pytest\.mark\.gpu$|pytestmark = .*pytest\.mark\.gpu\b", re.M)
    return {path.stem for path in TESTS.rglob("test_*.py") if marked.search(path.read_text())}


@pytest.fixture(scope="module")
def collected() -> list[str]:
    """The whole suite's node ids as one process collects them (in file order)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", str(TESTS)], capture_output=True, text=True, timeout=600,
                          cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("fixture", SHARED)
def test_the_users_of_a_shared_session_fixture_share_one_worker(fixture):
    modules = uses(fixture)
    assert len(modules) >= 2, f"{fixture}: {modules}"  # else nothing to share, and this test proves nothing
    assert len({xdist_scope(f"tests/{m}.py::test_x") for m in modules}) == 1, modules


def test_every_module_that_starts_ray_clusters_shares_one_worker():
    starts = {path.stem for path in TESTS.rglob("test_*.py")
              if re.search(r"\bray_nodes\b|\bgpu_cluster\b", path.read_text()) and path.stem != "test_suite_scopes"}
    assert {"test_cluster_ray", "test_cluster_doctor_logs", "test_cluster_placement"} <= starts
    assert {xdist_scope(f"tests/{m}.py::test_x") for m in starts} == {"ray"}


def test_the_gpu_tests_share_one_worker():
    assert {"test_kernel_scripts", "test_check_sglang"} <= gpu_marked()
    assert {xdist_scope(f"tests/{m}.py::test_x[a]") for m in gpu_marked()} == {"gpu"}


def test_a_module_of_no_scope_keeps_its_tests_together_and_apart_from_others():
    assert xdist_scope("tests/lock/test_lock.py::test_a") == xdist_scope("tests/lock/test_lock.py::test_b[x::y]")
    assert xdist_scope("tests/lock/test_lock.py::test_a") != xdist_scope("tests/bundle/test_bundle.py::test_a")


def test_every_scoped_module_exists():
    listed = {m for modules in XDIST_SCOPES.values() for m in modules}
    assert listed <= {p.stem for p in TESTS.rglob("test_*.py")}
    scopes = set(XDIST_SCOPES) | {p.relative_to(TESTS.parent).as_posix() for p in TESTS.rglob("test_*.py")}
    assert set(XDIST_FIRST) <= scopes, set(XDIST_FIRST) - scopes


def test_the_longest_scopes_run_first_and_each_scope_keeps_its_order(collected):
    ordered = xdist_order(collected)
    assert sorted(ordered) == sorted(collected)
    for scope in set(map(xdist_scope, collected)):  # a scope's own tests keep their order
        assert [n for n in ordered if xdist_scope(n) == scope] == [n for n in collected if xdist_scope(n) == scope]
    scopes = [xdist_scope(nodeid) for nodeid in ordered]
    runs = [s for i, s in enumerate(scopes) if i == 0 or scopes[i - 1] != s]
    assert runs[:len(XDIST_FIRST)] == list(XDIST_FIRST)
    assert len(runs) == len(set(runs))  # each scope in one run: a worker takes it whole


def test_the_scheduler_keeps_the_conftest_order_of_scopes(pytestconfig, monkeypatch):
    """pytest-xdist would otherwise queue the scopes with the most tests first (1000 quick doctor tests before a
    Ray cluster of 6 minutes, which then ran alone at the end: 2026-11-28)."""
    import conftest

    monkeypatch.setattr(pytestconfig.option, "loadscopereorder", True, raising=False)
    monkeypatch.setattr(pytestconfig.option, "tx", ["popen"] * 2, raising=False)  # two workers, as on 2 cores
    scheduler = conftest.pytest_xdist_make_scheduler(pytestconfig, None)
    assert pytestconfig.option.loadscopereorder is False
    assert scheduler._split_scope("tests/cluster/test_cluster_trainer.py::test_x") == "ray"


STAND_IN_CONFTEST = '''
import importlib.util
import pytest

# The suite's own hooks, from its conftest (loaded under another name: this folder's conftest is this file).
spec = importlib.util.spec_from_file_location("suite_conftest", {conftest!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_collection_finish = suite.pytest_collection_finish
pytest_runtest_teardown = suite.pytest_runtest_teardown
EVENTS = []


class Running:  # test double: stands for the Ray cluster, which would take a minute to start
    def stop(self):
        EVENTS.append("stop")


@pytest.fixture(scope="session")
def gpu_cluster():
    running = Running()
    suite.STOPPED_AFTER_LAST_USER["gpu_cluster"] = running
    yield running
    suite.STOPPED_AFTER_LAST_USER.pop("gpu_cluster", None)
    EVENTS.append("session end")


@pytest.fixture
def events():
    return EVENTS
'''

STAND_IN_TESTS = '''
def test_first_user(gpu_cluster, events):
    assert events == []


def test_not_a_user_between(events):
    assert events == []


def test_last_user(gpu_cluster, events):
    assert events == []


def test_after_the_last_user(events):
    assert events == ["stop"]
'''


def test_a_session_cluster_stops_after_its_last_user_not_at_the_sessions_end(tmp_path):
    """The conftest's hooks on a session of four tests: the fixture's value is stopped once, right after the last test
    that uses it, and a test between two users does not stop it."""
    (tmp_path / "conftest.py").write_text(STAND_IN_CONFTEST.format(conftest=str(TESTS / "conftest.py")))
    (tmp_path / "test_order.py").write_text(STAND_IN_TESTS)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:randomly", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_session_logs_test_is_the_first_to_use_the_session_cluster(collected):
    """test_cluster_doctor_logs asserts that a healthy job leaves nothing in the cluster's session logs: it must run
    before any other test's job (a failing stand-in trainer among them) writes there, in one process and on the
    ray scope's worker alike."""
    users = uses("gpu_cluster")
    for order in (collected, xdist_order(collected)):
        first = next(n for n in order if Path(n.partition("::")[0]).stem in users)
        assert first.startswith("tests/cluster/test_cluster_doctor_logs.py::"), first
