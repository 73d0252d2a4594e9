"""Run in an env with verl 0.9.1 and SGLang (the sglang variant's): verl's own Hydra config composed (as main_ppo
composes it) with the trainer check's overrides for the sglang variant, fast and thorough, for the sizes a node or a
cluster may ask for, validated by verl's own checks; then verl's own SGLang server (SGLangHttpServer.__init__ and
launch_server, verl/workers/rollout/sglang_rollout/async_sglang_server.py) maps each mode's rollout config to its
engine arguments, and SGLang's own ServerArgs takes them (device cpu: the accelerator probe is the only GPU part of
its __post_init__). Prints one JSON object.

argv: the kernel folder, a scratch folder, a JSON file {"specs": {variant: trainer spec}, "families": {name: row}}.
"""

import asyncio
import dataclasses
import json
import os
import sys

KERNELS, WORK = sys.argv[1], sys.argv[2]
TABLES = json.load(open(sys.argv[3]))
sys.path.insert(0, KERNELS)  # as when the check runs: its folder first, for _common, _models and _phases
import check_verl_trainer as t  # noqa: E402

import torch  # noqa: E402
import verl  # noqa: E402
import verl.workers.rollout.sglang_rollout.async_sglang_server as server_module  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass, validate_config  # noqa: E402
from verl.workers.rollout.replica import RolloutMode  # noqa: E402

SIZES = [dict(), dict(n_gpus_per_node=2), dict(n_gpus_per_node=2, rollout_tp=2), dict(nnodes=2, n_gpus_per_node=4,
                                                                                    rollout_tp=2)]
KEYS = ["actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.enforce_eager",
        "actor_rollout_ref.rollout.tensor_model_parallel_size", "actor_rollout_ref.actor.strategy",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile", "data.train_batch_size"]
SHOWN = ["attention_backend", "disable_cuda_graph", "disable_piecewise_cuda_graph", "max_total_tokens",
         "mem_fraction_static", "log_level", "tp_size", "enable_memory_saver", "skip_tokenizer_init", "device"]


class Captured(Exception):
    """Raised by the stand-in for ServerArgs once it has what verl passes: launch_server stops there."""


def server_args(cfg) -> dict:
    """What verl's SGLang server hands SGLang's ServerArgs for this config, and what ServerArgs makes of it."""
    seen = {}

    class Capture(ServerArgs):  # test double of ServerArgs in verl's module: records, builds the real one, stops
        def __init__(self, **kwargs):
            seen["kwargs"] = kwargs
            seen["args"] = ServerArgs(**{**kwargs, "device": "cpu"})
            raise Captured

    server = server_module.SGLangHttpServer(
        config=cfg.actor_rollout_ref.rollout, model_config=cfg.actor_rollout_ref.model,
        rollout_mode=RolloutMode.HYBRID, workers=[], replica_rank=0, node_rank=0, nnodes=1,
        cuda_visible_devices="0", base_gpu_id=0)
    real, server_module.ServerArgs = server_module.ServerArgs, Capture
    try:
        asyncio.run(server.launch_server())
    except Captured:
        pass
    finally:
        server_module.ServerArgs = real
    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    return {"unknown": sorted(set(seen["kwargs"]) - fields),
            "engine_kwargs": sorted(OmegaConf.to_container(cfg.actor_rollout_ref.rollout.engine_kwargs.sglang)),
            **{k: getattr(seen["args"], k) for k in SHOWN}}


torch.set_num_threads(2)

llama = TABLES["families"]["llama"]
paths = t.write_inputs(WORK, torch, llama)
spec = TABLES["specs"]["sglang"]
out = {"cases": [], "server": {}}
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    for sizes in SIZES:
        for thorough in (False, True):
            cfg = compose(config_name=spec["actor"]["config_name"],
                          overrides=t.overrides(paths, spec, llama, thorough=thorough, **sizes))
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # verl's own RolloutConfig validation
            OmegaConf.resolve(cfg)  # as TaskRunnerV1.run does: every interpolation must resolve
            out["cases"].append({"sizes": sizes, "thorough": thorough,
                                 "values": {k: OmegaConf.select(cfg, k) for k in KEYS}})
            if sizes in (dict(), dict(n_gpus_per_node=2, rollout_tp=2)):
                key = f"{'thorough' if thorough else 'fast'}-tp{sizes.get('rollout_tp', 1)}"
                out["server"][key] = server_args(cfg)
print(json.dumps(out, default=str))
