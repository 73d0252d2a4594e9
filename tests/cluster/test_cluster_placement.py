"""Placement is shown, identity is compared, on a real Ray cluster on this machine (tests/ray_nodes.py).

Two worker nodes differ only in where their share of a job sits: each is started with `--num-gpus 1` and its own
CUDA_VISIBLE_DEVICES, so Ray really assigns their tasks different GPU ids (1 and 0), as two raylets on one host
or Slurm's GPU binding do; and each has its own Slurm ids, ranks, container GPU list and vLLM host IP. `verify
--ray` passes and shows them. Then a node joins whose workers see another PYTORCH_CUDA_ALLOC_CONF (an identity
fact: it changes how the job allocates): `verify --ray` fails naming that fact and that node, and nothing else.
Needs the default env (`nox -s env`, or VERLENV_CLUSTER_ENV=<its python>).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
import ray_nodes  # noqa: E402
from ray_nodes import placed  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VERLENV = Path(sys.executable).with_name("verlenv")
RUN_TIMEOUT_S = 3600  # a hang guard: nodes that share two loaded cores

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_TIMEOUT_S)]


def verify(cluster, python: str, report: Path, *extra: str, allreduce: str = "gloo") -> tuple[int, dict, str]:
    proc = subprocess.run([str(VERLENV), "verify", "--ray", cluster.address, "--python", python, "--allreduce",
                           allreduce, "--only", "torch", "--node-timeout", "1800", "--report", str(report), *extra],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    assert report.exists(), proc.stderr[-3000:]
    return proc.returncode, json.loads(report.read_text()), proc.stderr


def test_each_node_binds_its_workers_in_a_port_block_of_its_own(gpu_cluster):
    """Raylets on one host that share a worker port range can give two workers one port (tests/ray_nodes.py)."""
    procs = ray_nodes._processes()
    raylets = [procs[pid][1] for pid in gpu_cluster.pids() if pid in procs and "raylet/raylet " in procs[pid][1]]
    assert len(raylets) == 1 + len(gpu_cluster.workers), raylets
    blocks = []
    for cmd in raylets:
        low, high = (int(re.search(rf"--{end}_worker_port=(\d+)", cmd).group(1)) for end in ("min", "max"))
        blocks.append(range(low, high + 1))
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for i, block in enumerate(blocks):
        assert len(block) >= 100 and block.stop <= ephemeral and block.start > 19999, block  # past Ray's default
        assert all(not set(block) & set(other) for other in blocks[i + 1:]), blocks


def test_nodes_that_differ_only_in_placement_pass(gpu_cluster, env_python, tmp_path):
    cluster = gpu_cluster
    code, data, err = verify(cluster, env_python, tmp_path / "cluster.json")
    assert code == 0, err[-3000:]
    assert data["differences"] == [] and data["result"] == "pass"
    a, b = cluster.workers
    names = {row["address"]: row["name"] for row in data["nodes"]}
    shown = {p["fact"]: p["values"] for p in data["placement"]}
    # Ray gave each worker's task the GPU id its raylet holds: the placement really differed.
    assert {shown["env:CUDA_VISIBLE_DEVICES"][names[a]], shown["env:CUDA_VISIBLE_DEVICES"][names[b]]} == {"1", "0"}
    for fact in ("env:SLURM_NODEID", "env:RANK", "env:NVIDIA_VISIBLE_DEVICES", "env:VLLM_HOST_IP", "node:ip",
                 "node:id"):
        assert fact in shown, sorted(shown)
    assert shown["node:ip"][names[b]] == b
    assert "placement (shown, not compared)" in err and "env:SLURM_NODEID" in err
    # Ray's GPU resource is not a GPU: the nodes' own checks saw none, so verl's trainer has nowhere to run.
    assert data["trainer"] == {"status": "skipped", "reason": "no GPU node in the cluster: verl's trainer needs GPUs"}
    assert "verl's trainer across the cluster: skipped (no GPU node" in err and "result: pass" in err


def test_an_identity_difference_fails_naming_the_fact_and_the_node(gpu_cluster, env_python, tmp_path):
    cluster = gpu_cluster
    odd = cluster.add_worker(env_python, {**placed("2", 2), "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                             ("--num-gpus", "1"))
    try:
        # What differs is the question here; the all-reduce across the nodes is the test above's.
        code, data, err = verify(cluster, env_python, tmp_path / "cluster.json", "--skip-cluster-trainer",
                                 allreduce="off")
    finally:
        cluster.remove_worker(odd)  # the shared cluster as it was
    assert code == 1, err[-3000:]
    odd_name = next(row["name"] for row in data["nodes"] if row["address"] == odd)
    assert [(d["fact"], d["odd_nodes"]) for d in data["differences"]] == [("env:PYTORCH_CUDA_ALLOC_CONF", [odd_name])]
    assert data["differences"][0]["values"][odd_name] == "expandable_segments:True"
    assert "env:PYTORCH_CUDA_ALLOC_CONF" in err and "result: FAIL" in err
    assert data["trainer"] == {"status": "skipped", "reason": "--skip-cluster-trainer"}


def test_the_allreduce_names_the_rank_that_cannot_take_part_and_its_step(gpu_cluster, env_python, tmp_path):
    """Each fault ends the all-reduce with one line that names the rank, its node and the step, at once where Ray or
    the rank says so (not after the ranks' 300 s), after the step's bound where a rank only waits."""
    out = tmp_path / "faults.json"
    proc = subprocess.run([env_python, str(ROOT / "tests" / "data" / "programs" / "allreduce_faults.py"),
                           str(ROOT / "src"), gpu_cluster.address, str(out)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    gone, first_gpu = data["gone"][:12], data["gpus"][0][:12]
    assert all(not data[k]["ok"] for k in ("node_gone", "no_gpu_node", "gpu_taken", "gpu_unseen")), data
    assert data["node_gone"]["error"].startswith(f"rank 1 (node {gone}) failed to start: ActorUnschedulableError")
    assert data["no_gpu_node"]["error"].startswith("rank 0 (node the-head) failed to start: ActorUnschedulableError")
    # The node's one GPU is held by another job's placement group: the rank waits for it and is named once the
    # step's bound is up.
    assert data["gpu_taken"]["error"] == f"rank 0 (node {first_gpu}) did not start within 2 s"
    # Ray's GPU resource is not a GPU: the first rank to find none says so, in torch's words.
    assert re.match(r"rank [01] \(node [0-9a-f]{12}\) failed to finish: RuntimeError: .*NVIDIA driver",
                    data["gpu_unseen"]["error"]), data["gpu_unseen"]
