"""--trainer-override: a user's own Hydra overrides of verl's config reach the trainer check last, replacing what the
check's actor, rollout, env or family rows set for the same key; malformed ones, one key twice, and the check's own
settings (what its judge reads) are refused in one line before anything runs; a report trained so is recorded as such
and is no verdict in the compatibility matrix."""

import json
import subprocess
import sys

import pytest

from test_kernel_scripts import load
from test_verify_profiles import REPO
from test_verify_runner import settings
from verlenv.catalog import families, stacks
from verlenv.cluster.trainer import trainer_spec
from verlenv.errors import UserError
from verlenv.verify import report, user_overrides

sys.path.insert(0, str(REPO / "benchmarks"))
import compat_matrix  # noqa: E402

TRAINER = load("verl_trainer")
PATHS = {"model": "/m", "data": "/d.parquet", "reward": "/r.py", "checkpoints": "/c", "run": "/w"}
ENV_KEY = "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"


def family(name: str) -> dict:
    table = families.table()
    return table.rows([table.families[name]])[0]


def megatron(user: list[str]) -> list[str]:
    spec = {**trainer_spec(stacks.load(REPO / "stacks.toml").variant("verl-0.9", "megatron")), "user_overrides": user}
    return TRAINER.overrides(PATHS, spec, family("gpt-oss"))


def test_a_users_override_comes_last_and_replaces_the_rows_one_for_its_key():
    before = megatron([])
    assert f"{ENV_KEY}=auto" in before  # the env's
    assert "++actor_rollout_ref.model.override_config.attn_implementation=eager" in before  # gpt-oss's
    user = [f"{ENV_KEY}=flash", "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
            "~actor_rollout_ref.rollout.enforce_eager"]
    after = megatron(user)
    assert after[-3:] == user
    for text in user:  # each key once: the row's setting of it is gone
        assert [o for o in after if TRAINER.override_key(o) == TRAINER.override_key(text)] == [text]
    assert [o for o in before if TRAINER.override_key(o) not in {TRAINER.override_key(u) for u in user}] == after[:-3]


def test_the_checks_own_keys_are_the_head_of_its_overrides_and_none_of_the_rows():
    own = TRAINER.own_keys()
    listed = [TRAINER.override_key(o) for o in megatron([])]
    assert set(listed[:len(own)]) == own and len(own) == len(set(listed[:len(own)]))
    assert {"data.train_files", "actor_rollout_ref.actor.optim.lr", "trainer.total_training_steps",
            "actor_rollout_ref.rollout.calculate_log_probs", "reward.custom_reward_function.path"} <= own
    assert not own & set(listed[len(own):])  # what the rows set, a user may set


@pytest.mark.parametrize("given", [
    ["actor_rollout_ref.rollout.enforce_eager=False"],
    ["+actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_bias_update_rate=0",
     "++actor_rollout_ref.model.override_config.attn_implementation=sdpa", "~actor_rollout_ref.rollout.foo",
     "actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_seqs=8"],
])
def test_hydra_overrides_of_other_keys_are_taken_as_given(given):
    assert user_overrides.checked(given) == tuple(given)


@pytest.mark.parametrize("text, words", [
    ("enforce_eager", "not a Hydra override"), ("=1", "not a Hydra override"), ("a..b=1", "not a Hydra override"),
    ("+~a.b=1", "not a Hydra override"), ("a b=1", "not a Hydra override"), ("", "not a Hydra override"),
    ("data.train_files=['/mine.parquet']", "sets data.train_files itself"),
    ("++actor_rollout_ref.actor.optim.lr=1e-6", "sets actor_rollout_ref.actor.optim.lr itself"),
    ("~trainer.logger", "sets trainer.logger itself"),
])
def test_a_bad_override_is_one_line_naming_what_is_valid(text, words):
    with pytest.raises(UserError, match=words) as e:
        user_overrides.checked(["a.ok=1", text])
    assert "\n" not in str(e.value) and repr(text) in str(e.value)


def test_one_key_twice_is_refused():
    with pytest.raises(UserError, match=r"^--trainer-override: a\.b given twice \('a\.b=1', '\+\+a\.b=2'\)"):
        user_overrides.checked(["a.b=1", "++a.b=2"])


def test_the_cli_refuses_before_anything_runs(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "verlenv", "verify", "--gpu", "h100", "--force", "--report", str(out),
                           "--trainer-override", "trainer.total_training_steps=50"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().count("\n") == 0 and "sets trainer.total_training_steps itself" in proc.stderr


def test_the_runner_hands_them_to_the_check_and_decides_the_actors_needs_after_them(tmp_path):
    attention = "++actor_rollout_ref.model.override_config.attn_implementation=sdpa"
    plain = settings(tmp_path, "fsdp", families=[family("llama")]).trainer()
    mine = settings(tmp_path, "fsdp", families=[family("llama")], trainer_override=(attention,)).trainer()
    assert plain["user_overrides"] == [] and mine["user_overrides"] == [attention]
    assert [n["module"] for n in plain["families"][0]["actor_needs"]] == ["flash_attn_2_cuda"]
    assert mine["families"][0]["actor_needs"] == []  # sdpa: the FSDP actor imports no flash-attn


def test_the_report_records_them_and_the_matrix_passes_it_over(tmp_path):
    s = settings(tmp_path, "megatron", families=[family("llama")], trainer_override=(f"{ENV_KEY}=flash",))
    section = report.trainer_section(s)
    assert section["user_overrides"] == [f"{ENV_KEY}=flash"]
    assert "user_overrides" not in report.trainer_section(settings(tmp_path, "megatron", families=[family("llama")]))
    check = {"name": "verl/trainer/megatron/llama/grpo-2-steps", "status": "pass", "required": True, "numbers": {}}
    base = {"stack": "verl-0.9", "variant": "megatron", "mode": "fast", "checks": [check]}
    (tmp_path / "a.json").write_text(json.dumps({**base, "timestamp": "2026-12-07T10:00:00",
                                                 "trainer": {"actor": "megatron", "rollout": "vllm", "families": []}}))
    failed = {**check, "status": "fail"}
    (tmp_path / "b.json").write_text(json.dumps({**base, "timestamp": "2026-12-07T11:00:00", "checks": [failed],
                                                 "trainer": {**section, "families": []}}))
    cell = compat_matrix.cells(tmp_path, families.table(), stacks.load(REPO / "stacks.toml"))[
        ("verl-0.9", "megatron", "llama", "fast")]
    assert (cell["status"], cell["report"]) == ("pass", "a.json")  # the newer report had the user's settings
    real = json.loads((REPO / "docs" / "verification" /
                       "2026-12-07-h100-verl-0.9-megatron-thorough-qwen3.5-visit-v.json").read_text())
    assert not any(line.startswith("- your overrides") for line in report.markdown(real).splitlines())
    real["trainer"]["user_overrides"] = section["user_overrides"]
    assert f"- your overrides of verl's config (--trainer-override; not verl's defaults): `{ENV_KEY}=flash`" in \
        report.markdown(real).splitlines()


def test_every_node_of_a_cluster_gets_them_and_the_report_command_names_them():
    from verlenv.verify.options import VerifyOptions

    given = VerifyOptions(trainer_override=(f"{ENV_KEY}=flash", "+a.b=1"), ray="auto")
    assert given.for_node().trainer_override == given.trainer_override  # verify --ray: each node trains so
    assert VerifyOptions.from_json(json.loads(json.dumps(given.to_json()))) == given
    assert given.to_argv()[-5:] == ["--trainer-override", f"{ENV_KEY}=flash", "--trainer-override", "+a.b=1", "--ray"]
