"""Runs in an env with verl, vLLM, Ray and FlashInfer: each marker's message is taken from the installed library's
source (the string constant holding it, %-args filled in), formatted by that library's own formatter with a known
time, and prefixed as Ray forwards it. The CPU side checks that _phases finds the marker, its stamp and its number."""
import ast
import importlib.util
import json
import logging
import os
import re
import sys

OUT, LAUNCH = sys.argv[1], float(sys.argv[2])

def root(name):
    return os.path.dirname(importlib.util.find_spec(name).origin)

site = os.path.dirname(root("verl"))

def constant(relpath, phrase):
    """The string constant (or f-string, its fields as X) in an installed file that holds phrase; a phrase
    starting with ^ must start the string (not a docstring that names it), one ending in " must end it (core.py
    words this message three ways)."""
    tree = ast.parse(open(os.path.join(site, relpath)).read())
    if phrase.startswith("^"):
        def holds(text):
            return text.startswith(phrase[1:])
    elif phrase.endswith('"'):
        def holds(text):
            return text.endswith(phrase[:-1])
    else:
        def holds(text):
            return phrase in text
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and holds(node.value):
            return node.value
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
            if holds(text):
                return text
    raise SystemExit(f"{relpath}: no string holds {phrase!r}")

def fill(message, number):
    return re.sub(r"%(\.\d+)?([sdf])", lambda m: format(number, m.group(1) + "f") if m.group(1)
                  else str(int(number)) if m.group(2) == "d" else str(number), message)

def fmt_from(relpath, pattern):
    return re.search(pattern, open(os.path.join(site, relpath)).read()).group(1)

import vllm.logger
from vllm.logging_utils import NewLineFormatter

formatters = {
    "vllm": NewLineFormatter(vllm.logger._FORMAT, vllm.logger._DATE_FORMAT),
    "verl": logging.Formatter(fmt_from("verl/utils/logging_utils.py", r'logging\.Formatter\("([^"]+)"\)')),
    "ray": logging.Formatter(fmt_from("ray/_private/ray_constants.py", r'LOGGER_FORMAT = "([^"]+)"')),
    "flashinfer": logging.Formatter(fmt_from("flashinfer/jit/core.py", r'Formatter\(\s*"([^"]+)"')),
    "print": None,
}
TB, MR, TR, VS = ("verl/trainer/ppo/v1/trainer_base.py", "vllm/v1/worker/gpu_model_runner.py", "TaskRunnerV1",
                  "vLLMHttpServer")
CASES = [  # (what, file, phrase, formatter, Ray actor, seconds after launch, number in the message)
    ("ray_init", "verl/trainer/main_ppo.py", "^ray init kwargs: ", "print", None, 4.0, None),
    ("ray_up", "ray/_private/worker.py", "Started a local Ray instance.", "ray", None, 9.25, None),
    ("ray_up", "ray/_private/worker.py", "Connected to Ray cluster.", "ray", None, 9.5, None),
    ("dataloader", TB, "train and validate dataloader initialized", "verl", TR, 20.125, None),
    ("workers_spawned", TB, "create worker group ", "verl", TR, 30.5, None),
    ("workers_ready", TB, "actor and ref model engine initialized", "verl", TR, 45.75, None),
    ("reward_ready", TB, "reward loop manager initialized", "verl", TR, 46.0, None),
    ("rollout_ready", "verl/workers/rollout/llm_server.py", "^LLMServerManager: ", "print", TR, 96.0, None),
    ("fit_ready", TB, "all initialize finished, ready to fit", "verl", TR, 99.875, None),
    ("model_load", MR, "Model loading took", "vllm", VS, 70.0, 0.4123),
    ("torch_compile", "vllm/compilation/monitor.py", "torch.compile took", "vllm", VS, 82.0, 10.52),
    ("graph_capture", MR, "Graph capturing finished in", "vllm", VS, 92.0, 8.0),
    ("engine_init", "vllm/v1/engine/core.py", "init engine (profile, create kv cache, warmup model) took %.2f s\"",
     "vllm", VS, 92.0, 21.4),
    ("autotune_start", "flashinfer/autotuner.py", "[Autotuner]: Autotuning process starts", "flashinfer", VS, 83.004,
     None),
    ("autotune_end", "flashinfer/autotuner.py", "[Autotuner]: Autotuning process ends", "flashinfer", VS, 84.504, None),
]
out = []
for what, relpath, phrase, kind, actor, at, number in CASES:
    message = constant(relpath, phrase)
    message = fill(message, number if number is not None else 1)
    if kind == "print":
        text = message
    else:
        record = logging.LogRecord("x", logging.INFO, relpath, 1, message, None, None)
        record.created, record.msecs = LAUNCH + at, round((LAUNCH + at) % 1 * 1000)
        text = formatters[kind].format(record)
    if actor == VS:  # EngineCore's lines: vLLM's own process prefix, then Ray's
        text = "(EngineCore pid=11200) " + text
    if actor:
        text = f"\x1b[36m({actor} pid=9251)\x1b[0m {text}"
    out.append({"what": what, "line": text, "at": at, "number": number, "stamped": kind not in ("print",)})
# verl's vLLM server prints its `vllm serve` arguments with pprint, the list starting with "serve".
source = open(os.path.join(site, "verl/workers/rollout/vllm_rollout/vllm_async_server.py")).read()
assert 'server_args = ["serve", self.model_config.local_path]' in source and "pprint(server_args)" in source
json.dump(out, open(OUT, "w"))
