"""Versions as torch itself reports them, in a child of the Ray worker, so the worker never imports torch or touches
CUDA (cluster/fingerprint.py); a fact torch cannot give is null. No arguments.

    python torch_versions.py -> {"version", "cuda", "cudnn", "nccl", "cxx11_abi"}
"""

import json

import torch


def call(fn):
    try:
        return fn()
    except Exception:
        return None


def main():
    nccl = call(torch.cuda.nccl.version)
    print(json.dumps({
        "version": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": call(torch.backends.cudnn.version),
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
        "cxx11_abi": call(lambda: torch.compiled_with_cxx11_abi()),
    }))


if __name__ == "__main__":
    main()
