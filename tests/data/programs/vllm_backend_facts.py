"""Runs in an env with vLLM, without a GPU: what vLLM's own code says of the attention backends data/kernel_paths.toml
names, as JSON. vllm/platforms/cuda.py loads vLLM's CUDA library on import (libcuda), so its backend order
(_get_backend_priorities) and the log lines naming the chosen backend are read from its source; each backend class is
imported where it imports without a GPU, else its source is read (its bases, what it defines)."""
import ast
import functools
import importlib.util
import json
import sys
from pathlib import Path

from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backends.registry import AttentionBackendEnum


def source_of(module: str) -> tuple[str, ast.Module]:
    text = Path(importlib.util.find_spec(module).origin).read_text()
    return text, ast.parse(text)


text, tree = source_of("vllm.platforms.cuda")
function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_backend_priorities")
namespace = {"AttentionBackendEnum": AttentionBackendEnum, "DeviceCapability": DeviceCapability,
             "CacheDType": str, "cache": functools.cache}
exec(ast.get_source_segment(text, function), namespace)
out = {"order": {}, "backends": {}, "formats": []}
for mla in (True, False):
    for arch in ("8.0", "9.0"):
        order = namespace["_get_backend_priorities"](mla, DeviceCapability(*map(int, arch.split("."))))
        out["order"][f"{'mla' if mla else 'mha'}/{arch}"] = [b.name for b in order]
chooser = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_attn_backend_cls")
for call in ast.walk(chooser):
    if isinstance(call, ast.Call) and getattr(call.func, "attr", "") in ("info", "info_once") and call.args and \
            isinstance(call.args[0], ast.Constant):
        out["formats"].append(call.args[0].value)

for name in sys.argv[1:]:
    path = AttentionBackendEnum[name].value  # the default class path
    module, cls_name = path.rsplit(".", 1)
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except ImportError:  # needs vLLM's CUDA libraries: read what it defines
        src, mod = source_of(module)
        node = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
        methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        cap = methods.get("supports_compute_capability")
        out["backends"][name] = {"imported": False, "bases": [ast.unparse(b) for b in node.bases],
                                 "defines_head_sizes": "get_supported_head_sizes" in methods,
                                 "capability": ast.unparse(cap.body[-1].value) if cap else None}
        continue
    caps = [a for a in ("8.0", "9.0") if cls.supports_compute_capability(DeviceCapability(*map(int, a.split("."))))]
    row = {"imported": True, "head_sizes": cls.get_supported_head_sizes(), "archs": caps, "mla": cls.is_mla()}
    if not cls.is_mla():
        row["sink_refused"] = {a: cls.supports_combination(
            head_size=64, dtype=None, kv_cache_dtype=None, block_size=None, use_mla=False, has_sink=True,
            use_sparse=False, use_mm_prefix=False, device_capability=DeviceCapability(*map(int, a.split("."))))
            for a in ("8.0", "9.0")}
    out["backends"][name] = row
print(json.dumps(out))
