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
SELF=docs/verification/2026-12-07-visit-s-verl-0.9.sh
THOROUGH="fsdp:qwen3.5 megatron:qwen3.5 fsdp:qwen3-next megatron:qwen3-next"  # in this order, while held
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers, the common steps

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
  thorough_runs "$THOROUGH"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
