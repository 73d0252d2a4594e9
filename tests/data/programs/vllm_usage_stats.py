"""Run in the env: whether vLLM would write and send its usage stats, as vLLM itself decides it
(vllm.usage.usage_lib.is_usage_stats_enabled), in this process's environment, after importing the check
script named by argv[2] from the kernels folder argv[1] ("-": none). Prints one JSON line."""
import importlib
import json
import sys

kernels, script = sys.argv[1], sys.argv[2]
sys.path.insert(0, kernels)
if script != "-":
    importlib.import_module(script)
from vllm.usage.usage_lib import is_usage_stats_enabled  # noqa: E402

print(json.dumps({"usage_stats": is_usage_stats_enabled()}))
