"""Run by verl's trainer check in the env's python, by path: one kernel module the rollout engine JIT-compiles at
the first step, compiled and loaded through the engine's own JIT spec (argv: the module, the function returning the
spec), as the engine would. First it says on one line (MARK, then JSON) whether the spec will load a prebuilt module
instead (FlashInfer's JitSpec.is_aot: a flashinfer_jit_cache package holds it), and from where. Standard library plus
what the env has."""

import importlib
import json
import sys

MARK = "verlenv-jit-warm: "

if __name__ == "__main__":
    spec = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])()
    prebuilt = bool(getattr(spec, "is_aot", False))
    library = spec.get_library_path() if hasattr(spec, "get_library_path") else None
    print(MARK + json.dumps({"prebuilt": prebuilt, "library": str(library) if library else None}), flush=True)
    spec.build_and_load()
