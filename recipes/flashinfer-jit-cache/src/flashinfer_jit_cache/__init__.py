"""FlashInfer JIT modules compiled ahead of time by verlenv; BUILD.json beside this file says which, and how.
FlashInfer loads jit_cache/<name>/<name>.so from here instead of compiling the module at its first call."""
from pathlib import Path

__version__ = "0.6.12+verlenv"


def get_jit_cache_dir() -> str:
    return str(Path(__file__).with_name("jit_cache"))
