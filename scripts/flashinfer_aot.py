"""Compile FlashInfer JIT modules ahead of time, on a machine without a GPU (nvcc needs none), into a folder that holds
a `flashinfer_jit_cache` package: FlashInfer then loads `flashinfer_jit_cache/jit_cache/<name>/<name>.so` instead of
compiling the module at its first call (flashinfer/jit/env.py: _get_aot_dir; jit/core.py: aot_path, build_and_load).
The package's version is the env's FlashInfer version plus a local label, which FlashInfer's own check accepts (the
jit-cache version must start with FlashInfer's). BUILD.json beside it says what was compiled, how, and each .so's
sha256.

Run with the env's python and the project's sources importable (the run-time CUDA_HOME with the libcuda link stub is
the project's own, verlenv.native.toolchain.runtime_cuda_home, unless CUDA_HOME is set):
    PYTHONPATH=src <env>/bin/python scripts/flashinfer_aot.py --into DIR [--module MOD:FUNC ...] [--jobs N]
"""

import argparse
import json
import os
import shutil
import sys
import sysconfig
import time
from importlib import import_module
from pathlib import Path

# vLLM 0.24.0's GDN prefill on sm_90 (Qwen3.5, Qwen3-Next): 510 s on a 16-core H100 host at the first step.
DEFAULT_MODULES = ["flashinfer.jit.gdn:gen_gdn_prefill_sm90_module"]
# The largest of its nvcc units held 6.2 GiB (docs/benchmarks/jit-compile-gdn-prefill-cpu.json).
GIB_PER_JOB = 6.5
INIT = '''"""FlashInfer modules compiled ahead of time by scripts/flashinfer_aot.py (BUILD.json says which)."""
from pathlib import Path

__version__ = "{version}"


def get_jit_cache_dir() -> str:
    return str(Path(__file__).with_name("jit_cache"))
'''


def setup_env(work: Path, archs: str, jobs: int | None) -> dict:
    """FlashInfer's environment, set before it is imported: its workspace, the archs, nvcc's CUDA_HOME, the jobs."""
    from verlenv.native.parallelism import mem_available_gib, parallelism_for
    from verlenv.native.toolchain import runtime_cuda_home

    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(work)
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = archs
    if "CUDA_HOME" not in os.environ:
        home = runtime_cuda_home(sysconfig.get_paths()["purelib"], Path(sys.prefix))
        if home is None:
            raise SystemExit("flashinfer_aot: this env has no PyPI nvcc (nvidia/cu13/bin/nvcc); set CUDA_HOME to a "
                             "toolkit of torch's CUDA major")
        os.environ["CUDA_HOME"] = str(home)
    os.environ["PATH"] = f"{os.environ['CUDA_HOME']}/bin:{Path(sys.executable).parent}:{os.environ['PATH']}"
    # The builder's own bound (cores, and memory less its safety margin); nvcc threads do not apply: one arch.
    os.environ["MAX_JOBS"] = str(jobs or parallelism_for(GIB_PER_JOB, 0.0, 1, mem_available_gib(),
                                                         os.cpu_count() or 1).jobs)
    return {k: os.environ[k] for k in ("CUDA_HOME", "FLASHINFER_CUDA_ARCH_LIST", "MAX_JOBS")}


def build(name: str, jit_cache: Path) -> dict:
    """Compile one module (MOD:FUNC returns its JIT spec) and place its .so where FlashInfer looks for it."""
    from verlenv.native.sources import sha256_file

    module, _, func = name.partition(":")
    spec = getattr(import_module(module), func)()
    started = time.time()
    spec.build(verbose=False)
    dest = jit_cache / spec.name / f"{spec.name}.so"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(spec.jit_library_path, dest)
    return {"spec": name, "name": spec.name, "wall_s": round(time.time() - started, 1), "bytes": dest.stat().st_size,
            "sha256": sha256_file(dest)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--into", type=Path, required=True, help="the folder to hold the flashinfer_jit_cache package")
    p.add_argument("--module", action="append", help=f"MOD:FUNC returning a JIT spec (default: {DEFAULT_MODULES[0]})")
    p.add_argument("--archs", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST (default 9.0a)")
    p.add_argument("--jobs", type=int, help="compile jobs (default: by cores and memory)")
    p.add_argument("--work", type=Path, help="FlashInfer's workspace for sources and objects (default INTO/.work)")
    args = p.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        print(f"flashinfer_aot: --jobs {args.jobs}: give a whole number of at least 1", file=sys.stderr)
        return 2
    package = args.into / "flashinfer_jit_cache"
    environment = setup_env((args.work or args.into / ".work").absolute(), args.archs, args.jobs)
    import flashinfer

    built = [build(name, package / "jit_cache") for name in args.module or DEFAULT_MODULES]
    print(json.dumps(write_package(package, flashinfer.__version__, built, environment), indent=1))
    return 0


def write_package(package: Path, flashinfer_version: str, built: list[dict], environment: dict) -> dict:
    """The package's __init__.py (its version, get_jit_cache_dir) and BUILD.json beside the modules' .so files."""
    version = f"{flashinfer_version}+verlenv"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(INIT.format(version=version))
    record = {"version": version, "flashinfer": flashinfer_version, "environment": environment, "modules": built,
              "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (package / "BUILD.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    sys.exit(main())
