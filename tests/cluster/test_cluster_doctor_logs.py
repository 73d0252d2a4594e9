"""`verlenv doctor --ray` reads each node's own Ray session logs, on the suite's real three-node Ray cluster on this
machine (tests/conftest.py's gpu_cluster, tests/ray_nodes.py; the nodes share one session folder, so each reads the
files its own raylet started): a healthy job leaves nothing to report, and a flash-attn ABI error printed by a task
on one worker node is named on that node only. Needs the default env (`nox -s env`, or
VERLENV_CLUSTER_ENV=<its python>)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from verlenv.cluster.verdict import node_problems
from verlenv.doctor import diagnose_path, ray_session

ROOT = Path(__file__).resolve().parents[2]
VERLENV = Path(sys.executable).with_name("verlenv")
# FAILURES.md F1: a flash-attn wheel built for another torch, as the worker's import prints it.
FLASH_ATTN_ABI = ("ImportError: /envs/verl/lib/python3.12/site-packages/"
                  "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
                  "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
RUN_TIMEOUT_S = 600

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

# Programs run in the env; each one's docstring says what it does.
HEALTHY_JOB = ROOT / "tests" / "data" / "programs" / "ray_healthy_job.py"
PLANT = ROOT / "tests" / "data" / "programs" / "ray_plant_failure.py"


def doctor_ray(cluster) -> tuple[int, dict, str]:
    proc = subprocess.run([str(VERLENV), "doctor", "--ray", cluster.address, "--json", "--only", "nccl-env",
                           "--node-timeout", "300"], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT,
                          check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def session_folder(cluster) -> Path:
    return Path(cluster.temp_dir) / "session_latest" / "logs"


def test_each_node_reads_its_own_session_logs_and_names_a_failure_there(gpu_cluster, env_python):
    """On the session's cluster (tests/conftest.py's gpu_cluster), before any other test ran a job there: this
    module's name sorts it first among the cluster's users, so its session folder holds only Ray's own files."""
    cluster = gpu_cluster
    job = subprocess.run([env_python, str(HEALTHY_JOB), cluster.address], capture_output=True, text=True, check=False,
                         timeout=RUN_TIMEOUT_S)
    assert job.returncode == 0, job.stderr[-2000:]

    # A live session folder of a healthy job: nothing on any node, and `doctor DIR` on the folder agrees.
    code, data, _ = doctor_ray(cluster)
    rows = {row["address"]: row for row in data["nodes"]}
    assert len(rows) == 3 and all(row["state"] == "checked" for row in rows.values()), rows
    for row in rows.values():
        assert row["logs"]["folder"] == str(session_folder(cluster).resolve()) or \
            Path(row["logs"]["folder"]).resolve() == session_folder(cluster).resolve()
        assert [d["id"] for d in row["logs"]["diagnoses"]] == [], row["logs"]
    assert diagnose_path(str(session_folder(cluster))).diagnoses == []
    # One host, three nodes: each node reads its own raylet's files and workers, the head the shared rest.
    files = [row["logs"]["files"] for row in rows.values()]
    assert all(files) and sum(files) <= len(list(session_folder(cluster).rglob("*.*")))

    planted_on = cluster.workers[0]
    plant = subprocess.run([env_python, str(PLANT), cluster.address, planted_on, FLASH_ATTN_ABI],
                           capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert plant.returncode == 0, plant.stderr[-2000:]

    code, data, _ = doctor_ray(cluster)
    rows = {row["address"]: row for row in data["nodes"]}
    found = {ip: [d["id"] for d in row["logs"]["diagnoses"]] for ip, row in rows.items()}
    assert found[planted_on] == ["F1"], found
    assert all(ids == [] for ip, ids in found.items() if ip != planted_on), found
    (f1,) = rows[planted_on]["logs"]["diagnoses"]
    assert f1["evidence"][0]["file"].startswith("worker-") and f1["evidence"][0]["file"].endswith(".err")
    assert "flash_attn_2_cuda" in f1["evidence"][0]["text"] and f1["fix"]
    # The cluster's verdict counts it: the exit code, and the line the text report prints under that node.
    assert code == 1
    assert [line for line in node_problems(rows[planted_on]) if line.startswith("logs [F1]")]


def test_a_folder_of_one_node_is_read_whole(tmp_path):
    """On a real cluster each host's folder holds one raylet's files: every file there is that node's."""
    (tmp_path / "raylet.out").write_text("node_id=abc\n")
    (tmp_path / "worker-aa-ff-12.err").write_text("x\n")
    assert len(ray_session.node_files(tmp_path, "another-node")) == 2
