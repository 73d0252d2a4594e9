"""GPU check of verl's own trainer: `python -m verl.trainer.main_ppo` (verl's default V1 trainer) runs 2 GRPO steps
for each model family the profile names (data/families.toml rows: a tiny random model built offline with
transformers' own classes, its tokenizer, and GSM8K-shaped rows, with images for an image family; _models.py), with
the variant's actor and rollout (data/backends.toml rows: FSDP or Megatron; vLLM or SGLang), the env's flash-attn
(verl's default attn_implementation), on the GPUs the profile gives (gpu_count). The reward (a file of its own, as a
user would give it) depends on each response's tokens, so GRPO advantages and gradients are non-zero.

Judged per family from verl's own console metrics and its own checkpoint: finite actor/pg_loss, actor/grad_norm > 0
and actor/entropy above a floor on every step (a near-deterministic policy trains nothing, and verl still exits 0),
the actor's weights after the 2 steps (verl's hf_model checkpoint) differ from the initial ones, and the rollout's
log-probs agree with the actor's (training/rollout_actor_probs_pearson_corr >= 0.99 and
training/rollout_probs_diff_mean <= 0.01 on every step). Reports step times, the time to the first rollout and
where the time went (`phase/<name>_s`, read from the trainer's output by _phases.py).

Two modes (the profile's `thorough`): the fast proof (default) applies the actor's and rollout's fast overrides
(vLLM eager with a fixed KV cache, the FSDP actor without torch.compile), starts the trainers before the import
check and runs families side by side (the profile's `trainer.parallel` at once); thorough keeps verl's defaults
(CUDA graphs, torch.compile) and runs the families in turn. The profile's rollout_tp and actor_tp set the
tensor-parallel sizes. VERLENV_TRAINER_LOG=<file> keeps the trainer's whole output there, each line with its arrival
(_phases.read_timed_log), written as the lines arrive; with several families, each family's log is <file> with the
family before its suffix.

Thresholds: none (the agreement bounds are above).
Run: python check_verl_trainer.py --out results.json --profile '{"key": "h100", "arch": "9.0", "fp8": true,
     "trainer": {"actor": {...}, "rollout": {...}, "overrides": {}, "families": [{...}]}}'
"""

import atexit
import contextlib
import importlib
import json
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
import traceback

import _common
import _kernel_paths
import _models
import _phases

PACKAGE = "verl"
STEPS = 2
TIMEOUT_S = 540  # below the runner's 600 s per round of trainers, so a hang still gives a result and its log
REAP_S = 60  # for what a finished trainer left running (its Ray, its engine) to be gone
# A line that says the rollout engine died. verl 0.9.1 does not notice: its driver waits on the dead server until the
# check's timeout (GPU visit K: gpt-oss's and deepseek-v3's trainers sat 540 s after vLLM's worker failed on its first
# weight sync). The run is stopped once the engine's traceback has had DEAD_ENGINE_GRACE_S to arrive.
DEAD_ENGINE_LINE = re.compile(r"EngineDeadError|Worker failed with error|EngineCore encountered a fatal error")
DEAD_ENGINE_GRACE_S = 20
PROMPTS_PER_GPU, RESPONSES_PER_PROMPT = 8, 4
MAX_PROMPT, MAX_RESPONSE = 64, 32
ROWS = 64
# NVLink multicast off: the lent multi-GPU machines need it (as check_nccl.py has it).
NCCL_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# The fast proof's rollout KV cache: 32 sequences of 96 tokens need a few MiB; 1 GiB is plenty at any size here.
KV_CACHE_BYTES = 1 << 30
# Rollout and actor compute the same probabilities from the same weights (bf16 vs the actor's bf16 compute).
MIN_PEARSON, MAX_PROB_DIFF_MEAN = 0.99, 0.01
# A policy whose mean token entropy is below this samples (nearly) one answer: GRPO's advantages vanish.
MIN_ENTROPY = 0.05
# verl's console logger (verl/utils/logger/aggregate_logger.py, concat_dict_to_str): "step:N - key:value - ...",
# printed inside a Ray actor, so the line may carry Ray's "(TaskRunnerV1 pid=...)" prefix.
METRICS_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
# The fields a backend row's overrides may name (data/backends.toml).
FIELD = re.compile(r"\{(actor_tp|rollout_tp|kv_cache_bytes)\}")
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


def rows_needed(gpus: int) -> int:
    """Rows of the parquet: verl's epoch is len(dataset) // train_batch_size steps, and the check runs one epoch."""
    return max(ROWS, STEPS * PROMPTS_PER_GPU * gpus)


def write_inputs(workdir, torch, family: dict, rows: int = ROWS) -> dict:
    """Everything the trainer reads for one family, under workdir: model (tokenizer, processor), train parquet,
    reward file; and the folders it writes to."""
    paths = {"reward": os.path.join(workdir, "verlenv_check_reward.py"),
             "checkpoints": os.path.join(workdir, "checkpoints"),
             # The trainer's working directory, on its sys.path: empty, so nothing here shadows a package.
             "run": os.path.join(workdir, "run")}
    os.makedirs(paths["run"])
    written = _models.write_family(workdir, torch, family, rows)
    paths.update(model=written["model"], data=written["data"])
    with open(paths["reward"], "w") as f:
        f.write(REWARD_SOURCE)
    paths["init"] = written["stats"]
    return paths


def text_config(family: dict) -> dict:
    """The family's language-model sizes: its config, or its text_config for a VL family."""
    config = family["config"]
    return config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config


def parallel_problem(trainer: dict, family: dict, nnodes: int, n_gpus_per_node: int, rollout_tp: int,
                     actor_tp: int) -> str | None:
    """Why these sizes cannot run the check, in one line; None when they can."""
    for name, value in (("nnodes", nnodes), ("n_gpus_per_node", n_gpus_per_node), ("rollout_tp", rollout_tp),
                        ("actor_tp", actor_tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer, not {value!r}"
    gpus = nnodes * n_gpus_per_node
    sizes = text_config(family)
    actor, rollout = trainer["actor"], trainer["rollout"]
    problems = []
    if gpus % rollout_tp:
        problems.append(f"rollout_tp {rollout_tp} does not divide the {gpus} GPU(s)")
    for key in rollout["tp_divides"]:
        if sizes.get(key) and sizes[key] % rollout_tp:
            problems.append(f"rollout_tp {rollout_tp} does not divide the {family['name']} model's {key} "
                            f"({sizes[key]})")
    if not actor["tp_overrides"] and actor_tp != 1:
        problems.append(f"actor_tp {actor_tp}: verl's {actor['name']} actor is not tensor-parallel")
    elif gpus % actor_tp:
        problems.append(f"actor_tp {actor_tp} does not divide the {gpus} GPU(s)")
    else:
        for key in actor["tp_divides"]:
            if sizes.get(key) and sizes[key] % actor_tp:
                problems.append(f"actor_tp {actor_tp} does not divide the {family['name']} model's {key} "
                                f"({sizes[key]})")
    return "; ".join(problems) or None


def filled(texts, **values) -> list[str]:
    """A backend row's overrides with their {fields} filled."""
    return [FIELD.sub(lambda m: str(values[m.group(1)]), text) for text in texts]


def overrides(paths: dict, trainer: dict, family: dict, *, nnodes: int = 1, n_gpus_per_node: int = 1,
              rollout_tp: int = 1, actor_tp: int = 1, thorough: bool = False) -> list[str]:
    """Hydra overrides of verl's own config: sizes, paths and what a check must not do (download, log to wandb,
    validate); the actor's, the rollout's, the env's (stacks.toml trainer_overrides) and the family's own; unless
    thorough, the fast proof's; last, the user's own (the trainer's `user_overrides`, from --trainer-override).
    Attention, trainer (V1) and engines stay verl's defaults unless a user's override says. The batch grows with the
    GPUs of all nodes; raises ValueError (one line) for sizes the check's model or GPUs cannot take."""
    problem = parallel_problem(trainer, family, nnodes, n_gpus_per_node, rollout_tp, actor_tp)
    if problem:
        raise ValueError(problem)
    actor, rollout = trainer["actor"], trainer["rollout"]
    fields = {"actor_tp": actor_tp, "rollout_tp": rollout_tp, "kv_cache_bytes": KV_CACHE_BYTES}
    out = own_overrides(paths, family, rollout["name"], PROMPTS_PER_GPU * nnodes * n_gpus_per_node, nnodes,
                        n_gpus_per_node, rollout_tp)
    out += filled(actor["tp_overrides"], **fields) + filled(actor["overrides"], **fields)
    out += filled(rollout["overrides"], **fields)
    out += list(trainer.get("overrides", {})) + list(family.get("overrides", []))
    if not thorough:
        out += filled(rollout["fast_overrides"], **fields) + filled(actor["fast_overrides"], **fields)
    return with_user_overrides(out, trainer.get("user_overrides") or [])


def own_overrides(paths: dict, family: dict, rollout_name: str, prompts: int, nnodes: int, n_gpus_per_node: int,
                  rollout_tp: int) -> list[str]:
    """What the check itself sets, whatever the actor, rollout, env or family: its data, model, sizes, learning
    rate, steps, reward, logging and checkpoints (what its judge reads). --trainer-override may not change these."""
    actor_key = "actor_rollout_ref.actor"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files=['{paths['data']}']",
        f"data.val_files=['{paths['data']}']",
        f"data.train_batch_size={prompts}",
        f"data.max_prompt_length={MAX_PROMPT}",
        f"data.max_response_length={MAX_RESPONSE}",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={paths['model']}",
        # Large enough that one step moves bf16 weights (verl's 1e-6 is below their rounding).
        f"{actor_key}.optim.lr=1e-4",
        # Two mini-batches per step: the second is trained on after the first update.
        f"{actor_key}.ppo_mini_batch_size={prompts // 2}",
        f"{actor_key}.ppo_micro_batch_size_per_gpu={RESPONSES_PER_PROMPT * 2}",
        f"{actor_key}.checkpoint.save_contents=['model','hf_model']",
        f"actor_rollout_ref.rollout.name={rollout_name}",
        f"actor_rollout_ref.rollout.n={RESPONSES_PER_PROMPT}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout_tp}",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={RESPONSES_PER_PROMPT * 2}",
        # The rollout's own log-probs, which the judge compares with the actor's (pearson, probs diff): verl 0.7.x
        # computes them only when asked (its default is False).
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"reward.custom_reward_function.path={paths['reward']}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "trainer.logger=['console']",
        "trainer.project_name=verlenv",
        f"trainer.experiment_name=verify-{family['name']}",
        f"trainer.nnodes={nnodes}",
        f"trainer.n_gpus_per_node={n_gpus_per_node}",
        f"trainer.total_training_steps={STEPS}",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.save_freq={STEPS}",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={paths['checkpoints']}",
    ]


def override_key(text: str) -> str:
    """The config key a Hydra override sets or deletes (`key=v`, `+key=v`, `++key=v`, `~key`)."""
    return text.partition("=")[0].lstrip("+~")


def own_keys() -> frozenset[str]:
    """The keys own_overrides sets (placeholder paths and sizes: the keys do not depend on them)."""
    paths = dict.fromkeys(("data", "model", "reward", "checkpoints"), "-")
    return frozenset(override_key(o) for o in own_overrides(paths, {"name": "-"}, "-", 1, 1, 1, 1))


def with_user_overrides(out: list[str], user: list[str]) -> list[str]:
    """The user's overrides (--trainer-override) last, each replacing what the actor, rollout, env or family set for
    its key: Hydra takes `key=v` twice, but not `+key=v` twice, and a user's override must win either way."""
    keys = {override_key(u) for u in user}
    return [o for o in out if override_key(o) not in keys] + list(user)


def command(python: str, paths: dict, trainer: dict, family: dict, **sizes) -> list[str]:
    """The trainer's command line; sizes: overrides()'s keywords (nnodes, n_gpus_per_node, rollout_tp, actor_tp,
    thorough)."""
    return [python, "-m", "verl.trainer.main_ppo", "--config-name", trainer["actor"]["config_name"],
            *overrides(paths, trainer, family, **sizes)]


# verl 0.9.1 names the socket its trainer sends the weights to vLLM through by the Ray job id, and every fresh Ray
# instance numbers its first job alike: side-by-side trainers, each in a Ray of its own, would share one socket path
# (_verl_own_ray.py says what follows). The slots are host-wide, as that path is: verify runs side by side share them.
OWN_RAY_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_verl_own_ray.py")
RAY_JOB_SLOTS = "/tmp/verlenv-ray-jobs"


def in_own_ray(cmd: list[str]) -> list[str]:
    """cmd (verl's driver) run joined to a Ray instance of its own, under a Ray job id no other trainer on the host
    started so has."""
    return [sys.executable, OWN_RAY_PROGRAM, RAY_JOB_SLOTS, "--", *cmd]


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
        wanted = {"pg_loss": "actor/pg_loss", "grad_norm": "actor/grad_norm", "entropy": "actor/entropy",
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
        entropy = metrics.get("actor/entropy")
        if entropy is not None and not _common.at_least(entropy, MIN_ENTROPY):
            problems.append(f"step {step}: actor/entropy is {entropy:.3g}, below {MIN_ENTROPY}: the policy samples "
                            "(nearly) one answer, so GRPO has nothing to learn from")
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


def trainer_env(environ=os.environ, ray_address: str = "local", log_env: dict | None = None,
                jit_max_jobs: int | None = None) -> dict:
    """No downloads, no wandb; Ray's log dedup would fold repeated worker lines. NVLink multicast off, as the
    NCCL check has it (the lent multi-GPU machines need it), the rollout engine's INFO lines on (its row's
    log_env) and MAX_JOBS for its run-time JIT compiles (verify's bound for this host), unless the user set those;
    no usage stats from verl's vLLM servers (check_vllm.py says why)."""
    jit = {"MAX_JOBS": str(jit_max_jobs)} if jit_max_jobs else {}
    return {**NCCL_DEFAULTS, "VLLM_NO_USAGE_STATS": "1", **(log_env or {}), **jit, **environ,
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            # hydra prints the whole traceback (the cause inside Ray's wrappers), not only a hint to set this.
            "HYDRA_FULL_ERROR": "1",
            "WANDB_MODE": "disabled", "RAY_DEDUP_LOGS": "0", "PYTHONUNBUFFERED": "1",
            # verl's ray.init() joins the Ray instance it finds (RAY_ADDRESS, else the last one started on this
            # machine): run as a node's check inside a cluster, it joined the cluster, whose GPUs the node checks
            # hold ("Total available GPUs 0"). So a private instance, unless the cluster trainer names its cluster.
            "RAY_ADDRESS": ray_address}


def session_pids(sid: int) -> list[int]:
    """Live processes of session sid, from /proc/<pid>/stat (field 6: the session). This script runs in the env's
    python, where verlenv (its proctree) is not importable: hence its own reader."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and fields[3] == str(sid):
                out.append(int(entry))
    return out


class TrainerRun:
    """The trainer in its own session (its Ray and vLLM processes with it), its output read line by line in a
    thread (a silent hang must not keep the timeout from firing), each line with its arrival. Its output is echoed
    (the report keeps a failure's tail) from the start, or, with hold=True, from echo() on: output printed while
    another check runs would be filed under that check."""

    def __init__(self, cmd, workdir, hold: bool = False, ray_address: str = "local", env: dict | None = None,
                 live_log: str | None = None):
        self.launch_wall, self.start, self.end = time.time(), time.monotonic(), None
        self.lines: list[_phases.Line] = []
        # Each line also goes to live_log as it arrives, so a run stopped from outside (the verify run killed, the
        # machine taken back) leaves what it printed; keep_log rewrites the file whole at the end.
        self._live = open_live_log(live_log, self.launch_wall)
        self.dead_engine: str | None = None  # the first line saying the rollout engine died
        self._over = threading.Event()  # the driver exited, or the engine died
        self._lock = threading.Lock()
        self._echoing, self._echoed = not hold, 0
        self.proc = subprocess.Popen(cmd, cwd=workdir, env=env or trainer_env(ray_address=ray_address),
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: (self.proc.wait(), self._over.set()), daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            with self._lock:
                self.lines.append(_phases.Line(time.monotonic() - self.start, raw.rstrip("\n")))
                self._write_live(self.lines[-1])
                if self.dead_engine is None and DEAD_ENGINE_LINE.search(raw):
                    self.dead_engine = raw.strip()
                    self._over.set()
                if self._echoing:
                    self._flush()
        if self._live is not None:
            self._live.close()

    def _write_live(self, line):
        """One line into the live log; a failure to write (a full disk) ends the live log, never the reading: an
        unread pipe would stall the trainer."""
        if self._live is None:
            return
        try:
            self._live.write(_phases.timed_log_line(line))
            self._live.flush()
        except OSError as e:
            print(f"VERLENV_TRAINER_LOG: stopped writing it as lines arrive ({e.strerror})", flush=True)
            with contextlib.suppress(OSError):
                self._live.close()
            self._live = None

    def _flush(self):
        for line in self.lines[self._echoed:]:
            print(line.text, flush=True)
        self._echoed = len(self.lines)

    def echo(self):
        """Print what was held and every line from now on."""
        with self._lock:
            self._echoing = True
            self._flush()

    def wait(self, timeout: float = TIMEOUT_S) -> int | None:
        """The exit code, or None when the trainer did not finish within timeout seconds of its launch (then its
        whole session is killed)."""
        self._over.wait(max(0.0, timeout - (time.monotonic() - self.start)))
        if self.proc.poll() is None and self.dead_engine is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):  # the rest of the engine's traceback
                self.proc.wait(timeout=DEAD_ENGINE_GRACE_S)
        code = self.proc.poll()
        self.reap()  # the driver too, when it outlived the timeout
        self.proc.wait()
        self.end = time.monotonic()
        self.wall_s = self.end - self.start
        self._reader.join(timeout=30)
        self.echo()
        return code

    def reap(self, timeout: float = REAP_S) -> list[int]:
        """Kill the trainer's whole session (the driver, if it still runs, and what it started) and wait until it is
        gone; returns what is still there after timeout seconds. Ray puts its processes in groups of their own
        (killpg of the driver's group misses them) and the rollout engine's workers outlive the driver for seconds:
        the next trainer's vLLM, sizing its KV cache from the GPU's free memory, failed while they still held or were
        releasing theirs ("Available KV cache memory: -0.00 GiB", "Error in memory profiling")."""
        deadline = time.monotonic() + timeout
        while (left := session_pids(self.proc.pid)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        return session_pids(self.proc.pid)

    def first_metrics_s(self) -> float | None:
        return next((line.arrival for line in self.lines if METRICS_LINE.search(line.text)), None)


def run_trainer(cmd, workdir, timeout=TIMEOUT_S, ray_address: str = "local", log_env: dict | None = None
                ) -> tuple[list[_phases.Line], int | None, dict]:
    """Run the trainer to its end, echoing its output: its lines (with arrivals), exit code (None when killed at
    the timeout) and the times seen from here. ray_address: the cluster it joins ("local": a Ray of its own)."""
    run = TrainerRun(cmd, workdir, env=trainer_env(ray_address=ray_address, log_env=log_env))
    code = run.wait(timeout)
    return run.lines, code, {"wall_s": run.wall_s, "first_metrics_s": run.first_metrics_s(),
                             "launch_wall": run.launch_wall}


def needs_transfer_queue(requires: list[str] | None) -> bool:
    """Whether this verl's trainer imports TransferQueue when it starts: verl >= 0.8 declares it (its `verl-core`
    extra) and its V1 trainer imports it; verl 0.7.x neither declares nor imports it."""
    return any(re.match(r"\s*transferqueue\b", r, re.I) for r in requires or ())


def check_import():
    from importlib.metadata import requires

    import verl
    import verl.trainer.main_ppo  # noqa: F401

    if needs_transfer_queue(requires("verl")):
        import transfer_queue  # noqa: F401
        return {}, f"verl {verl.__version__}: main_ppo and TransferQueue import"
    return {}, f"verl {verl.__version__}: main_ppo imports (this verl does not use TransferQueue)"


def log_path(family: str | None = None, environ=os.environ) -> str | None:
    """Where VERLENV_TRAINER_LOG asks for the trainer's output; with family, that family's log (the family's name
    before the file's suffix); None where it asks for none."""
    path = environ.get("VERLENV_TRAINER_LOG")
    if path and family:
        root, ext = os.path.splitext(path)
        path = f"{root}.{family}{ext}"
    return path or None


def open_live_log(path: str | None, launch_wall: float):
    """The trainer log opened for its lines as they arrive, header written; None without a path, or if it cannot
    be written (said once, not a failed check)."""
    if not path:
        return None
    try:
        live = open(path, "w", encoding="utf-8")  # noqa: SIM115  closed when the output ends (_read)
        live.write(_phases.timed_log_header(launch_wall))
        live.flush()
        return live
    except OSError as e:
        print(f"VERLENV_TRAINER_LOG {path}: cannot write it ({e.strerror})", flush=True)
        return None


def keep_log(run: TrainerRun, family: str | None = None, environ=os.environ) -> None:
    """The trainer's whole output with arrivals, where VERLENV_TRAINER_LOG asks for it (a failure to write it is
    said, not a failed check); with family, that family's log (log_path)."""
    path = log_path(family, environ)
    if path:
        try:
            _phases.write_timed_log(path, run.lines, run.launch_wall)
        except OSError as e:
            print(f"VERLENV_TRAINER_LOG {path}: cannot write it ({e.strerror})", flush=True)


class TrainerCheck:
    """One family's trainer check in two halves: launch (inputs written, trainer started) and finish (waited for,
    judged). The fast proof launches the first families before the import check, which then runs while they start
    up; a family finished launches the next waiting one (at most the profile's trainer.parallel at once)."""

    def __init__(self, torch, profile, family: dict, queue: "Queue | None" = None):
        self.torch, self.profile, self.family, self.queue = torch, profile, family, queue
        self.trainer = profile.trainer
        self.gpus = profile.gpu_count or torch.cuda.device_count()
        self.sizes = {"n_gpus_per_node": self.gpus, "rollout_tp": profile.rollout_tp, "actor_tp": profile.actor_tp,
                      "thorough": profile.thorough}
        self.workdir = self.paths = self.cmd = self.run = self.error = None

    @property
    def name(self) -> str:
        return f"verl/trainer/{self.profile.variant}/{self.family['name']}/grpo-{STEPS}-steps"

    @property
    def log_family(self) -> str | None:
        """The family's name in its log's file name where several families train (each its own log)."""
        return self.family["name"] if len(self.trainer.get("families") or []) > 1 else None

    def launch(self, hold: bool = False):
        """Start the trainer; a failure here is kept for finish() to report as this family's check."""
        try:
            problem = parallel_problem(self.trainer, self.family, 1, self.gpus, self.profile.rollout_tp,
                                       self.profile.actor_tp)
            if problem:
                raise _common.Failed(f"cannot run verl's trainer on this node so: {problem}")
            self.workdir = tempfile.mkdtemp(prefix="verlenv-verl-trainer-")
            atexit.register(self.abandon)  # the import check failing ends the script before finish()
            self.paths = write_inputs(self.workdir, self.torch, self.family, rows_needed(self.gpus))
            self.cmd = in_own_ray(command(sys.executable, self.paths, self.trainer, self.family, **self.sizes))
            env = trainer_env(log_env=self.trainer["rollout"].get("log_env"),
                              jit_max_jobs=self.trainer.get("jit_max_jobs"))
            if self.trainer.get("jit_why"):
                print(f"{self.family['name']}: MAX_JOBS={env.get('MAX_JOBS')} "
                      f"({'yours' if 'MAX_JOBS' in os.environ else self.trainer['jit_why']})", flush=True)
            # Ray's own folder per trainer: several trainers side by side each start a Ray of their own.
            env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="vray-", dir="/tmp")
            self.paths["ray_tmp"] = env["RAY_TMPDIR"]
            self.run = TrainerRun(self.cmd, self.paths["run"], hold=hold, env=env, live_log=log_path(self.log_family))
        except Exception as e:  # noqa: BLE001  reported by finish(), under this family's check
            self.error = e
            if not isinstance(e, _common.Failed):
                traceback.print_exc()

    def abandon(self):
        if self.run is not None:
            self.run.reap()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.paths and self.paths.get("ray_tmp"):
            shutil.rmtree(self.paths["ray_tmp"], ignore_errors=True)

    def finish(self):
        try:
            return self._finish()
        finally:
            if self.queue is not None:
                self.queue.launch_next()

    def _finish(self):
        if self.run is None and self.error is None:
            if self.queue is not None:
                self.queue.launch(self)
            else:
                self.launch()
        if self.error is not None:
            raise self.error
        run = self.run
        print("running:", " ".join(self.cmd), flush=True)
        run.echo()
        try:
            code = run.wait(TIMEOUT_S)
            texts = [line.text for line in run.lines]
            steps = parse_metrics(texts)
            final = hf_checkpoint(os.path.join(self.paths["checkpoints"], f"global_step_{STEPS}", "actor"))
            weights = weight_change(self.torch, self.paths["model"], final) if final else None
            keep_log(run, self.log_family)
        finally:
            self.abandon()
        numbers, problems = judge(steps, weights)
        problems += kernel_path_problems(self.family, self.trainer.get("kernel_paths"), self.profile.arch, texts)
        numbers.update({"family": self.family["name"], "gpus": self.gpus, "rollout_tp": self.profile.rollout_tp,
                        "actor_tp": self.profile.actor_tp, "wall_s": run.wall_s})
        numbers.update({f"init_{k}": v for k, v in self.paths["init"].items()})
        if self.family.get("shrunk"):
            numbers["model_config"] = self.family["source"]
            numbers["shrunk"] = self.family["shrunk"]
        first_metrics = run.first_metrics_s()
        if first_metrics is not None and "step1_step_s" in numbers and "step1_gen_s" in numbers:
            # From launch to the end of the first rollout: start-up (Ray, workers, vLLM) plus step 1's generation.
            startup = first_metrics - numbers["step1_step_s"]
            numbers["startup_s"] = startup
            numbers["time_to_first_rollout_s"] = startup + numbers["step1_gen_s"]
        numbers.update(_phases.phases(run.lines, run.launch_wall, run.wall_s if code is not None else None, steps,
                                      wall_s=run.wall_s, rollout=self.trainer["rollout"]))
        if code is None and run.dead_engine:
            problems.insert(0, f"verl's trainer was stopped: its rollout engine died ({run.dead_engine[-200:]}) "
                               "and verl kept waiting on it")
        elif code is None:
            problems.insert(0, f"verl's trainer did not finish in {TIMEOUT_S} s")
        elif code != 0:
            problems.insert(0, f"verl's trainer exited with {code}: {failure_line(texts)[:300]}")
        times = ", ".join(f"{numbers.get(f'step{s}_step_s', math.nan):.1f}" for s in range(1, STEPS + 1))
        mode = "thorough (verl's defaults)" if self.profile.thorough else "fast"
        actor, rollout = self.trainer["actor"], self.trainer["rollout"]
        tp = f", rollout TP {self.profile.rollout_tp}" + (f", actor TP {self.profile.actor_tp}"
                                                          if actor["tp_overrides"] else "")
        beside = self.queue.beside(self) if self.queue else 0
        known = known_failure(self.family, texts, self.profile.variant) if problems else None
        if known:
            numbers["known_issue"] = known["url"]
        note = (f"{self.family['name']}: {STEPS} GRPO steps, {self.gpus} GPU(s), {actor['name']} actor, "
                f"{rollout['name']} rollout{tp}, {mode}"
                # Over its whole run, not at one time: the profile's trainer.parallel caps how many run at once.
                + (f", {beside} other trainer(s) ran during it" if beside else "")
                + f"; step times {times} s; {run.wall_s:.0f} s in all")
        return _common.verdict(numbers, problems, note, known)


def kernel_path_problems(family: dict, paths: dict | None, arch: str, texts) -> list[str]:
    """A family that names its fast kernels (needs) or attention kind fails when its run fell back to a slow path or
    its rollout took another attention backend than vLLM's own order gives for it: a proof on the slow path is not the
    proof users need (docs/slow-paths.md)."""
    if not paths:
        return []
    found = _kernel_paths.slow_paths(texts, paths["fallbacks"], family["name"]) if family.get("needs") else []
    backend = _kernel_paths.backend_problem(family, paths, arch, texts)
    return found + ([backend] if backend else [])


def known_failure(family: dict, texts, variant: str) -> dict | None:
    """The family's known upstream failure in this variant (data/families.toml known_issue) whose signature the
    trainer's output shows; None otherwise (a failure of another kind counts against the env as any other)."""
    for issue in family.get("known_issues") or []:
        if issue.get("variants") and variant not in issue["variants"]:
            continue
        pattern = re.compile(issue["signature"])
        if any(pattern.search(t) for t in texts):
            return {k: issue[k] for k in ("url", "fix", "summary")}
    return None


class Queue:
    """The families' trainers: at most `parallel` running at once, each launched once, in order. A trainer runs
    until its check has waited for it and reaped what it left (TrainerRun.wait): the next one's rollout engine sizes
    its memory from what the GPU has free."""

    def __init__(self, checks: list, parallel: int):
        self.checks, self.parallel = checks, max(1, parallel)
        self._launched: list = []
        self._lock = threading.Lock()

    def start(self, hold: bool = True):
        for _ in range(min(self.parallel, len(self.checks))):
            self.launch_next(hold)

    def launch_next(self, hold: bool = True):
        """Launch the first waiting trainer if fewer than `parallel` run."""
        with self._lock:  # held while launching: a launch in progress is one running
            running = [c for c in self._launched if c.run is not None and c.run.end is None]
            waiting = [c for c in self.checks if c not in self._launched]
            if waiting and len(running) < self.parallel:
                self._launched.append(waiting[0])
                waiting[0].launch(hold=hold)

    def launch(self, check, hold: bool = False):
        """Launch this trainer now, unless it was (its check's finish came before the queue reached it)."""
        with self._lock:
            if check not in self._launched:
                self._launched.append(check)
                check.launch(hold=hold)

    def beside(self, check) -> int:
        """How many other trainers ran at some time while this one ran (one still running counts)."""
        mine = check.run
        if mine is None or mine.end is None:
            return 0
        return sum(1 for c in self.checks if c is not check and c.run is not None and c.run.start < mine.end
                   and (c.run.end is None or c.run.end > mine.start))


# Run in the env, by path: the engine's own JIT spec of a kernel module, compiled and loaded as the engine would.
WARM_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_warm_jit.py")
WARM_MARK = "verlenv-jit-warm: "  # _warm_jit.py's MARK: the line that says whether the module is prebuilt


def warm(row: dict, max_jobs: int | None, environ=os.environ, python: str = sys.executable):
    """Compile one jit_warm row's module once, alone, before the trainers (their engines then load it from the JIT
    cache): MAX_JOBS is verify's bound for one compile, unless the user set it. Numbers: its wall time and jobs."""
    env = dict(environ)
    if max_jobs and "MAX_JOBS" not in environ:
        env["MAX_JOBS"] = str(max_jobs)
    what = f"{row['module']}.{row['spec']}() (MAX_JOBS={env.get('MAX_JOBS', 'unset')})"
    start = time.monotonic()
    proc = subprocess.Popen([python, WARM_PROGRAM, row["module"], row["spec"]], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=row["timeout_s"])
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # ninja and its compilers too, not only the python above them
        proc.communicate()
        raise _common.Failed(f"{what} did not compile in {row['timeout_s']} s; the trainers would compile it at "
                             "their first step") from None
    if proc.returncode != 0:
        print(out[-6000:], flush=True)
        raise _common.Failed(f"{what} failed: {failure_line(out.splitlines())}")
    jobs = env.get("MAX_JOBS", "")
    found = warm_found(out)
    numbers = {"wall_s": round(time.monotonic() - start, 1), "max_jobs": int(jobs) if jobs.isdigit() else None,
               "prebuilt": found.get("prebuilt")}
    if found.get("prebuilt"):
        return numbers, f"loaded prebuilt from {found.get('library')}, nothing compiled: {row['why']}"
    ahead = (f"; every node compiles it again unless the env has {row['prebuilt_by']}, which carries it prebuilt "
             f"(`verlenv build {row['prebuilt_by']}`)") if row.get("prebuilt_by") else ""
    return numbers, f"compiled once before the trainers, {what}{ahead}: {row['why']}"


def warm_found(out: str) -> dict:
    """What _warm_jit.py said of the spec before loading it (prebuilt, library); {} if it said nothing."""
    for line in out.splitlines():
        if line.startswith(WARM_MARK):
            with contextlib.suppress(ValueError):
                return json.loads(line[len(WARM_MARK):])
    return {}


def warm_checks(profile, torch) -> list:
    """The trainer's jit_warm rows for this GPU's compute capability, each a check of its own."""
    trainer = profile.trainer
    rows = trainer.get("jit_warm") or {}
    if not rows:
        return []
    major, minor = torch.cuda.get_device_capability()
    return [(f"verl/jit-warm/{key}", lambda row=row: warm(row, trainer.get("jit_warm_max_jobs")))
            for key, row in rows.items() if f"{major}.{minor}" in row["archs"]]


def missing_needs(actor: str, needs, importer=importlib.import_module) -> list[str]:
    """The compiled modules a family's trainer imports under verl's default config (its `actor_needs`: the runner
    decided from data/backends.toml which hold for it) that this env cannot import, one line each: what, from which
    package, why it is needed."""
    out = []
    for need in needs or []:
        try:
            importer(need["module"])
        except Exception as e:  # ImportError, or an extension that does not load (an undefined symbol)
            out.append(f"verl's {actor} actor needs {need['module']} ({need['package']}), which does not "
                       f"import in this env ({type(e).__name__}: {str(e)[:160]}); {need['why']}"
                       + (f" ({need['selected_by']})" if need.get("selected_by") else ""))
    return out


def not_started(problems: list[str]):
    """A check that fails at once, before any trainer or warm compile spends its minutes."""
    def check():
        raise _common.Failed("not started: " + "; ".join(problems))
    return check


def checks(profile, torch):
    families = profile.trainer.get("families") or []
    parallel = 1 if profile.thorough else profile.trainer.get("parallel", 1)
    actor = (profile.trainer.get("actor") or {}).get("name", "")
    trainers = [TrainerCheck(torch, profile, family) for family in families]
    missing = {t.name: missing_needs(actor, t.family.get("actor_needs")) for t in trainers}
    starting = [t for t in trainers if not missing[t.name]]
    queue = Queue(starting, parallel)
    for t in starting:
        t.queue = queue
    judged = [(t.name, not_started(missing[t.name]) if missing[t.name] else t.finish) for t in trainers]
    if trainers and not starting:
        return [("verl/trainer/import", check_import), *judged]
    if profile.thorough:
        import_check = check_import
    else:
        def import_check():  # the trainers start first: their start-up, not this import, is the long pole
            queue.start(hold=True)
            return check_import()
    # The warm compiles first: the fast proof's import check is what launches the trainers.
    return [*warm_checks(profile, torch), ("verl/trainer/import", import_check), *judged]


if __name__ == "__main__":
    sys.exit(_common.main(PACKAGE, {"verl": "verl", "torch": "torch"}, checks))
