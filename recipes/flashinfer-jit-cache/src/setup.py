"""Builds flashinfer-jit-cache: compiles the FlashInfer JIT modules of modules.toml for the archs the builder asks for
(VERLENV_JIT_ARCHS, e.g. "8.0;9.0"), each in a process of its own (FlashInfer reads its arch list once, at import),
and packs their .so files with BUILD.json. Run by `verlenv build flashinfer-jit-cache` (its recipe.toml) in the env
whose FlashInfer will load them, with the builder's CUDA_HOME and MAX_JOBS; no GPU is needed (nvcc needs none)."""

import hashlib
import json
import os
import subprocess
import sys
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PACKAGE = "flashinfer_jit_cache"
ARCHS_VARIABLE = "VERLENV_JIT_ARCHS"

# Run in a child process: FlashInfer's own JIT spec, built as its first call would build it, copied into the package.
COMPILE = """
import os, shutil, sys
from importlib import import_module
spec_ref, jit_cache = sys.argv[1], sys.argv[2]
module, _, func = spec_ref.partition(":")
spec = getattr(import_module(module), func)()
spec.build(verbose=False)
dest = os.path.join(jit_cache, spec.name)
os.makedirs(dest, exist_ok=True)
shutil.copyfile(spec.jit_library_path, os.path.join(dest, spec.name + ".so"))
print(spec.name)
"""


def modules_table(path: Path = HERE / "modules.toml") -> list[dict]:
    return tomllib.loads(path.read_text())["module"]


def requested_archs(environ) -> list[str]:
    text = environ.get(ARCHS_VARIABLE, "").strip()
    if not text:
        raise SystemExit(f"flashinfer-jit-cache: {ARCHS_VARIABLE} is not set; give the archs to build for, e.g. "
                         f"{ARCHS_VARIABLE}='9.0' (`verlenv build` sets it)")
    return [a.strip() for a in text.split(";") if a.strip()]


def wanted_modules(modules: list[dict], archs: list[str]) -> list[dict]:
    """The modules for the archs asked for; the others stay out (FlashInfer compiles them at first use)."""
    return [m for m in modules if m["arch"] in archs]


def check_flashinfer(own: str, flashinfer: str) -> None:
    """The modules are compiled from this env's FlashInfer sources, and FlashInfer loads them only under a version
    that starts with its own: a package of another FlashInfer's version would never be read."""
    if own.split("+")[0] != flashinfer:
        raise SystemExit(f"flashinfer-jit-cache {own} is for FlashInfer {own.split('+')[0]}, but this env has "
                         f"flashinfer-python {flashinfer}; pin the version of the env's FlashInfer")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def compile_module(module: dict, jit_cache: Path, workspace: Path) -> dict:
    env = {**os.environ, "FLASHINFER_WORKSPACE_BASE": str(workspace),
           "FLASHINFER_CUDA_ARCH_LIST": module["flashinfer_arch"]}
    started = time.time()
    run = subprocess.run([sys.executable, "-c", COMPILE, module["spec"], str(jit_cache)], env=env,
                         stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        raise SystemExit(f"flashinfer-jit-cache: compiling {module['spec']} failed (exit {run.returncode}); "
                         "FlashInfer's ninja output is above")
    name = run.stdout.split()[-1]
    so = jit_cache / name / f"{name}.so"
    return {"spec": module["spec"], "name": name, "arch": module["arch"], "flashinfer_arch": module["flashinfer_arch"],
            "wall_s": round(time.time() - started, 1), "bytes": so.stat().st_size, "sha256": sha256(so)}


class BuildModules(build_py):
    """The package's Python files, then the compiled modules and BUILD.json beside them."""

    def run(self):
        super().run()
        from flashinfer_jit_cache import __version__ as own  # the source tree's package (setup.py's folder)

        check_flashinfer(own, version("flashinfer-python"))
        archs = requested_archs(os.environ)
        package = Path(self.build_lib) / PACKAGE
        workspace = Path(self.build_lib).resolve().parent / "flashinfer-workspace"  # beside build/lib
        built = [compile_module(m, package / "jit_cache", workspace) for m in wanted_modules(modules_table(), archs)]
        record = {"version": own, "flashinfer": version("flashinfer-python"), "archs": archs, "modules": built,
                  "environment": {k: os.environ.get(k) for k in ("CUDA_HOME", "MAX_JOBS")},
                  "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (package / "BUILD.json").write_text(json.dumps(record, indent=1) + "\n")


class NativeDistribution(Distribution):
    """Native code, though no extension setuptools compiles: the package goes to platlib, the wheel is a platform's."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """The modules are native code for one platform but no Python ABI (FlashInfer loads them through TVM-FFI)."""

    def get_tag(self):
        return "py3", "none", super().get_tag()[2]


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    setup(packages=[PACKAGE], distclass=NativeDistribution,
          cmdclass={"build_py": BuildModules, "bdist_wheel": PlatformWheel})
