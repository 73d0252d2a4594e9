"""`verlenv verify --ray` on a real four-node Ray cluster on this machine (tests/ray_nodes.py): one node from a
second venv whose torch RECORD was changed and whose Ray workers see another NCCL_CUMEM_ENABLE, one node killed
mid-check, one node stopped. Needs the default env (`nox -s env`, or VERLENV_CLUSTER_ENV=<its python>); the
second venv comes from uv's cache, PyPI for what the cache lacks."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
import ray_nodes  # noqa: E402
from waiting import StreamLines, until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VERLENV = Path(sys.executable).with_name("verlenv")
RUN_TIMEOUT_S = 3600  # a hang guard: nodes that share two loaded cores

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.timeout(2 * RUN_TIMEOUT_S)]


@pytest.fixture(scope="module")
def odd_python(env_python, tmp_path_factory) -> str:
    """A second venv of the same lock whose torch RECORD lists one file more than was installed."""
    from uv import find_uv_bin

    venv = tmp_path_factory.mktemp("odd") / "venv"
    uv = find_uv_bin()
    subprocess.run([uv, "venv", "-q", str(venv), "--python", env_python], check=True, timeout=120)
    # From uv's cache where `nox -s env` left the packages (PyPI for any it lacks), as symlinks: hard links would
    # change the link count, and so the ctime, of the default env's own files (the same inodes), and every node's
    # check would then hash them all again instead of trusting install's record.
    subprocess.run([uv, "pip", "sync", "-q", "--link-mode", "symlink", "--python", str(venv / "bin" / "python"),
                    str(ray_nodes.LOCK)], check=True, timeout=RUN_TIMEOUT_S)
    record = next(venv.glob("lib/python*/site-packages/torch-*.dist-info/RECORD"))
    # A new file, not an edit in place: installed files are hard links into uv's cache.
    text = record.read_text() + "torch/lib/libtorch_extra.so,sha256=AAAA,1024\n"
    record.unlink()
    record.write_text(text)
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def cluster(env_python, odd_python):
    c = ray_nodes.start(env_python, [(env_python, {}), (odd_python, {"NCCL_CUMEM_ENABLE": "0"}), (env_python, {})])
    try:
        yield c
    finally:
        c.stop()


def _run_killing(cluster, doomed: str, report: Path) -> tuple[int, str]:
    """verify --ray with node `doomed` killed while its check runs: (exit code, stderr)."""
    runtime_env = report.with_name("runtime-env.json")  # as verl's trainer gives its workers variables
    runtime_env.write_text(json.dumps({"env_vars": {"VERL_CLUSTER_CHECK": "on"}}))
    cmd = [str(VERLENV), "verify", "--ray", cluster.address, "--allreduce", "gloo", "--node-timeout", "1800",
           "--runtime-env", str(runtime_env), "--report", str(report)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        err = StreamLines(proc.stderr)
        assert err.wait_for("alive node(s)"), err.text()
        # The node dies under its check: once a worker of that node runs the check's task. Each look scans /proc
        # (tens of ms among a cluster's processes): a finer poll would take a core from the nodes' own checks.
        assert until(lambda: proc.poll() is not None or cluster.running(doomed, "verlenv-verify-node"),
                     every_s=0.5)
        assert cluster.kill_node(doomed), f"no process of node {doomed} found"
        code = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, err.text()


def test_odd_node_named_and_dead_node_reported(cluster, odd_python, tmp_path):
    same, odd, doomed = cluster.workers
    code, err = _run_killing(cluster, doomed, tmp_path / "cluster.json")
    assert code == 1, err
    data = json.loads((tmp_path / "cluster.json").read_text())
    rows = {row["address"]: row for row in data["nodes"]}
    assert len(rows) == 4 and set(cluster.workers) < set(rows), err
    head = next(ip for ip in rows if ip not in cluster.workers)
    # Reported as dead, not as hung: seen by Ray's own view of the cluster, not by --node-timeout running out.
    assert rows[doomed]["state"] in ("died", "error"), rows[doomed]

    for ip in (head, same, odd):
        assert rows[ip]["state"] == "checked", rows[ip]
        assert rows[ip]["fingerprint"]["env:VERL_CLUSTER_CHECK"] == "on"  # the checks ran under the job's runtime_env
        assert rows[ip]["node"]["python"] == (odd_python if ip == odd else rows[head]["node"]["python"])
    failed = {ip: [r["name"] for r in rows[ip]["results"] if r["required"] and r["status"] == "fail"]
              for ip in (head, same, odd)}
    assert failed[head] == [] and failed[same] == [], failed
    assert "intact/torch" in failed[odd], failed

    odd_name = rows[odd]["name"]
    by_fact = {d["fact"]: d for d in data["differences"]}
    assert by_fact["record:torch"]["odd_nodes"] == [odd_name]
    assert by_fact["env:NCCL_CUMEM_ENABLE"]["odd_nodes"] == [odd_name]
    assert by_fact["env:NCCL_CUMEM_ENABLE"]["values"][odd_name] == "0"
    assert by_fact["env:NCCL_CUMEM_ENABLE"]["values"][rows[head]["name"]] is None
    # Everything else is equal: the same lock, the same packages, the same torch as torch reports it.
    assert all(d["odd_nodes"] == [odd_name] for d in data["differences"]), data["differences"]
    assert not any(f.startswith(("package:", "torch:")) for f in by_fact), sorted(by_fact)
    assert "record:torch" in err and odd_name in err  # the table names them too

    reduce = data["allreduce"]
    assert reduce["ok"] and reduce["wrong_elements"] == 0 and reduce["world"] == 3 and reduce["nodes"] == 3, reduce
    assert all(r["busbw_gbps"] > 0 for r in reduce["rows"])


def test_doctor_probes_every_alive_node(cluster, tmp_path):
    """After the test above one node is dead: the doctor probes the three alive ones and names the odd one."""
    same, odd, doomed = cluster.workers
    proc = subprocess.run([str(VERLENV), "doctor", "--ray", cluster.address, "--json", "--node-timeout", "1800"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    rows = {row["address"]: row for row in data["nodes"]}
    # Ray may not have declared the killed node dead yet: then it is reported dead by the doctor itself.
    assert rows.pop(doomed, {"state": "died"})["state"] == "died"
    assert len(rows) == 3 and same in rows and odd in rows, sorted(rows)
    assert all(row["state"] == "checked" and row["probes"] for row in rows.values()), rows
    probed = {p["probe"] for p in rows[same]["probes"]}
    assert {"lock-drift", "torch-extensions", "cuda-libraries"} <= probed
    by_fact = {d["fact"]: d for d in data["differences"]}
    assert by_fact["record:torch"]["odd_nodes"] == [rows[odd]["name"]]


def test_a_hung_node_is_reported_within_the_node_timeout(cluster):
    """A node whose every process is stopped (SIGSTOP) answers nothing: reported once --node-timeout passes, or
    sooner when Ray declares it dead."""
    same, odd, _ = cluster.workers
    stopped = cluster.stop_node(same)
    assert stopped, f"no process of node {same} found"
    try:
        # Long enough for the others to answer on a loaded machine; Ray itself declares the stopped node dead
        # sooner (its raylet misses the health checks), else this timeout reports it hung.
        proc = subprocess.run([str(VERLENV), "doctor", "--ray", cluster.address, "--json", "--node-timeout", "300",
                               "--only", "apex"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert proc.returncode == 1, proc.stderr[-2000:]
    rows = {row["address"]: row for row in json.loads(proc.stdout)["nodes"]}
    # Ray may declare it dead first (its raylet misses the health checks; its task then fails, "died" or "error"):
    # reported either way, while the others were checked.
    assert rows[same]["state"] in ("hung", "died", "error"), rows[same]
    assert rows[odd]["state"] == "checked"
