"""Run inside a megatron env (no GPU needed): verl 0.9.1's default Megatron path up to the model provider, for the
check's model families. As verl's Megatron engine does it (verl/workers/engine/megatron/transformer_impl.py,
vanilla_mbridge False): `verl.models.mcore.bridge.AutoBridge.from_hf_pretrained(model dir)`,
`to_megatron_provider(load_weights=False)`, `apply_overrides_and_finalize` with verl's provider overrides at
tp = pp = ep = 1 and the env's override_transformer_config. Building the model itself needs a GPU (TE's layers).

usage: python megatron_bridge_provider.py KERNELS_DIR ROWS_JSON OVERRIDES_JSON OUT_JSON
  ROWS_JSON       the families' rows as verify hands them to the trainer check (families.Table.rows)
  OVERRIDES_JSON  override_transformer_config keys the env's trainer_overrides set (e.g. {"attention_backend": "auto"})
"""

import importlib.metadata as md
import json
import os
import sys
import tempfile

kernels, rows_file, overrides_file, out_file = sys.argv[1:5]
sys.path.insert(0, kernels)  # the trainer check's own model builder
import _models

import torch
import verl.models.mcore.bridge as verl_bridge  # verl's own `from megatron.bridge import AutoBridge`
from megatron.core.transformer.enums import AttnBackend

out = {"versions": {n: md.version(n) for n in ("megatron-core", "megatron-bridge", "transformer-engine", "transformers",
                                                "verl")},
       # verl takes these from Megatron-Bridge >= 0.5.0, else from its own fallback code.
       "verl_helpers_from": {n: getattr(verl_bridge, n).__module__ for n in ("LinearForLastLayer", "make_value_model",
                                                                            "freeze_moe_router")},
       "families": {}}
# The DDP config verl's model build asks Megatron-Bridge for (verl/utils/megatron_utils.py), with its defaults.
from megatron.bridge.training.utils.config_utils import create_ddp_config

ddp = create_ddp_config(wrap_with_ddp=True, use_distributed_optimizer=True, use_megatron_fsdp=False, overrides={})
out["ddp_config"] = {"type": type(ddp).__name__, "use_distributed_optimizer": ddp.use_distributed_optimizer}

# verl's provider overrides (transformer_impl.py) at tp = pp = ep = cp = 1, without virtual pipeline stages.
base = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": None, "virtual_pipeline_model_parallel_size": None, "context_parallel_size": 1,
        "sequence_parallel": False, "overlap_p2p_comm": False, "batch_p2p_comm": False, "variable_seq_lengths": True,
        "attention_backend": AttnBackend.flash, "moe_token_dispatcher_type": "alltoall",
        "moe_router_load_balancing_type": "none"}
with open(overrides_file) as f:
    env = json.load(f)
if "attention_backend" in env:
    env["attention_backend"] = AttnBackend[env["attention_backend"]]
keys = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels", "ffn_hidden_size",
        "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_grouped_gemm", "qk_layernorm", "add_qkv_bias",
        "position_embedding_type", "mrope_section", "rotary_base", "share_embeddings_and_output_weights",
        "vocab_size", "bf16", "variable_seq_lengths", "tensor_model_parallel_size")



def mrope_forward(kv_channels: int, rotary_base: float, sections: list[int]) -> str:
    """megatron-core's MultimodalRotaryEmbedding on CPU: "ok", or the error its forward raises. Its __init__ places
    the table on torch.cuda.current_device(); the CPU stands in for that device here (nothing else is replaced)."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import (
        MultimodalRotaryEmbedding,
    )

    current = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        rope = MultimodalRotaryEmbedding(kv_channels, 1.0, rotary_base=rotary_base)
        emb = rope(torch.arange(8).expand(3, 1, 8), sections)
        return "ok" if emb.shape[-1] == kv_channels else f"shape {list(emb.shape)}"
    except RuntimeError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    finally:
        torch.cuda.current_device = current


with open(rows_file) as f:
    rows = json.load(f)
for row in rows:
    folder = tempfile.mkdtemp(prefix=f"family-{row['name']}-")
    config = _models.build_config(row)
    config.architectures = [row["model_class"]]  # what a saved model's config names; the bridge is chosen by it
    config.save_pretrained(folder)
    bridge = verl_bridge.AutoBridge.from_hf_pretrained(folder, trust_remote_code=False)
    provider = bridge.to_megatron_provider(load_weights=False)
    provider.apply_overrides_and_finalize(dtype=torch.bfloat16, overrides={**base, **env})
    seen = {k: getattr(provider, k, None) for k in keys}
    seen["attention_backend"] = provider.attention_backend.name
    if provider.position_embedding_type == "mrope":
        # The model's first step: megatron-core's own 3-D rotary table for these sections and this head size.
        seen["mrope_forward"] = mrope_forward(provider.kv_channels, provider.rotary_base, provider.mrope_section)
        hf_sections = config.get_text_config().rope_parameters.get("mrope_section")
        seen["hf_mrope_section"] = hf_sections
        seen["mrope_forward_hf_sections"] = mrope_forward(provider.kv_channels, provider.rotary_base, hf_sections)
    out["families"][row["name"]] = {"bridge": type(bridge._model_bridge).__name__, "provider": type(provider).__name__,
                                    **seen}
with open(out_file, "w") as f:
    json.dump(out, f, default=str)
os._exit(0)  # Megatron's and TE's atexit hooks can hang a process that never initialised CUDA
