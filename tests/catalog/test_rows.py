"""A new rollout engine and a new model family are rows: a test-only rollout row (backends.toml), its package row
(packages.toml) with a stand-in check script, and a variant naming it (stacks.toml) reach verify's requirements, its
script order and the trainer check's command line with no code changed; a family row reaches the check whole."""

import dataclasses
import json
import sys
import tomllib
from pathlib import Path

import pytest

from verlenv.catalog import backends, families, gpus, packages, stacks
from verlenv.errors import UserError
from verlenv.verify import runner
from verlenv.verify.options import VerifyOptions

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "src" / "verlenv" / "verify" / "kernels"
sys.path.insert(0, str(KERNELS))  # the check script's own imports (_common, _models, _phases), as when it runs
import check_verl_trainer  # noqa: E402

# Test-only rows (test doubles of a rollout engine that does not exist).
ROLLOUT_ROW = """
[rollouts.tinyserve]
description = "a stand-in rollout engine"
package = "tinyserve"
tp_divides = ["num_attention_heads"]
fast_overrides = ["++actor_rollout_ref.rollout.engine_kwargs.tinyserve.eager=True"]
log_env = { TINYSERVE_LOG = "info" }
server_args = "^tinyserve ready"
parts = ["warmup"]

[[rollouts.tinyserve.reports]]
name = "warmup"
pattern = "warm in ([\\\\d.]+) s"
source = "tinyserve: 'warm in %.1f s'"
"""
PACKAGE_ROW = """
[packages.tinyserve]
dists = ["tinyserve"]
required_by = ["rollout:tinyserve"]
checks = ["tinyserve"]
"""
MISTRAL_ROW = """
[families.mistral]
description = "Mistral: sliding-window attention"
exercises = "a sliding attention window"
config_class = "MistralConfig"
model_class = "MistralForCausalLM"
inputs = "text"
config = { hidden_size = 256, intermediate_size = 512, num_hidden_layers = 2, num_attention_heads = 4,\
 num_key_value_heads = 2, sliding_window = 32, max_position_embeddings = 512 }
"""
VARIANT = """
[stacks."verl-0.9".variants.tiny]
extends = "fsdp"
rollout = "tinyserve"
requirements = ["tinyserve==1.0"]
"""


def with_rows(monkeypatch, tmp_path) -> stacks.Catalog:
    """The packaged tables plus the test-only rows, and a catalog with a variant on the new rollout."""
    back = backends.parse(backends.DATA, tomllib.loads(backends.DATA.read_text() + ROLLOUT_ROW))
    pack = packages.parse(packages.DATA, tomllib.loads(packages.DATA.read_text() + PACKAGE_ROW))
    monkeypatch.setattr(backends, "table", lambda: back)
    monkeypatch.setattr(packages, "table", lambda: pack)
    path = tmp_path / "stacks.toml"
    path.write_text((REPO / "stacks.toml").read_text() + VARIANT)
    return stacks.load(path)


def test_a_new_rollout_is_rows_alone(monkeypatch, tmp_path):
    cat = with_rows(monkeypatch, tmp_path)
    variant = cat.variant("verl-0.9", "tiny")
    assert (variant.actor, variant.rollout) == ("fsdp", "tinyserve")
    # vLLM is not required of it; the new engine is, and its check script runs in its row's order.
    required = packages.table().required(variant.actor, variant.rollout)
    assert "tinyserve" in required and "vllm" not in required and "flash-attn" in required
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for name in ("check_torch.py", "check_tinyserve.py", "check_verl.py"):
        (kernels / name).write_text("")
    # Rows in file order: torch's script first, verl's, then the appended engine's.
    assert [p.name for p in runner.scripts(kernels)] == ["check_torch.py", "check_verl.py", "check_tinyserve.py"]
    assert runner.package_of(kernels / "check_tinyserve.py") == "tinyserve"
    # The trainer check gets the rollout's row whole and drives verl with it.
    options = VerifyOptions(variant="tiny")
    h100 = gpus.profile("h100")
    settings = runner.Settings.from_options(options, python=sys.executable, cat=cat, variant=variant, profile=h100,
                                            visible=[gpus.Gpu("NVIDIA H100", "9.0", 81559, "580")], lock=None)
    spec = settings.trainer()
    assert spec["rollout"]["name"] == "tinyserve" and spec["rollout"]["log_env"] == {"TINYSERVE_LOG": "info"}
    family = settings.families[0]
    paths = {k: f"/t/{k}" for k in ("model", "data", "reward", "checkpoints", "run")}
    fast = check_verl_trainer.overrides(paths, spec, family)
    assert "actor_rollout_ref.rollout.name=tinyserve" in fast
    assert "++actor_rollout_ref.rollout.engine_kwargs.tinyserve.eager=True" in fast
    assert not any("vllm" in o for o in fast)  # nothing of vLLM's rows leaks into another engine's run
    # Its phase lines are read from its row.
    import _phases

    lines = [_phases.Line(1.0, "reward loop manager initialized"), _phases.Line(2.0, "tinyserve ready"),
             _phases.Line(3.0, "warm in 4.5 s"), _phases.Line(9.0, "LLMServerManager: ['a']")]
    out = _phases.phases(lines, None, 10.0, {}, rollout=spec["rollout"])
    assert out["phase/rollout_server/warmup_s"] == 4.5 and out["phase/rollout_server/server_process_s"] == 1.0


def test_a_new_family_is_a_row_alone(tmp_path):
    """A Mistral row (sliding-window attention) is read, selected and handed to the check whole (test_families.py
    builds and trains it on CPU with the rest)."""
    table = families.parse(families.DATA, tomllib.loads(families.DATA.read_text() + MISTRAL_ROW))
    row = table.rows(table.select(["mistral"], thorough=False))[0]
    assert row["model_class"] == "MistralForCausalLM" and row["config"]["sliding_window"] == 32
    assert "mistral" in [f.name for f in table.select([], thorough=True)]
    spec = {"actor": backends.table().actor("fsdp").row(), "rollout": backends.table().rollout("vllm").row(),
            "overrides": {}}
    paths = {k: f"/t/{k}" for k in ("model", "data", "reward", "checkpoints", "run")}
    assert "trainer.experiment_name=verify-mistral" in check_verl_trainer.overrides(paths, spec, row)
    json.dumps(row)  # it travels as JSON in --profile and to every cluster node
    assert dataclasses.asdict(table.families["mistral"])["config_class"] == "MistralConfig"


def test_the_sglang_variant_is_rows_alone():
    """verl-0.9's sglang variant: its rollout row, its package row and check script, no code of its own in the
    runner."""
    cat = stacks.load(REPO / "stacks.toml")
    variant = cat.variant("verl-0.9", "sglang")
    required = packages.table().required(variant.actor, variant.rollout)
    assert {"sglang", "flash-attn", "verl"} <= required and "vllm" not in required
    names = [p.name for p in runner.scripts(KERNELS)]
    assert names.index("check_vllm.py") < names.index("check_sglang.py") < names.index("check_nccl.py")
    assert runner.package_of(KERNELS / "check_sglang.py") == "sglang"
    settings = runner.Settings.from_options(VerifyOptions(variant="sglang"), python=sys.executable, cat=cat,
                                            variant=variant, profile=gpus.profile("h100"),
                                            visible=[gpus.Gpu("NVIDIA H100", "9.0", 81559, "580")], lock=None)
    spec = settings.trainer()
    assert spec["rollout"]["name"] == "sglang" and spec["actor"]["name"] == "fsdp"
    paths = {k: f"/t/{k}" for k in ("model", "data", "reward", "checkpoints", "run")}
    fast = check_verl_trainer.overrides(paths, spec, settings.families[0])
    assert "actor_rollout_ref.rollout.name=sglang" in fast and not any("vllm" in o for o in fast)


def test_a_rollouts_registry_is_module_colon_object(tmp_path):
    """The registry `verify --model-config` asks for the engine's model classes: one line when it is not a spec."""
    data = tomllib.loads(backends.DATA.read_text())
    assert backends.parse(backends.DATA, data).rollout("vllm").registry == \
        "vllm.model_executor.models.registry:ModelRegistry"
    assert backends.parse(backends.DATA, data).rollout("sglang").registry is None
    data["rollouts"]["vllm"]["registry"] = "vllm.model_executor.models.registry.ModelRegistry"
    with pytest.raises(UserError, match=r"rollouts\.vllm\.registry: .*give module:object"):
        backends.parse(backends.DATA, data)
