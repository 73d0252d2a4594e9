"""Model families (data/families.toml) and a user's own config.json shrunk to the check's size (--model-config): the
table read and refused where wrong, the shrink rules on real published configs, and, inside the default env, every
family's tiny model written by the trainer check, trained one step on CPU with the env's transformers, its rows
loaded through verl's own dataset class (images with the family's processor), and verl's Hydra config composed for
it in each variant."""

import copy
import json
import subprocess
import tomllib

import pytest

from test_kernel_scripts import KERNELS, has_modules, torch_python
from test_rows import MISTRAL_ROW
from test_verify_profiles import REPO
from verlenv.catalog import families, stacks
from verlenv.cluster.trainer import trainer_spec
from verlenv.errors import UserError

CONFIGS = REPO / "tests" / "data" / "model-configs"
PROGRAM = REPO / "tests" / "data" / "trainer" / "families_in_env.py"
REAL = {"vl": CONFIGS / "Qwen2.5-VL-3B-Instruct" / "config.json", "moe": CONFIGS / "Qwen3-30B-A3B" / "config.json"}


def table():
    return families.table()


def test_the_table_holds_the_families_users_train():
    names = table().names()
    assert {"llama", "qwen2", "qwen3", "qwen3-moe", "qwen2.5-vl", "qwen3.5", "qwen3.5-moe", "qwen3-vl", "qwen3-next",
            "gpt-oss", "deepseek-v3", "glm4-moe"} <= set(names)
    assert [f.name for f in table().select([], thorough=False)] == table().defaults["fast"]
    assert [f.name for f in table().select([], thorough=True)] == names
    assert [f.name for f in table().select(["all"], thorough=False)] == names
    assert [f.name for f in table().select(["qwen3", "llama", "qwen3"], thorough=False)] == ["qwen3", "llama"]


def test_an_unknown_family_is_one_line_naming_the_valid_ones():
    with pytest.raises(UserError) as e:
        table().select(["gpt2"], thorough=False)
    assert str(e.value).startswith("--family gpt2: unknown family; valid: llama, qwen2") and "\n" not in str(e.value)


@pytest.mark.parametrize("change, complaint", [
    (lambda d: d["families"]["llama"].pop("model_class"), "families.llama.model_class must be a non-empty string"),
    (lambda d: d["families"]["llama"].update(inputs="audio"), "families.llama.inputs is 'audio'; valid: text, images"),
    (lambda d: d["families"]["llama"].update(colour="red"), "families.llama: unknown key 'colour'"),
    (lambda d: d["defaults"].update(fast=["gpt2"]), "defaults.fast must name families of the table"),
    (lambda d: d["defaults"].update(logit_std=0), "defaults.logit_std must be a positive number"),
    (lambda d: d["families"].update({"all": d["families"]["llama"]}), "families.all: a family's name is"),
    (lambda d: d.pop("shrink"), "missing table [shrink]"),
    (lambda d: d["families"]["qwen2.5-vl"]["known_issue"][1].update(variants="megatron"),
     "families.qwen2.5-vl.known_issue.variants must be a list of variant names"),
    (lambda d: d["families"]["qwen2.5-vl"]["known_issue"][0].update(link="x"),
     "families.qwen2.5-vl.known_issue: unknown key 'link'"),
    (lambda d: d["families"]["qwen2.5-vl"].update(known_issue="verl#7899"),
     "families.qwen2.5-vl.known_issue must be a table or an array of tables"),
    (lambda d: d["families"]["llama"].update(model_since="2026-12-07"),
     "families.llama.model_since is '2026-12-07'; give a TOML date-time with its offset"),
    (lambda d: d["families"]["llama"].update(model_since=__import__("datetime").datetime(2026, 12, 7, 23)),
     "families.llama.model_since is datetime.datetime(2026, 12, 7, 23, 0); give a TOML date-time with its offset"),
])
def test_a_broken_table_is_one_line(change, complaint):
    import tomllib

    data = tomllib.loads(families.DATA.read_text())
    change(data)
    with pytest.raises(UserError) as e:
        families.parse(families.DATA, data)
    assert complaint in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_real_vl_config_is_shrunk_keeping_its_features():
    f = families.shrink(REAL["vl"])
    config = f.config
    assert (f.model_class == "Qwen2_5_VLForConditionalGeneration" and f.inputs == "images"
            and f.model_type == "qwen2_5_vl")
    assert config["tie_word_embeddings"] is True  # the 3B ties its head: kept
    # 4 heads of the original's 128: the hidden size follows the head kept (2048 / 16 = 128).
    assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]) == (2, 512, 4)
    assert config["num_key_value_heads"] == 2  # still grouped-query (4 heads, 2 KV heads), as the original
    # The head is kept, so the original's mrope split of head_dim/2 = 64 stands as it is.
    assert config["rope_scaling"]["mrope_section"] == [16, 24, 24] and sum([16, 24, 24]) == 512 // 4 // 2
    vision = config["vision_config"]
    assert (vision["depth"], vision["fullatt_block_indexes"], vision["out_hidden_size"]) == (2, [1], 512)
    assert vision["patch_size"] == 14 and vision["window_size"] == 112  # what the image processor depends on
    assert f.shrunk["num_hidden_layers"] == [36, 2] and "torch_dtype" not in config
    assert json.loads(REAL["vl"].read_text())["num_hidden_layers"] == 36  # the file itself is untouched
    # verl 0.9.1's failure with Qwen2.5-VL (the table's row) is this architecture's: reported with its link.
    assert f.known_issues == families.table().families["qwen2.5-vl"].known_issues
    assert [i["url"] for i in f.known_issues] == ["https://github.com/verl-project/verl/issues/7899",
                                                  "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4507"]


def test_a_real_moe_config_keeps_its_experts_routing_and_head_size_ratio():
    f = families.shrink(REAL["moe"])
    config = f.config
    assert f.inputs == "text" and f.model_class == "Qwen3MoeForCausalLM"
    assert (config["num_experts"], config["num_experts_per_tok"], config["moe_intermediate_size"]) == (8, 2, 128)
    assert config["norm_topk_prob"] is True and config["decoder_sparse_step"] == 1 and config["mlp_only_layers"] == []
    # Qwen3 names its head_dim (128, twice 2048/32): kept as it is, beside the shrunk hidden size.
    assert config["head_dim"] == 128 and config["hidden_size"] == 256
    assert f.name == "config-qwen3-30b-a3b"
    assert f.known_issues == ()  # no row of its architecture has a known failure


def test_per_layer_lists_and_layer_indexes_follow_the_layers_kept(tmp_path):
    config = json.loads(REAL["moe"].read_text())
    config.update(num_hidden_layers=6, mlp_only_layers=[0, 1, 5], layer_types=["full_attention"] * 6)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    shrunk = families.shrink(path).config
    assert shrunk["mlp_only_layers"] == [0, 1] and shrunk["layer_types"] == ["full_attention"] * 2


@pytest.mark.parametrize("change, complaint", [
    (lambda c: c.update(model_type="gpt2"), "cannot shrink model_type 'gpt2'; known: llama"),
    (lambda c: c.pop("model_type"), "no model_type"),
    (lambda c: c.pop("architectures"), "no architectures list"),
    (lambda c: c.update(moe_num_experts=256), "does not know how to shrink moe_num_experts=256"),
])
def test_a_config_it_cannot_shrink_is_one_line_naming_what_it_does_not_know(tmp_path, change, complaint):
    config = json.loads(REAL["moe"].read_text())
    change(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UserError) as e:
        families.shrink(path)
    assert complaint in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_vl_config_without_vision_rules_or_tower_is_refused(tmp_path):
    config = json.loads(REAL["vl"].read_text())
    del config["vision_config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(UserError, match="has no vision_config to shrink"):
        families.shrink(path)
    rules = copy.deepcopy(table().shrink)
    del rules["vision"]["qwen2_5_vl"]
    broken = families.Table(table().path, table().families, table().defaults, rules)
    with pytest.raises(UserError, match=r"has a vision_config but no \[shrink.vision.qwen2_5_vl\] rules"):
        families.shrink(REAL["vl"], broken)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]"])
def test_a_file_that_is_not_a_config_is_one_line(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        families.shrink(path)
    assert str(e.value).startswith(f"--model-config {path}:") and "\n" not in str(e.value)
    with pytest.raises(UserError, match="No such file"):
        families.shrink(tmp_path / "missing.json")


def test_a_hub_id_given_for_a_config_is_told_to_download_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder of that name here
    with pytest.raises(UserError) as e:
        families.shrink("Qwen/Qwen3-8B")
    assert "looks like a Hugging Face Hub id" in str(e.value)
    assert "hf download Qwen/Qwen3-8B config.json" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError, match="No such file"):  # a relative path to a missing config is only missing
        families.shrink("missing/config.json")


@pytest.fixture(scope="module")
def in_env(tmp_path_factory) -> dict:
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    if not has_modules(python, "verl", "hydra", "transformers", "qwen_vl_utils"):
        pytest.skip("the torch environment lacks verl, hydra, transformers or qwen_vl_utils")
    cat = stacks.load(REPO / "stacks.toml")
    # The table's rows, a test-only row added by data alone (test_rows.py), and the real configs shrunk.
    extra = families.parse(families.DATA, tomllib.loads(families.DATA.read_text() + MISTRAL_ROW))
    rows = extra.rows(list(extra.families.values()) + [families.shrink(p) for p in REAL.values()])
    out = tmp_path_factory.mktemp("families")
    tables = out / "tables.json"
    tables.write_text(json.dumps({"specs": {v: trainer_spec(cat.variant("verl-0.9", v)) for v in ("fsdp", "megatron")},
                                  "families": rows}))
    proc = subprocess.run([python, str(PROGRAM), str(KERNELS), str(out / "out.json"), str(tables)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "out.json").read_text())


ALL = ["llama", "qwen2", "qwen3", "qwen3-moe", "qwen2.5-vl", "qwen3.5", "qwen3.5-moe", "qwen3-vl", "qwen3-next",
       "gpt-oss", "deepseek-v3", "glm4-moe", "mistral", "config-qwen2.5-vl-3b-instruct", "config-qwen3-30b-a3b"]
VL = ["qwen2.5-vl", "qwen3.5", "qwen3.5-moe", "qwen3-vl", "config-qwen2.5-vl-3b-instruct"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_each_family_trains_a_step_on_cpu_with_the_envs_transformers(in_env, name):
    r = in_env[name]
    assert r["loss"] > 0 and r["grad_nonzero"] == r["with_grad"] == r["params_total"], r
    assert r["config"]["vocab_size"] == 512 and r["config"]["num_hidden_layers"] == 2
    # Tiny: it starts in seconds on any GPU (DeepSeek-V3's published MLA ranks, q 1536 and kv 512, make most of its
    # 6.3M parameters).
    assert r["params"] < 8_000_000
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(r["files"]) and r["rows"] == 16


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_each_familys_sampling_stays_stochastic(in_env, name):
    """The init keeps sampling diverse, tied head or not (a tied head at N(0, 0.15) made it deterministic)."""
    init = in_env[name]["init"]
    assert init["entropy_min"] > 2.0 and init["top_prob_max"] < 0.6, init
    assert init["logit_std"] == pytest.approx(2.0, rel=0.05)


@pytest.mark.slow
def test_tied_and_moe_families_exercise_what_they_are_for(in_env):
    assert in_env["qwen2"]["tied"] is True and in_env["llama"]["tied"] is False
    assert in_env["config-qwen2.5-vl-3b-instruct"]["tied"] is True  # the real 3B's tied head, kept by the shrink
    assert in_env["qwen3-moe"]["expert_grad"] > 0 and in_env["config-qwen3-30b-a3b"]["expert_grad"] > 0


def vl_row() -> dict:
    rows = table().rows(list(table().families.values()))
    return next(row for row in rows if row["name"] == "qwen2.5-vl")


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["verl-0.7", "verl-0.9"])
def test_the_image_familys_processor_loads_in_each_stacks_verl(stack, tmp_path):
    """transformers 4.57 (verl-0.7) takes only Qwen2 tokenizer classes in Qwen2.5-VL's processor; the check's
    word-level tokenizer failed there ("Received a PreTrainedTokenizerFast ... but a ('Qwen2Tokenizer',
    'Qwen2TokenizerFast') was expected" on the GPU). Written by the check, loaded by that stack's own verl."""
    python = REPO / f".venv-{stack}-fsdp" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {stack} fsdp env here (.venv-{stack}-fsdp): `nox -s env -- --stack {stack}` makes it")
    proc = subprocess.run([str(python), str(REPO / "tests" / "data" / "trainer" / "vl_processor_in_env.py"),
                           str(KERNELS), str(tmp_path), json.dumps(vl_row())], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["processor"] == "Qwen2_5_VLProcessor" and r["template_kept"], r
    written, loaded, in_processor = r["ids"]
    assert written == loaded == in_processor and len(written) == 5, r  # the same tokens, "\n" and <|im_end|> one each


@pytest.mark.slow
@pytest.mark.parametrize("name", VL)
def test_the_vl_rows_load_through_verls_dataset_with_the_familys_processor(in_env, name):
    r = in_env[name]
    assert r["images_in_rows"] == r["rows"] and r["dataset_items"] == r["rows"] and r["raw_has_image"]
    # An image of 2 x 2 merged tokens: 4 x 4 patches (14 px for Qwen2.5-VL, 16 px for Qwen3-VL and Qwen3.5) merged
    # 2 x 2 -> 4 image tokens, 16 pixel rows; the processor is the one transformers maps the model type to.
    assert (r["image_tokens"], r["pixel_rows"]) == (4, 16)
    assert r["processor"] == ("Qwen2_5_VLProcessor" if "2.5" in name else "Qwen3VLProcessor"), r["processor"]
    assert r["vision_grad"] > 0  # the vision tower trains
    assert "processor_config.json" in r["files"] or "preprocessor_config.json" in r["files"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_verls_rollout_tokenizes_each_familys_tokenizer(in_env, name):
    """verl builds its Continuous Token builder from the family's tokenizer: a Qwen family's builder needs "\n" as
    one token and <|im_end|> (without them every rollout of qwen2/qwen3/qwen3-moe failed on the GPU)."""
    r = in_env[name]["rollout_tokenizer"]
    assert r["error"] is None, r
    if r["model_type"].startswith("qwen") and r["verl_maps_type"]:
        assert r["builder"].startswith("Qwen"), r  # the Qwen boundary handling, not the generic builder
    # verl 0.9.1 maps every Qwen family of the table to its Qwen builders but Qwen3-Next (the generic builder).
    assert r["verl_maps_type"] or r["model_type"] in ("qwen3_next", "gpt_oss", "deepseek_v3", "glm4_moe", "mistral",
                                                      "llama"), r


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_verls_config_composes_for_each_family_in_each_variant(in_env, name):
    for variant in ("fsdp", "megatron"):
        composed = in_env[name]["composed"][variant]
        assert composed["model"].endswith("model") and composed["experiment"] == f"verify-{name}"
        assert composed["rollout"] == "vllm"


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_the_checks_prompts_vary_in_length_as_a_users_do(in_env, name):
    """An equal-length batch skips prompt padding and meets verl#7899 (below); the check's questions vary."""
    lengths = in_env[name]["prompt_tokens"]
    assert len(set(lengths)) >= 8 and max(lengths) + 4 < 64, lengths  # 4 image tokens; max_prompt_length 64


@pytest.mark.slow
def test_verls_micro_batch_split_takes_the_checks_vl_batch_and_not_an_equal_length_one(in_env):
    """verl 0.9.1's own maybe_fix_3d_position_ids + chunk_tensordict on mRoPE position ids: the check's batch (its
    prompts' lengths) comes back intact; the same batch with one length fails, the upstream bug verl#7899 that the
    family's known_issue and the doctor's F52 name. When a verl release fixes it, the second assert says so."""
    split = in_env["mrope_split"]
    assert split["rows"] == {"error": None, "intact": True}, split
    assert split["one_length"]["error"] and not split["one_length"]["intact"], split


def test_an_unknown_family_beside_all_is_not_dropped():
    for names in (["all", "gpt2"], ["gpt2", "all"]):
        with pytest.raises(UserError) as e:
            table().select(names, thorough=False)
        assert str(e.value).startswith("--family gpt2: unknown family; valid: ")


# Run by the env's python: causal-conv1d's and fla's kernels replaced, in transformers' modeling modules, by a test
# double that refuses CPU tensors as the real CUDA/Triton kernels do (neither can run on this machine); the check's
# calibration must still build and scale the hybrid families' models on CPU.
CUDA_ONLY_KERNELS = """
import json, sys, importlib
sys.path.insert(0, sys.argv[1])
import torch, _models
def cuda_only(*args, **kwargs):
    raise RuntimeError("Expected x.is_cuda() to be true, but got false.")
class CudaOnlyGatedNorm(torch.nn.Module):  # fla's FusedRMSNormGated: its Triton kernel takes no CPU tensor
    def __init__(self, hidden_size, eps=1e-5, activation="silu", device=None, dtype=None):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.full((hidden_size,), 0.5))
    def forward(self, x, gate=None):
        raise ValueError("Pointer argument (at 0) cannot be accessed from Triton (cpu tensor?)")
torch.cuda.current_device = lambda: "cpu"  # transformers builds fla's norm on the current CUDA device
for name in ("qwen3_5", "qwen3_5_moe", "qwen3_next"):
    modeling = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    for kernel in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_gated_delta_rule",
                   "fused_recurrent_gated_delta_rule"):
        setattr(modeling, kernel, cuda_only)
    modeling.FusedRMSNormGated = CudaOnlyGatedNorm
out = {}
for row in json.loads(sys.argv[2]):
    model = _models.build_model(row, torch)
    layers = [m for m in model.modules() if hasattr(m, "chunk_gated_delta_rule")]
    out[row["name"]] = {"layers": len(layers), "stats": _models.sampling_stats(model, torch),
                        "doubles_left": sum(getattr(m, k, None) is cuda_only for m in layers
                                            for k in _models.TORCH_PATHS),
                        "norms_left": sum(isinstance(m.norm, CudaOnlyGatedNorm) for m in layers),
                        "norm_weights": sorted({round(w, 3) for m in layers for w in m.norm.weight.tolist()})}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_hybrid_families_calibrate_on_cpu_beside_cuda_only_kernels():
    """GPU visit K: with causal-conv1d installed, the check's CPU calibration called its CUDA kernel and Qwen3.5,
    Qwen3.5-MoE and Qwen3-Next failed before verl started; GPU visit M: then on fla's gated RMSNorm. The calibration
    now takes transformers' torch fallbacks, the norm's weight kept."""
    python = torch_python()
    if python is None or not has_modules(python, "transformers"):
        pytest.skip("no env python with torch and transformers")
    names = [n for n, f in table().families.items() if f.needs.get("causal-conv1d")]
    assert sorted(names) == ["qwen3-next", "qwen3.5", "qwen3.5-moe"]
    rows = table().rows([table().families[n] for n in names])
    proc = subprocess.run([python, "-c", CUDA_ONLY_KERNELS, str(KERNELS), json.dumps(rows)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in names:
        assert out[name]["layers"] >= 1 and out[name]["doubles_left"] == 0 and out[name]["norms_left"] == 0, out[name]
        assert out[name]["norm_weights"] == [0.5], out[name]  # the torch norm took the fla norm's weight
        assert out[name]["stats"]["logit_std"] == pytest.approx(2.0, rel=0.05)


# Run by the env's python: each MoE family's model written as the check writes it; the expert tensors' names.
EXPERT_NAMES = """
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch, _models
from safetensors import safe_open
out = {}
for row in json.loads(sys.argv[2]):
    directory = tempfile.mkdtemp()
    _models.write_model(directory, torch, row)
    names = []
    for f in sorted(os.listdir(directory)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(directory, f), "pt") as s:
                names += [k for k in s.keys() if ".mlp.experts." in k]
    out[row["name"]] = sorted(names)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_moe_checkpoints_are_laid_out_as_the_published_ones():
    """GPU visit N: Megatron-Bridge 0.5.2's Qwen3.5 bridge reads the experts packed, as Qwen3.5-MoE's hub checkpoints
    hold them (KeyError 'model.language_model.layers.0.mlp.experts.gate_up_proj'); transformers 5.9 saves them one
    tensor per expert unless told. Qwen3-Next's and Qwen3-MoE's hub checkpoints (and their bridges) are per expert."""
    python = torch_python()
    if python is None or not has_modules(python, "transformers", "safetensors"):
        pytest.skip("no env python with torch and transformers")
    names = ["qwen3.5-moe", "qwen3-next", "qwen3-moe"]
    rows = table().rows([table().families[n] for n in names])
    proc = subprocess.run([python, "-c", EXPERT_NAMES, str(KERNELS), json.dumps(rows)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    packed = [f"model.language_model.layers.{i}.mlp.experts.{w}" for i in (0, 1) for w in ("down_proj", "gate_up_proj")]
    assert out["qwen3.5-moe"] == packed
    for name in ("qwen3-next", "qwen3-moe"):
        assert "model.layers.0.mlp.experts.0.gate_proj.weight" in out[name], out[name][:4]
        assert not [k for k in out[name] if k.endswith("gate_up_proj")], name


def test_deepseek_v3_keeps_the_router_bias_vllm_registers_only_for_noaux_tc():
    """vLLM 0.24.0's DeepSeek model (deepseek_v2.py) registers the router's correction bias only when the config says
    topk_method "noaux_tc" (the published DeepSeek-V3 config does); transformers' always has it, so a config without
    it breaks verl's first weight sync (GPU visit K)."""
    assert table().families["deepseek-v3"].config["topk_method"] == "noaux_tc"
    vllm = torch_python() and REPO / ".venv-verl-0.9-fsdp" / "lib"
    source = next(vllm.glob("python3*/site-packages/vllm/model_executor/models/deepseek_v2.py"), None) if vllm else None
    if source is None:
        pytest.skip("the verl-0.9 env's vLLM is not here")
    assert 'getattr(config, "topk_method", None) == "noaux_tc"' in source.read_text()


def test_gpt_oss_known_issue_is_recognised_in_its_real_log_and_only_there():
    """vllm-project/vllm#45830, from GPU visit K's own trainer logs: gpt-oss's weight sync, in both actors; the
    deepseek-v3 run's KeyError in the same place (a row of ours without topk_method, since fixed) is not it."""
    logs = REPO / "tests" / "data" / "logs"
    gpt_oss = (logs / "F63-verlenv-visit-k-gpt-oss.log").read_text().splitlines()
    deepseek = (logs / "F63-verlenv-visit-k-deepseek-v3.log").read_text().splitlines()
    row = table().families["gpt-oss"]
    for variant in ("fsdp", "megatron"):
        assert row.known_failure(gpt_oss, variant)["url"].endswith("/45830")
        assert row.known_failure(deepseek, variant) is None
    assert table().families["deepseek-v3"].known_failure(deepseek, "fsdp") is None
    # What a hung run's report keeps: the engine's line (the megatron run's, visit K), not the worker's KeyError.
    engine = ("(vLLMHttpServer pid=25037) (EngineCore pid=26060) ERROR 12-05 16:38:31 [core.py:1449] RuntimeError: "
              "Worker failed with error ''layers.0.mlp.experts.w13_bias'', please check the stack trace above")
    assert row.known_failure([engine], "megatron")["url"].endswith("/45830")
