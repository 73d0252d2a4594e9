"""Runs in an env with torch, transformers, pyarrow, verl and hydra: writes the inputs, reads them back the way verl
does, has verl's main_ppo parse the check's command line (both variants) and checks what it set."""
import json
import os
import subprocess
import sys
import tempfile

KERNELS, OUT = sys.argv[1], sys.argv[2]
TABLES = json.load(open(sys.argv[3]))  # what verify hands the check: each variant's trainer spec, the family rows
sys.path.insert(0, KERNELS)  # as when the script runs: its folder first, for _common, _models and _phases
import check_verl_trainer as t

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(2)
work = tempfile.mkdtemp(dir=OUT)
LLAMA = TABLES["families"]["llama"]
paths = t.write_inputs(work, torch, LLAMA)
tokenizer = AutoTokenizer.from_pretrained(paths["model"])
model = AutoModelForCausalLM.from_pretrained(paths["model"])
rows = pq.read_table(paths["data"]).to_pylist()
chat = tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False)
ids = tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True)
ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
with torch.no_grad():
    probs = model(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
out = {"vocab": len(tokenizer), "model_vocab": model.config.vocab_size, "chat": chat, "unk": tokenizer.unk_token_id,
       "ids": list(ids), "pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id, "rows": len(rows),
       "row": rows[0], "top_prob": probs.max().item(), "dtype": str(model.dtype),
       "attn": model.config._attn_implementation if hasattr(model.config, "_attn_implementation") else None}

weights = t.weight_change(torch, paths["model"], paths["model"])
out["same_weights"] = weights

import yaml
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

for variant in ("fsdp", "megatron"):
    # verl's own entry point parses the command line the check runs; --cfg job prints the config and stops.
    cmd = t.command(sys.executable, paths, TABLES["specs"][variant], LLAMA, n_gpus_per_node=2) + [
        "--cfg", "job", "--resolve"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=paths["run"])
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    cfg = OmegaConf.create(yaml.safe_load(proc.stdout))
    a = cfg.actor_rollout_ref
    out[variant] = {"use_v1": cfg.trainer.use_v1, "strategy": a.actor.strategy, "rollout": a.rollout.name,
                    "n": a.rollout.n, "tp": a.rollout.tensor_model_parallel_size, "model": a.model.path,
                    "reward": cfg.reward.custom_reward_function.path, "logger": list(cfg.trainer.logger),
                    "steps": cfg.trainer.total_training_steps, "gpus": cfg.trainer.n_gpus_per_node,
                    "calc_log_probs": a.rollout.calculate_log_probs, "adv": cfg.algorithm.adv_estimator,
                    "save": list(a.actor.checkpoint.save_contents), "lr": a.actor.optim.lr,
                    "attn": OmegaConf.select(cfg, "actor_rollout_ref.model.override_config.attn_implementation"),
                    "vanilla_mbridge": OmegaConf.select(cfg, "actor_rollout_ref.actor.megatron.vanilla_mbridge"),
                    "ref_vanilla_mbridge": OmegaConf.select(cfg, "actor_rollout_ref.ref.megatron.vanilla_mbridge"),
                    "te_attention": OmegaConf.select(
                        cfg, "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"),
                    "ref_te_attention": OmegaConf.select(
                        cfg, "actor_rollout_ref.ref.megatron.override_transformer_config.attention_backend")}
    omega_conf_to_dataclass(a.rollout)  # verl's own RolloutConfig validation
    # What main_ppo checks before it starts Ray: batch sizes against GPUs, micro-batches, the critic's need.
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    out[variant]["validated"] = True

# verl's console logger writes the metric lines the check parses.
import contextlib
import io

from verl.utils.logger.aggregate_logger import LocalLogger

buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    LocalLogger().log({"actor/pg_loss": -0.25, "actor/grad_norm": 1.5, "note": "text", "timing_s/step": 3}, step=1)
out["console_line"] = buf.getvalue().strip()
out["parsed"] = t.parse_metrics(buf.getvalue().splitlines())
json.dump(out, open(os.path.join(OUT, "out.json"), "w"))
