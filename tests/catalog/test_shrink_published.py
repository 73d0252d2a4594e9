"""`verify --model-config` on the architectures verl's users train now (issue 54): published configs of Qwen3.5,
Qwen3-VL, Qwen3-Next, gpt-oss, DeepSeek-V2/V3 (and Moonlight), GLM-4.5, Mixtral and Phi-3 shrunk keeping what makes
each one itself (one layer of each kind, MLA's ranks, first dense layers, shared experts, sinks, a window the check's
sequences meet), bad configs refused in one line before anything runs, and, inside the default env, each tiny model
built as the trainer check builds it and trained one step on CPU.

The configs are tests/data/model-configs/published.py: values as the hub publishes them, and config.json files
written from them by the env's own transformers classes. The shrink rules were written from four of them
(published.RULES_FROM); the others (published.HELD_OUT) were tested only after."""

import copy
import importlib.util
import json
import re
import subprocess
import sys

import pytest

from test_kernel_scripts import KERNELS, has_modules, torch_python
from test_verify_profiles import REPO
from verlenv.catalog import families
from verlenv.errors import UserError
from verlenv.verify import model_probe

CONFIGS = REPO / "tests" / "data" / "model-configs"
PROGRAM = REPO / "tests" / "data" / "trainer" / "shrunk_models_in_env.py"
_spec = importlib.util.spec_from_file_location("published", CONFIGS / "published.py")
published = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(published)
NAMES = list(published.PUBLISHED)
_vspec = importlib.util.spec_from_file_location("variants", CONFIGS / "variants.py")
variants = importlib.util.module_from_spec(_vspec)
_vspec.loader.exec_module(variants)
VARIANTS = list(variants.VARIANTS)
LINEAR, FULL, SLIDING = published.LINEAR, published.FULL, published.SLIDING


def write(tmp_path, config: dict, name: str = "config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def shrunk(tmp_path, name: str) -> families.Family:
    """A published config as the hub has it, shrunk."""
    directory = tmp_path / name
    directory.mkdir(exist_ok=True)
    return families.shrink(write(directory, published.as_published(name)))


def text_of(f: families.Family) -> dict:
    return f.config.get("text_config", f.config)


def text_of_published(name: str) -> dict:
    values = published.as_published(name)
    return values.get("text_config", values)


def test_the_rules_were_written_from_four_configs_and_the_others_held_out():
    assert len(published.RULES_FROM) == 4 and set(published.RULES_FROM) <= set(NAMES)
    kinds = {published.PUBLISHED[n]["values"]["model_type"] for n in published.HELD_OUT}
    assert {"glm4_moe", "qwen3_vl", "qwen3_vl_moe", "qwen3_5_moe", "mixtral", "phi3", "deepseek_v2"} <= kinds


@pytest.mark.parametrize("name", NAMES)
def test_each_published_config_shrinks_to_the_checks_size(tmp_path, name):
    f = shrunk(tmp_path, name)
    text = text_of(f)
    assert f.model_class == published.PUBLISHED[name]["values"]["architectures"][0]
    assert text["num_hidden_layers"] == 2
    # 512 positions, or the published length where a YaRN scaling is written for it (gpt-oss, DeepSeek-V2/V3).
    yarn = (text.get("rope_scaling") or {}).get("original_max_position_embeddings")
    assert text["max_position_embeddings"] == (text_of_published(name)["max_position_embeddings"] if yarn else 512)
    assert text["hidden_size"] <= 512 and text["num_attention_heads"] == 4
    for key in ("quantization_config", "auto_map", "torch_dtype"):
        assert key not in f.config
    assert f.inputs == ("images" if "vision_config" in f.config else "text")


def test_qwen35_keeps_a_linear_and_a_full_layer_and_its_interval_agrees(tmp_path):
    f = shrunk(tmp_path, "Qwen3.5-27B")
    text = text_of(f)
    # [linear x 3, full] x 16 -> the first layer of each kind; every 2nd layer full, as the interval now says.
    assert text["layer_types"] == [LINEAR, FULL] and text["full_attention_interval"] == 2
    assert f.shrunk["text_config.full_attention_interval"] == [4, 2]
    # Gated DeltaNet: 2 key heads, value heads at the published 3 per key head; head sizes as published.
    assert (text["linear_num_key_heads"], text["linear_num_value_heads"]) == (2, 6)
    assert (text["linear_key_head_dim"], text["linear_value_head_dim"], text["head_dim"]) == (128, 128, 256)
    assert text["attn_output_gate"] is True and text["rope_parameters"]["mrope_section"] == [11, 11, 10]
    vision = f.config["vision_config"]
    assert (vision["depth"], vision["out_hidden_size"], vision["patch_size"]) == (2, text["hidden_size"], 16)


def test_qwen3_next_writes_out_the_kinds_its_interval_says(tmp_path):
    """The published Qwen3-Next names full_attention_interval = 4 and no layer_types: cut to 2 layers, transformers
    would derive [linear, linear] from it, losing the full-attention layer."""
    f = shrunk(tmp_path, "Qwen3-Next-80B-A3B-Instruct")
    assert "layer_types" not in published.as_published("Qwen3-Next-80B-A3B-Instruct")
    assert f.config["layer_types"] == [LINEAR, FULL] and f.config["full_attention_interval"] == 2
    assert f.shrunk["layer_types"][0] == "from full_attention_interval"
    assert (f.config["num_experts"], f.config["num_experts_per_tok"]) == (8, 2)
    assert f.config["shared_expert_intermediate_size"] == 128 and f.config["mlp_only_layers"] == []


def test_more_kinds_than_layers_keeps_a_layer_of_each(tmp_path):
    config = published.as_published("Qwen3.5-27B")
    rules = dict(families.table().shrink, text={**families.table().shrink["text"], "num_hidden_layers": 1})
    table = families.Table(families.DATA, families.table().families, families.table().defaults, rules)
    f = families.shrink(write(tmp_path, config), table)
    assert f.config["text_config"]["layer_types"] == [LINEAR, FULL]
    assert f.shrunk["text_config.num_hidden_layers"] == [64, 2]
    three = dict(rules, text={**rules["text"], "num_hidden_layers": 3})
    f = families.shrink(write(tmp_path, config), families.Table(families.DATA, table.families, table.defaults, three))
    text = f.config["text_config"]
    assert text["layer_types"] == [LINEAR, LINEAR, FULL] and text["full_attention_interval"] == 3


def test_gpt_oss_keeps_both_window_kinds_its_sinks_and_a_window_below_the_checks_prompts(tmp_path):
    f = shrunk(tmp_path, "gpt-oss-20b")
    assert f.config["layer_types"] == [SLIDING, FULL]
    # The check's prompts are 11-26 tokens (measured in the env below): a window of 8 is met by every sequence.
    assert f.config["sliding_window"] == 8
    assert f.config["attention_bias"] is True and f.config["swiglu_limit"] == 7.0
    assert (f.config["num_local_experts"], f.config["num_experts_per_tok"], f.config["experts_per_token"]) == (8, 2, 2)
    assert f.shrunk["quantization_config"] == ["removed", "the check trains bf16 weights"]
    assert f.config["rope_scaling"]["rope_type"] == "yarn"


def test_deepseek_v3_keeps_mla_first_dense_layer_groups_and_shared_expert(tmp_path):
    f = shrunk(tmp_path, "DeepSeek-V3")
    c = f.config
    # MLA as vLLM's MLA backends take it: latent 512 + rope 64 = 576; nope and v heads as published.
    assert (c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]) == (512, 64, 128, 128)
    assert c["q_lora_rank"] == 64 and c["hidden_size"] == 256  # the hidden size does not follow a head size in MLA
    # One dense layer, then one MoE layer with its shared expert.
    assert c["first_k_dense_replace"] == 1 < c["num_hidden_layers"] and c["n_shared_experts"] == 1
    # Grouped routing kept grouped: 8 experts in 2 groups, the top group's 4 experts cover the top 2.
    assert (c["n_routed_experts"], c["n_group"], c["topk_group"], c["num_experts_per_tok"]) == (8, 2, 1, 2)
    assert c["n_routed_experts"] // c["n_group"] * c["topk_group"] >= c["num_experts_per_tok"]
    assert c["topk_method"] == "noaux_tc" and c["scoring_func"] == "sigmoid"
    assert f.shrunk["auto_map"] == ["removed", "transformers ships model_type deepseek_v3: the check builds its own "
                                               "DeepseekV3ForCausalLM"]
    assert f.shrunk["quantization_config"][0] == "removed"


def test_held_out_configs_keep_their_features(tmp_path):
    glm = shrunk(tmp_path, "GLM-4.5").config
    assert (glm["first_k_dense_replace"], glm["n_shared_experts"], glm["n_group"], glm["topk_group"]) == (1, 1, 1, 1)
    assert glm["partial_rotary_factor"] == 0.5 and glm["use_qk_norm"] is True and glm["head_dim"] == 128
    vl = shrunk(tmp_path, "Qwen3-VL-8B-Instruct").config
    assert vl["vision_config"]["deepstack_visual_indexes"] == [1] and vl["vision_config"]["depth"] == 2
    assert vl["text_config"]["rope_scaling"]["mrope_section"] == [24, 20, 20] and vl["text_config"]["head_dim"] == 128
    moonlight = shrunk(tmp_path, "Moonlight-16B-A3B").config
    assert moonlight["q_lora_rank"] is None and moonlight["kv_lora_rank"] == 512 and moonlight["n_shared_experts"] == 2
    phi = shrunk(tmp_path, "Phi-3-mini-4k-instruct")
    assert phi.config["sliding_window"] == 8 and phi.config["hidden_size"] == 4 * 96  # its head of 96 kept
    assert phi.shrunk["auto_map"][0] == "removed"
    mixtral = shrunk(tmp_path, "Mixtral-8x7B-v0.1").config
    assert (mixtral["num_local_experts"], mixtral["num_experts_per_tok"], mixtral["intermediate_size"]) == (8, 2, 128)


def test_a_published_zero_that_says_a_part_is_absent_is_kept_not_refused(tmp_path):
    """Qwen3-Coder-480B publishes shared_expert_intermediate_size = 0 (no shared expert; families.toml [shrink]
    absent_at_zero): the shrink keeps the 0 rather than refusing the config or giving the tiny model a shared expert
    of the check's size. A 0 where a size must be whole and above 0 is still refused, and so is a negative one."""
    f = shrunk(tmp_path, "Qwen3-Coder-480B-A35B-Instruct")
    assert f.config["shared_expert_intermediate_size"] == 0 and "shared_expert_intermediate_size" not in f.shrunk
    assert (f.config["num_experts"], f.config["moe_intermediate_size"]) == (8, 128)  # the rest shrunk as ever
    next_ = published.as_published("Qwen3-Next-80B-A3B-Instruct")
    assert families.shrink(write(tmp_path, next_)).config["shared_expert_intermediate_size"] == 128  # a real one
    for key, value, valid in (("shared_expert_intermediate_size", -1, "of 0 or more"),
                              ("moe_intermediate_size", 0, "above 0")):
        config = published.as_published("Qwen3-Coder-480B-A35B-Instruct")
        config[key] = value
        with pytest.raises(UserError, match=f"{key} is {value}; a size is a whole number {valid}$"):
            families.shrink(write(tmp_path, config))


def test_minimax_m2_keeps_routed_experts_partial_rotary_and_qk_norm_and_drops_mtp(tmp_path):
    """MiniMax-M2: every MLP a routed expert picked top-k by sigmoid scores plus a routing bias, 64 of each 128-wide
    head rotated, QK-norm; its MTP modules (built by neither transformers nor vLLM) set to none."""
    f = shrunk(tmp_path, "MiniMax-M2")
    c = f.config
    assert c["num_local_experts"] >= 2 and 1 <= c["num_experts_per_tok"] < c["num_local_experts"]
    assert (c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]) == (8, 2, 128)
    assert (c["scoring_func"], c["use_routing_bias"]) == ("sigmoid", True)
    assert (c["head_dim"], c["rotary_dim"]) == (128, 64)  # partial rotary as published
    assert c["use_qk_norm"] is True and c["qk_norm_type"] == "per_layer"
    assert c["num_mtp_modules"] == 0 and f.shrunk["num_mtp_modules"] == [3, 0]
    assert c["num_attention_heads"] % c["num_key_value_heads"] == 0


def test_kimi_k2_is_shrunk_as_the_deepseek_v3_architecture_it_is(tmp_path):
    """model_type kimi_k2 is DeepSeek-V3's remote code under Moonshot's name: shrunk as deepseek_v3 (which transformers,
    vLLM and Megatron-Bridge know), the rename said; its MLA, single group and 384-to-8 experts as DeepSeek-V3's."""
    f = shrunk(tmp_path, "Kimi-K2-Instruct-0905")
    c = f.config
    assert f.shrunk["model_type"] == ["kimi_k2", "deepseek_v3"] and c["model_type"] == "deepseek_v3"
    assert f.model_type == "deepseek_v3" and f.model_class == "DeepseekV3ForCausalLM"
    assert (c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]) == (512, 64, 128, 128)
    assert (c["n_routed_experts"], c["n_group"], c["topk_group"], c["first_k_dense_replace"]) == (8, 1, 1, 1)
    assert f.known_issues == shrunk(tmp_path, "DeepSeek-V3").known_issues  # the architecture's row, as DeepSeek-V3's
    # The same name on another class is not vouched for.
    config = published.as_published("Kimi-K2-Instruct-0905")
    config["architectures"] = ["KimiK25ForConditionalGeneration"]
    with pytest.raises(UserError) as e:
        families.shrink(write(tmp_path, config))
    assert str(e.value).endswith("model_type kimi_k2 is shrunk as deepseek_v3 only for architectures "
                                 "DeepseekV3ForCausalLM; it names ['KimiK25ForConditionalGeneration']")


def test_a_shrunk_config_takes_its_architecture_rows_overrides_and_fast_path_packages(tmp_path):
    """The table's row of an architecture says what verl's config needs for it and which packages are its fast path;
    a user's config of the same architecture needs the same."""
    rows = families.table().families
    gpt = shrunk(tmp_path, "gpt-oss-20b")
    assert gpt.overrides == rows["gpt-oss"].overrides and any("attn_implementation=eager" in o for o in gpt.overrides)
    nxt = shrunk(tmp_path, "Qwen3-Next-80B-A3B-Instruct")
    assert nxt.needs == rows["qwen3-next"].needs and "causal-conv1d" in nxt.needs
    glm = shrunk(tmp_path, "GLM-4.5")
    assert glm.overrides == {} and glm.needs == ()


BAD = [
    ("head_dim", 0, "head_dim is 0; a size is a whole number above 0"),
    ("head_dim", -128, "head_dim is -128; a size is a whole number above 0"),
    ("hidden_size", 5120.5, "hidden_size is 5120.5; a size is a whole number above 0"),
    ("hidden_size", "5120", 'hidden_size is "5120"; a size is a whole number above 0'),
    ("num_attention_heads", True, "num_attention_heads is true; a size is a whole number above 0"),
    ("first_k_dense_replace", -1, "first_k_dense_replace is -1; a size is a whole number of 0 or more"),
    ("head_dim", 100000, "head_dim=100000 is above 512, the largest the shrink keeps as published"),
    ("kv_lora_rank", 4096, "kv_lora_rank=4096 is above 512"),
]


@pytest.mark.parametrize("key, value, complaint", BAD)
def test_a_bad_size_is_one_line_before_anything_runs(tmp_path, key, value, complaint):
    config = published.as_published("DeepSeek-V3" if "lora" in key or "dense" in key else "GLM-4.5")
    config[key] = value
    with pytest.raises(UserError) as e:
        families.shrink(write(tmp_path, config))
    assert complaint in str(e.value) and "\n" not in str(e.value), str(e.value)


def _text_set(**values):
    return lambda c: c["text_config"].update(values)


# Configs whose sizes disagree with each other: their model cannot be built or routed, and replacing the sizes would
# hide it (a tiny model of 4 heads over 2 KV heads works whatever the published ones were).
INCONSISTENT = [
    ("GLM-4.5", lambda c: c.update(num_key_value_heads=7),
     "num_attention_heads=96 is not a multiple of num_key_value_heads=7"),
    ("Qwen3.5-27B", _text_set(linear_num_value_heads=20),
     "text_config.linear_num_value_heads=20 is not a multiple of text_config.linear_num_key_heads=16"),
    ("DeepSeek-V3", lambda c: c.update(n_group=512), "n_routed_experts=256 is not a multiple of n_group=512"),
    ("GLM-4.5", lambda c: c.update(num_experts_per_tok=300), "num_experts_per_tok=300 is above n_routed_experts=160"),
    ("gpt-oss-20b", lambda c: c.update(experts_per_token=64), "experts_per_token=64 is above num_local_experts=32"),
    ("DeepSeek-V3", lambda c: c.update(topk_group=9), "topk_group=9 is above n_group=8"),
    ("DeepSeek-V3", lambda c: c.update(first_k_dense_replace=62),
     "first_k_dense_replace=62 is above num_hidden_layers=61"),
    ("gpt-oss-20b", lambda c: c.update(layer_types=[SLIDING, FULL]),
     "layer_types has 2 entries for num_hidden_layers=24; it lists one per layer"),
    ("gpt-oss-20b", lambda c: c.update(layer_types=SLIDING), 'layer_types is "sliding_attention"; it lists one kind'),
    ("Qwen3-Next-80B-A3B-Instruct", lambda c: c.update(mlp_only_layers=[48]),
     "mlp_only_layers names layer 48; the layers are 0 to 47"),
    ("GLM-4.5", lambda c: c.update(vocab_size=0), "vocab_size is 0; a size is a whole number above 0"),
    ("GLM-4.5", lambda c: c.update(rms_norm_eps=float("nan")), "rms_norm_eps is nan; a config's numbers are finite"),
    ("DeepSeek-V3", lambda c: c["rope_scaling"].update(factor=float("inf")),
     "rope_scaling.factor is inf; a config's numbers are finite"),
    ("DeepSeek-V4-shape", lambda c: c.update(o_groups=7), "num_attention_heads=64 is not a multiple of o_groups=7"),
    ("DeepSeek-V4-shape", lambda c: c["compress_rates"].update(compressed_sparse_attention=0),
     "compress_rates.compressed_sparse_attention is 0; a size is a whole number above 0"),
    ("SmolLM3-3B-shape", lambda c: c.update(no_rope_layers=[1, 2, 1, 0] * 9), "no_rope_layers is [1, 2, 1, 0"),
    ("SmolLM3-3B-shape", lambda c: c.update(no_rope_layers=[True, False] * 18), "it lists one kind (a string, or a"),
    ("MiniMax-M2", lambda c: c.update(rotary_dim=256), "rotary_dim=256 is above head_dim=128"),
    ("MiniMax-M2", lambda c: c.update(rotary_dim=-64), "rotary_dim is -64; a size is a whole number above 0"),
    ("MiniMax-M2", lambda c: c.update(rotary_dim=32.5), "rotary_dim is 32.5; a size is a whole number above 0"),
    ("MiniMax-M2", lambda c: c.update(head_dim=100000), "head_dim=100000 is above 512"),
    ("MiniMax-M2", lambda c: c.update(num_local_experts=2.5), "num_local_experts is 2.5; a size is a whole number"),
    ("MiniMax-M2", lambda c: c.update(num_experts_per_tok=300), "num_experts_per_tok=300 is above num_local_experts"),
    ("MiniMax-M2", lambda c: c.update(num_mtp_modules=-1), "num_mtp_modules is -1; a size is a whole number of 0"),
    ("Qwen3.5-27B", lambda c: c.pop("text_config"),
     "vision_config.out_hidden_size is the language model's hidden_size, which the config does not give"),
]


@pytest.mark.parametrize("name, change, complaint", INCONSISTENT)
def test_a_config_whose_sizes_disagree_is_one_line_before_anything_runs(tmp_path, name, change, complaint):
    config = published.as_published(name) if name in published.PUBLISHED else copy.deepcopy(variants.VARIANTS[name])
    change(config)
    with pytest.raises(UserError) as e:
        families.shrink(write(tmp_path, config))  # json.dumps writes NaN and Infinity as Python's json reads them
    assert complaint in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_first_k_dense_count_covering_every_layer_keeps_the_tiny_model_dense(tmp_path):
    config = published.as_published("DeepSeek-V3")
    config["first_k_dense_replace"] = 61
    f = families.shrink(write(tmp_path, config))
    assert f.config["first_k_dense_replace"] == f.config["num_hidden_layers"] == 2
    assert f.shrunk["first_k_dense_replace"] == [61, 2]
    assert shrunk(tmp_path, "DeepSeek-V3").config["first_k_dense_replace"] == 1  # 3 of 61: one dense, one MoE


@pytest.mark.parametrize("count, said_by", [(None, "the class default (3 dense)"), (3, "first_k_dense_replace (3)"),
                                             (5, "first_k_dense_replace (5)")])
def test_glm5s_mlp_kinds_said_by_a_count_keep_a_dense_and_a_sparse_layer(tmp_path, count, said_by):
    """GLM-5's class derives mlp_layer_types from its first 3 layers when a config lists none: at 2 layers that is
    [dense, dense], no MoE layer; the shrink writes the published layers' kinds out first and cuts them."""
    config = {k: v for k, v in variants.VARIANTS["GLM-5-shape"].items() if k not in ("mlp_layer_types",
                                                                                      "indexer_types")}
    if count is not None:
        config["first_k_dense_replace"] = count
    f = families.shrink(write(tmp_path, config))
    assert f.config["mlp_layer_types"] == ["dense", "sparse"]
    assert f.shrunk["mlp_layer_types"] == [f"from {said_by}", ["dense", "sparse"]]


def test_a_models_folder_is_taken_for_its_config_json(tmp_path):
    """What verl's actor_rollout_ref.model.path names: the folder; a folder without config.json is one line."""
    folder = tmp_path / "Qwen3.5-27B"
    folder.mkdir()
    write(folder, published.as_published("Qwen3.5-27B"))
    f = families.shrink(folder)
    assert f.name == "config-qwen3.5-27b" and f.source == str(folder / "config.json")
    with pytest.raises(UserError, match=r"a folder without config\.json; give a model's config\.json or its folder"):
        families.shrink(tmp_path / "Qwen3.5-27B" / "..")


def test_a_bad_size_in_a_vl_models_sub_configs_is_one_line(tmp_path):
    config = published.as_published("Qwen3.5-27B")
    config["text_config"]["head_dim"] = 0
    with pytest.raises(UserError, match=r"text_config\.head_dim is 0"):
        families.shrink(write(tmp_path, config))
    config = published.as_published("Qwen3-VL-8B-Instruct")
    config["vision_config"]["depth"] = 2.5
    with pytest.raises(UserError, match=r"vision_config\.depth is 2\.5"):
        families.shrink(write(tmp_path, config))
    config = published.as_published("Qwen3-VL-8B-Instruct")
    config["vision_config"]["num_position_embeddings"] = 1 << 20
    with pytest.raises(UserError, match=r"vision_config\.num_position_embeddings=1048576 is above 4096"):
        families.shrink(write(tmp_path, config))


# ---- in the default env: the class, the meta-device parameter count, one training step -------------------------

@pytest.fixture(scope="module")
def env_python() -> str:
    python = torch_python()
    if python is None or not has_modules(python, "torch", "transformers"):
        pytest.skip("no python with torch and transformers: set VERLENV_TEST_TORCH_PYTHON or create "
                    ".venv-verl-0.9-fsdp")
    return python


@pytest.fixture(scope="module")
def class_written(env_python, tmp_path_factory) -> dict:
    """Each published config as the env's transformers class writes it (config.json), shrunk."""
    out = tmp_path_factory.mktemp("published")
    proc = subprocess.run([env_python, str(CONFIGS / "published.py"), str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: families.shrink(out / name / "config.json") for name in NAMES}


@pytest.fixture(scope="module")
def trained(env_python, class_written, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("trained")
    rows = out / "rows.json"
    rows.write_text(json.dumps(families.table().rows(list(class_written.values()))))
    proc = subprocess.run([env_python, str(PROGRAM), str(KERNELS), str(rows), str(out / "out.json")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "out.json").read_text())


def model(trained, class_written, name: str) -> dict:
    r = trained["models"][class_written[name].name]
    assert "error" not in r, r.get("error")
    return r


def grads(r: dict, pattern: str) -> list[bool]:
    return [g for n, g in r["grads"].items() if re.search(pattern, n)]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_each_shrunk_model_trains_a_step_on_cpu_with_the_envs_transformers(trained, class_written, name):
    r = model(trained, class_written, name)
    assert r["loss"] > 0 and all(r["grads"].values()), [n for n, g in r["grads"].items() if not g]
    assert r["params"] < 6_000_000
    assert r["text_config"]["num_hidden_layers"] == 2 and r["text_config"]["vocab_size"] == 512


@pytest.fixture(scope="module")
def variants_trained(env_python, tmp_path_factory) -> tuple[dict, dict]:
    """The variants (configs the rules were never written from) shrunk, built and trained a step in the env."""
    out = tmp_path_factory.mktemp("variants")
    fams = {path.parent.name: families.shrink(path) for path in variants.write(out)}
    rows = out / "rows.json"
    rows.write_text(json.dumps(families.table().rows(list(fams.values()))))
    proc = subprocess.run([env_python, str(PROGRAM), str(KERNELS), str(rows), str(out / "out.json")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return fams, json.loads((out / "out.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_keeps_its_structure_and_trains_a_step(variants_trained, name):
    fams, trained = variants_trained
    config, r = variants.VARIANTS[name], trained["models"][fams[name].name]
    assert "error" not in r, r.get("error")
    # DeepSeek Sparse Attention's indexer picks tokens by a discrete top-k: the LM loss gives it no gradient (its
    # own loss trains it), so its weights are the only ones allowed none.
    without = [n for n, g in r["grads"].items() if not g and not ("index_topk" in config and ".indexer." in n)]
    assert r["loss"] > 0 and not without, without
    assert r["params"] < 6_000_000 and r["text_config"]["num_hidden_layers"] == 2
    text = config.get("text_config", config)
    if "compress_rates" in text:  # every compressed kind compresses within the check's shortest prompt (11 tokens)
        assert max(fams[name].config["compress_rates"].values()) <= 8
        assert fams[name].config["num_key_value_heads"] == 1  # multi-query attention stays so
    for key in ("mlp_layer_types", "indexer_types", "no_rope_layers"):  # each kind of layer kept, the lists cut alike
        if key in text:
            assert set(fams[name].config[key]) == set(text[key]) and len(fams[name].config[key]) == 2
    kinds = text.get("layer_types") or (["interval"] if text.get("full_attention_interval") else [])
    if kinds:  # a hybrid keeps a layer of each kind, whether it lists them or says them by an interval
        assert set(r["text_config"]["layer_types"]) == set(text.get("layer_types") or [LINEAR, FULL])
    if text.get("rope_scaling") and text.get("original_max_position_embeddings"):  # Phi-3's longrope scale
        assert fams[name].config["max_position_embeddings"] == text["max_position_embeddings"]
    if config.get("tie_word_embeddings"):
        assert fams[name].config["tie_word_embeddings"] is True
    if text.get("sliding_window") and (text.get("use_sliding_window") is not False):
        assert r["window_matters"] is True  # the window is below the check's prompts, and used
    if text.get("quantization_config") or config.get("quantization_config"):
        assert "quantization_config" in fams[name].shrunk


@pytest.mark.slow
def test_the_added_dense_types_keep_what_sets_them_apart(variants_trained):
    """Gemma 3's interval of full layers, SmolLM3's layers without rope, Gemma's query scale and soft-capping, as the
    env's transformers built the tiny models."""
    fams, trained = variants_trained
    built = {name: trained["models"][fams[name].name]["text_config"] for name in fams}
    assert built["Gemma-3-1B-shape"]["layer_types"] == ["sliding_attention", FULL]
    assert built["Gemma-3-1B-shape"]["num_key_value_heads"] == 1  # Gemma 3 1B's one KV head
    for name in ("SmolLM3-3B-shape", "SmolLM3-interval-only"):  # a layer with rope and one without, listed or not
        assert built[name]["no_rope_layers"] == [1, 0]
    assert built["Gemma-3-270M-shape"]["layer_types"] == ["sliding_attention", FULL]
    for name in ("Gemma-2-9B-shape", "Gemma-3-1B-shape"):
        assert built[name]["query_pre_attn_scalar"] == 256 and built[name]["sliding_window"] == 8
    assert (built["Gemma-2-9B-shape"]["attn_logit_softcapping"], built["Gemma-2-9B-shape"]["final_logit_softcapping"]) \
        == (50.0, 30.0)
    glm4 = built["GLM-4-9B-0414-shape"]
    assert (glm4.get("partial_rotary_factor") or glm4["rope_parameters"].get("partial_rotary_factor")) == 0.5


@pytest.mark.slow
def test_the_distinctive_parts_are_in_the_built_models_and_train(trained, class_written):
    def has(name, pattern):
        found = grads(model(trained, class_written, name), pattern)
        return bool(found) and all(found)

    for name in ("Qwen3.5-27B", "Qwen3.5-35B-A3B", "Qwen3-Next-80B-A3B-Instruct"):
        r = model(trained, class_written, name)
        assert r["text_config"]["layer_types"] == [LINEAR, FULL]
        assert has(name, r"layers\.0\.linear_attn\.") and has(name, r"layers\.1\.self_attn\.")  # DeltaNet + full
    for name in ("Qwen3.5-35B-A3B", "Qwen3-Next-80B-A3B-Instruct"):
        assert has(name, r"\.shared_expert\.") and has(name, r"\.experts\.")
    for name in ("Qwen3.5-27B", "Qwen3-VL-8B-Instruct", "Qwen3-VL-30B-A3B-Instruct"):
        assert has(name, r"visual\.blocks\.")  # the image went through the vision tower
    for name in ("Qwen3-VL-8B-Instruct", "Qwen3-VL-30B-A3B-Instruct"):
        assert len({n.split(".deepstack_merger_list.")[1].split(".")[0]
                    for n in model(trained, class_written, name)["grads"] if ".deepstack_merger_list." in n}) == 1
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        r = model(trained, class_written, name)
        assert r["text_config"]["layer_types"] == [SLIDING, FULL] and has(name, r"self_attn\.sinks$")
        assert has(name, r"mlp\.experts\.") and has(name, r"self_attn\.q_proj\.bias")
        assert r["attn_implementation"] == "eager"  # sinks: neither sdpa nor FA2 has them
    for name in ("DeepSeek-V3", "Moonlight-16B-A3B", "DeepSeek-V2-Lite", "GLM-4.5"):
        assert has(name, r"layers\.0\.mlp\.gate_proj\.") and not grads(model(trained, class_written, name),
                                                                      r"layers\.0\.mlp\.experts")
        assert has(name, r"layers\.1\.mlp\.experts") and has(name, r"layers\.1\.mlp\.shared_experts\.")
    for name in ("DeepSeek-V3", "Moonlight-16B-A3B", "DeepSeek-V2-Lite"):
        text = model(trained, class_written, name)["text_config"]
        assert (text["kv_lora_rank"], text["qk_rope_head_dim"]) == (512, 64) and has(name, r"kv_a_proj_with_mqa")
    moonlight = model(trained, class_written, "Moonlight-16B-A3B")
    assert has("DeepSeek-V3", r"q_a_proj") and not grads(moonlight, r"q_a_proj")  # no query compression: none
    minimax = model(trained, class_written, "MiniMax-M2")  # routed experts, full-width QK-norm, partial rotary
    assert has("MiniMax-M2", r"layers\.1\.mlp\.experts\.") and has("MiniMax-M2", r"layers\.1\.mlp\.gate\.")
    assert has("MiniMax-M2", r"self_attn\.q_norm\.") and has("MiniMax-M2", r"self_attn\.k_norm\.")
    text = minimax["text_config"]
    assert 2 <= text["num_experts_per_tok"] < text["num_local_experts"] and text["scoring_func"] == "sigmoid"
    assert (text["rotary_dim"], text["head_dim"], text["num_mtp_modules"]) == (64, 128, 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt-oss-20b", "Phi-3-mini-4k-instruct"])
def test_the_shrunk_window_changes_the_output_of_the_checks_shortest_prompt(trained, class_written, name):
    """A window of 128 against the check's sequences of at most 96 tokens changed nothing; 8 does, on a sequence as
    short as the shortest prompt the check writes (its own tokenizer and rows, measured in the env)."""
    r = model(trained, class_written, name)
    assert r["text_config"]["sliding_window"] < trained["shortest_prompt"], trained["shortest_prompt"]
    assert r["window_matters"] is True


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_each_shrunk_models_sampling_stays_stochastic(trained, class_written, name):
    """The check's logit scaling reaches each shrunk model (Qwen3.5's and Qwen3-Next's zero-centred final norm, x * (1 +
    weight), included), and its sampling is diverse enough for GRPO, as the table's rows must be."""
    r = model(trained, class_written, name)
    assert r["logit_std"] == pytest.approx(2.0, rel=0.05)
    assert r["sampling"]["entropy_min"] > 2.0 and r["sampling"]["top_prob_max"] < 0.6, r["sampling"]


@pytest.mark.slow
def test_the_probe_counts_the_parameters_the_built_models_hold(env_python, trained, class_written):
    rows = families.table().rows(list(class_written.values()))
    counts = model_probe.check(env_python, rows, families.table().shrink["max_params"])
    assert counts == {f.name: trained["models"][f.name]["params"] for f in class_written.values()}
    with pytest.raises(UserError) as e:
        model_probe.check(env_python, rows[:1], 1_000_000)
    assert "holds 3,272,652 parameters, above the check's 1,000,000" in str(e.value) and "\n" not in str(e.value)
    # It names where most of them are: a parameter group (layer numbers as *), one member's shape, the group's total.
    assert re.search(r"too large \(most in [\w.*]+ \[\d+(, \d+)*\]: [\d,]+\)$", str(e.value)), str(e.value)


def verify_cli(tmp_path, env_python, config: dict) -> subprocess.CompletedProcess:
    path = write(tmp_path, config)
    return subprocess.run([sys.executable, "-m", "verlenv", "verify", "--model-config", str(path), "--python",
                           env_python, "--report", str(tmp_path / "report.json")], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def _bad(name: str, change) -> dict:
    config = published.as_published(name)
    change(config)
    return config


def _text_only(name: str, architecture: str) -> dict:
    """A VL config's language model saved alone (a text-only fine-tune): its text_config as the config."""
    config = published.as_published(name)["text_config"]
    config["architectures"] = [architecture]
    return config


@pytest.mark.slow
@pytest.mark.parametrize("config, complaint", [
    (_bad("gpt-oss-20b", lambda c: c.update(head_dim=0)), "head_dim is 0; a size is a whole number above 0"),
    (_bad("gpt-oss-20b", lambda c: c.update(head_dim=-64)), "head_dim is -64"),
    (_bad("GLM-4.5", lambda c: c.update(hidden_size=5120.5)), "hidden_size is 5120.5"),
    (_bad("GLM-4.5", lambda c: c.update(head_dim=100000)), "head_dim=100000 is above 512"),
    (_bad("MiniMax-M2", lambda c: c.update(rotary_dim=256)), "rotary_dim=256 is above head_dim=128"),
    (_bad("Qwen3-Next-80B-A3B-Instruct", lambda c: c.update(architectures=["Qwen3NextForCausalLMX"])),
     "architectures names Qwen3NextForCausalLMX, which transformers 5.9.0 of the env does not have "
     "(its qwen3_next classes: Qwen3NextForCausalLM)"),
    (_bad("GLM-4.5", lambda c: c.update(num_key_value_heads=7)), "num_attention_heads=96 is not a multiple of "
     "num_key_value_heads=7"),
    (_bad("gpt-oss-20b", lambda c: c.update(layer_types=SLIDING)), 'layer_types is "sliding_attention"'),
    # a text-only Qwen3.5 fine-tune as transformers saves it: vLLM 0.24.0 runs only the multimodal class
    (_text_only("Qwen3.5-27B", "Qwen3_5ForCausalLM"), "architectures names Qwen3_5ForCausalLM, which vllm 0.24.0 of "
     "the env (the rollout) does not run (its Qwen3_5 classes: Qwen3_5ForConditionalGeneration)"),
    (_bad("DeepSeek-V3", lambda c: c.update(architectures=["LlamaForCausalLM"])),
     "architectures names LlamaForCausalLM, a model of LlamaConfig, not of model_type deepseek_v3"),
])
def test_a_bad_config_fails_verify_in_one_line_with_exit_2_before_anything_runs(tmp_path, env_python, config,
                                                                                complaint):
    proc = verify_cli(tmp_path, env_python, config)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and complaint in lines[0], proc.stderr[-2000:]
    assert lines[0].startswith("verlenv verify: --model-config ")
    assert not (tmp_path / "report.json").exists() and proc.stdout == ""  # nothing ran, nothing was reported


def test_the_probe_refuses_a_class_the_rollout_engine_does_not_run(tmp_path, env_python, monkeypatch):
    """The engine's registry (data/backends.toml) read in the env; a test double of it here, so that the test does not
    depend on which classes a vLLM release has. An engine that does not import checks nothing."""
    (tmp_path / "engine_double.py").write_text(
        "class ModelRegistry:\n    @staticmethod\n    def get_supported_archs():\n"
        "        return {'Qwen3_5ForConditionalGeneration', 'GptOssForCausalLM'}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    rows = families.table().rows([shrunk(tmp_path, "Qwen3.5-27B"), shrunk(tmp_path, "GLM-4.5")])
    assert set(model_probe.check(env_python, rows[:1], 20_000_000, "engine_double:ModelRegistry")) == {rows[0]["name"]}
    with pytest.raises(UserError) as e:
        model_probe.check(env_python, rows, 20_000_000, "engine_double:ModelRegistry")
    assert ("architectures names Glm4MoeForCausalLM, which engine_double of the env (the rollout) does not run (its "
            "Glm4Moe classes: none)") in str(e.value) and "\n" not in str(e.value)
    assert set(model_probe.check(env_python, rows, 20_000_000, "no_such_engine:ModelRegistry")) == {
        r["name"] for r in rows}


# ---- the trainer check's own pipeline on shrunk published configs ----------------------------------------------

PIPELINE = ["Qwen3.5-27B", "Qwen3-VL-8B-Instruct", "Qwen3-Next-80B-A3B-Instruct", "gpt-oss-20b", "DeepSeek-V3"]


@pytest.fixture(scope="module")
def pipeline(env_python, tmp_path_factory) -> dict:
    """What the trainer check writes for a shrunk published config (tokenizer, model, processor, rows), loaded back
    by verl's dataset, trained a step, and verl's Hydra config composed for it in each variant
    (tests/data/trainer/families_in_env.py, the table's rows' own test program)."""
    from verlenv.catalog import stacks
    from verlenv.cluster.trainer import trainer_spec

    if not has_modules(env_python, "verl", "hydra", "qwen_vl_utils"):
        pytest.skip("the torch environment lacks verl, hydra or qwen_vl_utils")
    out = tmp_path_factory.mktemp("pipeline")
    fams = []
    for name in PIPELINE:
        (out / name).mkdir()
        fams.append(families.shrink(write(out / name, published.as_published(name))))
    cat = stacks.load(REPO / "stacks.toml")
    tables = out / "tables.json"
    tables.write_text(json.dumps({"specs": {v: trainer_spec(cat.variant("verl-0.9", v)) for v in ("fsdp", "megatron")},
                                  "families": families.table().rows(fams)}))
    proc = subprocess.run([env_python, str(REPO / "tests" / "data" / "trainer" / "families_in_env.py"), str(KERNELS),
                           str(out / "out.json"), str(tables)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {name: json.loads((out / "out.json").read_text())[f.name] for name, f in zip(PIPELINE, fams)}


@pytest.mark.slow
@pytest.mark.parametrize("name", PIPELINE)
def test_the_checks_pipeline_takes_each_shrunk_config(pipeline, name):
    r = pipeline[name]
    assert r["loss"] > 0 and r["grad_nonzero"] == r["with_grad"] == r["params_total"], r
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(r["files"]) and r["rows"] == 16
    assert r["rollout_tokenizer"]["error"] is None, r["rollout_tokenizer"]
    for variant in ("fsdp", "megatron"):
        assert r["composed"][variant]["rollout"] == "vllm"
    if name in ("Qwen3.5-27B", "Qwen3-VL-8B-Instruct"):  # the processor of the model type, sized from its tower
        assert r["images_in_rows"] == r["rows"] and r["vision_grad"] > 0 and r["image_tokens"] > 0, r


def test_two_checkpoints_in_folders_of_one_name_get_the_folders_above_and_one_config_twice_is_one_line(tmp_path):
    """verl saves each run's model as .../actor/huggingface: two of them are two families, named by the folders
    that tell them apart; the same config given twice (a folder and its config.json) is trained once: one line."""
    from verlenv.verify import runner
    from verlenv.verify.options import VerifyOptions

    for run, name in (("run1", "GLM-4.5"), ("run2", "DeepSeek-V3")):
        (tmp_path / run / "actor" / "huggingface").mkdir(parents=True)
        write(tmp_path / run / "actor" / "huggingface", published.as_published(name))
    one, two = (str(tmp_path / run / "actor" / "huggingface") for run in ("run1", "run2"))
    rows = runner.family_rows(VerifyOptions(model_config=(one, two)))
    assert [r["name"] for r in rows] == ["config-run1-actor-huggingface", "config-run2-actor-huggingface"]
    with pytest.raises(UserError, match=r"--model-config: .*run1/actor/huggingface/config\.json given twice; each "
                                        r"config is trained once"):
        runner.family_rows(VerifyOptions(model_config=(one, f"{one}/config.json")))
