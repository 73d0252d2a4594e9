"""GPU check of verl's own trainer: `python -m verl.trainer.main_ppo` (verl's default V1 trainer) runs 2 GRPO steps
on a tiny random Llama, a word-level tokenizer and a GSM8K-shaped parquet written here (no download), with vLLM
rollout, the env's flash-attn (verl's default attn_implementation) and an FSDP actor, or a Megatron actor (TE,
megatron-core, mbridge) for the megatron variant, on the GPUs the profile gives (gpu_count). The reward (a file of
its own, as a user would give it) depends on each response's tokens, so GRPO advantages and gradients are non-zero.

Judged from verl's own console metrics and its own checkpoint: finite actor/pg_loss, actor/grad_norm > 0 on every
step, the actor's weights after the 2 steps (verl's hf_model checkpoint) differ from the initial ones, and vLLM's
rollout log-probs agree with the actor's (training/rollout_actor_probs_pearson_corr >= 0.99 and
training/rollout_probs_diff_mean <= 0.01 on every step). Reports step times and the time to the first rollout.

Thresholds: none (the agreement bounds are above).
Run: python check_verl_trainer.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true}'
"""

import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import _common

PACKAGE = "verl"
STEPS = 2
TIMEOUT_S = 540  # below the runner's 600 s for this script, so a hang still gives a result and its log
SPECIAL = ["<unk>", "<pad>", "<s>", "</s>"]
CHAT_WORDS = ["system", "user", "assistant", ":", "+", "=", "?"]
DIGITS = [str(d) for d in range(10)]
VOCAB = 512
PROMPTS_PER_GPU, RESPONSES_PER_PROMPT = 8, 4
MAX_PROMPT, MAX_RESPONSE = 64, 32
ROWS = 64
# NVLink multicast off: the lent multi-GPU machines need it (as check_nccl.py has it).
NCCL_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Rollout and actor compute the same probabilities from the same weights (bf16 vs the actor's bf16 compute).
MIN_PEARSON, MAX_PROB_DIFF_MEAN = 0.99, 0.01
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}assistant : {% endif %}")
# verl's console logger (verl/utils/logger/aggregate_logger.py, concat_dict_to_str): "step:N - key:value - ...",
# printed inside a Ray actor, so the line may carry Ray's "(TaskRunnerV1 pid=...)" prefix.
METRICS_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
REWARD_SOURCE = '''\
"""The reward verl's trainer calls for each response: it depends on the response's words, so responses to one
prompt score differently and GRPO's advantages are non-zero."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    words = solution_str.split()
    if not words:
        return 0.0
    shape = sum(sum(map(ord, w)) % 10 for w in words) / (9.0 * len(words))
    return shape + (1.0 if ground_truth in words else 0.0)
'''


def words() -> list[str]:
    fixed = SPECIAL + CHAT_WORDS + DIGITS
    return fixed + [f"w{i}" for i in range(VOCAB - len(fixed))]


def write_tokenizer(directory):
    """A word-level tokenizer with a chat template, saved like a hub tokenizer (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(words())}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # decodes to words joined by spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>",
                                   bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def write_model(directory, torch):
    """A 2-layer Llama with random weights, bf16, laid out like a hub model; its vocab is the tokenizer's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = {w: i for i, w in enumerate(words())}
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"],
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Logits of a few units: sampling at temperature 1 stays diverse, and probabilities vary enough for the
        # rollout/actor correlation to mean something (near-uniform ones would be all rounding).
        model.lm_head.weight.normal_(0.0, 0.15)
    model.to(torch.bfloat16).save_pretrained(directory)


def dataset_rows(count=ROWS, seed=0) -> list[dict]:
    """GSM8K-shaped rows, as verl's gsm8k preprocessing writes them: chat prompt, data_source, reward_model,
    extra_info."""
    import random

    rng = random.Random(seed)
    filler = [w for w in words() if w.startswith("w")]
    rows = []
    for index in range(count):
        a, b = rng.randrange(5), rng.randrange(5)
        question = " ".join(rng.sample(filler, 6) + [str(a), "+", str(b), "=", "?"])
        rows.append({"data_source": "openai/gsm8k",
                     "prompt": [{"role": "user", "content": question}],
                     "ability": "math",
                     "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                     "extra_info": {"split": "train", "index": index, "answer": str(a + b), "question": question}})
    return rows


def write_dataset(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def write_inputs(workdir, torch) -> dict:
    """Everything the trainer reads, under workdir: model (with tokenizer), train parquet, reward file; and the
    folders it writes to."""
    paths = {"model": os.path.join(workdir, "model"), "data": os.path.join(workdir, "train.parquet"),
             "reward": os.path.join(workdir, "verlenv_check_reward.py"),
             "checkpoints": os.path.join(workdir, "checkpoints"),
             # The trainer's working directory, on its sys.path: empty, so nothing here shadows a package.
             "run": os.path.join(workdir, "run")}
    os.makedirs(paths["run"])
    write_tokenizer(paths["model"])
    write_model(paths["model"], torch)
    write_dataset(paths["data"], dataset_rows())
    with open(paths["reward"], "w") as f:
        f.write(REWARD_SOURCE)
    return paths


def config_name(variant: str) -> str:
    return "ppo_megatron_trainer" if variant == "megatron" else "ppo_trainer"


def overrides(paths: dict, n_gpus: int, variant: str) -> list[str]:
    """Hydra overrides of verl's own config: only sizes, paths and what a check must not do (download, log to
    wandb, validate); attention, trainer (V1) and engines stay verl's defaults."""
    prompts = PROMPTS_PER_GPU * n_gpus
    actor = "actor_rollout_ref.actor"
    out = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files=['{paths['data']}']",
        f"data.val_files=['{paths['data']}']",
        f"data.train_batch_size={prompts}",
        f"data.max_prompt_length={MAX_PROMPT}",
        f"data.max_response_length={MAX_RESPONSE}",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={paths['model']}",
        # Large enough that one step moves bf16 weights (verl's 1e-6 is below their rounding).
        f"{actor}.optim.lr=1e-4",
        # Two mini-batches per step: the second is trained on after the first update.
        f"{actor}.ppo_mini_batch_size={prompts // 2}",
        f"{actor}.ppo_micro_batch_size_per_gpu={RESPONSES_PER_PROMPT * 2}",
        f"{actor}.checkpoint.save_contents=['model','hf_model']",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={RESPONSES_PER_PROMPT}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={RESPONSES_PER_PROMPT * 2}",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"reward.custom_reward_function.path={paths['reward']}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "trainer.logger=['console']",
        "trainer.project_name=verlenv",
        "trainer.experiment_name=verify",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={n_gpus}",
        f"trainer.total_training_steps={STEPS}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.save_freq={STEPS}",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={paths['checkpoints']}",
    ]
    if variant == "megatron":
        out += [f"{actor}.megatron.tensor_model_parallel_size=1", f"{actor}.megatron.pipeline_model_parallel_size=1",
                # verl 0.9.1 bridges HF and Megatron with Megatron-Bridge by default (verl.models.mcore.bridge imports
                # megatron.bridge); its ==0.5.2 is not on PyPI, so the env carries mbridge, which verl selects so.
                f"{actor}.megatron.vanilla_mbridge=True",
                # verl's default `flash` makes TE use flash-attn, but TE 2.12.0 accepts flash-attn 2.1.1..2.8.3 only
                # (transformer_engine/pytorch/attention/dot_product_attention/utils.py max_version) and disables the
                # built 2.8.3.post2: no backend is left. auto lets TE choose its cuDNN fused attention. The ref model
                # follows the actor's setting (oc.select in verl's config).
                f"{actor}.megatron.override_transformer_config.attention_backend=auto"]
    return out


def command(python: str, paths: dict, n_gpus: int, variant: str) -> list[str]:
    return [python, "-m", "verl.trainer.main_ppo", "--config-name", config_name(variant),
            *overrides(paths, n_gpus, variant)]


def parse_value(text: str):
    try:
        return float(text)
    except ValueError:
        return None


def parse_metrics(log_lines) -> dict[int, dict[str, float]]:
    """verl's console metric lines -> {step: {metric: value}} (non-numeric values dropped)."""
    steps: dict[int, dict[str, float]] = {}
    for line in log_lines:
        match = METRICS_LINE.search(line)
        if not match:
            continue
        metrics = steps.setdefault(int(match.group(1)), {})
        for field in match.group(2).split(" - "):
            key, sep, value = field.rpartition(":")
            number = parse_value(value.strip()) if sep else None
            if key and number is not None:
                metrics[key.strip()] = number
    return steps


def safetensors_files(directory) -> list[str]:
    found = []
    for root, _, files in os.walk(directory):
        found += [os.path.join(root, f) for f in files if f.endswith(".safetensors")]
    return sorted(found)


def hf_checkpoint(actor_dir) -> str | None:
    """The hf_model part of verl's actor checkpoint: actor/huggingface (FSDP), actor/model/huggingface (Megatron)."""
    for candidate in ("huggingface", os.path.join("model", "huggingface")):
        path = os.path.join(actor_dir, candidate)
        if safetensors_files(path):
            return path
    return None


def weight_change(torch, before_dir, after_dir) -> dict:
    """Relative change ||after - before|| / ||before|| over every tensor both checkpoints have."""
    from safetensors.torch import load_file

    def tensors(directory):
        out = {}
        for path in safetensors_files(directory):
            out.update(load_file(path))
        return out

    before, after = tensors(before_dir), tensors(after_dir)
    common = sorted(set(before) & set(after))
    if not common:
        raise _common.Failed(f"no tensor names shared by the initial model and verl's checkpoint in {after_dir}")
    diff = sum((after[k].double() - before[k].double()).norm().item() ** 2 for k in common) ** 0.5
    norm = sum(before[k].double().norm().item() ** 2 for k in common) ** 0.5
    changed = sum(not torch.equal(after[k].to(before[k].dtype), before[k]) for k in common)
    return {"weights_rel_change": diff / norm, "tensors_changed": changed, "tensors_compared": len(common)}


def judge(steps: dict[int, dict[str, float]], weights: dict | None) -> tuple[dict, list[str]]:
    """verl's metrics of each step and the weight change -> (numbers, problems)."""
    numbers, problems = {}, []
    for step in range(1, STEPS + 1):
        metrics = steps.get(step)
        if metrics is None:
            problems.append(f"verl logged no metrics for step {step}")
            continue
        wanted = {"pg_loss": "actor/pg_loss", "grad_norm": "actor/grad_norm",
                  "pearson": "training/rollout_actor_probs_pearson_corr",
                  "prob_diff_mean": "training/rollout_probs_diff_mean",
                  "prob_diff_max": "training/rollout_probs_diff_max",
                  "step_s": "timing_s/step", "gen_s": "timing_s/gen", "update_actor_s": "timing_s/update_actor",
                  "score_mean": "critic/score/mean", "advantages_max": "critic/advantages/max"}
        for name, key in wanted.items():
            if key in metrics:
                numbers[f"step{step}_{name}"] = metrics[key]
        for key in ("actor/pg_loss", "actor/grad_norm", "training/rollout_actor_probs_pearson_corr",
                    "training/rollout_probs_diff_mean"):
            if key not in metrics:
                problems.append(f"step {step}: verl logged no {key}")
        loss, grad = metrics.get("actor/pg_loss"), metrics.get("actor/grad_norm")
        if loss is not None and not math.isfinite(loss):
            problems.append(f"step {step}: actor/pg_loss is {loss}")
        if grad is not None and not (math.isfinite(grad) and grad > 0):
            problems.append(f"step {step}: actor/grad_norm is {grad}, not a finite number > 0")
        pearson = metrics.get("training/rollout_actor_probs_pearson_corr")
        if pearson is not None and not _common.at_least(pearson, MIN_PEARSON):
            problems.append(f"step {step}: rollout/actor probability correlation {pearson:.5f} below {MIN_PEARSON}")
        diff = metrics.get("training/rollout_probs_diff_mean")
        if diff is not None and not _common.within(diff, MAX_PROB_DIFF_MEAN):
            problems.append(f"step {step}: mean |p_rollout - p_actor| {diff:.3g} above {MAX_PROB_DIFF_MEAN}")
    if weights is None:
        problems.append("verl saved no hf_model checkpoint to compare the weights with")
    else:
        numbers.update(weights)
        if not weights["tensors_changed"] or not weights["weights_rel_change"] > 0:
            problems.append(f"the actor's weights did not change over {STEPS} steps (verl's own checkpoint)")
    return numbers, problems


# A Python exception line: "AttributeError: ...", "ray.exceptions.RayTaskError(ValueError): ...".
EXCEPTION_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(\([\w.]+\))?: ")


def failure_line(lines) -> str:
    """What made the trainer exit: the last exception line of its output (the innermost cause, printed after the Ray
    wrappers), not hydra's closing hint; else its last line."""
    text = [line.strip() for line in lines if line.strip()]
    return next((line for line in reversed(text) if EXCEPTION_LINE.match(line)), text[-1] if text else "no output")


def run_trainer(cmd, workdir, timeout=TIMEOUT_S) -> tuple[list[str], int | None, dict]:
    """Run the trainer, echoing its output (the report keeps a failure's tail); returns its lines, exit code
    (None when killed at the timeout) and the wall times seen from here."""
    # No downloads, no wandb; Ray's log dedup would fold repeated worker lines. NVLink multicast off, as the
    # NCCL check has it (the lent multi-GPU machines need it), unless the user set those.
    env = {**NCCL_DEFAULTS, **os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           # hydra prints the whole traceback (the cause inside Ray's wrappers), not only a hint to set this.
           "HYDRA_FULL_ERROR": "1",
           "WANDB_MODE": "disabled", "RAY_DEDUP_LOGS": "0", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    lines, seen = [], {}
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)

    def read():  # in a thread: a silent hang must not keep the timeout from firing
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line.rstrip("\n"))
            if "first_metrics_s" not in seen and METRICS_LINE.search(line):
                seen["first_metrics_s"] = time.monotonic() - start

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
        with contextlib.suppress(ProcessLookupError):  # it may have exited just now
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started in its session (Ray, vLLM)
        proc.wait()
    reader.join(timeout=30)
    return lines, code, {"wall_s": time.monotonic() - start, "first_metrics_s": seen.get("first_metrics_s")}


def check_import():
    import verl
    import verl.trainer.main_ppo  # noqa: F401

    import transfer_queue  # noqa: F401  (the V1 trainer imports it when it starts)

    return {}, f"verl {verl.__version__}: main_ppo and TransferQueue import"


def check_trainer(torch, profile):
    n_gpus = profile.gpu_count or torch.cuda.device_count()
    workdir = tempfile.mkdtemp(prefix="verlenv-verl-trainer-")
    try:
        paths = write_inputs(workdir, torch)
        cmd = command(sys.executable, paths, n_gpus, profile.variant)
        print("running:", " ".join(cmd), flush=True)
        lines, code, walls = run_trainer(cmd, paths["run"])
        steps = parse_metrics(lines)
        final = hf_checkpoint(os.path.join(paths["checkpoints"], f"global_step_{STEPS}", "actor"))
        weights = weight_change(torch, paths["model"], final) if final else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    numbers, problems = judge(steps, weights)
    numbers.update({"gpus": n_gpus, "wall_s": walls["wall_s"]})
    if walls["first_metrics_s"] is not None and "step1_step_s" in numbers and "step1_gen_s" in numbers:
        # From launch to the end of the first rollout: start-up (Ray, workers, vLLM) plus step 1's generation.
        startup = walls["first_metrics_s"] - numbers["step1_step_s"]
        numbers["startup_s"] = startup
        numbers["time_to_first_rollout_s"] = startup + numbers["step1_gen_s"]
    if code is None:
        problems.insert(0, f"verl's trainer did not finish in {TIMEOUT_S} s")
    elif code != 0:
        problems.insert(0, f"verl's trainer exited with {code}: {failure_line(lines)[:300]}")
    times = ", ".join(f"{numbers.get(f'step{s}_step_s', math.nan):.1f}" for s in range(1, STEPS + 1))
    note = f"{STEPS} GRPO steps, {n_gpus} GPU(s), {profile.variant} actor, vLLM rollout; step times {times} s"
    return _common.verdict(numbers, problems, note)


def checks(profile, torch):
    name = "verl/trainer/megatron" if profile.variant == "megatron" else "verl/trainer/fsdp"
    return [
        ("verl/trainer/import", check_import),
        (f"{name}/grpo-{STEPS}-steps", lambda: check_trainer(torch, profile)),
    ]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"verl": "verl", "torch": "torch", "vllm": "vllm"}, checks))
