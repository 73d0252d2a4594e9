"""Configs the shrink rules were never written from nor tested on before 2026-12-06, to re-check `--model-config` the
way a user's config will: the published configs of published.py changed the way the published family changes
across its sizes (a tied head in a small Qwen3.5, 512 experts, a config without layer_types), and configs of the
known model types in the shape of other published models (Llama-3.1/3.2 with llama3 rope scaling, Qwen3-0.6B,
Qwen2.5-7B, Qwen2-57B-A14B, Mistral with and without a window, Phi-3 with longrope), and GLM-5, GLM-4.7-Flash
and DeepSeek-V4 as transformers 5.9's config classes default them. They are shapes, not copies:
the sizes are those of the model named, the point is each one's structure. Plain data (imported by the tests);
`python variants.py OUT` writes OUT/<name>/config.json."""

import copy
import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("published", Path(__file__).with_name("published.py"))
published = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(published)
LINEAR, FULL = published.LINEAR, published.FULL
CSA, HCA = "compressed_sparse_attention", "heavily_compressed_attention"


def _from(name: str, text: dict | None = None, vision: dict | None = None, **top) -> dict:
    """A published config with keys of its top level, its text_config and its vision_config changed (None: the key
    removed)."""
    config = copy.deepcopy(published.as_published(name))
    for part, changes in ((config, top), (config.get("text_config"), text), (config.get("vision_config"), vision)):
        for key, value in (changes or {}).items():
            part.pop(key, None) if value is None else part.update({key: value})
    return config


LLAMA_31 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
            "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
            "rms_norm_eps": 1e-5, "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                                    "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 128256}
MISTRAL = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "bos_token_id": 1, "eos_token_id": 2,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
           "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
QWEN2_TEXT = {"bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "max_window_layers": 28,
              "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
              "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936}

GLM_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "v_head_dim": 256, "n_group": 1,
           "topk_group": 1, "n_shared_experts": 1, "norm_topk_prob": True, "hidden_act": "silu",
           "max_position_embeddings": 202752, "rms_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 1,
           "tie_word_embeddings": False, "vocab_size": 154880, "attention_bias": False}

OLMO3_7B = {"architectures": ["Olmo3ForCausalLM"], "model_type": "olmo3", "attention_bias": False,
            "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 65536,
            "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
                             "attention_factor": 1.2079, "beta_fast": 32, "beta_slow": 1},
            "rope_theta": 500000.0, "rms_norm_eps": 1e-6, "sliding_window": 4096,
            "layer_types": (["sliding_attention"] * 3 + [FULL]) * 8, "vocab_size": 100278,
            "pad_token_id": 100277, "eos_token_id": 100257, "tie_word_embeddings": False}
SMOLLM3_3B = {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 2048,
              "intermediate_size": 11008, "num_attention_heads": 16, "num_key_value_heads": 4,
              "num_hidden_layers": 36, "max_position_embeddings": 65536, "no_rope_layer_interval": 4,
              "no_rope_layers": [1, 1, 1, 0] * 9, "rope_theta": 5000000.0, "vocab_size": 128256,
              "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": None,
              "pad_token_id": 128004, "bos_token_id": 128000, "eos_token_id": 128012}

VARIANTS = {
    "Qwen3.5-small-tied": _from("Qwen3.5-27B", tie_word_embeddings=True, text={
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24, "num_attention_heads": 8,
        "num_key_value_heads": 2, "linear_num_value_heads": 16, "tie_word_embeddings": True,
        "layer_types": ([LINEAR] * 3 + [FULL]) * 6}, vision={"depth": 24, "hidden_size": 1024,
                                                             "intermediate_size": 4096, "out_hidden_size": 2048}),
    "Qwen3.5-moe-512-experts": _from("Qwen3.5-35B-A3B", text={
        "hidden_size": 4096, "num_hidden_layers": 60, "num_attention_heads": 32, "linear_num_value_heads": 64,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024, "layer_types": ([LINEAR] * 3 + [FULL]) * 15},
        vision={"out_hidden_size": 4096}),
    "Qwen3.5-no-layer-types": _from("Qwen3.5-27B", text={"layer_types": None}),
    "Qwen3-Next-with-layer-types": _from("Qwen3-Next-80B-A3B-Instruct", layer_types=([LINEAR] * 3 + [FULL]) * 12),
    "Qwen3-VL-moe-94-layers": _from("Qwen3-VL-30B-A3B-Instruct", text={
        "hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64, "moe_intermediate_size": 1536},
        vision={"out_hidden_size": 4096}),
    "GLM-4.5-air-shape": _from("GLM-4.5", hidden_size=4096, num_hidden_layers=46, n_routed_experts=128,
                               first_k_dense_replace=1, use_qk_norm=False, intermediate_size=10944,
                               moe_intermediate_size=1408),
    "gpt-oss-no-layer-types": _from("gpt-oss-20b", layer_types=None),
    "Kimi-K2-int4": _from("Kimi-K2-Instruct-0905", quantization_config={
        "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "group_size": 32,
                                                                         "type": "int", "symmetric": True}}}}),
    "DeepSeek-V3-bf16": {k: v for k, v in published.as_published("DeepSeek-V3").items()
                         if k not in ("quantization_config", "auto_map")},
    "Llama-3.1-8B-shape": LLAMA_31,
    "Llama-3.2-1B-shape": {**LLAMA_31, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                           "head_dim": 64, "tie_word_embeddings": True,
                           "rope_scaling": {**LLAMA_31["rope_scaling"], "factor": 32.0}},
    "Qwen3-0.6B-shape": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **QWEN2_TEXT,
                         "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, "num_attention_heads": 16,
                         "num_key_value_heads": 8, "max_position_embeddings": 40960, "sliding_window": None,
                         "tie_word_embeddings": True},
    "Qwen2.5-7B-shape": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **QWEN2_TEXT,
                         "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                         "max_position_embeddings": 32768, "sliding_window": 131072, "vocab_size": 152064},
    "Qwen2-57B-A14B-shape": {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", **QWEN2_TEXT,
                             "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                             "decoder_sparse_step": 1, "moe_intermediate_size": 2560, "norm_topk_prob": False,
                             "num_experts": 64, "num_experts_per_tok": 8, "shared_expert_intermediate_size": 20480,
                             "max_position_embeddings": 131072, "sliding_window": 65536},
    "Mistral-7B-window": MISTRAL,
    "Mistral-no-window-head-128": {**MISTRAL, "head_dim": 128, "hidden_size": 5120, "intermediate_size": 32768,
                                   "num_hidden_layers": 40, "rope_theta": 100000000.0, "sliding_window": None,
                                   "vocab_size": 131072},
    # transformers 5.9's own GlmMoeDsaConfig and Glm4MoeLiteConfig defaults (the classes' reference sizes): GLM-5's
    # MLA with DeepSeek Sparse Attention's indexer, and GLM-4.7-Flash's MLA; both list their MLP kinds per layer.
    "GLM-5-shape": {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", **GLM_MLA,
                    "hidden_size": 6144, "intermediate_size": 12288, "moe_intermediate_size": 2048,
                    "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64,
                    "n_routed_experts": 256, "num_experts_per_tok": 8, "q_lora_rank": 2048,
                    "routed_scaling_factor": 2.5, "mlp_layer_types": ["dense"] * 3 + ["sparse"] * 75,
                    "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 32, "indexer_types": ["full"] * 78},
    "GLM-4.7-Flash-shape": {"architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", **GLM_MLA,
                            "hidden_size": 2048, "intermediate_size": 10240, "moe_intermediate_size": 1536,
                            "num_hidden_layers": 47, "num_attention_heads": 20, "num_key_value_heads": 20,
                            "n_routed_experts": 64, "num_experts_per_tok": 4, "q_lora_rank": 768,
                            "routed_scaling_factor": 1.8, "rope_interleave": True,
                            "mlp_layer_types": ["dense"] + ["sparse"] * 46},
    # transformers 5.9's DeepseekV4Config defaults: multi-query attention over compressed (every 4 and every 128
    # tokens) branches, grouped low-rank output, a Lightning Indexer, hyper-connections, hash-routed first MoE layers.
    "DeepSeek-V4-shape": {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
                          "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048,
                          "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1,
                          "head_dim": 512, "q_lora_rank": 1024, "num_experts_per_tok": 6, "n_routed_experts": 256,
                          "n_shared_experts": 1, "scoring_func": "sqrtsoftplus", "routed_scaling_factor": 1.5,
                          "max_position_embeddings": 1048576, "rope_theta": 10000.0,
                          "layer_types": [HCA] * 3 + [CSA, HCA] * 20,
                          "compress_rates": {CSA: 4, HCA: 128}, "compress_rope_theta": 160000.0, "hc_mult": 4,
                          "hc_sinkhorn_iters": 20, "mlp_layer_types": ["hash_moe"] * 3 + ["moe"] * 40,
                          "swiglu_limit": 10.0, "sliding_window": 128, "o_groups": 8, "o_lora_rank": 1024,
                          "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
                          "num_nextn_predict_layers": 1, "rms_norm_eps": 1e-6, "bos_token_id": 0, "eos_token_id": 1,
                          "tie_word_embeddings": False, "partial_rotary_factor": 0.125},
    # Model types added on 2026-12-06, written with their rules (not held out): Gemma 2 and 3 (sliding and full
    # layers, a query scale, logit soft-capping, one KV head in Gemma 3 1B), OLMo 2 and 3 (QK norms after the
    # projections; OLMo 3's windowed layers and YaRN), GLM-4-0414 (partial rotary, biased QKV), Seed-OSS (80 heads,
    # biased QKV) and SmolLM3 (every fourth layer without rope). Shapes of the models named.
    "Gemma-3-1B-shape": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
                         "attn_logit_softcapping": None, "final_logit_softcapping": None, "bos_token_id": 2,
                         "eos_token_id": [1, 106], "pad_token_id": 0, "head_dim": 256,
                         "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
                         "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26,
                         "num_key_value_heads": 1, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6,
                         "rope_local_base_freq": 10000.0, "rope_scaling": None, "rope_theta": 1000000.0,
                         "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144},
    "Gemma-2-9B-shape": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attn_logit_softcapping": 50.0,
                         "final_logit_softcapping": 30.0, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
                         "cache_implementation": "hybrid", "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                         "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192,
                         "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
                         "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                         "sliding_window": 4096, "sliding_window_size": 4096, "vocab_size": 256000},
    "OLMo-3-7B-shape": OLMO3_7B,
    "OLMo-2-7B-shape": {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "attention_bias": False,
                        "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 4096,
                        "rope_theta": 500000.0, "rms_norm_eps": 1e-6, "vocab_size": 100352, "pad_token_id": 100277,
                        "eos_token_id": 100257, "tie_word_embeddings": False},
    "GLM-4-9B-0414-shape": {"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "attention_bias": True,
                            "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 13696,
                            "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 40,
                            "num_key_value_heads": 2, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5,
                            "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 151552,
                            "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338]},
    "Seed-OSS-36B-shape": {"architectures": ["SeedOssForCausalLM"], "model_type": "seed_oss", "attention_bias": True,
                           "attention_out_bias": False, "head_dim": 128, "hidden_size": 5120,
                           "intermediate_size": 27648, "max_position_embeddings": 524288, "num_attention_heads": 80,
                           "num_hidden_layers": 64, "num_key_value_heads": 8, "rope_theta": 10000000.0,
                           "residual_dropout": 0.1, "vocab_size": 155136, "tie_word_embeddings": False,
                           "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1},
    "SmolLM3-3B-shape": SMOLLM3_3B,
    # Held out: written after the rules of the seven types above were committed (b87de96), run once before any change.
    "Gemma-2-27B-shape": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "bos_token_id": 2,
                          "eos_token_id": 1, "pad_token_id": 0,
                          "head_dim": 128, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 4608,
                          "intermediate_size": 36864, "max_position_embeddings": 8192, "num_attention_heads": 32,
                          "num_hidden_layers": 46, "num_key_value_heads": 16, "query_pre_attn_scalar": 144,
                          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000},
    "Gemma-3-270M-shape": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 256,
                           "hidden_size": 640, "intermediate_size": 2048, "num_attention_heads": 4,
                           "num_key_value_heads": 1, "num_hidden_layers": 18, "sliding_window": 512,
                           "layer_types": (["sliding_attention"] * 5 + [FULL]) * 3, "_sliding_window_pattern": 6,
                           "query_pre_attn_scalar": 256, "rope_local_base_freq": 10000.0, "rope_theta": 1000000.0,
                           "max_position_embeddings": 32768, "vocab_size": 262144, "use_bidirectional_attention": False,
                           "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0},
    "OLMo-3-32B-shape": {**OLMO3_7B, "hidden_size": 5120, "intermediate_size": 27648,
                         "num_attention_heads": 40, "num_key_value_heads": 8, "num_hidden_layers": 64,
                         "layer_types": (["sliding_attention"] * 3 + [FULL]) * 16},
    "OLMo-2-32B-shape": {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "hidden_size": 5120,
                         "intermediate_size": 27648, "num_attention_heads": 40, "num_key_value_heads": 8,
                         "num_hidden_layers": 64, "max_position_embeddings": 4096, "rope_theta": 500000.0,
                         "rms_norm_eps": 1e-6, "vocab_size": 100352, "tie_word_embeddings": False},
    "GLM-4-32B-0414-shape": {"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "attention_bias": True,
                             "head_dim": 128, "hidden_size": 6144, "intermediate_size": 23040,
                             "max_position_embeddings": 32768, "num_attention_heads": 48, "num_hidden_layers": 61,
                             "num_key_value_heads": 8, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5,
                             "rope_theta": 10000.0, "vocab_size": 151552, "tie_word_embeddings": False},
    "SmolLM3-interval-only": {k: v for k, v in SMOLLM3_3B.items() if k != "no_rope_layers"},
    "Phi-3-longrope": _from("Phi-3-mini-4k-instruct", max_position_embeddings=131072, sliding_window=262144,
                            rope_scaling={"type": "longrope", "long_factor": [1.0 + i / 10 for i in range(48)],
                                          "short_factor": [1.0] * 48}),
}


def write(out: Path) -> list[Path]:
    written = []
    for name, config in VARIANTS.items():
        path = Path(out) / name / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(path)
