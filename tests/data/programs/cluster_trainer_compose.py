"""verl's own config, composed by Hydra with the cluster job's command line for N nodes x G GPUs, then verl's own
checks of it, and the runtime_env that verl's run_ppo would hand to ray.init, checked by Ray's RuntimeEnv."""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from ray.runtime_env import RuntimeEnv
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from verlenv.catalog import families, stacks
from verlenv.cluster import trainer

paths = {k: f"/tmp/verlenv-cluster-trainer-x/{k}" for k in ("model", "data", "reward", "checkpoints", "run")}
CATALOG = stacks.load(os.path.join(os.path.dirname(sys.argv[1]), "stacks.toml"))
LLAMA = families.table().rows(families.table().select(["llama"], False))[0]


def spec(variant):
    return trainer.trainer_spec(CATALOG.variant("verl-0.9", variant))


out = {}
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    for variant in ("fsdp", "megatron"):
        for nnodes, gpus in ((2, 1), (2, 8), (3, 2), (4, 8)):
            cmd = trainer.command(sys.executable, paths, spec(variant), LLAMA, nnodes, gpus,
                                  trainer.worker_env({"JOB": "7"}))
            cfg = compose(config_name=cmd[4], overrides=cmd[5:])
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
            # As run_ppo merges them before ray.init (verl/trainer/main_ppo.py).
            merged = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(cfg),
                                                            cfg.ray_kwargs.ray_init.runtime_env))
            RuntimeEnv(**{k: v for k, v in merged.items() if v is not None})
            out[f"{variant} {nnodes}x{gpus}"] = {
                "nnodes": cfg.trainer.nnodes, "gpus": cfg.trainer.n_gpus_per_node,
                "batch": cfg.data.train_batch_size, "mini": cfg.actor_rollout_ref.actor.ppo_mini_batch_size,
                "strategy": cfg.actor_rollout_ref.actor.strategy, "env": merged["env_vars"]}
    # verify --ray --thorough --rollout-tp 2 / --actor-tp 2: the same keywords as the one-node check.
    for variant, proof in (("fsdp", {"rollout_tp": 2, "thorough": True}), ("megatron", {"actor_tp": 2})):
        cmd = trainer.command(sys.executable, paths, spec(variant), LLAMA, 2, 2, trainer.worker_env({}), **proof)
        cfg = compose(config_name=cmd[4], overrides=cmd[5:])
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        out[f"{variant} proof"] = {"rollout_tp": cfg.actor_rollout_ref.rollout.tensor_model_parallel_size,
                                   "eager": cfg.actor_rollout_ref.rollout.enforce_eager,
                                   "actor_tp": (cfg.actor_rollout_ref.actor.megatron.tensor_model_parallel_size
                                                if variant == "megatron" else None)}
print(json.dumps(out))
