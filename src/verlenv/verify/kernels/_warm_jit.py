"""Run by verl's trainer check in the env's python, by path: one kernel module the rollout engine JIT-compiles at
the first step, compiled and loaded through the engine's own JIT spec (argv: the module, the function returning the
spec), as the engine would. Standard library plus what the env has."""

import importlib
import sys

if __name__ == "__main__":
    getattr(importlib.import_module(sys.argv[1]), sys.argv[2])().build_and_load()
