"""Run by the env's own python (its runtime defaults applied, as in verl's workers): which of the named system
libraries the loader finds, and the variables and tools a JIT build reads (verify/static.py). Standard library only.

    python runtime_probe.py '["libX.so.1", ...]' -> {"libs": {"libX.so.1": null or the loader's error},
                                                     "env": {"CUDA_HOME", "CUDA_PATH", "CXX", "NVCC_CCBIN", "PATH"}}
"""

import ctypes
import json
import os
import sys


def main(libraries):
    out = {"libs": {}, "env": {k: os.environ.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "CXX", "NVCC_CCBIN", "PATH")}}
    for lib in libraries:
        try:
            ctypes.CDLL(lib)
            out["libs"][lib] = None
        except OSError as e:
            out["libs"][lib] = str(e)
    print(json.dumps(out))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
