"""Test double of verl's GPU trainer: verl's own run_ppo (ray.init with its runtime_env, joining the cluster named by
RAY_ADDRESS) with a stand-in TaskRunner in place of training, which needs GPUs."""
import json
import os
import sys

import ray
import verl
from hydra import compose, initialize_config_dir
from verl.trainer.main_ppo import run_ppo

argv = sys.argv[1:]
name = argv[argv.index("--config-name") + 1]
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    config = compose(config_name=name, overrides=[a for a in argv if a not in ("--config-name", name)])
SEEN = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "HF_HUB_OFFLINE", "JOB_SETTING")


@ray.remote(num_cpus=0, num_gpus=1)
class Worker:
    def look(self, model, reward):
        return {"node": ray.get_runtime_context().get_node_id(), "env": {k: os.environ.get(k) for k in SEEN},
                "inputs": os.path.isfile(os.path.join(model, "model.safetensors")) and os.path.isfile(reward)}

    def save(self, model, out):
        from safetensors.torch import load_file, save_file
        tensors = load_file(os.path.join(model, "model.safetensors"))
        os.makedirs(out)
        # A step's change that bf16 keeps at any magnitude (the check scales the final norm to a few units).
        save_file({k: (v.float() * 1.05 + 0.01).to(v.dtype) for k, v in tensors.items()},
                  os.path.join(out, "model.safetensors"))


@ray.remote(num_cpus=0)
class StandInTaskRunner:
    def run(self, config):
        if os.environ.get("JOB_SETTING") == "fail":
            raise ValueError("the stand-in was told to fail")
        from verl.utils.logger.aggregate_logger import LocalLogger
        workers = [Worker.remote() for _ in range(config.trainer.nnodes * config.trainer.n_gpus_per_node)]
        model, reward = config.actor_rollout_ref.model.path, config.reward.custom_reward_function.path
        looks = ray.get([w.look.remote(model, reward) for w in workers])
        print("STANDIN " + json.dumps({"gcs": ray.get_runtime_context().gcs_address, "looks": looks}), flush=True)
        steps = config.trainer.total_training_steps
        actor = os.path.join(config.trainer.default_local_dir, f"global_step_{steps}", "actor", "huggingface")
        ray.get(workers[0].save.remote(model, actor))  # rank 0 saves the hf_model part
        for step in range(1, steps + 1):
            LocalLogger().log({"actor/pg_loss": -0.01, "actor/grad_norm": 0.9, "timing_s/step": 1.5,
                               "timing_s/gen": 0.5, "training/rollout_actor_probs_pearson_corr": 0.9999,
                               "training/rollout_probs_diff_mean": 0.0004}, step=step)


run_ppo(config, StandInTaskRunner)
