"""verl's own trainer, once, across the whole cluster: the proof that verl trains over these nodes.

After every node passed, the driver runs `python -m verl.trainer.main_ppo` with RAY_ADDRESS set to the cluster,
so verl joins it instead of starting its own, with trainer.nnodes = the GPU nodes and trainer.n_gpus_per_node =
the GPUs each holds: the single-node check's tiny model, data, reward, config and pass criteria
(verify/kernels/check_verl_trainer.py, reused, never copied).

No shared filesystem is assumed. A Ray task per node writes the inputs (seeded: every node writes the same bytes)
to one path and returns their digest; verl starts only when every node holds the same inputs. verl's hf_model
checkpoint lands on the node of rank 0: a task per node looks for it and measures the weight change there. A task
per node removes it all afterwards. NVLink multicast stays off in every worker (verl's runtime_env carries the
variables, since a joined cluster's workers do not inherit the driver's environment).
Ray is imported where it is used: deciding what runs where, and the node tasks, need none.
"""

import contextlib
import hashlib
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from verlenv.catalog import backends
from verlenv.verify import user_overrides
from verlenv.verify.kernels import _phases

TIMEOUT_S = 900  # verl's start-up over several nodes (Ray workers, FSDP, one vLLM engine per GPU) plus 2 steps
NODE_TASK_S = 300  # writing the inputs (torch imports on a busy node), finding the checkpoint, cleaning up
# A spec's "trainer_s" and "node_task_s" replace TIMEOUT_S and NODE_TASK_S: a cluster of stand-in nodes sharing two
# loaded cores needs longer than any real node.
BUDGET_S = TIMEOUT_S + 3 * NODE_TASK_S  # the most this module adds to the driver's time
# Variables verl's workers need that a joined cluster does not pass on from the driver's environment: no
# downloads or wandb (the check's own), NVLink multicast off (the check's NCCL_DEFAULTS, added below).
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
LOG_TAIL = 80  # lines of the trainer's output kept in the report when it fails


def check_module():
    """kernels/check_verl_trainer.py as a module (verify.user_overrides loads it)."""
    return user_overrides.trainer_check_module()


def trainer_nodes(answered: dict[str, dict], nodes: dict[str, dict]) -> dict[str, int]:
    """{node id: GPUs} of the nodes verl's trainer runs on: Ray gives the node GPUs and its own check saw them. A
    CPU-only node (often the head) is not a trainer node."""
    gpus = {}
    for node_id, row in answered.items():
        ray_gpus = int(nodes[node_id].get("Resources", {}).get("GPU", 0))
        if ray_gpus and int((row.get("fingerprint") or {}).get("gpu:count") or 0):
            gpus[node_id] = ray_gpus
    return gpus


def uneven(gpus: dict[str, int], names: dict[str, str]) -> str | None:
    """Why one verl job cannot use these nodes as they are, if their GPU counts differ."""
    if len(set(gpus.values())) <= 1:
        return None
    counts = ", ".join(f"{names[i]}: {n}" for i, n in sorted(gpus.items(), key=lambda kv: names[kv[0]]))
    return (f"the GPU nodes hold different GPU counts ({counts}); verl's trainer.n_gpus_per_node is one number for "
            "every node (--skip-cluster-trainer leaves this job out)")


def worker_env(job_env_vars: dict | None) -> dict[str, str]:
    """What every verl worker gets through verl's runtime_env: the check's settings, then the job's own
    (--runtime-env)."""
    return {**check_module().NCCL_DEFAULTS, **WORKER_ENV, **{k: str(v) for k, v in (job_env_vars or {}).items()}}


def _hydra_string(value: str) -> str:
    """A value as a quoted Hydra string: `0` stays the string "0" (Ray wants env_vars as strings)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def trainer_spec(variant) -> dict:
    """What the check's trainer runs in this variant: its actor's and rollout's rows and the env's overrides."""
    rows = backends.table()
    return {"actor": rows.actor(variant.actor).row(), "rollout": rows.rollout(variant.rollout).row(),
            "overrides": dict(variant.trainer_overrides)}


def command(python: str, paths: dict, spec: dict, family: dict, nnodes: int, n_gpus_per_node: int,
            env: dict[str, str], **proof) -> list[str]:
    """The check's own command for one family on nnodes x n_gpus_per_node (spec: trainer_spec(); proof: its
    thorough, rollout_tp, actor_tp), plus the workers' variables in verl's runtime_env
    (`ray_kwargs.ray_init.runtime_env`, merged by verl on top of its defaults)."""
    return [*check_module().command(python, paths, spec, family, nnodes=nnodes, n_gpus_per_node=n_gpus_per_node,
                                    **proof),
            *(f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={_hydra_string(v)}" for k, v in sorted(env.items()))]


# ---- run on each node, inside a Ray worker of the node's own env ----

def tree_digest(root: str) -> str:
    """sha256 over every file under root: its path relative to root and its bytes."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()


def write_inputs_here(base: str, gpus: int, family: dict) -> dict:
    """Write the check's inputs of one family for `gpus` GPUs in all to `base` on this node, unless a node sharing
    this filesystem (another raylet of the same host) did: into a temp sibling, then one rename. Returns their layout
    (paths relative to base) and digest."""
    import torch

    check = check_module()
    os.makedirs(os.path.dirname(base), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(base)}.", dir=os.path.dirname(base))
    try:
        written = check.write_inputs(tmp, torch, family, check.rows_needed(gpus))
        layout = {k: os.path.relpath(v, tmp) for k, v in written.items() if isinstance(v, str)}
        try:
            os.rename(tmp, base)
        except OSError:
            if not os.path.isdir(base):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"host": socket.gethostname(), "layout": layout, "digest": tree_digest(base)}


def weights_here(base: str, layout: dict) -> dict | None:
    """The weight change of verl's hf_model checkpoint against the initial model, where the checkpoint is on this
    node (rank 0's); None elsewhere."""
    check = check_module()
    actor = os.path.join(base, layout["checkpoints"], f"global_step_{check.STEPS}", "actor")
    final = check.hf_checkpoint(actor)
    if final is None:
        return None
    import torch

    try:
        return {"host": socket.gethostname(), "checkpoint": final,
                **check.weight_change(torch, os.path.join(base, layout["model"]), final)}
    except Exception as e:  # a checkpoint it cannot read: the job did not leave what it should have
        return {"host": socket.gethostname(), "checkpoint": final, "error": f"{type(e).__name__}: {e}"}


def remove_here(base: str) -> bool:
    existed = os.path.isdir(base)
    shutil.rmtree(base, ignore_errors=True)
    return existed


# ---- the driver's side ----

def on_each(fn, node_ids: list[str], *args, timeout: float = NODE_TASK_S) -> dict[str, object]:
    """{node id: fn(*args) as that node ran it, or the exception it raised}, all nodes at once, within timeout."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(fn)
    refs = {i: task.options(num_cpus=0, max_retries=0, name=f"verlenv-trainer-{fn.__name__}",
                            scheduling_strategy=NodeAffinitySchedulingStrategy(i, soft=False)).remote(*args)
            for i in node_ids}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    out = {}
    for node_id, ref in refs.items():
        if ref not in ready:
            ray.cancel(ref, force=True)
            out[node_id] = TimeoutError(f"no answer within {timeout:g} s")
            continue
        try:
            out[node_id] = ray.get(ref)
        except Exception as e:  # a node that died or a task that failed: named in the report
            out[node_id] = e
    return out


def _error(e: Exception) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {(lines[-1] if lines else '')[:300]}"


@dataclass(frozen=True)
class TrainerRun:
    """One run of verl's trainer across a cluster: where its inputs go, what it trains, on which nodes."""
    base: str  # the inputs' folder, the same path on every node
    spec: dict  # the cluster run's spec (time limits, the trainer's log, the job's runtime_env)
    options: object  # the verify options (thorough, rollout_tp, actor_tp, ray, trainer_override)
    variant: object
    family: dict
    gpus: dict[str, int]  # node id: its GPUs, every GPU node alike
    everywhere: list[str]  # every node id: verl's TaskRunner and reward workers may land on any
    names: dict[str, str]  # node id: its name in the report
    progress: Callable[[str], None]

    @property
    def gpus_per_node(self) -> int:
        return next(iter(self.gpus.values()))

    @property
    def node_task_s(self) -> float:
        return self.spec.get("node_task_s", NODE_TASK_S)


def run(answered: dict[str, dict], nodes: dict[str, dict], names: dict[str, str], spec: dict, options, variant,
        progress=lambda line: None) -> dict:
    """verl's trainer across the GPU nodes of a cluster whose every node passed, for the run's first family (the
    nodes' own checks train every family): the report's `trainer` section."""
    gpus = trainer_nodes(answered, nodes)
    if not gpus:
        return {"status": "skipped", "reason": "no GPU node in the cluster: verl's trainer needs GPUs"}
    if why := uneven(gpus, names):
        return {"status": "refused", "reason": why}
    start = time.monotonic()
    base = os.path.join(tempfile.gettempdir(), f"verlenv-cluster-trainer-{uuid.uuid4().hex[:12]}")
    everywhere = sorted(answered)  # verl's TaskRunner and reward workers may land on any node, CPU-only ones too
    family = spec["families"][0]
    out = {"nnodes": len(gpus), "n_gpus_per_node": next(iter(gpus.values())), "nodes": sorted(names[i] for i in gpus),
           "inputs": base, "family": family["name"]}
    if getattr(options, "trainer_override", ()):
        out["user_overrides"] = list(options.trainer_override)  # the compat matrix passes such a run over
    job = TrainerRun(base, spec, options, variant, family, gpus, everywhere, names, progress)
    try:
        out.update(_stage_and_train(job))
    except Exception as e:  # the job broke (a node lost mid-way, an error of Ray's): the nodes' report still stands
        out.update(status="fail", problems=[f"the cluster job broke: {_error(e)}"])
    finally:
        removed = on_each(remove_here, everywhere, base, timeout=spec.get("node_task_s", NODE_TASK_S))
    out["cleaned"] = sorted(names[i] for i, r in removed.items() if not isinstance(r, Exception))
    out["seconds"] = round(time.monotonic() - start, 1)
    return out


def _stage_and_train(job: TrainerRun) -> dict:
    names = job.names
    job.progress(f"verl's trainer: writing its inputs ({job.family['name']}) to {job.base} on "
                 f"{len(job.everywhere)} node(s)")
    written = on_each(write_inputs_here, job.everywhere, job.base, len(job.gpus) * job.gpus_per_node, job.family,
                      timeout=job.node_task_s)
    bad = {names[i]: _error(r) for i, r in written.items() if isinstance(r, Exception)}
    digests = {names[i]: r["digest"] for i, r in written.items() if not isinstance(r, Exception)}
    if bad or len(set(digests.values())) != 1:
        why = (f"writing the inputs failed on {', '.join(f'{n} ({e})' for n, e in bad.items())}" if bad else
               "the nodes wrote different inputs from one seed (another torch, transformers or pyarrow?)")
        return {"status": "fail", "input_digests": digests, "problems": [why]}
    layout = next(iter(written.values()))["layout"]
    paths = {k: os.path.join(job.base, v) for k, v in layout.items()}
    return {"input_digests": digests, **_train(job, paths, layout)}


def _train(job: TrainerRun, paths: dict, layout: dict) -> dict:
    import ray

    check = check_module()
    spec, options, names = job.spec, job.options, job.names
    env = worker_env((spec.get("runtime_env") or {}).get("env_vars"))
    proof = {"thorough": options.thorough, "rollout_tp": options.rollout_tp, "actor_tp": options.actor_tp}
    trainer = {**trainer_spec(job.variant), "user_overrides": list(getattr(options, "trainer_override", ()))}
    cmd = command(sys.executable, paths, trainer, job.family, len(job.gpus), job.gpus_per_node, env, **proof)
    log = spec["trainer_log"]
    os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
    given = options.ray or "auto"
    address = given if given.startswith("ray://") else ray.get_runtime_context().gcs_address
    job.progress(f"verl's trainer: {len(job.gpus)} node(s) x {job.gpus_per_node} GPU(s) on {address}; log {log}")
    # A fresh, empty working folder on this machine: it is on the trainer's sys.path, so nothing there may shadow.
    with tempfile.TemporaryDirectory(prefix="verlenv-trainer-run-") as cwd, open(log, "w") as sink:
        # run_trainer echoes every line: into the log as it comes (readable while verl runs), then the log is
        # replaced by the same lines with their arrivals (the check's timed log, which its phase reader reads).
        # RAY_ADDRESS: verl's ray.init() joins this cluster instead of starting one.
        with contextlib.redirect_stdout(sink):
            lines, code, walls = check.run_trainer(cmd, cwd, timeout=spec.get("trainer_s", TIMEOUT_S),
                                                   ray_address=address, log_env=trainer["rollout"].get("log_env"))
    _phases.write_timed_log(log, lines, walls["launch_wall"])
    texts = [line.text for line in lines]
    found = {i: r for i, r in on_each(weights_here, job.everywhere, job.base, layout, timeout=job.node_task_s).items()
             if r is not None and not isinstance(r, Exception)}
    weights = next((r for r in found.values() if "error" not in r), None)
    steps = check.parse_metrics(texts)
    metrics, problems = check.judge(steps, None if weights is None else
                                    {k: weights[k]
                                     for k in ("weights_rel_change", "tensors_changed", "tensors_compared")})
    if code is None:
        problems.insert(0, f"verl's trainer did not finish in {spec.get('trainer_s', TIMEOUT_S):g} s")
    elif code != 0:
        problems.insert(0, f"verl's trainer exited with {code}: {check.failure_line(texts)[:300]}")
    problems += [f"verl's checkpoint on {names[i]} could not be read: {r['error']}" for i, r in found.items()
                 if "error" in r and weights is None]
    # Where the time went, read by the check's own phase reader: verl's start-up markers, the rollout server's
    # parts, each step's timing_s/* parts, the total.
    phases = _phases.phases(lines, walls["launch_wall"], walls["wall_s"] if code is not None else None, steps,
                            wall_s=walls["wall_s"], rollout=trainer["rollout"])
    return {"status": "fail" if problems else "pass", "command": cmd, "exit_code": code,
            "metrics": metrics, "problems": problems, "phases": {**phases, "first_metrics_s": walls["first_metrics_s"]},
            "checkpoint_node": next((names[i] for i, r in found.items() if r is weights), None), "log": log,
            **({"log_tail": texts[-LOG_TAIL:]} if problems else {})}
