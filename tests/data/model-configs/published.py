"""Published model configs of the types `verify --model-config` learned for issue 54, as values, not files: each
model's config.json values (the hub repo named), written here by hand, never a copy of the file (the machines here
reach no hub). Where a public page was checked, it is named.

Run by an env's python (`python published.py OUT`), it writes OUT/<name>/config.json through that env's own
transformers config class (`Class(**values).to_dict()`): a config.json as transformers writes one, extras such as
quantization_config and auto_map carried as the hub file carries them. Imported by the tests, it is plain data.

`rules_from`: the four configs the shrink rules of families.toml were written from; the others were held out and
tested after the rules were written.
"""

import json
import sys
from pathlib import Path

LINEAR, FULL, SLIDING = "linear_attention", "full_attention", "sliding_attention"
QWEN_VISION_IDS = {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
                   "vision_end_token_id": 151653}
QWEN35_VISION_IDS = {"image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
                     "vision_end_token_id": 248054}
QWEN3_VISION = {"depth": 27, "hidden_act": "gelu_pytorch_tanh", "hidden_size": 1152, "in_channels": 3,
                "initializer_range": 0.02, "intermediate_size": 4304, "num_heads": 16, "num_position_embeddings": 2304,
                "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
YARN_DEEPSEEK = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                 "original_max_position_embeddings": 4096, "type": "yarn"}
DEEPSEEK_AUTO_MAP = {"AutoConfig": "configuration_deepseek.DeepseekV3Config",
                     "AutoModel": "modeling_deepseek.DeepseekV3Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}


def _qwen35_text(**sizes) -> dict:
    layers = sizes["num_hidden_layers"]
    return {"attention_bias": False, "attn_output_gate": True, "head_dim": 256, "hidden_act": "silu",
            "full_attention_interval": 4, "layer_types": ([LINEAR] * 3 + [FULL]) * (layers // 4),
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "linear_num_key_heads": 16, "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
            "rms_norm_eps": 1e-6, "vocab_size": 248320, "eos_token_id": 248044, "tie_word_embeddings": False,
            "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                                "rope_theta": 10000000, "partial_rotary_factor": 0.25}, **sizes}


PUBLISHED = {
    # Checked against THUDM/slime scripts/models/qwen3.5-27B.sh (24 heads, 4 KV groups, head 256, 64 layers, 5120,
    # ffn 17408, rotary 0.25, base 1e7).
    "Qwen3.5-27B": {"repo": "Qwen/Qwen3.5-27B", "class": "Qwen3_5Config", "values": {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": False,
        **QWEN35_VISION_IDS,
        "text_config": _qwen35_text(model_type="qwen3_5_text", hidden_size=5120, intermediate_size=17408,
                                    num_hidden_layers=64, num_attention_heads=24, num_key_value_heads=4,
                                    linear_num_value_heads=48),
        "vision_config": {"model_type": "qwen3_5", **QWEN3_VISION, "out_hidden_size": 5120}}},
    "Qwen3.5-35B-A3B": {"repo": "Qwen/Qwen3.5-35B-A3B", "class": "Qwen3_5MoeConfig", "values": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False, **QWEN35_VISION_IDS,
        "text_config": _qwen35_text(model_type="qwen3_5_moe_text", hidden_size=2048, num_hidden_layers=40,
                                    num_attention_heads=16, num_key_value_heads=2, linear_num_value_heads=32,
                                    num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                                    shared_expert_intermediate_size=512, router_aux_loss_coef=0.001),
        "vision_config": {"model_type": "qwen3_5_moe", **QWEN3_VISION, "out_hidden_size": 2048}}},
    # No layer_types: transformers derives them from full_attention_interval.
    "Qwen3-Next-80B-A3B-Instruct": {"repo": "Qwen/Qwen3-Next-80B-A3B-Instruct", "class": "Qwen3NextConfig",
                                    "values": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "decoder_sparse_step": 1, "full_attention_interval": 4,
        "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
        "mlp_only_layers": [], "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
        "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
        "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151936}},
    "Qwen3-VL-8B-Instruct": {"repo": "Qwen/Qwen3-VL-8B-Instruct", "class": "Qwen3VLConfig", "values": {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": False,
        **QWEN_VISION_IDS,
        "text_config": {"model_type": "qwen3_vl_text", "attention_bias": False, "bos_token_id": 151643,
                        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
                        "intermediate_size": 12288, "max_position_embeddings": 262144, "num_attention_heads": 32,
                        "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-6,
                        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                         "rope_type": "default"},
                        "rope_theta": 5000000, "vocab_size": 151936},
        "vision_config": {"model_type": "qwen3_vl", **QWEN3_VISION, "out_hidden_size": 4096,
                          "deepstack_visual_indexes": [8, 16, 24]}}},
    "Qwen3-VL-30B-A3B-Instruct": {"repo": "Qwen/Qwen3-VL-30B-A3B-Instruct", "class": "Qwen3VLMoeConfig", "values": {
        "architectures": ["Qwen3VLMoeForConditionalGeneration"], "model_type": "qwen3_vl_moe",
        "tie_word_embeddings": False, **QWEN_VISION_IDS,
        "text_config": {"model_type": "qwen3_vl_moe_text", "attention_bias": False, "bos_token_id": 151643,
                        "eos_token_id": 151645, "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu",
                        "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 262144,
                        "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True,
                        "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
                        "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-6,
                        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                         "rope_type": "default"},
                        "rope_theta": 5000000, "vocab_size": 151936},
        "vision_config": {"model_type": "qwen3_vl_moe", **QWEN3_VISION, "out_hidden_size": 2048,
                          "deepstack_visual_indexes": [8, 16, 24]}}},
    # Checked against a public MLX conversion's model card (24 layers, 32 experts, top-4, 64 heads, 8 KV, head 64,
    # window 128, yarn 32 from 4096, swiglu limit 7.0).
    "gpt-oss-20b": {"repo": "openai/gpt-oss-20b", "class": "GptOssConfig", "values": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
        "intermediate_size": 2880, "layer_types": [SLIDING, FULL] * 12, "max_position_embeddings": 131072,
        "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
        "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"],
                                "quant_method": "mxfp4"},
        "rms_norm_eps": 1e-5, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                               "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                               "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088}},
    "gpt-oss-120b": {"repo": "openai/gpt-oss-120b", "class": "GptOssConfig", "values": None},  # 20b's, see below
    "DeepSeek-V3": {"repo": "deepseek-ai/DeepSeek-V3", "class": "DeepseekV3Config", "values": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "attention_bias": False,
        "attention_dropout": 0.0, "auto_map": DEEPSEEK_AUTO_MAP, "aux_loss_alpha": 0.001, "bos_token_id": 0,
        "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
        "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "pretraining_tp": 1,
        "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-6, "rope_scaling": YARN_DEEPSEEK, "rope_theta": 10000, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4,
        "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": 128,
        "vocab_size": 129280}},
    # Moonlight: DeepSeek-V3's architecture without query compression (q_lora_rank null) or expert groups.
    "Moonlight-16B-A3B": {"repo": "moonshotai/Moonlight-16B-A3B", "class": "DeepseekV3Config", "values": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "attention_bias": False,
        "auto_map": DEEPSEEK_AUTO_MAP, "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585,
        "ep_size": 1, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
        "intermediate_size": 11264, "kv_lora_rank": 512, "max_position_embeddings": 8192,
        "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
        "n_shared_experts": 2, "norm_topk_prob": True, "num_attention_heads": 16, "num_experts_per_tok": 6,
        "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 50000,
        "routed_scaling_factor": 2.446, "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False,
        "topk_group": 1, "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 163840}},
    # Kimi-K2: DeepSeek-V3's architecture and remote code under a model_type of its own ("kimi_k2", so that engines
    # can tell it apart; Moonshot's deploy guidance says to rename it deepseek_v3 where a framework does not know it).
    # Values from public pages: a model-inspector report of Kimi-K2-Instruct-0905 (7168 wide, 61 layers, 64 heads and
    # 64 KV heads, vocab 163840, 18432 dense MLP, rope theta 50000, YaRN x64 from 4096 with betas 1/1), Miles' Kimi-K2
    # page (1 dense layer first) and public K2.5/K2.6 text-config fixtures (MLA 1536/512, heads 128/64/128, 384
    # experts top-8 and 1 shared of 2048, sigmoid noaux_tc in 1 group, scaling 2.827, 262144 positions).
    "Kimi-K2-Instruct-0905": {"repo": "moonshotai/Kimi-K2-Instruct-0905", "class": "DeepseekV3Config", "values": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "attention_bias": False,
        "auto_map": DEEPSEEK_AUTO_MAP, "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585,
        "ep_size": 1, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 7168,
        "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 262144,
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 384,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 64, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-6, "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 64.0, "mscale": 1.0,
                                               "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                                               "type": "yarn"},
        "rope_theta": 50000.0, "routed_scaling_factor": 2.827, "scoring_func": "sigmoid", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "use_cache": True, "v_head_dim": 128, "vocab_size": 163840}},
    "DeepSeek-V2-Lite": {"repo": "deepseek-ai/DeepSeek-V2-Lite", "class": "DeepseekV2Config", "values": {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "attention_bias": False,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV2Config",
                     "AutoModel": "modeling_deepseek.DeepseekV2Model",
                     "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM"},
        "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "ep_size": 1,
        "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10944,
        "kv_lora_rank": 512, "max_position_embeddings": 163840, "moe_intermediate_size": 1408, "moe_layer_freq": 1,
        "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False,
        "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
        "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-6,
        "rope_scaling": {**YARN_DEEPSEEK, "mscale": 0.707, "mscale_all_dim": 0.707}, "rope_theta": 10000,
        "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True, "tie_word_embeddings": False,
        "topk_group": 1, "topk_method": "greedy", "v_head_dim": 128, "vocab_size": 102400}},
    "GLM-4.5": {"repo": "zai-org/GLM-4.5", "class": "Glm4MoeConfig", "values": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
        "attention_dropout": 0.0, "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128,
        "hidden_act": "silu", "hidden_size": 5120, "partial_rotary_factor": 0.5, "initializer_range": 0.02,
        "intermediate_size": 12288, "max_position_embeddings": 131072, "moe_intermediate_size": 1536,
        "norm_topk_prob": True, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 160,
        "n_shared_experts": 1, "routed_scaling_factor": 2.5, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
        "num_hidden_layers": 92, "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "rope_scaling": None,
        "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "use_qk_norm": True, "vocab_size": 151552}},
    "Mixtral-8x7B-v0.1": {"repo": "mistralai/Mixtral-8x7B-v0.1", "class": "MixtralConfig", "values": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
        "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
        "output_router_logits": False, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
        "vocab_size": 32000}},
    # MiniMax-M2: not copied from the hub's config.json (none reachable here). Every value is the default of
    # ModelCloud/GPTQModel's MiniMaxM2Config (gptqmodel/hf_minimax_m2/configuration_minimax_m2.py at 3d14511, its
    # modeling file's checkpoint MiniMaxAI/MiniMax-M2), cross-checked where they say it against Megatron-Bridge f83545d
    # (docs/models/minimax/minimax-m2.md and minimax_m2_bridge.py: 256 experts, top-8, sigmoid router with expert-bias
    # correction, full-dimension QK RMSNorm, MTP modules; rotary_dim / head_dim its rotary share) and transformers
    # 5.9's MiniMaxM2Config (same sizes, though its docstring names MiniMax-Text-01). Left out for want of a source:
    # the hub's token ids, quantization_config (FP8), auto_map, attn_type_list and GPTQModel-only fields. Its shrink
    # rules were written with this entry in view: not held out.
    "MiniMax-M2": {"repo": "MiniMaxAI/MiniMax-M2", "class": "MiniMaxM2Config", "values": {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "attention_dropout": 0.0,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 1536,
        "max_position_embeddings": 196608, "mtp_transformer_layers": 1, "num_attention_heads": 48,
        "num_experts_per_tok": 8, "num_hidden_layers": 62, "num_key_value_heads": 8, "num_local_experts": 256,
        "num_mtp_modules": 3, "qk_norm_type": "per_layer", "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
        "rotary_dim": 64, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "scoring_func": "sigmoid",
        "shared_intermediate_size": 0, "tie_word_embeddings": False, "use_mtp": True, "use_qk_norm": True,
        "use_routing_bias": True, "vocab_size": 200064}},
    "Phi-3-mini-4k-instruct": {"repo": "microsoft/Phi-3-mini-4k-instruct", "class": "Phi3Config", "values": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                     "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-5,
        "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32064}},
    # Qwen3-Coder-480B-A35B-Instruct: checked against the verbatim copy of its config.json in ai-dynamo/aiconfigurator
    # (aic-core/src/aiconfigurator_core/model_configs/Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json at 0b077da5).
    # A qwen3_moe that says shared_expert_intermediate_size = 0 (no shared expert); held out: added after the rules.
    "Qwen3-Coder-480B-A35B-Instruct": {"repo": "Qwen/Qwen3-Coder-480B-A35B-Instruct", "class": "Qwen3MoeConfig",
                                       "values": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_dropout": 0.0,
        "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 6144,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 262144,
        "max_window_layers": 62, "mlp_only_layers": [], "moe_intermediate_size": 2560, "norm_topk_prob": True,
        "num_attention_heads": 96, "num_experts": 160, "num_experts_per_tok": 8, "num_hidden_layers": 62,
        "num_key_value_heads": 8, "output_router_logits": False, "qkv_bias": False, "rms_norm_eps": 1e-6,
        "rope_scaling": None, "rope_theta": 10000000, "router_aux_loss_coef": 0.0,
        "shared_expert_intermediate_size": 0, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True, "use_qk_norm": True,
        "use_sliding_window": False, "vocab_size": 151936}},
}
# gpt-oss-120b is the 20b's architecture at 36 layers and 128 experts.
PUBLISHED["gpt-oss-120b"]["values"] = {**PUBLISHED["gpt-oss-20b"]["values"], "num_hidden_layers": 36,
                                       "num_local_experts": 128, "layer_types": [SLIDING, FULL] * 18}

RULES_FROM = ("Qwen3.5-27B", "Qwen3-Next-80B-A3B-Instruct", "gpt-oss-20b", "DeepSeek-V3")
HELD_OUT = tuple(name for name in PUBLISHED if name not in RULES_FROM)


def as_published(name: str) -> dict:
    """The values as the hub's config.json has them."""
    return json.loads(json.dumps(PUBLISHED[name]["values"]))


def write(out: Path) -> list[Path]:
    """Each config through the env's transformers class, as config.json under out/<name>/."""
    import transformers

    written = []
    for name, entry in PUBLISHED.items():
        values = as_published(name)
        written_out = getattr(transformers, entry["class"])(**values).to_dict()
        # The class writes its own model_type; a model's remote config class (Kimi-K2's) writes the published one.
        written_out["model_type"] = values["model_type"]
        path = Path(out) / name / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(written_out, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(path)
