# GPU visit S (one H100 or H200), prepared 2026-12-06 after visit R. Visit Q's bundle again (44 parts; see visit R's
# script for the bundle command), then by itself:
#   1. benchmarks/gdn_algorithm_agreement.py --device cuda: does routing's choice amplify the rollout/actor
#      difference of the hybrid MoE families on the GPU too (flash-linear-attention's two algorithms, bf16 vs float32,
#      every expert selected)? About a minute; no vLLM, so no FlashInfer compile;
#   2. the published Qwen3.5-35B-A3B (fsdp) and Qwen3-Next-80B-A3B-Instruct (megatron) configs side by side (visit R's
#      second round, cut off by the device time), after the GDN prefill compile (510 s on visit R's H100);
#   3. --thorough per family, as long as the machine is held.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 43 (carry .carry/nNNNN), install-base 44, then wait 560 [mark] until the plan ends, partial if cut.
# bash docs/verification/2026-12-07-visit-s-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
ENV=/opt/torch/.venv  # the node's torch env: the bundle leaves its distributions at the locked version to it
SELF=docs/verification/2026-12-07-visit-s-verl-0.9.sh; VARIANT=megatron
THOROUGH="fsdp:qwen3.5 megatron:qwen3.5 fsdp:qwen3-next megatron:qwen3-next"  # in this order, while held
CONFIGS=""
step=$1; shift
. docs/verification/visit-lib.sh  # the helpers; the steps part, install-base, wheels, wait, send, partial

case $step in
plan)     # on the node, by itself
  echo "A $(date +%s)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  run_named agreement "PYTHONPATH=src $ENV/bin/python benchmarks/gdn_algorithm_agreement.py --device cuda \
            --out $R/gdn-algorithm-agreement.json"
  echo "G $(date +%s) $(cat $R/agreement.done)"
  run_named fsdp-config "$(verify_cmd fsdp-config --variant fsdp --only verl $(CONFIGS=Qwen3.5-35B-A3B configs))" &
  run_named megatron-config "$(verify_cmd megatron-config --variant megatron --only verl \
            $(CONFIGS=Qwen3-Next-80B-A3B-Instruct configs))" &
  wait
  echo "end $(date +%s) fsdp-config: $(cat $R/fsdp-config.done) megatron-config: $(cat $R/megatron-config.done)"
  for t in $THOROUGH; do v=${t%%:*}; f=${t#*:}
    run_named thorough-$v-$f "$(verify_cmd thorough-$v-$f --variant $v --only verl --thorough --family $f)"
    echo "T $v $f $(date +%s) $(cat $R/thorough-$v-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
