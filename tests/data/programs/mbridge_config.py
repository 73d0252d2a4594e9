"""Runs in an env with torch and transformers, with the locked megatron-core and mbridge on its path: what verl's
Megatron actor does before it builds the model (vanilla mbridge, the check's tiny Llama, TE's attention left to TE),
on one CPU rank (gloo)."""
import json, os, sys
import torch, torch.distributed as dist
from transformers import LlamaConfig
from megatron.core import parallel_state as mpu
from megatron.core.transformer.enums import AttnBackend
from mbridge import AutoBridge
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
mpu.initialize_model_parallel(1, 1)
hf = LlamaConfig(vocab_size=64, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512)
hf.architectures = ["LlamaForCausalLM"]
bridge = AutoBridge.from_config(hf, dtype=torch.bfloat16)
bridge.set_extra_args(attention_backend=AttnBackend.auto, recompute_granularity=None, recompute_modules=["core_attn"])
c = bridge.config
print(json.dumps({"layers": c.num_layers, "hidden": c.hidden_size, "heads": c.num_attention_heads,
                  "groups": c.num_query_groups, "ffn": c.ffn_hidden_size, "bf16": c.bf16,
                  "attention": c.attention_backend.name}))
