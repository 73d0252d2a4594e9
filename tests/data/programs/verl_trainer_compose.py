"""Runs in an env with verl and vLLM: verl's own Hydra config composed (as main_ppo composes it) with the check's
overrides, fast and thorough, for each size a cluster may ask for; validated by verl's own checks; and the fast
proof's vLLM settings passed the way verl's vLLM server passes them, through vLLM's own argument parser."""
import json
import os
import sys

KERNELS, OUT, SRC = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, KERNELS)
import check_verl_trainer as t

# What verify hands the check for each variant (its actor's and rollout's rows, the env's overrides) and the family.
sys.path.insert(0, SRC)
from verlenv.catalog import families, stacks
from verlenv.cluster.trainer import trainer_spec

CATALOG = stacks.load(os.path.join(os.path.dirname(SRC), "stacks.toml"))
SPECS = {v: trainer_spec(CATALOG.variant("verl-0.9", v)) for v in ("fsdp", "megatron")}
LLAMA, GPT_OSS = families.table().rows(families.table().select(["llama", "gpt-oss"], False))
# A user's own overrides (--trainer-override): one of a key the env sets (megatron's TE attention backend), one of a
# key the family adds with ++ (gpt-oss's eager attention; Hydra refuses a second + of one key), one new.
USER = ["actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend=flash",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_bias_update_rate=0"]

import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

SIZES = [dict(), dict(n_gpus_per_node=2), dict(n_gpus_per_node=2, rollout_tp=2), dict(nnodes=2),
         dict(nnodes=2, n_gpus_per_node=4), dict(nnodes=2, n_gpus_per_node=4, rollout_tp=2)]
MEGATRON_ONLY = [dict(n_gpus_per_node=2, actor_tp=2), dict(nnodes=2, n_gpus_per_node=4, rollout_tp=2, actor_tp=2)]
paths = {"model": "/m", "data": "/d.parquet", "reward": "/r.py", "checkpoints": "/c", "run": "/w"}


def pick(cfg, key):
    return OmegaConf.select(cfg, key)


out = []
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    for variant in ("fsdp", "megatron"):
        for sizes in SIZES + (MEGATRON_ONLY if variant == "megatron" else []):
            for thorough in (False, True):
                cfg = compose(config_name=SPECS[variant]["actor"]["config_name"],
                              overrides=t.overrides(paths, SPECS[variant], LLAMA, thorough=thorough, **sizes))
                validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg),
                                use_critic=need_critic(cfg))
                rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
                OmegaConf.resolve(cfg)  # as TaskRunnerV1.run does: every interpolation must resolve
                keys = ["trainer.nnodes", "trainer.n_gpus_per_node", "data.train_batch_size",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size",
                        "actor_rollout_ref.rollout.n_gpus_per_node",
                        "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.cudagraph_capture_sizes",
                        "actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers",
                        "data.dataloader_num_workers",
                        "actor_rollout_ref.actor.use_torch_compile",
                        "actor_rollout_ref.actor.fsdp_config.use_torch_compile",
                        "actor_rollout_ref.ref.fsdp_config.use_torch_compile",
                        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                        "actor_rollout_ref.ref.megatron.tensor_model_parallel_size", "actor_rollout_ref.actor.strategy",
                        "actor_rollout_ref.actor.ppo_mini_batch_size"]
                out.append({"variant": variant, "sizes": sizes, "thorough": thorough,
                            "values": {k: pick(cfg, k) for k in keys},
                            "vllm_engine_kwargs": dict(rollout.engine_kwargs.get("vllm") or {})})
    cfg = compose(config_name=SPECS["megatron"]["actor"]["config_name"],
                  overrides=t.overrides(paths, {**SPECS["megatron"], "user_overrides": USER}, GPT_OSS))
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    user = {k: pick(cfg, k) for k in ("actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend",
                                      "actor_rollout_ref.model.override_config.attn_implementation",
                                      "actor_rollout_ref.actor.megatron.override_transformer_config."
                                      "moe_router_bias_update_rate", "trainer.total_training_steps")}

# The fast proof's vLLM settings, as verl's vLLM server hands them to vLLM (vllm_async_server.py: its args dict
# with engine_kwargs spread in, build_cli_args_from_config, vLLM's own parser).
import vllm.platforms
from vllm.platforms.cpu import CpuPlatform

# Test double: vLLM's parser asks the platform for a device type, and the CUDA platform needs libcuda; the parse
# itself is the same on any platform.
vllm.platforms._current_platform = CpuPlatform()
from verl.workers.rollout.vllm_rollout.utils import build_cli_args_from_config
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser

fast = next(c for c in out if c["variant"] == "fsdp" and not c["thorough"])
args = {"enforce_eager": fast["values"]["actor_rollout_ref.rollout.enforce_eager"], **fast["vllm_engine_kwargs"]}
parsed = AsyncEngineArgs.from_cli_args(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(
    ["--model", "/m", *build_cli_args_from_config(args)]))
json.dump({"cases": out, "user": user, "vllm": {"enforce_eager": parsed.enforce_eager,
                                                "kv_cache_memory_bytes": parsed.kv_cache_memory_bytes}}, open(OUT, "w"))
