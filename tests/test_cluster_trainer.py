"""verl's trainer once across the cluster (cluster/trainer.py), on this CPU machine.

- Which nodes it runs on and when it refuses, its command, the workers' variables, its report lines: plain Python.
- Its config for N nodes x G GPUs, composed by Hydra from verl's own ppo_trainer / ppo_megatron_trainer and
  validated by verl's own validate_config; the workers' variables merged as verl's run_ppo merges them and
  checked by Ray's own RuntimeEnv: in the default env.
- The inputs every node writes (the same bytes from the same seed, one folder when nodes share a filesystem), the
  checkpoint lookup and the cleanup: in the default env.
- The whole flow on a real 3-node Ray cluster (conftest's gpu_cluster: a CPU head, two workers with one GPU each in
  Ray's view, shared with the placement tests): inputs written by a Ray task per node, verl's own run_ppo joining
  the running cluster through RAY_ADDRESS with the workers' variables in its runtime_env, the checkpoint found where
  rank 0 wrote it, the judging, the log, the cleanup on every node. GPU training cannot run here, so a stand-in
  TaskRunner (a test double, named so) takes verl's place inside run_ppo: it places one worker per GPU, checks what
  each sees, writes an hf checkpoint from rank 0 and prints its metrics with verl's own console logger.
Needs the default env (VERLENV_CLUSTER_ENV=<its python>) for all but the first part.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from verlenv.catalog import families, stacks
from verlenv.cluster import launch, trainer, verdict

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PROGRAMS = Path(__file__).parent / "data" / "programs"
JOBS_GUARD_S = 7200  # a hang guard for a run of stand-in jobs on nodes that share two loaded cores


def node(gpus: int) -> dict:
    return {"Resources": {"CPU": 8.0, **({"GPU": float(gpus)} if gpus else {})}}


def seen(gpus: int) -> dict:
    return {"state": "checked", "fingerprint": {"gpu:count": str(gpus)}}


NAMES = {"h": "10.0.0.1", "a": "10.0.0.2", "b": "10.0.0.3"}


def test_trainer_nodes_are_the_gpu_nodes_a_cpu_head_is_not_one():
    nodes = {"h": node(0), "a": node(8), "b": node(8)}
    assert trainer.trainer_nodes({"h": seen(0), "a": seen(8), "b": seen(8)}, nodes) == {"a": 8, "b": 8}
    # Ray's GPU resource alone (a CPU node started with --num-gpus) is not a GPU the checks saw.
    assert trainer.trainer_nodes({"h": seen(0), "a": seen(0), "b": seen(0)}, nodes) == {}


def test_no_gpu_node_skips_and_uneven_gpu_counts_refuse_with_one_line():
    answered = {"h": seen(0), "a": seen(8), "b": seen(4)}
    nodes = {"h": node(0), "a": node(8), "b": node(4)}
    result = trainer.run(answered, nodes, NAMES, {}, None, None)
    assert result == {"status": "refused",
                      "reason": "the GPU nodes hold different GPU counts (10.0.0.2: 8, 10.0.0.3: 4); "
                                "verl's trainer.n_gpus_per_node is one number for every node (--skip-cluster-trainer "
                                "leaves this job out)"}
    assert trainer.run({"h": seen(0)}, {"h": node(0)}, NAMES, {}, None, None) == {
        "status": "skipped", "reason": "no GPU node in the cluster: verl's trainer needs GPUs"}


def test_every_worker_gets_nvlink_multicast_off_and_the_jobs_own_variables():
    env = trainer.worker_env({"NCCL_SOCKET_IFNAME": "ib0", "WANDB_MODE": "online", "RETRIES": 3})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and env["WANDB_MODE"] == "online" and env["RETRIES"] == "3"
    paths = {"model": "/t/model", "data": "/t/d.parquet", "reward": "/t/r.py", "checkpoints": "/t/c", "run": "/t/run"}
    spec = trainer.trainer_spec(stacks.load(ROOT / "stacks.toml").variant("verl-0.9", "fsdp"))
    llama = families.table().rows(families.table().select(["llama"], False))[0]
    cmd = trainer.command("python", paths, spec, llama, 4, 8, {"A": "it's", "NCCL_NVLS_ENABLE": "0"})
    assert cmd[:5] == ["python", "-m", "verl.trainer.main_ppo", "--config-name", "ppo_trainer"]
    assert "trainer.nnodes=4" in cmd and "trainer.n_gpus_per_node=8" in cmd and "data.train_batch_size=256" in cmd
    assert cmd[-2:] == ["+ray_kwargs.ray_init.runtime_env.env_vars.A='it\\'s'",
                        "+ray_kwargs.ray_init.runtime_env.env_vars.NCCL_NVLS_ENABLE='0'"]


def test_the_tool_waits_for_the_trainers_whole_budget():
    assert launch.TRAINER_S == trainer.BUDGET_S


GOOD = {"nodes": [{"name": "a", "state": "checked", "results": []}], "differences": [], "allreduce": None}


@pytest.mark.parametrize("status, code", [("pass", 0), ("skipped", 0), ("fail", 1), ("refused", 1)])
def test_the_trainer_is_judged_in_the_exit_code(status, code):
    assert verdict.exit_code({**GOOD, "trainer": {"status": status}}) == code


@pytest.mark.parametrize("change", [
    lambda d: d["nodes"].append({"name": "b", "state": "hung", "error": "no answer"}),
    lambda d: d["differences"].append({"fact": "record:torch"}),
    lambda d: d.update(allreduce={"ok": False}),
    lambda d: d.update(nodes=[]),
])
def test_the_trainer_runs_only_on_a_cluster_whose_nodes_all_pass(change):
    data = json.loads(json.dumps(GOOD))
    assert verdict.nodes_pass(data)
    change(data)
    assert not verdict.nodes_pass(data)


def test_skip_cluster_trainer_reaches_the_cluster_run(monkeypatch):
    from verlenv.cli import main
    from verlenv.cluster import address

    seen = {}
    # No cluster here: the address's probe and the cluster run are test doubles that record what they were given.
    monkeypatch.setattr(address, "probe", lambda where: None)
    monkeypatch.setattr(launch, "verify_cluster",
                        lambda cat, variant, python, lock, options, families, *rest: seen.update(
                            options=options, families=families, variant=variant.name) or 0)
    assert main(["verify", "--ray", "127.0.0.1:1", "--python", sys.executable, "--no-lock",
                 "--skip-cluster-trainer"]) == 0
    assert seen["options"].skip_cluster_trainer is True
    assert main(["verify", "--ray", "127.0.0.1:1", "--python", sys.executable, "--no-lock"]) == 0
    o = seen["options"]
    assert o.skip_cluster_trainer is False and (o.thorough, o.rollout_tp, o.actor_tp) == (False, 1, 1)
    assert [f["name"] for f in seen["families"]] == ["llama"]
    assert main(["verify", "--ray", "127.0.0.1:1", "--python", sys.executable, "--no-lock", "--variant", "megatron",
                 "--thorough", "--rollout-tp", "2", "--actor-tp", "2"]) == 0
    o = seen["options"]
    assert (o.thorough, o.rollout_tp, o.actor_tp, seen["variant"]) == (True, 2, 2, "megatron")
    assert len(seen["families"]) == len(families.table().names())  # --thorough trains every family


def test_the_report_shows_the_trainer_run():
    ran = {"status": "fail", "nnodes": 2, "n_gpus_per_node": 1, "nodes": ["127.0.0.1", "127.0.0.2"], "seconds": 128.4,
           "metrics": {"step1_step_s": 55.0, "step2_step_s": 3.2, "step1_pearson": 0.99997, "step2_pearson": 0.9,
                       "step1_grad_norm": 12.2, "step2_grad_norm": 11.0, "weights_rel_change": 0.0031},
           "phases": {"phase/ray_init_s": 12.04, "phase/rollout_server_s": 50.0,
                      "phase/rollout_server/model_load_s": 3.0, "phase/step1_s": 55.0, "phase/step2_s": 3.2,
                      "phase/total_s": 128.4},
           "checkpoint_node": "127.0.0.1",
           "problems": ["step 2: rollout/actor probability correlation 0.90000 below 0.99"], "log": "/r/x.trainer.log"}
    console = Console(record=True, width=250)
    launch.trainer_report(ran, console)
    text = console.export_text()
    assert "verl's trainer across the cluster (2 node(s) x 1 GPU(s): 127.0.0.1, 127.0.0.2): FAIL in 128 s" in text
    assert "steps 55.0, 3.2 s; rollout/actor pearson 0.99997, 0.90000; grad norm 12.2, 11" in text
    assert "phases (s): ray_init 12.0, rollout_server 50.0, step1 55.0, step2 3.2; total 128" in text
    assert "weights changed by 0.0031 (checkpoint on 127.0.0.1)" in text and "correlation 0.90000 below" in text
    assert "log: /r/x.trainer.log" in text
    console = Console(record=True, width=250)
    launch.trainer_report({"status": "skipped", "reason": "--skip-cluster-trainer"}, console)
    assert console.export_text().strip() == "verl's trainer across the cluster: skipped (--skip-cluster-trainer)"


def in_env(python: str, program: Path, *args, timeout: float = 600) -> dict:
    """Run one of tests/data/programs in the env: its last line of output, as JSON."""
    proc = subprocess.run([python, str(program), str(SRC), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_config_for_n_nodes_by_g_gpus_is_one_verl_accepts(verl_composed):
    # tests/data/programs/cluster_trainer_compose.py, run in the default env (conftest's verl_composed).
    out = verl_composed["cluster"]
    for (nnodes, gpus) in ((2, 1), (2, 8), (3, 2), (4, 8)):
        for variant in ("fsdp", "megatron"):
            cfg = out[f"{variant} {nnodes}x{gpus}"]
            assert (cfg["nnodes"], cfg["gpus"], cfg["strategy"]) == (nnodes, gpus, variant)
            assert cfg["batch"] == 8 * nnodes * gpus and cfg["mini"] == cfg["batch"] // 2
            env = cfg["env"]
            assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
            assert env["NVSHMEM_DISABLE_NVLS"] == "1" and env["HF_HUB_OFFLINE"] == "1" and env["JOB"] == "7"
            assert env["TOKENIZERS_PARALLELISM"] == "true"  # verl's own defaults are kept beside them
    assert out["fsdp proof"] == {"rollout_tp": 2, "eager": False, "actor_tp": None}  # thorough: verl's CUDA graphs
    assert out["megatron proof"] == {"rollout_tp": 1, "eager": True, "actor_tp": 2}


# A program run in the env; its docstring says what it does.
STAGE = PROGRAMS / "cluster_trainer_stage.py"


@pytest.mark.slow
def test_every_node_writes_the_same_inputs_and_the_checkpoint_is_measured_where_it_is(env_python, tmp_path):
    out = in_env(env_python, STAGE, tmp_path)
    digests = {r["digest"] for r in out["results"]}
    assert len(digests) == 1, out["results"]
    assert out["results"][0]["layout"] == {"model": "model", "data": "train.parquet",
                                           "reward": "verlenv_check_reward.py", "checkpoints": "checkpoints",
                                           "run": "run"}
    assert out["before"] is None  # no checkpoint on this node
    assert out["after"]["tensors_changed"] == 0 and out["after"]["weights_rel_change"] == 0.0
    assert out["after"]["checkpoint"].endswith("global_step_2/actor/huggingface")
    assert out["removed"] == [True, False] and out["left"] == []  # no temp sibling left by the node that lost the race


# A program run in the env; its docstring says what it does.
STANDIN = PROGRAMS / "standin_main_ppo.py"


# A program run in the env; its docstring says what it does.
DRIVE = PROGRAMS / "cluster_trainer_drive.py"


@pytest.fixture(scope="module")
def cluster_jobs(gpu_cluster, env_python, tmp_path_factory) -> tuple[dict, dict, dict]:
    """Two cluster jobs, one driver, one after the other: the stand-in trains ("on"), then it raises ("fail").
    Returns (results by setting, node names, log paths by setting)."""
    logs = {setting: tmp_path_factory.mktemp(f"cluster-job-{setting}") / "report.trainer.log"
            for setting in ("on", "fail")}
    out = in_env(env_python, DRIVE, gpu_cluster.address, STANDIN, *(f"{s}={log}" for s, log in logs.items()),
                 timeout=JOBS_GUARD_S)
    return out["results"], out["names"], logs


@pytest.mark.slow
@pytest.mark.timeout(JOBS_GUARD_S)
def test_the_cluster_job_joins_the_cluster_and_is_judged(cluster_jobs, gpu_cluster):
    results, names, logs = cluster_jobs
    result, log = results["on"], logs["on"]
    workers = sorted(n for n in names.values() if n in gpu_cluster.workers)
    assert result["status"] == "pass", json.dumps(result, indent=1)[-4000:]
    assert (result["nnodes"], result["n_gpus_per_node"], result["nodes"]) == (2, 1, workers)
    assert len(result["input_digests"]) == 3 and len(set(result["input_digests"].values())) == 1
    text = log.read_text()
    standin_line = next(line for line in text.splitlines() if "STANDIN " in line)
    seen = json.loads(standin_line.split("STANDIN ", 1)[1])
    # verl joined the running cluster, it did not start its own: its workers ran on this cluster's GPU nodes.
    assert seen["gcs"].rsplit(":", 1)[1] == str(gpu_cluster.port)
    assert sorted(names[look["node"]] for look in seen["looks"]) == workers
    for look in seen["looks"]:  # through verl's runtime_env: a joined cluster's workers get nothing else
        assert look["env"] == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                               "NVSHMEM_DISABLE_NVLS": "1", "HF_HUB_OFFLINE": "1", "JOB_SETTING": "on"}
        assert look["inputs"]
    m = result["metrics"]
    assert m["step1_pearson"] == m["step2_pearson"] == 0.9999 and m["weights_rel_change"] > 0
    assert m["tensors_changed"] == m["tensors_compared"] > 0 and result["checkpoint_node"] in names.values()
    # The check's own phase reader: verl's step timers as each step's parts.
    assert result["phases"]["phase/step1/gen_s"] == 0.5 and result["phases"]["first_metrics_s"] > 0
    assert result["log"] == str(log) and text.startswith("# verlenv trainer log: launch_wall=") and "step:2 - " in text
    assert sorted(result["cleaned"]) == sorted(names.values()) and not Path(result["inputs"]).exists()
    assert result["problems"] == [] and "log_tail" not in result


@pytest.mark.slow
@pytest.mark.timeout(JOBS_GUARD_S)
def test_a_failing_cluster_job_names_the_innermost_exception_and_still_cleans_up(cluster_jobs):
    result = cluster_jobs[0]["fail"]
    assert result["status"] == "fail" and result.get("exit_code") == 1, json.dumps(result, indent=1)[-4000:]
    assert result["problems"][0] == "verl's trainer exited with 1: ValueError: the stand-in was told to fail"
    assert "verl logged no metrics for step 1" in result["problems"]
    assert "verl saved no hf_model checkpoint to compare the weights with" in result["problems"]
    assert result["log_tail"] and not Path(result["inputs"]).exists()


# A program run in the env; its docstring says what it does.
NODE_CHECK = PROGRAMS / "cluster_node_trainer_check.py"


@pytest.mark.slow
@pytest.mark.timeout(JOBS_GUARD_S)
def test_a_nodes_own_trainer_check_starts_a_ray_of_its_own_inside_a_cluster(gpu_cluster, env_python):
    out = in_env(env_python, NODE_CHECK, gpu_cluster.address, timeout=JOBS_GUARD_S)
    assert out["code"] == 0 and len(out["gcs"]) == 1, out
    assert out["gcs"][0] != out["cluster"], f"the node's check joined the cluster {out['cluster']}"
