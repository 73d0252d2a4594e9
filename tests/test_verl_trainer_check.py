"""The CPU side of the verl trainer check (kernels/check_verl_trainer.py): the tiny model, tokenizer and parquet it
writes, loaded back with transformers and pyarrow; its command line parsed by verl's own main_ppo (--cfg job); the
metric parser on lines made by verl's own console logger; the judging of good and broken runs.

Everything needing torch, transformers or verl runs inside an env that has them (the default env, see
torch_python in test_kernel_scripts.py); the parser and the judge need only the standard library.
"""

import json
import math
import os
import subprocess
import sys
import time

import pytest

from test_kernel_scripts import KERNELS, load, torch_python
from test_verify_profiles import REPO
from verlenv import catalog, families
from verlenv.cluster.trainer import trainer_spec

GOOD_STEP = {"actor/pg_loss": -0.0123, "actor/grad_norm": 0.87, "training/rollout_actor_probs_pearson_corr": 0.99994,
             "training/rollout_probs_diff_mean": 0.0004, "training/rollout_probs_diff_max": 0.01,
             "timing_s/step": 9.5, "timing_s/gen": 4.0}
GOOD_WEIGHTS = {"weights_rel_change": 3e-3, "tensors_changed": 21, "tensors_compared": 21}
# What verify hands the check for each variant of the default stack (its actor's and rollout's rows, the env's
# overrides), and the family rows (data/families.toml).
CATALOG = catalog.load(REPO / "stacks.toml")
SPECS = {name: trainer_spec(CATALOG.variant("verl-0.9", name)) for name in ("fsdp", "megatron")}
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
    assert (eight["trainer.nnodes"], eight["trainer.n_gpus_per_node"], eight["data.train_batch_size"]) == ("2", "4", "64")
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


# Runs in an env with torch, transformers, pyarrow, verl and hydra: writes the inputs, reads them back the way
# verl does, has verl's main_ppo parse the check's command line (both variants) and checks what it set.
IN_ENV = r'''
import importlib.util, json, os, sys, tempfile

KERNELS, OUT = sys.argv[1], sys.argv[2]
TABLES = json.load(open(sys.argv[3]))  # what verify hands the check: each variant's trainer spec, the family rows
sys.path.insert(0, KERNELS)  # as when the script runs: its folder first, for _common, _models and _phases
import check_verl_trainer as t

import pyarrow.parquet as pq
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(2)
work = tempfile.mkdtemp(dir=OUT)
paths = t.write_inputs(work, torch, TABLES["families"]["llama"])
tokenizer = AutoTokenizer.from_pretrained(paths["model"])
model = AutoModelForCausalLM.from_pretrained(paths["model"])
rows = pq.read_table(paths["data"]).to_pylist()
chat = tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False)
ids = tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True)
ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
with torch.no_grad():
    probs = model(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
out = {"vocab": len(tokenizer), "model_vocab": model.config.vocab_size, "chat": chat, "unk": tokenizer.unk_token_id,
       "ids": list(ids), "pad": tokenizer.pad_token_id, "eos": tokenizer.eos_token_id, "rows": len(rows),
       "row": rows[0], "top_prob": probs.max().item(), "dtype": str(model.dtype),
       "attn": model.config._attn_implementation if hasattr(model.config, "_attn_implementation") else None}

weights = t.weight_change(torch, paths["model"], paths["model"])
out["same_weights"] = weights

import os
import subprocess
import sys
import time
import yaml
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

for variant in ("fsdp", "megatron"):
    # verl's own entry point parses the command line the check runs; --cfg job prints the config and stops.
    cmd = t.command(sys.executable, paths, TABLES["specs"][variant], TABLES["families"]["llama"],
                    n_gpus_per_node=2) + ["--cfg", "job", "--resolve"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=paths["run"])
    if proc.returncode != 0:
        raise SystemExit(f"{variant}: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    cfg = OmegaConf.create(yaml.safe_load(proc.stdout))
    a = cfg.actor_rollout_ref
    out[variant] = {"use_v1": cfg.trainer.use_v1, "strategy": a.actor.strategy, "rollout": a.rollout.name,
                    "n": a.rollout.n, "tp": a.rollout.tensor_model_parallel_size, "model": a.model.path,
                    "reward": cfg.reward.custom_reward_function.path, "logger": list(cfg.trainer.logger),
                    "steps": cfg.trainer.total_training_steps, "gpus": cfg.trainer.n_gpus_per_node,
                    "calc_log_probs": a.rollout.calculate_log_probs, "adv": cfg.algorithm.adv_estimator,
                    "save": list(a.actor.checkpoint.save_contents), "lr": a.actor.optim.lr,
                    "attn": OmegaConf.select(cfg, "actor_rollout_ref.model.override_config.attn_implementation"),
                    "vanilla_mbridge": OmegaConf.select(cfg, "actor_rollout_ref.actor.megatron.vanilla_mbridge"),
                    "ref_vanilla_mbridge": OmegaConf.select(cfg, "actor_rollout_ref.ref.megatron.vanilla_mbridge"),
                    "te_attention": OmegaConf.select(
                        cfg, "actor_rollout_ref.actor.megatron.override_transformer_config.attention_backend"),
                    "ref_te_attention": OmegaConf.select(
                        cfg, "actor_rollout_ref.ref.megatron.override_transformer_config.attention_backend")}
    omega_conf_to_dataclass(a.rollout)  # verl's own RolloutConfig validation
    # What main_ppo checks before it starts Ray: batch sizes against GPUs, micro-batches, the critic's need.
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    out[variant]["validated"] = True

# verl's console logger writes the metric lines the check parses.
import contextlib, io
from verl.utils.logger.aggregate_logger import LocalLogger
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    LocalLogger().log({"actor/pg_loss": -0.25, "actor/grad_norm": 1.5, "note": "text", "timing_s/step": 3}, step=1)
out["console_line"] = buf.getvalue().strip()
out["parsed"] = t.parse_metrics(buf.getvalue().splitlines())
json.dump(out, open(os.path.join(OUT, "out.json"), "w"))
'''


def tables_file(folder) -> str:
    path = folder / "tables.json"
    path.write_text(json.dumps({"specs": SPECS, "families": FAMILIES}))
    return str(path)


@pytest.fixture(scope="module")
def in_env(tmp_path_factory) -> dict:
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    probe = subprocess.run([python, "-c", "import verl, hydra, pyarrow, transformers"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("the torch environment lacks verl, hydra, pyarrow or transformers")
    out = tmp_path_factory.mktemp("verl-trainer")
    proc = subprocess.run([python, "-c", IN_ENV, str(KERNELS), str(out), str(tables_file(out))], capture_output=True,
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


# Runs in an env with verl and vLLM: verl's own Hydra config composed (as main_ppo composes it) with the check's
# overrides, fast and thorough, for each size a cluster may ask for; validated by verl's own checks; and the fast
# proof's vLLM settings passed the way verl's vLLM server passes them, through vLLM's own argument parser.
COMPOSE = r'''
import json, os, sys

KERNELS, OUT = sys.argv[1], sys.argv[2]
TABLES = json.load(open(sys.argv[3]))
sys.path.insert(0, KERNELS)
import check_verl_trainer as t

import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

SIZES = [dict(), dict(n_gpus_per_node=2), dict(n_gpus_per_node=2, rollout_tp=2), dict(nnodes=2),
         dict(nnodes=2, n_gpus_per_node=4), dict(nnodes=2, n_gpus_per_node=4, rollout_tp=2)]
MEGATRON_ONLY = [dict(n_gpus_per_node=2, actor_tp=2), dict(nnodes=2, n_gpus_per_node=4, rollout_tp=2, actor_tp=2)]
paths = {"model": "/m", "data": "/d.parquet", "reward": "/r.py", "checkpoints": "/c", "run": "/w"}
pick = lambda cfg, key: OmegaConf.select(cfg, key)
out = []
with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                           version_base=None):
    for variant in ("fsdp", "megatron"):
        for sizes in SIZES + (MEGATRON_ONLY if variant == "megatron" else []):
            for thorough in (False, True):
                spec, llama = TABLES["specs"][variant], TABLES["families"]["llama"]
                cfg = compose(config_name=spec["actor"]["config_name"],
                              overrides=t.overrides(paths, spec, llama, thorough=thorough, **sizes))
                validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
                rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
                OmegaConf.resolve(cfg)  # as TaskRunnerV1.run does: every interpolation must resolve
                keys = ["trainer.nnodes", "trainer.n_gpus_per_node", "data.train_batch_size",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size", "actor_rollout_ref.rollout.n_gpus_per_node",
                        "actor_rollout_ref.rollout.enforce_eager", "actor_rollout_ref.rollout.cudagraph_capture_sizes",
                        "actor_rollout_ref.rollout.agent.num_workers", "reward.num_workers", "data.dataloader_num_workers",
                        "actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.actor.fsdp_config.use_torch_compile",
                        "actor_rollout_ref.ref.fsdp_config.use_torch_compile",
                        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                        "actor_rollout_ref.ref.megatron.tensor_model_parallel_size", "actor_rollout_ref.actor.strategy",
                        "actor_rollout_ref.actor.ppo_mini_batch_size"]
                out.append({"variant": variant, "sizes": sizes, "thorough": thorough,
                            "values": {k: pick(cfg, k) for k in keys},
                            "vllm_engine_kwargs": dict(rollout.engine_kwargs.get("vllm") or {})})

# The fast proof's vLLM settings, as verl's vLLM server hands them to vLLM (vllm_async_server.py: its args dict
# with engine_kwargs spread in, build_cli_args_from_config, vLLM's own parser).
import vllm.platforms
from vllm.platforms.cpu import CpuPlatform

# Test double: vLLM's parser asks the platform for a device type, and the CUDA platform needs libcuda; the parse
# itself is the same on any platform.
vllm.platforms._current_platform = CpuPlatform()
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser
from verl.workers.rollout.vllm_rollout.utils import build_cli_args_from_config

fast = next(c for c in out if c["variant"] == "fsdp" and not c["thorough"])
args = {"enforce_eager": fast["values"]["actor_rollout_ref.rollout.enforce_eager"], **fast["vllm_engine_kwargs"]}
parsed = AsyncEngineArgs.from_cli_args(AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(
    ["--model", "/m", *build_cli_args_from_config(args)]))
json.dump({"cases": out, "vllm": {"enforce_eager": parsed.enforce_eager,
                                  "kv_cache_memory_bytes": parsed.kv_cache_memory_bytes}}, open(OUT, "w"))
'''


@pytest.fixture(scope="module")
def composed(tmp_path_factory) -> dict:
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    probe = subprocess.run([python, "-c", "import verl, hydra, vllm"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("the torch environment lacks verl, hydra or vLLM")
    out = tmp_path_factory.mktemp("verl-compose") / "out.json"
    proc = subprocess.run([python, "-c", COMPOSE, str(KERNELS), str(out), str(tables_file(out.parent))],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


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
    talk = ("import sys, time; print('ray init', flush=True); time.sleep(0.3); "
            "print('(TaskRunnerV1 pid=1) step:1 - actor/grad_norm:0.5 - timing_s/step:0.1', flush=True)")
    lines, code, walls = t.run_trainer([sys.executable, "-c", talk], str(tmp_path), timeout=60)
    assert code == 0 and t.parse_metrics([x.text for x in lines]) == {1: {"actor/grad_norm": 0.5, "timing_s/step": 0.1}}
    assert 0.3 <= walls["first_metrics_s"] <= walls["wall_s"] < 30
    assert [x.text for x in lines][0] == "ray init" and lines[0].arrival <= lines[1].arrival == walls["first_metrics_s"]
    assert abs(walls["launch_wall"] - time.time()) < 60
    assert "ray init" in capsys.readouterr().out  # echoed, so the runner keeps it with the check's output
    child = tmp_path / "child.pid"
    hang = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(child)!r}, 'w').write(str(p.pid)); print('started', flush=True); time.sleep(60)")
    start = time.monotonic()
    lines, code, _ = t.run_trainer([sys.executable, "-c", hang], str(tmp_path), timeout=2)
    assert code is None and [x.text for x in lines] == ["started"] and time.monotonic() - start < 30
    pid = int(child.read_text())
    for _ in range(50):  # the killed child is reaped shortly after
        if not os.path.exists(f"/proc/{pid}") or "Z" in open(f"/proc/{pid}/stat").read().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the trainer's child {pid} outlived the timeout")


def test_the_failure_named_is_the_innermost_exception_not_hydras_hint():
    # The end of verl's main_ppo output on the H100, 2026-11-25 (docs/verification/2026-11-25-h100-verl-0.9-megatron-trainer.log).
    real = [
        "ray.exceptions.RayTaskError(AttributeError): \x1b[36mray::WorkerDict.actor_rollout_init_model()\x1b[39m (pid=10132)",
        '  File "/root/verl-env/lib/python3.12/site-packages/mbridge/core/util.py", line 83, in build_model',
        "    if model_type == ModelType.encoder_and_decoder:",
        "AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'. Did you mean: 'encoder_or_decoder'?",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    ]
    t = trainer()
    assert t.failure_line(real).startswith("AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'")
    assert t.failure_line(real[:1]).startswith("ray.exceptions.RayTaskError(AttributeError): ")
    assert t.failure_line(["starting", "killed by a signal", ""]) == "killed by a signal"
    assert t.failure_line([]) == "no output"


# A stand-in for main_ppo (test double): what verl prints at start-up and after each step, then it exits.
FAKE_TRAINER = """
import time
print("ray init kwargs: {}", flush=True)
time.sleep(0.3)
for step in (1, 2):
    print(f"(TaskRunnerV1 pid=1) step:{step} - actor/pg_loss:0.1 - actor/grad_norm:0.5 - timing_s/gen:0.05 "
          f"- training/rollout_actor_probs_pearson_corr:0.9999 - training/rollout_probs_diff_mean:0.001 "
          f"- timing_s/step:0.1", flush=True)
"""


def fake_launch(t, monkeypatch, tmp_path, script):
    def write_inputs(workdir, torch, family, rows):
        paths = {"model": str(tmp_path / "model"), "checkpoints": str(tmp_path / "ckpt"), "run": workdir,
                 "init": {"entropy_min": 4.0}}
        return paths
    monkeypatch.setattr(t, "write_inputs", write_inputs)
    monkeypatch.setattr(t, "command", lambda python, paths, spec, family, **sizes: [sys.executable, "-c", script])


def profile_json(**extra) -> str:
    """A profile as verify sends it to the trainer check: the fsdp variant's spec and the llama family."""
    trainer = {**SPECS["fsdp"], "families": [LLAMA], "parallel": 1, **extra.pop("trainer", {})}
    return json.dumps({"key": "h100", "arch": "9.0", "fp8": True, "gpu_count": 1, "trainer": trainer, **extra})


def test_the_fast_proof_starts_the_trainer_before_its_import_check_and_files_its_output_after(
        monkeypatch, tmp_path, capsys):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, FAKE_TRAINER)
    monkeypatch.setattr(t, "check_import", lambda: (time.sleep(1.0), print("IMPORTED"), ({}, "imports"))[-1])
    profile = common.parse_profile(profile_json())
    (name_import, first), (name_trainer, second) = t.checks(profile, torch=None)
    assert (name_import, name_trainer) == ("verl/trainer/import", "verl/trainer/fsdp/llama/grpo-2-steps")
    assert first() == ({}, "imports")
    imported = time.time()
    out = capsys.readouterr().out
    assert "IMPORTED" in out and "step:1" not in out  # the trainer ran meanwhile, its output held back
    run = second.__self__.run
    assert run.launch_wall + run.lines[0].arrival < imported  # it was up before the import check ended
    with pytest.raises(common.Failed) as failed:  # no checkpoint from the stand-in: a failure with its numbers
        second()
    out = capsys.readouterr().out
    assert out.index("running:") < out.index("ray init kwargs") < out.index("step:2")
    numbers = failed.value.numbers
    assert str(failed.value) == "verl saved no hf_model checkpoint to compare the weights with"
    assert numbers["step1_step_s"] == 0.1 and numbers["phase/step1_s"] == 0.1 and numbers["phase/step2/gen_s"] == 0.05
    assert 0 < numbers["phase/driver_start_s"] < numbers["phase/total_s"] == numbers["wall_s"]
    assert not os.path.exists(second.__self__.workdir)


def test_a_trainer_left_behind_by_a_failed_import_is_killed_and_its_folder_removed(monkeypatch, tmp_path):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, "import time; print('up', flush=True); time.sleep(120)")
    profile = common.parse_profile(profile_json())
    check = t.TrainerCheck(None, profile, LLAMA)
    check.launch(hold=True)
    assert check.error is None and check.run.proc.poll() is None and os.path.isdir(check.workdir)
    check.abandon()  # what the script's exit runs (atexit) when the import check ends it before finish()
    assert check.run.proc.wait(timeout=30) == -9 and not os.path.exists(check.workdir)


def test_sizes_this_node_cannot_take_fail_the_trainer_check_in_one_line(monkeypatch, tmp_path):
    t, common = trainer(), load("_common")
    fake_launch(t, monkeypatch, tmp_path, "print('never')")
    profile = common.parse_profile(profile_json(rollout_tp=2))
    check = t.TrainerCheck(None, profile, LLAMA)
    with pytest.raises(common.Failed) as failed:
        check.finish()
    assert str(failed.value) == "cannot run verl's trainer on this node so: rollout_tp 2 does not divide the 1 GPU(s)"
    assert check.run is None


def test_a_familys_known_upstream_failure_is_named_only_when_its_output_shows_it():
    t = trainer()
    vl = FAMILIES["qwen2.5-vl"]
    seen = ["(WorkerDict pid=9) RuntimeError: Expected cond to be True, but got False.",
            "    torch._check(lengths_sum <= ragged_dim_size)"]
    known = t.known_failure(vl, seen)
    assert known["url"] == "https://github.com/verl-project/verl/issues/7899" and "7901" in known["fix"]
    assert t.known_failure(vl, ["ModuleNotFoundError: No module named 'flash_attn'"]) is None  # another cause counts
    assert t.known_failure(LLAMA, seen) is None  # a family without a known issue has none
