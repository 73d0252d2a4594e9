"""The Ray driver of `verlenv verify --ray`, run by the env's own interpreter (Ray lives in the env, not in the tool).

python -m verlenv.cluster.driver REQUEST.json OUT.json: connects to the cluster, runs `node.check` once per
alive node (hard node affinity), waits for each within a bounded time, runs the cross-node all-reduce over the
GPUs of the nodes that answered, compares fingerprints, runs verl's own trainer across the GPU nodes when every
node passed (cluster/trainer.py), and writes one JSON document.
"""

import json
import os
import signal
import socket
import sys
import time
import warnings
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import verlenv
from verlenv.catalog import stacks
from verlenv.cluster import allreduce, compare, node, trainer, verdict
from verlenv.verify.options import VerifyOptions

CONNECT_S = 10.0
UNREACHABLE = 3  # exit code: the cluster's address does not answer
POLL_S = 2.0  # how often pending nodes are looked at: a dead one is named within this plus Ray's own detection
STOP_GRACE_S = 15.0  # an interrupted node task's time to clean up before it is killed
RUNNING: set = set()  # node tasks not yet answered: what a stop must stop


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def alive_nodes() -> dict[str, dict]:
    return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}


def labels(nodes: dict[str, dict]) -> dict[str, str]:
    """A readable, unique name per node: its Ray node name (the IP unless set), with the id's start where shared."""
    names = {i: n.get("NodeName") or n.get("NodeManagerAddress") or i for i, n in nodes.items()}
    shared = {v for v in names.values() if list(names.values()).count(v) > 1}
    return {i: f"{v}/{i[:8]}" if v in shared else v for i, v in names.items()}


def check_nodes(request: node.Request, nodes: dict[str, dict], node_timeout: float, what=node.check) -> dict[str, dict]:
    """node id -> what(request) as that node ran it, or {"state": "died"|"hung"|"error", "error": why} for a node
    without an answer."""
    task = ray.remote(what)
    refs = {}
    RUNNING.clear()
    for node_id, info in nodes.items():
        gpus = int(info.get("Resources", {}).get("GPU", 0))
        # All the node's GPUs: Ray then shows the task every one of them (CUDA_VISIBLE_DEVICES), as the kernel
        # checks need; num_cpus=0 so a node whose CPUs are all taken is still checked.
        refs[node_id] = task.options(num_cpus=0, num_gpus=gpus, max_retries=0, name="verlenv-verify-node",
                                     scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
                                     ).remote(request)
    RUNNING.update(refs.values())
    out: dict[str, dict] = {}
    deadline = time.monotonic() + node_timeout
    pending = dict(refs)
    while pending:
        ready, _ = ray.wait(list(pending.values()), num_returns=len(pending), timeout=POLL_S)
        for node_id, ref in list(pending.items()):
            if ref in ready:
                out[node_id] = _get(ref)
                del pending[node_id]
        if not pending:
            break
        alive = alive_nodes()
        for node_id in [i for i in pending if i not in alive]:
            out[node_id] = {"state": "died", "error": "the node left the cluster during the check (dead in Ray's view)"}
            ray.cancel(pending.pop(node_id), force=True)
        if time.monotonic() > deadline:
            for node_id, ref in pending.items():
                out[node_id] = {"state": "hung", "error": f"no answer within {node_timeout:g} s (--node-timeout)"}
            stop_tasks(list(pending.values()))
            break
    RUNNING.clear()
    return out


def _get(ref) -> dict:
    try:
        result = ray.get(ref)
    except ray.exceptions.NodeDiedError as e:
        return {"state": "died", "error": f"NodeDiedError: {str(e).strip().splitlines()[0][:300]}"}
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError, ray.exceptions.RaySystemError,
            ray.exceptions.TaskUnschedulableError) as e:
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        return {"state": "error", "error": f"{type(e).__name__}: {(lines[-1] if lines else '')[:300]}"}
    return {"state": "error" if result.get("error") else "checked", **result}


def cross_node_allreduce(answered: dict[str, dict], nodes: dict[str, dict], backend: str,
                         names: dict[str, str]) -> dict | None:
    if backend == "off":
        return None
    if backend == "gloo":  # CPU nodes: one rank per node
        places = [(i, 1) for i in answered]
    else:
        places = [(i, int(nodes[i].get("Resources", {}).get("GPU", 0))) for i in answered]
        places = [(i, n) for i, n in places if n > 0]
        if not places:
            return {"ok": True, "skipped": "no GPU in the cluster: the NCCL all-reduce needs GPUs", "backend": backend}
    progress(f"all-reduce over {sum(n for _, n in places)} ranks on {len(places)} node(s) ({backend})")
    return allreduce.run(places, backend, names=names)


class Unreachable(Exception):
    pass


def reachable(address: str, timeout: float = CONNECT_S) -> str:
    """The cluster's address, checked to answer: ray.init retries an address where nothing listens for minutes."""
    if address.startswith("ray://"):
        target = address[len("ray://"):]
    else:
        try:
            target = ray._private.services.canonicalize_bootstrap_address(address)
        except (ConnectionError, ValueError):  # `auto` and no cluster started on this machine
            target = None
        if target is None:
            raise Unreachable(f"--ray {address}: no Ray cluster found on this machine (start one with `ray start`, "
                              "or give HOST:PORT)")
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise Unreachable(f"--ray {address}: nothing answers at {target} ({why}); "
                          "is the Ray head running there (`ray status`)?") from None
    return address


def stop_tasks(refs: list, grace_s: float = STOP_GRACE_S) -> None:
    """Stop node tasks still running: interrupted first (their temp folders and check scripts cleaned up on the way
    out), killed after grace_s."""
    pending = [r for r in refs if r not in ray.wait(refs, num_returns=len(refs), timeout=0)[0]]
    for ref in pending:
        ray.cancel(ref, force=False)
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
    for ref in pending:
        ray.cancel(ref, force=True)


def main(argv: list[str]) -> int:
    request_path, out_path = map(Path, argv)
    spec = json.loads(request_path.read_text())
    options = VerifyOptions.from_json(spec["options"])
    address = options.ray or "auto"
    cat = stacks.load(Path(spec["catalog"]))
    lock = Path(spec["lock"]) if spec.get("lock") else None
    request = node.Request(catalog=cat, options=options.for_node().to_json(),
                           lock_name=lock.name if lock else None, lock_text=lock.read_text() if lock else None,
                           families=spec.get("families", []), probes=spec.get("probes"))
    doctor = spec.get("what") == "doctor"
    start = time.monotonic()
    warnings.filterwarnings("ignore", message=".*RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO")  # about a future default
    # A signal to the tool reaches this process group: stop the node tasks and leave nothing behind.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        reachable(address)
    except Unreachable as e:
        print(e)  # the tool shows this line as the error
        return UNREACHABLE
    # verlenv travels to every node through Ray's own runtime_env, beside the job's own (--runtime-env), as verl's
    # code does; the nodes' envs are untouched.
    runtime_env = dict(spec.get("runtime_env") or {})
    runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), os.path.dirname(verlenv.__file__)]
    ray.init(address=address, runtime_env=runtime_env, logging_level="WARNING", log_to_driver=False)
    if spec.get("connected"):  # the tool waits for this file: a cluster that answers but never lets us in is named
        Path(spec["connected"]).touch()
    try:
        nodes = alive_nodes()
        names = labels(nodes)
        progress(f"{len(nodes)} alive node(s): {', '.join(sorted(names.values()))}")
        checked = check_nodes(request, nodes, options.node_timeout, node.doctor if doctor else node.check)
        answered = {i: r for i, r in checked.items() if r["state"] == "checked"}
        reduce = None if doctor else cross_node_allreduce(answered, nodes, options.allreduce, names)
        rows = []
        for node_id in sorted(nodes, key=lambda i: names[i]):
            rows.append({"name": names[node_id], "node_id": node_id,
                         "address": nodes[node_id].get("NodeManagerAddress"),
                         "resources": {k: v for k, v in nodes[node_id].get("Resources", {}).items()
                                       if k in ("CPU", "GPU", "memory")}, **checked[node_id]})
        fingerprints = {row["name"]: row["fingerprint"] for row in rows if row.get("fingerprint")}
        data = {"address": address, "nodes": rows, "differences": compare.differences(fingerprints),
                "placement": compare.placement(fingerprints), "allreduce": reduce}
        if not doctor:
            data["trainer"] = cluster_trainer(data, answered, nodes, names, spec, options)
    finally:
        if RUNNING:
            stop_tasks(list(RUNNING))
        ray.shutdown()
    data["seconds"] = round(time.monotonic() - start, 2)
    out_path.write_text(json.dumps(data, indent=1))
    return 0


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def cluster_trainer(data: dict, answered: dict[str, dict], nodes: dict[str, dict], names: dict[str, str],
                    spec: dict, options: VerifyOptions) -> dict:
    """verl's own trainer across the cluster, once every node passed: the report's `trainer` section."""
    if options.skip_cluster_trainer:
        return {"status": "skipped", "reason": "--skip-cluster-trainer"}
    if not verdict.nodes_pass(data):
        return {"status": "skipped", "reason": "not every node passed (it runs on a cluster whose nodes all pass)"}
    cat = stacks.load(Path(spec["catalog"]))
    variant = cat.variant(options.stack, options.variant)
    return trainer.run(answered, nodes, names, spec, options, variant, progress)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
