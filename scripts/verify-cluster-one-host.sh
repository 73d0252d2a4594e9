#!/bin/bash
# The cluster path on one multi-GPU host: a Ray cluster over this host's GPUs, `verlenv verify --ray` over it
# (per-node checks, one vLLM engine per node, the NCCL all-reduce through one Ray actor per GPU, verl's trainer
# once across the cluster), then Ray stopped.
#
#   scripts/verify-cluster-one-host.sh ENV_PYTHON REPORT.json [verify options, e.g. --gpu h200]
#
# VERLENV_NODES=one (default): one Ray node holding every GPU. VERLENV_NODES=per-gpu: one Ray node per GPU, node i on
# 127.0.0.(i+1) with CUDA_VISIBLE_DEVICES=i, a real multi-node cluster (placement differs per node; the trainer
# runs with trainer.nnodes = the GPU count).
# VERLENV: the verlenv command (default: `verlenv` on PATH). Run it only where no other Ray runs: it ends
# with `ray stop`.
set -euo pipefail

PYTHON=$1 REPORT=$2
shift 2
VERLENV=${VERLENV:-verlenv}
RAY="$(dirname "$PYTHON")/ray"
PORT=${VERLENV_RAY_PORT:-6379}
NODES=${VERLENV_NODES:-one}
GPUS=$(nvidia-smi --list-gpus | wc -l)

# The lent multi-GPU hosts need NVLink multicast off (as verify's own NCCL check sets for its processes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 RAY_USAGE_STATS_ENABLED=0
trap '"$RAY" stop --force >/dev/null 2>&1 || true' EXIT
case $NODES in
one)
    "$RAY" start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-gpus="$GPUS" --include-dashboard=false \
        --disable-usage-stats ;;
per-gpu)
    CUDA_VISIBLE_DEVICES=0 "$RAY" start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-gpus=1 \
        --include-dashboard=false --disable-usage-stats
    for ((i = 1; i < GPUS; i++)); do
        CUDA_VISIBLE_DEVICES=$i "$RAY" start --address="127.0.0.1:$PORT" --node-ip-address="127.0.0.$((i + 1))" \
            --num-gpus=1 --disable-usage-stats
    done ;;
*)
    echo "VERLENV_NODES=$NODES: use one or per-gpu" >&2; exit 2 ;;
esac

status=0
"$VERLENV" verify --python "$PYTHON" --ray "127.0.0.1:$PORT" --report "$REPORT" "$@" || status=$?
echo "verify --ray exit code $status; report $REPORT"
exit "$status"
