"""The megatron env's bridge is Megatron-Bridge, verl 0.9.1's default: in an installed megatron env (no GPU), verl's
own path imports it and builds the model providers of the check's families; verify's static checks pass on it with
only the reviewed exceptions (pip check's unmet requirements, megatron-core gaps), no more, no fewer.

Skipped without the env: `verlenv install --stack verl-0.9 --variant megatron`, then `verlenv build
transformer-engine-torch megatron-bridge --variant megatron --archs '8.0;9.0' --source <Megatron-Bridge clone>`
(or $VERLENV_TEST_MEGATRON_PYTHON naming such an env's python).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from test_kernel_scripts import has_modules
from verlenv.catalog import families, packages, pins, stacks
from verlenv.native import recipes
from verlenv.verify import static

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = Path(__file__).with_name("megatron_bridge_provider.py")
KERNELS = ROOT / "src" / "verlenv" / "verify" / "kernels"
VARIANT = stacks.load(ROOT / "stacks.toml").variant("verl-0.9", "megatron")
OVERRIDE_PREFIX = "actor_rollout_ref.actor.megatron.override_transformer_config."


@pytest.fixture(scope="module")
def python() -> str:
    candidates = [os.environ.get("VERLENV_TEST_MEGATRON_PYTHON", ""),
                  str(ROOT / f".venv-{VARIANT.key}" / "bin" / "python")]
    for candidate in filter(None, candidates):
        if not Path(candidate).is_file():
            continue
        if has_modules(candidate, "megatron.bridge", "verl"):
            return candidate
    pytest.skip(f"no megatron env with Megatron-Bridge: install .venv-{VARIANT.key} and build megatron-bridge into it "
                "(see this file's docstring), or set VERLENV_TEST_MEGATRON_PYTHON")


@pytest.fixture(scope="module")
def providers(python, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("bridge")
    table = families.table()
    (folder / "rows.json").write_text(json.dumps(table.rows(table.select(["llama", "qwen3-moe", "qwen2.5-vl"], False))))
    # The env's own override_transformer_config settings (stacks.toml trainer_overrides), as verl receives them.
    env = {k.removeprefix(OVERRIDE_PREFIX): v for k, v in (o.split("=", 1) for o in VARIANT.trainer_overrides)
           if k.startswith(OVERRIDE_PREFIX)}
    (folder / "overrides.json").write_text(json.dumps(env))
    proc = subprocess.run([python, str(PROGRAM), str(KERNELS), str(folder / "rows.json"),
                           str(folder / "overrides.json"), str(folder / "out.json")], capture_output=True, text=True,
                          timeout=900,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((folder / "out.json").read_text())


@pytest.mark.slow
def test_verls_default_bridge_is_the_pinned_megatron_bridge_over_the_locked_megatron_core(providers):
    locked = pins.read_lock(pins.lock_path(ROOT, VARIANT))
    versions = providers["versions"]
    assert versions["megatron-core"] == locked["megatron-core"].version
    assert versions["megatron-bridge"] == recipes.load(ROOT, "megatron-bridge").source["version"]
    assert (versions["transformers"], versions["verl"]) == (locked["transformers"].version, locked["verl"].version)
    # verl takes Megatron-Bridge >= 0.5.0's helpers, not its own fallback copies, and its DDP config from it.
    assert set(providers["verl_helpers_from"].values()) == {"megatron.bridge.training.utils.train_utils"}
    assert providers["ddp_config"] == {"type": "DistributedDataParallelConfig", "use_distributed_optimizer": True}


@pytest.mark.slow
def test_the_families_providers_carry_their_configs(providers):
    rows = {r["name"]: r for r in families.table().rows(families.table().select(["llama", "qwen3-moe", "qwen2.5-vl"],
                                                                                False))}
    expected = {"llama": ("LlamaBridge", "GPTModelProvider"), "qwen3-moe": ("Qwen3MoEBridge", "GPTModelProvider"),
                "qwen2.5-vl": ("Qwen25VLBridge", "Qwen25VLModelProvider")}
    for name, (bridge, provider) in expected.items():
        got, row = providers["families"][name], rows[name]
        text = row["config"].get("text_config", row["config"])
        assert (got["bridge"], got["provider"]) == (bridge, provider), name
        assert (got["num_layers"], got["hidden_size"], got["num_attention_heads"], got["num_query_groups"],
                got["ffn_hidden_size"]) == (text["num_hidden_layers"], text["hidden_size"], text["num_attention_heads"],
                                            text["num_key_value_heads"], text["intermediate_size"]), name
        # verl's provider overrides and the env's own (TE picks its attention: stacks.toml trainer_overrides).
        assert got["bf16"] and got["variable_seq_lengths"] and got["tensor_model_parallel_size"] == 1, name
        assert got["attention_backend"] == "auto", name
        assert got["vocab_size"] == 512, name  # the check tokenizer's
    moe = providers["families"]["qwen3-moe"]
    assert ((moe["num_moe_experts"], moe["moe_router_topk"], moe["moe_ffn_hidden_size"], moe["qk_layernorm"])
            == (8, 2, 128, True))
    assert moe["moe_grouped_gemm"]  # TE's grouped GEMM for the experts, as Megatron-Bridge's Qwen3-MoE bridge sets it
    vl = providers["families"]["qwen2.5-vl"]
    assert vl["position_embedding_type"] == "mrope" and vl["add_qkv_bias"] and vl["rotary_base"] == 1e6


@pytest.mark.slow
def test_the_qwen25_vl_bridge_keeps_its_default_mrope_sections_whatever_the_model_says(providers):
    """Megatron-Bridge 0.5.2's Qwen2.5-VL bridge never reads the HF config's mrope_section (qwen25_vl_bridge.py;
    Qwen3-VL's does): the provider keeps [16, 24, 24], the published models' split of a 128-wide head. The check's
    family has 64-wide heads ([8, 12, 12]), so megatron-core's rotary table fails at the first forward unless the
    model's sections are passed (override_transformer_config.mrope_section). This test fails when that changes."""
    vl = providers["families"]["qwen2.5-vl"]
    assert vl["kv_channels"] == 64 and vl["hf_mrope_section"] == [8, 12, 12]
    assert vl["mrope_section"] == [16, 24, 24]
    assert vl["mrope_forward"].startswith("RuntimeError: split_with_sizes expects split_sizes to sum exactly to 64")
    assert vl["mrope_forward_hf_sections"] == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("has_pip", [True, False], ids=["pip", "uv"])
def test_pip_check_passes_with_exactly_the_reviewed_unmet_requirements(python, has_pip):
    r = static.check_pip(python, has_pip)
    assert r.status in ("pass", "warn") and not r.numbers["problems"], r.reason
    reviewed = {key for key in packages.table().unmet() if key[0] == "megatron-bridge"}
    # Every reviewed row is met by a line (none stale), and every unmet requirement of Megatron-Bridge is reviewed.
    assert {static._unmet_requirement(line) for line in r.numbers["expected"]} == reviewed


@pytest.mark.slow
def test_megatron_core_names_used_by_megatron_bridge_and_verl_are_defined_or_reviewed(python):
    from verlenv.doctor import facts
    from verlenv.verify.runner import Scope

    r = static.check_megatron_api(facts.gather(python), VARIANT.megatron_api_gaps, Scope(frozenset({"megatron-core"})))
    assert r.status == "pass", r.reason
    assert any(u.startswith("megatron-bridge ") for u in r.numbers["users"]) and not r.numbers["unexpected"]
    assert set(r.numbers["reviewed_gaps"]) == set(VARIANT.megatron_api_gaps)  # none stale


@pytest.mark.slow
def test_the_doctor_finds_verls_bridge_in_the_megatron_env(python):
    """The log of an env without Megatron-Bridge (F44), checked against this env: its fix is in place here."""
    from test_doctor_node_probes import excerpt
    from verlenv.doctor import diagnose_text, facts, probes

    checks = probes.check_findings(diagnose_text(excerpt("F44-verl-6931.log")), facts.gather(python))
    megatron = checks["F44"][0]
    version = recipes.load(ROOT, "megatron-bridge").source["version"]
    assert (megatron.name, megatron.status) == ("megatron", "ok") and f"Megatron-Bridge {version}" in megatron.summary
