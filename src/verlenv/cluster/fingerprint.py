"""A node's environment fingerprint, computed inside a Ray worker: what must be equal on every node of a job, and
where the node sits in it.

Flat {fact: value} so nodes compare key by key. Facts start with what they are about: `package:NAME` (installed
version), `record:NAME` (sha256 of the distribution's RECORD: its every file's hash), `abi:NAME` (the wheel
cache's ABI fingerprint of a source-built wheel), `torch:*` (as torch reports them), `gpu:*`, `env:NAME` (as the
Ray worker sees it), `nccl-net-plugin`, `jit-cache:NAME`, `node:*` (hostname, IP, Ray node id). Which of them are
identity and which placement: cluster/fact_kinds.py.
"""

import glob
import hashlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from verlenv.catalog import packages as package_table
from verlenv.verify.kernels import _jit_caches

# Variables verl, vLLM, NCCL and Ray read: a value differing on one node changes how the job runs there.
ENV_NAMES = ("NCCL_CUMEM_ENABLE", "VLLM_WORKER_MULTIPROC_METHOD", "FLASHINFER_WORKSPACE_BASE",
             "RAY_ENABLE_UV_RUN_RUNTIME_ENV", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "PYTHONPATH",
             "PYTORCH_CUDA_ALLOC_CONF", "TOKENIZERS_PARALLELISM", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
             "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_CACHE_ROOT",
             "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH",
             "CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN",
             # Placement: shown beside the other nodes' values, never compared (fact_kinds.py).
             "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "NODE_RANK")
ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "VLLM_", "VERL_", "SLURM")  # SLURM: SLURM_* and SLURMD_NODENAME
TORCH_SCRIPT = Path(__file__).with_name("env_programs") / "torch_versions.py"


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def packages(path: list[str] | None = None) -> dict[str, str]:
    """package:NAME -> version (several installs of one name: all of them, sorted), record:NAME -> RECORD digest;
    of the running interpreter, or of the distributions under `path`."""
    found: dict[str, list[str]] = {}
    records: dict[str, list[str]] = {}
    # Distributions whose exact files matter (data/packages.toml `recorded`): one changed file is another build.
    recorded = package_table.table().recorded()
    for d in metadata.distributions(**({} if path is None else {"path": path})):
        name = d.metadata["Name"]
        if not name:
            continue
        found.setdefault(canon(name), []).append(d.version)
        if canon(name) in recorded:
            records.setdefault(canon(name), []).append(_sha256(d.read_text("RECORD") or ""))
    out = {f"package:{n}": ", ".join(sorted(v)) for n, v in found.items()}
    out.update({f"record:{n}": ", ".join(sorted(v)) for n, v in records.items()})
    out["installed-set"] = _sha256("\n".join(f"{k}=={v}" for k, v in sorted(out.items()) if k.startswith("package:")))
    return out


def abi_fingerprints(source_builds: list[str], path: list[str] | None = None) -> dict[str, str]:
    """abi:NAME: the wheel cache folder (`<package>/<fingerprint>/<wheel>`) each source-built wheel of the variant
    (stacks.toml source_builds) was installed from."""
    out = {}
    for name in map(canon, source_builds):
        found = [d for d in metadata.distributions(**({} if path is None else {"path": path}))
                 if canon(d.metadata["Name"] or "") == name]
        if not found:
            continue
        text = found[0].read_text("direct_url.json")
        url = json.loads(text).get("url", "") if text else ""
        parts = url.rstrip("/").split("/")
        out[f"abi:{name}"] = (parts[-2] if len(parts) >= 3 and canon(parts[-3]) == name
                              else f"not from the wheel cache: {url or 'no direct_url'}")
    return out


def torch_facts(timeout: float | None = None) -> dict[str, str | None]:
    """Versions as torch itself reports them, in a child process: the worker never imports torch or touches CUDA.
    No clock of its own by default: on a loaded node importing torch took longer than any fixed limit, and a node
    then differed by "torch:import" alone; a node that truly hangs is reported by --node-timeout."""
    try:
        proc = subprocess.run([sys.executable, str(TORCH_SCRIPT)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"torch:import": f"timed out after {timeout:.0f} s"}
    except OSError:
        return {"torch:import": "fails"}
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
    except (ValueError, IndexError):
        data = None
    if data is None:
        return {"torch:import": "fails"}
    return {f"torch:{k}": None if v is None else str(v) for k, v in data.items()}


def gpu_facts(gpus: list) -> dict[str, str | None]:
    return {"gpu:model": ", ".join(sorted({g.name for g in gpus})) or None, "gpu:count": str(len(gpus)),
            "gpu:driver": ", ".join(sorted({g.driver for g in gpus if g.driver})) or None}


def env_vars(environ: dict) -> dict[str, str | None]:
    names = set(ENV_NAMES) | {k for k in environ if k.startswith(ENV_PREFIXES)}
    out = {f"env:{k}": environ.get(k) for k in sorted(names)}
    if out["env:PYTHONPATH"] is not None:  # Ray's runtime_env adds its per-node folders: not the node's own setting
        out["env:PYTHONPATH"] = ":".join(p for p in out["env:PYTHONPATH"].split(":")
                                         if "/runtime_resources/" not in p) or None
    return out


def nccl_net_plugins(environ: dict) -> str:
    """The NCCL net plugins the loader can find (NCCL dlopens libnccl-net[-NAME].so at init; a node without the
    plugin the others use falls back to sockets, or hangs)."""
    name = environ.get("NCCL_NET_PLUGIN")
    pattern = f"libnccl-net-{name}.so*" if name and name != "none" else "libnccl-net*.so*"
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "nvidia", "nccl", "lib"))
    found = {os.path.realpath(p) for d in dirs for p in glob.glob(os.path.join(d, pattern))}
    try:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        ldconfig = ""
    found |= {line.rsplit("=>", 1)[1].strip() for line in ldconfig.splitlines()
              if "libnccl-net" in line and "=>" in line}
    return ", ".join(sorted(found)) or "none"


def jit_caches(environ: dict) -> dict[str, str]:
    """Where each JIT compiler caches (data/packages.toml's [jit_caches], resolved as the engine checks resolve them),
    and whether the worker can write there (a read-only cache recompiles, or fails)."""
    rows = package_table.table().jit_caches
    return {f"jit-cache:{name}": (f"{(path := _jit_caches.folder(row, environ))} ({_writable(path)})")
            for name, row in rows.items()}


def _writable(path: str) -> str:
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    ok = os.access(probe, os.W_OK | os.X_OK)
    if probe == path:
        return "writable" if ok else "not writable"
    return "can be created" if ok else "cannot be created"


def node_facts() -> dict[str, str | None]:
    """Where this worker runs (placement): hostname, and inside Ray the node's IP and id."""
    out = {"node:hostname": socket.gethostname(), "node:ip": None, "node:id": None}
    try:
        import ray

        if ray.is_initialized():
            out["node:ip"] = ray.util.get_node_ip_address()
            out["node:id"] = ray.get_runtime_context().get_node_id()
    except ImportError:  # outside the env (tests of this module): the hostname is all there is
        pass
    return out


def compute(gpus: list, environ: dict | None = None, source_builds: list[str] = ()) -> dict[str, str | None]:
    environ = dict(os.environ) if environ is None else environ
    out: dict[str, str | None] = {"python": platform.python_version(), "python:executable": sys.executable,
                                  "platform": f"{platform.system()} {platform.machine()}"}
    env_marker = os.path.join(sys.prefix, "verlenv-env.json")
    try:
        with open(env_marker) as f:
            marker = json.load(f)
        out["verlenv-env"] = f"{marker.get('stack')}-{marker.get('variant')} {marker.get('lock')}"
    except (OSError, ValueError):
        out["verlenv-env"] = None
    out.update(packages())
    out.update(abi_fingerprints(list(source_builds)))
    out.update(torch_facts())
    out.update(gpu_facts(gpus))
    out.update(env_vars(environ))
    out["nccl-net-plugin"] = nccl_net_plugins(environ)
    out.update(jit_caches(environ))
    out.update(node_facts())
    return out
