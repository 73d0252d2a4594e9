"""An actor's needed compiled modules (data/backends.toml `needs`) are imported before verl's trainers start: GPU visit
P's five Megatron trainers, in an env without apex, spent 8 minutes on a warm compile and then stopped at model
construction (megatron-core's ColumnParallelLinear with gradient_accumulation_fusion on needs apex's
fused_weight_gradient_mlp_cuda). Now the trainer checks fail at once, in one line each, and nothing is compiled."""

import types

import pytest

from test_kernel_scripts import load
from verlenv.catalog import backends, families
from verlenv.errors import UserError

TRAINER = load("verl_trainer")
COMMON = load("_common")


def test_the_megatron_actor_needs_apexs_wgrad_extension_and_fsdp_flash_attn_where_it_is_the_attention():
    table = backends.table()
    megatron, fsdp = table.actor("megatron"), table.actor("fsdp")
    assert [(n.module, n.package, n.when) for n in megatron.needs] == [("fused_weight_gradient_mlp_cuda", "apex", None)]
    assert "gradient_accumulation_fusion" in megatron.needs[0].why
    assert megatron.needed_packages() == {"apex"} and fsdp.needed_packages() == {"flash-attn"}
    assert megatron.row()["needs"][0]["module"] == "fused_weight_gradient_mlp_cuda"  # travels to the check whole
    [need] = fsdp.row()["needs"]
    assert need["module"] == "flash_attn_2_cuda" and need["when"] == {
        "key": "actor_rollout_ref.model.override_config.attn_implementation", "value": "flash_attention_2",
        "default": "flash_attention_2"}


def test_the_fsdp_need_follows_each_familys_attention_override():
    """gpt-oss runs eager attention in the FSDP actor (families.toml): its trainer needs no flash-attn; the others
    do. Read from the real tables, so a family that changes its attention changes this."""
    fsdp = backends.table().actor("fsdp").row()
    table = families.table()
    missing = {row["name"]: TRAINER.missing_needs(fsdp, absent, overrides=row["overrides"])
               for row in table.rows(list(table.families.values()))}
    assert missing["gpt-oss"] == [] and missing["llama"] and missing["qwen3.5"]
    assert "(actor_rollout_ref.model.override_config.attn_implementation is flash_attention_2 for this family)" in \
        missing["llama"][0]


@pytest.mark.parametrize("needs, words", [
    ([{"module": "m", "package": "p", "why": "w", "when": "x"}], "when must be a table"),
    ([{"module": "m", "package": "p", "why": "w", "when": {"key": "k", "value": "v"}}], "default must be a non-empty"),
    ([{"module": "m", "package": "p", "why": "w", "when": {"key": "k", "value": "v", "default": "d", "x": 1}}],
     "unknown key 'x'"),
    ("apex", "must be a list"), (["apex"], "must be a table"),
    ([{"module": "m", "package": "p", "why": "w", "extra": 1}], "unknown key 'extra'"),
    ([{"module": "no such", "package": "p", "why": "w"}], "not an importable module name"),
    ([{"module": "m", "package": "", "why": "w"}], "package must be a non-empty string"),
])
def test_a_bad_needs_row_is_one_line(tmp_path, needs, words):
    row = {"description": "d", "config_name": "c", "needs": needs}
    data = {"actors": {"x": row}, "rollouts": {"vllm": {"description": "d", "package": "vllm"}}}
    with pytest.raises(UserError, match="actors.x") as e:
        backends.parse(tmp_path / "backends.toml", data)
    assert words in str(e.value) and "\n" not in str(e.value)


ACTOR = {"name": "megatron", "needs": [{"module": "wgrad_ext", "package": "apex", "why": "the fusion needs it"}]}


def absent(name):
    raise ImportError(f"No module named '{name}'")


def test_a_module_that_does_not_import_is_one_line_with_its_package_and_why():
    def broken(name):
        raise OSError("undefined symbol: _ZN2at4cuda4blas")

    [line] = TRAINER.missing_needs(ACTOR, absent)
    assert ("megatron actor needs wgrad_ext (apex)" in line and "No module named 'wgrad_ext'" in line
            and line.endswith("the fusion needs it") and "\n" not in line)
    assert "undefined symbol" in TRAINER.missing_needs(ACTOR, broken)[0]
    assert TRAINER.missing_needs(ACTOR, lambda name: None) == []
    assert TRAINER.missing_needs({"name": "fsdp"}, absent) == []


@pytest.mark.parametrize("overrides, value", [
    ([], "flash_attention_2"), (["++a.attn=eager"], "eager"), (["a.attn=sdpa", "+a.attn=eager"], "eager"),
    (["a.attn_x=eager", "b.a.attn=eager"], "flash_attention_2"),
])
def test_a_setting_is_its_last_override_or_the_default(overrides, value):
    assert TRAINER.setting(overrides, "a.attn", "flash_attention_2") == value


def profile(needs: list[dict]):
    families = [{"name": "qwen3.5"}, {"name": "deepseek-v3"}]
    trainer = {"families": families, "parallel": 2, "actor": {"name": "megatron", "needs": needs},
               "jit_warm_max_jobs": 4, "jit_warm": {"gdn": {"module": "m", "spec": "s", "archs": ["9.0"]}}}
    return types.SimpleNamespace(trainer=trainer, thorough=False, variant="megatron", gpu_count=1, rollout_tp=1,
                                 actor_tp=1)


HOPPER = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=lambda: (9, 0)))


def test_without_a_needed_module_no_trainer_starts_and_nothing_is_compiled():
    need = {"module": "verlenv_no_such_extension_module", "package": "apex", "why": "the fusion needs it"}
    checks = TRAINER.checks(profile([need]), HOPPER)
    names = [name for name, _ in checks]
    assert names == ["verl/trainer/import", "verl/trainer/megatron/qwen3.5/grpo-2-steps",
                     "verl/trainer/megatron/deepseek-v3/grpo-2-steps"]  # no verl/jit-warm/gdn
    for _, check in checks[1:]:
        with pytest.raises(COMMON.Failed, match=r"^not started: verl's megatron actor needs "
                                                r"verlenv_no_such_extension_module \(apex\)"):
            check()


def test_with_its_needed_modules_the_warm_compile_and_the_trainers_are_planned():
    names = [name for name, _ in TRAINER.checks(profile([{"module": "json", "package": "p", "why": "w"}]), HOPPER)]
    assert names[:2] == ["verl/jit-warm/gdn", "verl/trainer/import"] and len(names) == 4


def test_a_family_the_need_does_not_hold_for_still_trains_beside_one_that_cannot_start():
    need = {"module": "verlenv_no_such_extension_module", "package": "flash-attn", "why": "its attention",
            "when": {"key": "m.attn", "value": "flash_attention_2", "default": "flash_attention_2"}}
    prof = profile([need])
    prof.trainer["families"] = [{"name": "qwen3.5"}, {"name": "gpt-oss", "overrides": ["++m.attn=eager"]}]
    checks = dict(TRAINER.checks(prof, HOPPER))
    assert list(checks) == ["verl/jit-warm/gdn", "verl/trainer/import", "verl/trainer/megatron/qwen3.5/grpo-2-steps",
                            "verl/trainer/megatron/gpt-oss/grpo-2-steps"]
    with pytest.raises(COMMON.Failed, match=r"^not started: .*\(m\.attn is flash_attention_2 for this family\)$"):
        checks["verl/trainer/megatron/qwen3.5/grpo-2-steps"]()
    started = checks["verl/trainer/megatron/gpt-oss/grpo-2-steps"].__self__  # the trainer's own finish
    assert started.family["name"] == "gpt-oss" and [c.family["name"] for c in started.queue.checks] == ["gpt-oss"]
