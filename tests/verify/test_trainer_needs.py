"""An actor's needed compiled modules (data/backends.toml `needs`) are imported before verl's trainers start: GPU visit
P's five Megatron trainers, in an env without apex, spent 8 minutes on a warm compile and then stopped at model
construction (megatron-core's ColumnParallelLinear with gradient_accumulation_fusion on needs apex's
fused_weight_gradient_mlp_cuda). Now the trainer checks fail at once, in one line each, and nothing is compiled."""

import types

import pytest

from test_kernel_scripts import load
from test_verify_profiles import REPO
from test_verify_runner import settings
from verlenv.catalog import backends, families, stacks
from verlenv.cluster.trainer import trainer_spec
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
    do. Read from the real tables, with every override the check gives a trainer (the runner's order), so a family
    or an env that changes its attention changes this."""
    rows = backends.table()
    table = families.table()
    needs = {row["name"]: rows.actor("fsdp").trainer_needs(rows.override_order(
        "fsdp", "vllm", [], row["overrides"], thorough=False)) for row in table.rows(list(table.families.values()))}
    missing = {name: TRAINER.missing_needs("fsdp", rows_, absent) for name, rows_ in needs.items()}
    assert missing["gpt-oss"] == [] and missing["llama"] and missing["qwen3.5"]
    assert "(actor_rollout_ref.model.override_config.attn_implementation is flash_attention_2 for this family)" in \
        missing["llama"][0]
    env = ["++actor_rollout_ref.model.override_config.attn_implementation=sdpa"]  # an env's own, before the family's
    assert rows.actor("fsdp").trainer_needs(rows.override_order("fsdp", "vllm", env, [], thorough=True)) == []


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


NEEDS = [{"module": "wgrad_ext", "package": "apex", "why": "the fusion needs it"}]


def absent(name):
    raise ImportError(f"No module named '{name}'")


def test_a_module_that_does_not_import_is_one_line_with_its_package_and_why():
    def broken(name):
        raise OSError("undefined symbol: _ZN2at4cuda4blas")

    [line] = TRAINER.missing_needs("megatron", NEEDS, absent)
    assert ("megatron actor needs wgrad_ext (apex)" in line and "No module named 'wgrad_ext'" in line
            and line.endswith("the fusion needs it") and "\n" not in line)
    assert "undefined symbol" in TRAINER.missing_needs("megatron", NEEDS, broken)[0]
    assert TRAINER.missing_needs("megatron", NEEDS, lambda name: None) == []
    assert TRAINER.missing_needs("fsdp", None, absent) == []


WHEN = backends.Need("m", "p", "w", backends.When("a.attn", "flash_attention_2", "flash_attention_2"))


@pytest.mark.parametrize("overrides, value", [
    ([], "flash_attention_2"), (["++a.attn=eager"], "eager"), (["a.attn=sdpa", "+a.attn=eager"], "eager"),
    (["a.attn_x=eager", "b.a.attn=eager"], "flash_attention_2"), (["++a.attn=sdpa", "~a.attn"], "flash_attention_2"),
    (["~a.attn", "a.attn=eager"], "eager"),
])
def test_a_setting_is_its_last_override_or_the_default(overrides, value):
    assert WHEN.setting(overrides) == value
    assert WHEN.holds(overrides) == (value == "flash_attention_2")
    assert WHEN.for_trainer(overrides)["selected_by"] == f"a.attn is {value} for this family"


def test_the_fast_proofs_overrides_come_last_and_only_in_the_fast_proof(tmp_path):
    data = {"actors": {"x": {"description": "d", "config_name": "c", "overrides": ["a=1"], "fast_overrides": ["a=3"]}},
            "rollouts": {"vllm": {"description": "d", "package": "vllm", "overrides": ["b=1"],
                                  "fast_overrides": ["b=2"]}}}
    rows = backends.parse(tmp_path / "backends.toml", data)
    assert rows.override_order("x", "vllm", ["e=1"], ["f=1"], thorough=False) == ["a=1", "b=1", "e=1", "f=1", "b=2",
                                                                                     "a=3"]
    assert rows.override_order("x", "vllm", ["e=1"], ["f=1"], thorough=True) == ["a=1", "b=1", "e=1", "f=1"]


def profile(needs: list[dict]):
    families = [{"name": "qwen3.5", "actor_needs": needs}, {"name": "deepseek-v3", "actor_needs": needs}]
    trainer = {"families": families, "parallel": 2, "actor": {"name": "megatron"},
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
            "selected_by": "m.attn is flash_attention_2 for this family"}
    prof = profile([need])
    prof.trainer["families"] = [{"name": "qwen3.5", "actor_needs": [need]}, {"name": "gpt-oss", "actor_needs": []}]
    checks = dict(TRAINER.checks(prof, HOPPER))
    assert list(checks) == ["verl/jit-warm/gdn", "verl/trainer/import", "verl/trainer/megatron/qwen3.5/grpo-2-steps",
                            "verl/trainer/megatron/gpt-oss/grpo-2-steps"]
    with pytest.raises(COMMON.Failed, match=r"^not started: .*\(m\.attn is flash_attention_2 for this family\)$"):
        checks["verl/trainer/megatron/qwen3.5/grpo-2-steps"]()
    started = checks["verl/trainer/megatron/gpt-oss/grpo-2-steps"].__self__  # the trainer's own finish
    assert started.family["name"] == "gpt-oss" and [c.family["name"] for c in started.queue.checks] == ["gpt-oss"]


def test_the_runner_decides_each_familys_needs_and_the_check_reads_them(tmp_path):
    """The decision is made once, in verlenv, from the real tables: the FSDP variant's trainers of llama and qwen3.5
    import flash-attn's extension, gpt-oss's (eager attention) none; the Megatron variant's all import apex's."""
    table = families.table()
    chosen = table.rows([table.families[n] for n in ("llama", "qwen3.5", "gpt-oss")])
    fsdp = {f["name"]: f["actor_needs"] for f in settings(tmp_path, "fsdp", families=chosen).trainer()["families"]}
    assert [n["module"] for n in fsdp["llama"]] == [n["module"] for n in fsdp["qwen3.5"]] == ["flash_attn_2_cuda"]
    assert fsdp["gpt-oss"] == [] and "is flash_attention_2 for this family" in fsdp["llama"][0]["selected_by"]
    megatron = settings(tmp_path, "megatron", families=chosen).trainer()["families"]
    assert [[n["module"] for n in f["actor_needs"]] for f in megatron] == [["fused_weight_gradient_mlp_cuda"]] * 3
    assert all("selected_by" not in n for f in megatron for n in f["actor_needs"])


@pytest.mark.parametrize("variant", ["fsdp", "megatron", "sglang"])
@pytest.mark.parametrize("thorough", [False, True])
def test_the_catalogs_override_order_is_the_tail_of_what_the_check_gives_each_trainer(variant, thorough):
    """Which needs hold is decided from backends.Table.override_order; the trainer check builds the real list. The
    catalog's, its fields filled as the check fills them, must be the check's list's tail, in the same order, for
    every family: a group moved in one and not the other would decide a need from the wrong last override."""
    cat = stacks.load(REPO / "stacks.toml")
    v = cat.variant("verl-0.9", variant)
    spec, rows = trainer_spec(v), backends.table()
    paths = {"model": "/m", "data": "/d.parquet", "reward": "/r.py", "checkpoints": "/c", "run": "/w"}
    table = families.table()
    for family in table.rows(list(table.families.values())):
        ours = rows.override_order(v.actor, v.rollout, v.trainer_overrides, family["overrides"], thorough)
        theirs = TRAINER.overrides(paths, spec, family, thorough=thorough)
        filled = TRAINER.filled(ours, actor_tp=1, rollout_tp=1, kv_cache_bytes=TRAINER.KV_CACHE_BYTES)
        assert theirs[len(theirs) - len(filled):] == filled, family["name"]
