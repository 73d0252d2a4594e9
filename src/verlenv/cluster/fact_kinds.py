"""Which fingerprint facts are the env and which say where a node sits in the job.

Identity: what must be equal on every node of a job, or the nodes do not run one env. Placement: where a node's
share of the job sits (its GPUs, its ids in the scheduler, its address); it differs legitimately between nodes
(two raylets on one host, Slurm's GPU binding, a container's GPU list), so it is shown and never compared.
One table; the first row whose pattern matches a fact decides. README's Many nodes section prints it (a test keeps
the two equal).
"""

from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache

IDENTITY = "identity"
GPU_IDENTITY = "identity among GPU nodes"  # a CPU-only node (often the Ray head) has no GPU facts, which is normal
PLACEMENT = "placement"


@dataclass(frozen=True)
class Row:
    pattern: str  # a fact's name; `*` matches any run of characters
    kind: str
    what: str


TABLE = (
    Row("node:*", PLACEMENT, "the node's hostname, IP and Ray node id"),
    Row("env:CUDA_VISIBLE_DEVICES", PLACEMENT,
        "which of the host's GPUs the node's tasks get (Ray sets it from the GPU ids its raylet holds)"),
    Row("env:NVIDIA_VISIBLE_DEVICES", PLACEMENT, "the GPUs a container was given"),
    Row("env:ROCR_VISIBLE_DEVICES", PLACEMENT, "AMD's GPU selection"),
    Row("env:HIP_VISIBLE_DEVICES", PLACEMENT, "AMD's GPU selection"),
    Row("env:SLURM*", PLACEMENT, "Slurm's job, step, node and task ids and its GPU binding"),
    Row("env:LOCAL_RANK", PLACEMENT, "the process's rank on its node"),
    Row("env:RANK", PLACEMENT, "the process's rank in its job"),
    Row("env:NODE_RANK", PLACEMENT, "the node's rank in its job"),
    Row("env:VLLM_HOST_IP", PLACEMENT, "the node's own address, as vLLM is told it"),
    Row("gpu:*", GPU_IDENTITY, "GPU model, count and driver"),
    Row("verlenv-env", IDENTITY, "the stack, variant and lock the env was installed from"),
    Row("installed-set", IDENTITY, "digest of every installed name==version"),
    Row("package:*", IDENTITY, "each installed distribution's version"),
    Row("record:*", IDENTITY, "digest of the RECORD (every file's hash) of torch, cuDNN, NCCL, flash-attn, TE, apex"),
    Row("abi:*", IDENTITY, "the wheel cache's ABI fingerprint of each source-built wheel"),
    Row("torch:*", IDENTITY, "torch's version, CUDA, cuDNN, NCCL and C++ ABI, as torch reports them"),
    Row("python*", IDENTITY, "Python's version and the env's interpreter"),
    Row("platform", IDENTITY, "operating system and machine"),
    Row("nccl-net-plugin", IDENTITY, "the NCCL net plugin the loader finds (`libnccl-net*.so`)"),
    Row("jit-cache:*", IDENTITY, "each JIT cache folder and whether the worker can write there"),
    Row("env:*", IDENTITY, "every other variable verl, vLLM, NCCL and torch read as the Ray worker sees it: `NCCL_*`, "
        "`TORCH_NCCL_*`, `PYTORCH_CUDA_ALLOC_CONF`, `VLLM_*`, `VERL_*`, `CUDA_HOME`, `LD_LIBRARY_PATH`, ..."),
    Row("*", IDENTITY, "any other fact"),
)


@cache
def kind(fact: str) -> str:
    return next(row.kind for row in TABLE if fnmatchcase(fact, row.pattern))


def markdown() -> str:
    """The table as README prints it."""
    lines = ["| fact | kind | what |", "|---|---|---|"]
    lines += [f"| `{row.pattern}` | {row.kind} | {row.what} |" for row in TABLE]
    return "\n".join(lines) + "\n"
