#!/bin/bash
# The cluster path on one multi-GPU host: a one-node Ray cluster holding every GPU, `verlenv verify --ray` over
# it (per-node checks, one vLLM engine, the NCCL all-reduce through one Ray actor per GPU), then Ray stopped.
#
#   scripts/verify-cluster-one-host.sh ENV_PYTHON REPORT.json [verify options, e.g. --gpu h200]
#
# VERLENV: the verlenv command (default: `verlenv` on PATH). Run it only where no other Ray runs: it ends
# with `ray stop`.
set -euo pipefail

PYTHON=$1 REPORT=$2
shift 2
VERLENV=${VERLENV:-verlenv}
RAY="$(dirname "$PYTHON")/ray"
PORT=${VERLENV_RAY_PORT:-6379}
GPUS=$(nvidia-smi --list-gpus | wc -l)

# The lent multi-GPU hosts need NVLink multicast off (as verify's own NCCL check sets for its processes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
"$RAY" start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-gpus="$GPUS" --include-dashboard=false \
    --disable-usage-stats
trap '"$RAY" stop --force >/dev/null 2>&1 || true' EXIT

status=0
"$VERLENV" verify --python "$PYTHON" --ray "127.0.0.1:$PORT" --report "$REPORT" "$@" || status=$?
echo "verify --ray exit code $status; report $REPORT"
exit "$status"
