"""The CPU side of the verl trainer check (kernels/check_verl_trainer.py): the tiny model, tokenizer and parquet it
writes, loaded back with transformers and pyarrow; its command line parsed by verl's own main_ppo (--cfg job); the
metric parser on lines made by verl's own console logger; the judging of good and broken runs.

Everything needing torch, transformers or verl runs inside an env that has them (the default env, see
torch_python in test_kernel_scripts.py); the parser and the judge need only the standard library.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_kernel_scripts import KERNELS, has_modules, load, torch_python
from test_verify_profiles import REPO
from verlenv.catalog import families, stacks
from verlenv.cluster.trainer import trainer_spec
from waiting import exited, until

PROGRAMS = Path(__file__).parents[1] / "data" / "programs"
GOOD_STEP = {"actor/pg_loss": -0.0123, "actor/grad_norm": 0.87, "training/rollout_actor_probs_pearson_corr": 0.99994,
             "training/rollout_probs_diff_mean": 0.0004, "training/rollout_probs_diff_max": 0.01,
             "timing_s/step": 9.5, "timing_s/gen": 4.0}
GOOD_WEIGHTS = {"weights_rel_change": 3e-3, "tensors_changed": 21, "tensors_compared": 21}
# What verify hands the check for each variant of the default stack (its actor's and rollout's rows, the env's
# overrides), and the family rows (data/families.toml).
CATALOG = stacks.load(REPO / "stacks.toml")
SPECS = {name: trainer_spec(CATALOG.variant("verl-0.9", name)) for name in ("fsdp", "megatron", "sglang")}
FAMILIES = {f["name"]: f for f in families.table().rows(list(families.table().families.values()))}
LLAMA = FAMILIES["llama"]


def trainer():
    return load("verl_trainer")


def test_judge_passes_a_good_run():
    numbers, problems = trainer().judge({1: dict(GOOD_STEP), 2: dict(GOOD_STEP)}, GOOD_WEIGHTS)
    assert problems == []
    assert numbers["step1_grad_norm"] == 0.87 and numbers["step2_pearson"] == 0.99994
    assert numbers["weights_rel_change"] == 3e-3


@pytest.mark.parametrize("broken, complaint", [
    ({"actor/grad_norm": 0.0}, "actor/grad_norm is 0.0"),
    ({"actor/grad_norm": math.nan}, "actor/grad_norm is nan"),
    ({"actor/pg_loss": math.inf}, "actor/pg_loss is inf"),
    ({"training/rollout_actor_probs_pearson_corr": 0.9}, "correlation 0.90000 below 0.99"),
    ({"training/rollout_actor_probs_pearson_corr": math.nan}, "correlation nan below"),
    ({"training/rollout_probs_diff_mean": 0.2}, "above 0.01"),
    ({"actor/entropy": 0.0}, "actor/entropy is 0, below 0.05"),
    ({"actor/entropy": math.nan}, "actor/entropy is nan"),
])
def test_judge_fails_a_broken_step(broken, complaint):
    numbers, problems = trainer().judge({1: dict(GOOD_STEP), 2: {**GOOD_STEP, **broken}}, GOOD_WEIGHTS)
    assert len(problems) == 1 and problems[0].startswith("step 2:") and complaint in problems[0], problems


def test_a_degenerate_run_fails_the_check_though_verl_exits_0():
    """The H200 run of a tied head drawn at N(0, 0.15): sampling deterministic, so entropy, pg_loss and grad_norm 0
    and the correlation NaN; verl exited 0. The judge must fail it on every count it can see."""
    degenerate = {**GOOD_STEP, "actor/entropy": 0.0, "actor/pg_loss": 0.0, "actor/grad_norm": 0.0,
                  "training/rollout_actor_probs_pearson_corr": math.nan}
    _, problems = trainer().judge({1: dict(degenerate), 2: dict(degenerate)}, GOOD_WEIGHTS)
    for step in (1, 2):
        mine = [p for p in problems if p.startswith(f"step {step}:")]
        assert any("grad_norm is 0.0" in p for p in mine) and any("entropy is 0" in p for p in mine)
        assert any("correlation nan" in p for p in mine)


def test_judge_fails_missing_steps_metrics_and_unchanged_weights():
    step = {k: v for k, v in GOOD_STEP.items() if k != "training/rollout_actor_probs_pearson_corr"}
    _, problems = trainer().judge({1: step}, {**GOOD_WEIGHTS, "tensors_changed": 0, "weights_rel_change": 0.0})
    assert problems == ["step 1: verl logged no training/rollout_actor_probs_pearson_corr",
                        "verl logged no metrics for step 2",
                        "the actor's weights did not change over 2 steps (verl's own checkpoint)"]
    _, problems = trainer().judge({1: dict(GOOD_STEP), 2: dict(GOOD_STEP)}, None)
    assert problems == ["verl saved no hf_model checkpoint to compare the weights with"]


def test_parse_metrics_reads_ray_prefixed_lines_and_skips_others():
    lines = ["(TaskRunnerV1 pid=4242) step:1 - actor/pg_loss:-0.5 - actor/grad_norm:1.25 - timing_s/gen:3.0",
             "INFO 11-24 vllm: step:abc is not a metrics line",
             "(TaskRunnerV1 pid=4242) step:2 - actor/grad_norm:nan - training/global_step:2"]
    steps = trainer().parse_metrics(lines)
    assert set(steps) == {1, 2}
    assert steps[1] == {"actor/pg_loss": -0.5, "actor/grad_norm": 1.25, "timing_s/gen": 3.0}
    assert math.isnan(steps[2]["actor/grad_norm"]) and steps[2]["training/global_step"] == 2.0


def test_the_reward_varies_with_the_response():
    namespace = {}
    exec(trainer().REWARD_SOURCE, namespace)
    score = namespace["compute_score"]
    scores = {score("openai/gsm8k", text, "7") for text in ["w1 w2 w3", "w4 w9", "w17 w18 w19 w20", "3 + 4"]}
    assert len(scores) == 4 and score("openai/gsm8k", "", "7") == 0.0
    assert score("openai/gsm8k", "w1 7", "7") - score("openai/gsm8k", "w1 8", "7") > 0.5


PATHS = {"model": "/m", "data": "/d.parquet", "reward": "/r.py", "checkpoints": "/c", "run": "/w"}


def test_the_overrides_size_the_batch_by_the_gpus_of_all_nodes():
    t = trainer()
    two = dict(o.split("=", 1) for o in t.overrides(PATHS, SPECS["fsdp"], LLAMA, n_gpus_per_node=2))
    assert two["data.train_batch_size"] == "16" and two["actor_rollout_ref.actor.ppo_mini_batch_size"] == "8"
    assert two["trainer.n_gpus_per_node"] == "2" and two["actor_rollout_ref.rollout.name"] == "vllm"
    assert not any("attn_implementation" in key for key in two)  # verl's default (flash-attn) stays
    eight = dict(o.split("=", 1) for o in t.overrides(PATHS, SPECS["megatron"], LLAMA, nnodes=2, n_gpus_per_node=4,
                                                      rollout_tp=2, actor_tp=2))
    assert ((eight["trainer.nnodes"], eight["trainer.n_gpus_per_node"], eight["data.train_batch_size"])
            == ("2", "4", "64"))
    assert eight["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "2"
    assert eight["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == "2"
    # verl's epoch is len(dataset) // train_batch_size steps: the parquet holds both steps' prompts.
    assert t.rows_needed(8) == 128 >= t.STEPS * 64 and t.rows_needed(1) == t.ROWS
    megatron = t.command("python", PATHS, SPECS["megatron"], LLAMA)
    assert megatron[:5] == ["python", "-m", "verl.trainer.main_ppo", "--config-name", "ppo_megatron_trainer"]


def test_fast_and_thorough_differ_only_in_the_fast_proofs_settings():
    t = trainer()
    fast_of = {}
    for variant in ("fsdp", "megatron"):
        fast, thorough = t.overrides(PATHS, SPECS[variant], LLAMA), t.overrides(PATHS, SPECS[variant], LLAMA,
                                                                                  thorough=True)
        assert fast[:len(thorough)] == thorough
        fast_of[variant] = fast[len(thorough):]
    assert fast_of["fsdp"] == ["actor_rollout_ref.rollout.enforce_eager=True",
                               "++actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=1073741824",
                               "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False"]
    assert fast_of["megatron"] == fast_of["fsdp"][:2]  # the Megatron engine has no such switch


def test_the_sglang_variant_drives_verls_sglang_rollout_from_its_rows():
    """rollout.name=sglang, SGLang's INFO lines in both modes, and in the fast proof its eager, FA3, fixed-pool settings
    (the rollout row's), then the FSDP actor's; nothing of vLLM's."""
    t = trainer()
    fast, thorough = (t.overrides(PATHS, SPECS["sglang"], LLAMA, thorough=mode) for mode in (False, True))
    assert "actor_rollout_ref.rollout.name=sglang" in thorough and not any("vllm" in o for o in fast)
    assert "++actor_rollout_ref.rollout.engine_kwargs.sglang.log_level=info" in thorough
    assert fast[:len(thorough)] == thorough
    assert fast[len(thorough):] == ["actor_rollout_ref.rollout.enforce_eager=True",
                                    "++actor_rollout_ref.rollout.engine_kwargs.sglang.disable_piecewise_cuda_graph=True",
                                    "++actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=fa3",
                                    "++actor_rollout_ref.rollout.engine_kwargs.sglang.max_total_tokens=16384",
                                    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False"]


def test_each_family_and_the_env_add_their_own_overrides_with_reasons():
    t = trainer()
    megatron = t.overrides(PATHS, SPECS["megatron"], LLAMA, thorough=True)
    for override in CATALOG.variant("verl-0.9", "megatron").trainer_overrides:  # stacks.toml, each with its reason
        assert override in megatron
    # verl's default bridge (Megatron-Bridge, which the env carries): nothing selects mbridge.
    assert not any("vanilla_mbridge" in o for o in megatron)
    assert not set(CATALOG.variant("verl-0.9", "megatron").trainer_overrides) & set(
        t.overrides(PATHS, SPECS["fsdp"], LLAMA, thorough=True))
    row = {**LLAMA, "name": "tiny", "overrides": ["data.image_key=pictures"]}
    assert t.overrides(PATHS, SPECS["fsdp"], row, thorough=True)[-1] == "data.image_key=pictures"
    named = dict(o.split("=", 1) for o in t.overrides(PATHS, SPECS["fsdp"], FAMILIES["qwen3-moe"]))
    assert named["trainer.experiment_name"] == "verify-qwen3-moe"


@pytest.mark.parametrize("sizes, complaint", [
    ({"n_gpus_per_node": 2, "rollout_tp": 4}, "rollout_tp 4 does not divide the 2 GPU(s)"),
    ({"nnodes": 2, "n_gpus_per_node": 4, "rollout_tp": 8},
     "rollout_tp 8 does not divide the llama model's num_attention_heads (4)"),
    ({"n_gpus_per_node": 2, "actor_tp": 2}, "actor_tp 2: verl's fsdp actor is not tensor-parallel"),
    ({"n_gpus_per_node": 3, "actor_tp": 2, "variant": "megatron"}, "actor_tp 2 does not divide the 3 GPU(s)"),
    ({"n_gpus_per_node": 4, "actor_tp": 4, "variant": "megatron"},
     "actor_tp 4 does not divide the llama model's num_key_value_heads (2)"),
    ({"rollout_tp": 0}, "rollout_tp must be a positive integer, not 0"),
    ({"nnodes": True}, "nnodes must be a positive integer, not True"),
])
def test_sizes_the_check_cannot_run_are_one_clear_error(sizes, complaint):
    t = trainer()
    variant = sizes.pop("variant", "fsdp")
    with pytest.raises(ValueError) as e:
        t.overrides(PATHS, SPECS[variant], LLAMA, **sizes)
    assert str(e.value) == complaint or str(e.value).startswith(complaint), str(e.value)
    assert "\n" not in str(e.value)


# A program run in the env; its docstring says what it does.
IN_ENV = PROGRAMS / "verl_trainer_inputs.py"


def tables_file(folder) -> str:
    path = folder / "tables.json"
    path.write_text(json.dumps({"specs": SPECS, "families": FAMILIES}))
    return str(path)


@pytest.fixture(scope="module")
def in_env(tmp_path_factory) -> dict:
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    if not has_modules(python, "verl", "hydra", "pyarrow", "transformers"):
        pytest.skip("the torch environment lacks verl, hydra, pyarrow or transformers")
    out = tmp_path_factory.mktemp("verl-trainer")
    proc = subprocess.run([python, str(IN_ENV), str(KERNELS), str(out), tables_file(out)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "out.json").read_text())


@pytest.mark.slow
def test_the_written_model_tokenizer_and_data_load_back(in_env):
    t = trainer()
    assert in_env["vocab"] == in_env["model_vocab"] == load("_models").VOCAB and in_env["dtype"] == "torch.bfloat16"
    assert in_env["chat"].startswith("user : w") and in_env["chat"].endswith("assistant : ")
    assert in_env["unk"] not in in_env["ids"]  # every word of the chat prompt is in the vocabulary
    assert in_env["pad"] != in_env["eos"] and in_env["rows"] == t.ROWS
    row = in_env["row"]
    assert row["data_source"] == "openai/gsm8k" and row["prompt"][0]["role"] == "user"
    assert row["reward_model"]["ground_truth"].isdigit() and row["extra_info"]["index"] == 0
    assert 1 / load("_models").VOCAB * 2 < in_env["top_prob"] < 0.9  # neither uniform nor greedy
    assert in_env["same_weights"]["tensors_changed"] == 0 and in_env["same_weights"]["weights_rel_change"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["fsdp", "megatron"])
def test_verls_own_entry_point_parses_the_overrides(in_env, variant):
    cfg = in_env[variant]
    assert cfg["use_v1"] is True and cfg["strategy"] == variant and cfg["rollout"] == "vllm"
    assert (cfg["n"], cfg["tp"], cfg["steps"], cfg["gpus"], cfg["adv"]) == (4, 1, 2, 2, "grpo")
    assert cfg["calc_log_probs"] is True and "hf_model" in cfg["save"] and cfg["logger"] == ["console"]
    assert cfg["reward"].endswith("verlenv_check_reward.py") and cfg["model"].endswith("model")
    assert cfg["attn"] is None and cfg["lr"] == 1e-4  # verl's default attention (flash-attn) is left alone
    assert cfg["validated"]
    if variant == "megatron":
        # verl's default bridge, Megatron-Bridge; TE chooses its attention (it refuses flash-attn 2.8.3.post2).
        assert cfg["vanilla_mbridge"] is False and cfg["ref_vanilla_mbridge"] is False
        assert cfg["te_attention"] == cfg["ref_te_attention"] == "auto"
    else:
        assert cfg["vanilla_mbridge"] is None and cfg["te_attention"] is None


@pytest.mark.slow
def test_the_parser_reads_verls_own_console_line(in_env):
    assert in_env["console_line"].startswith("step:1 - ")
    assert in_env["parsed"] == {"1": {"actor/pg_loss": -0.25, "actor/grad_norm": 1.5, "timing_s/step": 3.0}}


@pytest.fixture(scope="module")
def composed(verl_composed) -> dict:
    """verl's own Hydra config composed (as main_ppo composes it) with the check's overrides, fast and thorough, for
    each size a cluster may ask for, validated by verl's own checks; and the fast proof's vLLM settings passed the way
    verl's vLLM server passes them, through vLLM's own argument parser (tests/data/programs/verl_trainer_compose.py,
    run with the cluster job's compose in one interpreter: conftest's verl_composed)."""
    return verl_composed["check"]


@pytest.mark.slow
def test_verls_own_config_takes_every_size_in_both_modes(composed):
    cases = composed["cases"]
    assert len(cases) == 2 * (6 + 6 + 2)  # fsdp 6 sizes, megatron 8, each fast and thorough
    for case in cases:
        v, sizes = case["values"], case["sizes"]
        nnodes, per_node = sizes.get("nnodes", 1), sizes.get("n_gpus_per_node", 1)
        assert (v["trainer.nnodes"], v["trainer.n_gpus_per_node"]) == (nnodes, per_node), case
        assert v["data.train_batch_size"] == 8 * nnodes * per_node, case
        assert v["actor_rollout_ref.actor.ppo_mini_batch_size"] == 4 * nnodes * per_node, case
        assert v["actor_rollout_ref.rollout.tensor_model_parallel_size"] == sizes.get("rollout_tp", 1), case
        assert v["actor_rollout_ref.rollout.n_gpus_per_node"] == per_node, case  # follows the trainer's
        assert (v["actor_rollout_ref.rollout.agent.num_workers"], v["reward.num_workers"],
                v["data.dataloader_num_workers"]) == (1, 1, 0), case
        assert v["actor_rollout_ref.actor.strategy"] == case["variant"], case
        if case["variant"] == "megatron":  # the ref model's TP follows the actor's through verl's own oc.select
            assert v["actor_rollout_ref.actor.megatron.tensor_model_parallel_size"] == sizes.get("actor_tp", 1), case
            assert v["actor_rollout_ref.ref.megatron.tensor_model_parallel_size"] == sizes.get("actor_tp", 1), case
        if case["thorough"]:  # verl's defaults: CUDA graphs and torch.compile, vLLM's own memory profile
            assert v["actor_rollout_ref.rollout.enforce_eager"] is False and case["vllm_engine_kwargs"] == {}, case
            if case["variant"] == "fsdp":
                assert v["actor_rollout_ref.actor.fsdp_config.use_torch_compile"] is True, case
        else:
            assert v["actor_rollout_ref.rollout.enforce_eager"] is True, case
            assert case["vllm_engine_kwargs"] == {"kv_cache_memory_bytes": 1 << 30}, case
            if case["variant"] == "fsdp":
                assert v["actor_rollout_ref.actor.fsdp_config.use_torch_compile"] is False, case
        assert v["actor_rollout_ref.actor.use_torch_compile"] is True, case  # read by no code in verl 0.9.1: kept
    assert composed["vllm"] == {"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30}


@pytest.mark.slow
def test_verls_own_config_takes_a_users_overrides_last(composed):
    """--trainer-override: verl's own Hydra composes the check's overrides with a user's, each user's override winning
    over the env's (a plain key) and the family's (a key gpt-oss adds with ++, which Hydra would not take a second +
    of), and the check's own settings untouched."""
    assert composed["user"] == {
        "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend": "flash",
        "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.actor.megatron.override_transformer_config.moe_router_bias_update_rate": 0,
        "trainer.total_training_steps": 2}


def test_the_hf_checkpoint_is_found_in_either_layout(tmp_path):
    t = trainer()
    assert t.hf_checkpoint(tmp_path) is None
    (tmp_path / "dist.safetensors").write_text("")  # not the hf_model part
    assert t.hf_checkpoint(tmp_path) is None
    megatron = tmp_path / "model" / "huggingface"
    megatron.mkdir(parents=True)
    (megatron / "model.safetensors").write_text("")
    assert t.hf_checkpoint(tmp_path) == str(megatron)
    fsdp = tmp_path / "huggingface"
    fsdp.mkdir()
    (fsdp / "model.safetensors").write_text("")
    assert t.hf_checkpoint(tmp_path) == str(fsdp)


def test_run_trainer_streams_times_and_kills_a_hang(tmp_path, capsys):
    # A stand-in for main_ppo (test double): prints what verl's console logger prints, then exits or hangs.
    t = trainer()
    talk = ("print('ray init', flush=True); "
            "print('(TaskRunnerV1 pid=1) step:1 - actor/grad_norm:0.5 - timing_s/step:0.1', flush=True)")
    before = time.time()
    lines, code, walls = t.run_trainer([sys.executable, "-c", talk], str(tmp_path), timeout=600)
    assert code == 0 and t.parse_metrics([x.text for x in lines]) == {1: {"actor/grad_norm": 0.5, "timing_s/step": 0.1}}
    assert [x.text for x in lines][0] == "ray init"
    # Arrivals are when this side read each line (a line may be read after the exit that wall_s marks).
    assert 0 <= lines[0].arrival <= lines[1].arrival == walls["first_metrics_s"] and walls["wall_s"] > 0
    assert before <= walls["launch_wall"] <= time.time()
    assert "ray init" in capsys.readouterr().out  # echoed, so the runner keeps it with the check's output
    child = tmp_path / "child.pid"
    hang = ("import os, subprocess, sys, threading; "
            "p = subprocess.Popen([sys.executable, '-c', 'import threading; threading.Event().wait()']); "
            f"print('started', flush=True); open({str(child)!r} + '.tmp', 'w').write(str(p.pid)); "
            f"os.rename({str(child)!r} + '.tmp', {str(child)!r}); threading.Event().wait()")
    run = t.TrainerRun([sys.executable, "-c", hang], str(tmp_path))
    assert until(lambda: child.exists() or run.proc.poll() is not None)  # it has printed its line
    code = run.wait(timeout=2)  # its start-up counts: a slow one is killed at once, after that line
    assert code is None and [x.text for x in run.lines] == ["started"]
    pid = int(child.read_text())
    assert exited(pid), f"the trainer's child {pid} outlived the timeout"


def test_a_trainer_stopped_from_outside_leaves_what_it_printed_in_its_log(tmp_path):
    """Visit S: the device time ended while the fsdp trainers ran, and their logs, written only at the end, were not
    there. The log now takes each line as it arrives: while the trainer still runs (a stand-in that prints two lines
    and hangs), its log reads back with both."""
    t = trainer()
    printed = tmp_path / "printed"
    hang = ("import threading; print('step:1 - pg_loss:0.1', flush=True); print('step:2 - pg_loss:0.2', flush=True); "
            f"open({str(printed)!r}, 'w').close(); threading.Event().wait()")
    log = tmp_path / "trainer.qwen3.log"
    run = t.TrainerRun([sys.executable, "-c", hang], str(tmp_path), live_log=str(log))
    try:
        assert until(lambda: printed.exists() and log.read_text().count("\n") == 3 or run.proc.poll() is not None)
        lines, launch_wall = load("_phases").read_timed_log(log.read_text())
        assert [x.text for x in lines] == ["step:1 - pg_loss:0.1", "step:2 - pg_loss:0.2"] and run.proc.poll() is None
        assert launch_wall == pytest.approx(run.launch_wall, abs=1e-3)
    finally:
        assert run.wait(timeout=0) is None  # stopped from outside, as the device's end stops it


def test_a_run_whose_rollout_engine_died_is_stopped_not_waited_out(tmp_path):
    """GPU visit K: vLLM's worker failed on verl's first weight sync and verl's driver waited on the dead server until
    the check's 540 s. A stand-in for main_ppo (test double) prints the engine's real dying lines, then hangs with a
    child of its own: the run must end on those lines (the timeout here is a guard an hour long), child included."""
    t = trainer()
    child = tmp_path / "child.pid"
    dying = ("(vLLMHttpServer pid=25193) (EngineCore pid=26153) ERROR 12-05 16:38:40 [core.py:1449] RuntimeError: "
             "Worker failed with error ''layers.1.mlp.gate.e_score_correction_bias'', please check the stack trace "
             "above for the root cause")
    hang = ("import os, subprocess, sys, threading; "
            "p = subprocess.Popen([sys.executable, '-c', 'import threading; threading.Event().wait()']); "
            f"open({str(child)!r} + '.tmp', 'w').write(str(p.pid)); "
            f"os.rename({str(child)!r} + '.tmp', {str(child)!r}); "
            f"print('step 1 rollout', flush=True); print({dying!r}, flush=True); threading.Event().wait()")
    run = t.TrainerRun([sys.executable, "-c", hang], str(tmp_path))
    code = run.wait(timeout=3600)
    assert code is None and run.dead_engine == dying
    assert [x.text for x in run.lines] == ["step 1 rollout", dying]
    assert exited(int(child.read_text()))


def test_the_failure_named_is_the_innermost_exception_not_hydras_hint():
    # The end of verl's main_ppo output on the H100, 2026-11-25
    # (docs/verification/2026-11-25-h100-verl-0.9-megatron-trainer.log).
    real = [
        "ray.exceptions.RayTaskError(AttributeError): \x1b[36mray::WorkerDict.actor_rollout_init_model()\x1b[39m "
        "(pid=10132)",
        '  File "/root/verl-env/lib/python3.12/site-packages/mbridge/core/util.py", line 83, in build_model',
        "    if model_type == ModelType.encoder_and_decoder:",
        "AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'. Did you mean: "
        "'encoder_or_decoder'?",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ]
    t = trainer()
    assert t.failure_line(real).startswith("AttributeError: type object 'ModelType' has no attribute "
                                           "'encoder_and_decoder'")
    assert t.failure_line(real[:1]).startswith("ray.exceptions.RayTaskError(AttributeError): ")
    assert t.failure_line(["starting", "killed by a signal", ""]) == "killed by a signal"
    assert t.failure_line([]) == "no output"


# A stand-in for main_ppo (test double): what verl prints at start-up and after each step, then it exits.
FAKE_TRAINER = PROGRAMS / "fake_main_ppo.py"


def fake_launch(t, monkeypatch, tmp_path, script):
    def write_inputs(workdir, torch, family, rows):
        paths = {"model": str(tmp_path / "model"), "checkpoints": str(tmp_path / "ckpt"), "run": workdir,
                 "init": {"entropy_min": 4.0}}
        return paths
    monkeypatch.setattr(t, "write_inputs", write_inputs)
    run = [str(script)] if isinstance(script, Path) else ["-c", script]
    monkeypatch.setattr(t, "command", lambda python, paths, spec, family, **sizes: [sys.executable, *run])
    # The stand-in runs as it is: the tests' python has no Ray (test_verl_own_ray.py runs the wrapper in the env).
    monkeypatch.setattr(t, "in_own_ray", lambda cmd: cmd)


def profile_json(**extra) -> str:
    """A profile as verify sends it to the trainer check: the fsdp variant's spec and the llama family."""
    trainer = {**SPECS["fsdp"], "families": [LLAMA], "parallel": 1, **extra.pop("trainer", {})}
    # The stand-in trainer imports no compiled module; the tests' env has no flash-attn (test_trainer_needs.py).
    trainer["actor"] = {**trainer["actor"], "needs": []}
    return json.dumps({"key": "h100", "arch": "9.0", "fp8": True, "gpu_count": 1, "trainer": trainer, **extra})


def test_the_fast_proof_starts_the_trainer_before_its_import_check_and_files_its_output_after(
        monkeypatch, tmp_path, capsys):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, FAKE_TRAINER)
    profile = common.parse_profile(profile_json())
    (name_import, first), (name_trainer, second) = t.checks(profile, torch=None)
    trainer_check = second.__self__

    def import_check():  # test double: it ends once the trainer, launched before it, has printed its first line
        assert trainer_check.run is not None, "the import check ran before the trainer was launched"
        assert until(lambda: trainer_check.run.lines), "the trainer printed nothing while the import check ran"
        print("IMPORTED")
        return {}, "imports"

    monkeypatch.setattr(t, "check_import", import_check)
    assert (name_import, name_trainer) == ("verl/trainer/import", "verl/trainer/fsdp/llama/grpo-2-steps")
    assert first() == ({}, "imports")
    out = capsys.readouterr().out
    assert "IMPORTED" in out and "ray init kwargs" not in out  # the trainer ran meanwhile, its output held back
    with pytest.raises(common.Failed) as failed:  # no checkpoint from the stand-in: a failure with its numbers
        second()
    out = capsys.readouterr().out
    assert out.index("running:") < out.index("ray init kwargs") < out.index("step:2")
    numbers = failed.value.numbers
    assert str(failed.value) == "verl saved no hf_model checkpoint to compare the weights with"
    assert numbers["step1_step_s"] == 0.1 and numbers["phase/step1_s"] == 0.1 and numbers["phase/step2/gen_s"] == 0.05
    # Each phase from the arrival of its line (read in a thread: possibly after the exit that total_s marks).
    assert numbers["phase/driver_start_s"] > 0 and numbers["phase/total_s"] == numbers["wall_s"] > 0
    assert not os.path.exists(second.__self__.workdir)


def test_the_trainer_is_launched_in_a_ray_of_its_own_under_a_job_id_of_its_own(monkeypatch, tmp_path):
    t, common = trainer(), load("_common")
    real = t.in_own_ray
    fake_launch(t, monkeypatch, tmp_path, "print('up')")
    wrapped = []
    monkeypatch.setattr(t, "in_own_ray", lambda cmd: wrapped.append(cmd) or cmd)
    check = t.TrainerCheck(None, common.parse_profile(profile_json()), LLAMA)
    check.launch(hold=True)
    assert check.error is None and wrapped == [[sys.executable, "-c", "print('up')"]]
    check.abandon()
    # what it is wrapped in: the env's python runs _verl_own_ray.py with the host-wide slots, then verl's command
    assert real(["python", "-m", "verl.trainer.main_ppo"]) == [
        sys.executable, os.path.join(str(KERNELS), "_verl_own_ray.py"), "/tmp/verlenv-ray-jobs", "--",
        "python", "-m", "verl.trainer.main_ppo"]


def test_a_trainer_left_behind_by_a_failed_import_is_killed_and_its_folder_removed(monkeypatch, tmp_path):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, "import time; print('up', flush=True); time.sleep(120)")
    profile = common.parse_profile(profile_json())
    check = t.TrainerCheck(None, profile, LLAMA)
    check.launch(hold=True)
    assert check.error is None and check.run.proc.poll() is None and os.path.isdir(check.workdir)
    check.abandon()  # what the script's exit runs (atexit) when the import check ends it before finish()
    assert check.run.proc.wait(timeout=600) == -9 and not os.path.exists(check.workdir)


def test_a_finished_trainer_leaves_nothing_running_in_its_session(tmp_path):
    """A driver that exits leaving a process in a group of its own (as Ray does): waiting for the trainer kills it
    and returns once it is gone. Left running, such processes held GPU memory while the next trainer's vLLM sized its
    KV cache ("Available KV cache memory: -0.00 GiB" on verl-0.7's thorough run)."""
    t = trainer()
    run = t.TrainerRun([sys.executable, str(PROGRAMS / "leaves_a_process_group.py")], str(tmp_path))
    try:
        assert run.wait(timeout=600) == 0
        child = int(run.lines[0].text)
        assert t.session_pids(run.proc.pid) == []
        state = Path(f"/proc/{child}/stat")
        assert not state.exists() or state.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # gone, or a zombie
    finally:
        for pid in t.session_pids(run.proc.pid):
            os.kill(pid, 9)


def test_thorough_families_run_one_at_a_time_each_launched_once(monkeypatch, tmp_path):
    """verl's own KV cache sizing (thorough) needs the GPU to itself: the families run in turn, each trainer once.
    The runner calls each family's finish in order; before, a finish launched its own trainer outside the queue and
    the queue then launched the first family again, beside the next."""
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, FAKE_TRAINER)
    launches = []
    launch = t.TrainerCheck.launch

    def counted(self, hold=False):
        launches.append(self.family["name"])
        return launch(self, hold)

    monkeypatch.setattr(t.TrainerCheck, "launch", counted)
    rows = [FAMILIES[name] for name in ("llama", "qwen2", "qwen3")]
    profile = common.parse_profile(profile_json(thorough=True, trainer={"families": rows, "parallel": 3}))
    (_, import_check), *finishes = t.checks(profile, torch=None)
    monkeypatch.setattr(t, "check_import", lambda: ({}, "imports"))
    assert launches == []  # thorough: nothing starts before its turn
    runs = []
    for _, finish in finishes:
        with pytest.raises(common.Failed):  # the stand-in saves no checkpoint
            finish()
        runs.append(finish.__self__.run)
    assert launches == ["llama", "qwen2", "qwen3"]
    for before, after in zip(runs, runs[1:]):
        assert before.end <= after.start  # the next trainer started after the previous one was reaped


def test_sizes_this_node_cannot_take_fail_the_trainer_check_in_one_line(monkeypatch, tmp_path):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, "print('never')")
    profile = common.parse_profile(profile_json(rollout_tp=2))
    check = t.TrainerCheck(None, profile, LLAMA)
    with pytest.raises(common.Failed) as failed:
        check.finish()
    assert str(failed.value) == "cannot run verl's trainer on this node so: rollout_tp 2 does not divide the 1 GPU(s)"
    assert check.run is None


@pytest.mark.parametrize("requires, needed", [
    # verl 0.9.1's Requires-Dist (its verl-core extra brings TransferQueue, which its V1 trainer imports)
    (["hydra-core", "mbridge; extra == \"mcore\"", "TransferQueue>=0.1.10; extra == \"verl-core\"",
      "pyzmq; extra == \"verl-core\""], True),
    # verl 0.7.1's: no TransferQueue, and its main_ppo imports it only when config.transfer_queue.enable
    (["accelerate", "codetiming", "datasets", "hydra-core", "ray[default]>=2.41.0", "transformers"], False),
    (None, False),
])
def test_the_import_check_asks_for_transfer_queue_only_where_verl_declares_it(requires, needed):
    assert trainer().needs_transfer_queue(requires) is needed


def test_a_familys_known_upstream_failure_is_named_only_when_its_output_shows_it():
    t = trainer()
    vl = FAMILIES["qwen2.5-vl"]
    seen = ["(WorkerDict pid=9) RuntimeError: Expected cond to be True, but got False.",
            "    torch._check(lengths_sum <= ragged_dim_size)"]
    for variant in ("fsdp", "megatron"):  # verl's own split: in either actor
        known = t.known_failure(vl, seen, variant)
        assert known["url"] == "https://github.com/verl-project/verl/issues/7899" and "7901" in known["fix"]
    assert t.known_failure(vl, ["ModuleNotFoundError: No module named 'flash_attn'"], "fsdp") is None  # another cause
    assert t.known_failure(LLAMA, seen, "fsdp") is None  # a family without a known issue has none


def test_megatron_bridges_qwen2_5_vl_failure_is_known_in_the_megatron_variant_only():
    """The real trainer output of visit F (H200): Megatron-Bridge's Qwen2.5-VL given verl's packed metadata. Known
    there, with its link; the same lines from an fsdp run would be a failure of another kind, counted."""
    t = trainer()
    log = (Path(__file__).parents[1] / "data/logs/F54-verlenv-h200-megatron-qwen2.5-vl-thd.log").read_text()
    log = log.splitlines()
    known = t.known_failure(FAMILIES["qwen2.5-vl"], log, "megatron")
    assert known["url"] == "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4507"
    assert "use_remove_padding=False" in known["fix"]
    assert t.known_failure(FAMILIES["qwen2.5-vl"], log, "fsdp") is None
    assert t.known_failure(LLAMA, log, "megatron") is None


def test_a_known_issues_variants_are_the_catalogs_variants():
    """A misspelt variant would never match: each named variant is one stacks.toml defines."""
    names = {v.name for v in CATALOG.all_variants()}
    named = {v for f in families.table().families.values() for i in f.known_issues for v in i.get("variants", [])}
    assert named and named <= names


# The sglang variant: verl's own config composed with its overrides, then verl's own SGLang server mapping them to
# engine arguments that SGLang's own ServerArgs takes (tests/data/programs/sglang_trainer_config.py, run in an env with
# verl and SGLang).
SGLANG_CONFIG = REPO / "tests" / "data" / "programs" / "sglang_trainer_config.py"


def libcuda_stand_in(python: str, folder) -> str:
    """Test double of the driver's libcuda.so.1 (no driver can exist here): a library of that soname exporting, as
    empty functions, the driver symbols sglang-kernel's and torch-memory-saver's objects bind at load, so verl's SGLang
    server module imports (sgl_kernel loads common_ops at import). Nothing calls them: no GPU work is done."""
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    objects = [str(p) for pattern in ("sgl_kernel/**/*.so", "torch_memory_saver_hook_mode_*cu13*.so")
               for p in Path(site).glob(pattern)]
    names = set()
    for so in objects:
        nm = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True).stdout
        names |= {line.split()[-1].split("@")[0] for line in nm.splitlines() if re.search(r" cu[A-Z]\w*", line)}
    source = folder / "libcuda.c"
    source.write_text("".join(f"void {n}(void) {{}}\n" for n in sorted(names)))
    subprocess.run(["gcc", "-shared", "-fPIC", str(source), "-Wl,-soname,libcuda.so.1", "-o",
                    str(folder / "libcuda.so.1")], check=True)
    return str(folder)


@pytest.fixture(scope="module")
def sglang_config(tmp_path_factory) -> dict:
    from test_check_sglang import sglang_python

    python = sglang_python()
    if python is None:
        pytest.skip("no python with sglang: install .venv-verl-0.9-sglang (verlenv install --variant sglang)")
    if shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("gcc and nm make the stand-in for the driver's libcuda.so.1")
    out = tmp_path_factory.mktemp("sglang-config")
    stub = out / "driver"
    stub.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LD_LIBRARY_PATH": libcuda_stand_in(python, stub)}
    (out / "work").mkdir()
    proc = subprocess.run([python, str(SGLANG_CONFIG), str(KERNELS), str(out / "work"), tables_file(out)],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_verls_own_config_takes_the_sglang_overrides_at_every_size(sglang_config):
    cases = sglang_config["cases"]
    assert len(cases) == 2 * 4
    for case in cases:
        v, sizes, fast = case["values"], case["sizes"], not case["thorough"]
        gpus = sizes.get("nnodes", 1) * sizes.get("n_gpus_per_node", 1)
        assert v["actor_rollout_ref.rollout.name"] == "sglang" and v["actor_rollout_ref.actor.strategy"] == "fsdp"
        assert v["data.train_batch_size"] == 8 * gpus
        assert v["actor_rollout_ref.rollout.tensor_model_parallel_size"] == sizes.get("rollout_tp", 1)
        assert v["actor_rollout_ref.rollout.enforce_eager"] is fast
        assert v["actor_rollout_ref.actor.fsdp_config.use_torch_compile"] is not fast


@pytest.mark.slow
def test_sglangs_own_server_args_take_every_argument_verl_passes(sglang_config):
    """verl's launch_server spreads engine_kwargs.sglang over its own arguments; SGLang's ServerArgs takes them all,
    and the fast proof's settings arrive as the rollout row says (thorough: verl's FlashInfer default for sglang >=
    0.5.12, CUDA graphs and piecewise graphs on, SGLang's own KV sizing)."""
    server = sglang_config["server"]
    assert set(server) == {"fast-tp1", "thorough-tp1", "fast-tp2", "thorough-tp2"}
    for key, args in server.items():
        assert args["unknown"] == [], key
        assert (args["log_level"], args["mem_fraction_static"], args["enable_memory_saver"],
                args["skip_tokenizer_init"]) == ("info", 0.3, True, True), key
        assert args["tp_size"] == int(key[-1])
        if key.startswith("fast"):
            assert (args["attention_backend"], args["disable_cuda_graph"], args["disable_piecewise_cuda_graph"],
                    args["max_total_tokens"]) == ("fa3", True, True, 16384), key
            assert args["engine_kwargs"] == ["attention_backend", "disable_piecewise_cuda_graph", "log_level",
                                             "max_total_tokens"]
        else:
            assert (args["attention_backend"], args["disable_cuda_graph"], args["disable_piecewise_cuda_graph"],
                    args["max_total_tokens"]) == ("flashinfer", False, False, None), key
            assert args["engine_kwargs"] == ["log_level"]
