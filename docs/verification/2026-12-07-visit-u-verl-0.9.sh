# GPU visit U (one H100 or H200), prepared 2026-12-07 on the last session's CPU machine. Run 2026-12-07, 10:08-10:36
# UTC, on an H100 (PHASE=all, then PHASE=gdn once --family all could not finish in the device time left); what
# happened: 2026-12-07-visit-u-verl-0.9.md. The bundle: the megatron variant's
# bundle without flash-attn and without flashinfer-jit-cache (their builds, 3.8 h and 67 min on 2 cores, did not fit
# the session beside the others), made with visit R's bundle command plus `--without flash-attn --without
# flashinfer-jit-cache --split 48MiB` (45 parts). With flash-attn absent the plan runs the megatron actor only, and says so; without
# the prebuilt GDN prefill, verify compiles it once before its trainers (510 s on visit R).
# Planned for a one-GPU machine counted at half its held time (two machines of 30 min); it was counted 1:1:
#   PHASE=all (the first machine), by itself on the node:
#     1. `verify --family all` for the megatron actor, as a user runs it: the twelve families side by side, as many at
#        once as the GPU's and the host's memory hold; qwen3.5-moe and qwen3-next with the calibrated models (their
#        cells are `fail` from visit R, with the models as drawn). Beside it, on the same GPU,
#        benchmarks/gdn_algorithm_agreement.py --device cuda on those two, calibrated and as drawn (no vLLM);
#     2. published configs, megatron, side by side: GLM-4.5, Qwen3-Next-80B-A3B-Instruct (visit N's run of it was
#        killed by the host's memory), Qwen3.5-35B-A3B and Qwen3-30B-A3B;
#     3. --thorough per 2026 family (megatron), in THOROUGH's order, as long as the machine is held.
#   PHASE=more (a second machine): steps 2 and 3 only, THOROUGH set to what the first machine did not reach.
#   PHASE=gdn: qwen3.5-moe, qwen3-next and the published Qwen3-Next-80B-A3B config alone (three trainers at once).
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 44 (carry .carry/nNNNN), install-base 45, then wait 560 [mark] (M, end, T…) until the plan ends,
#   partial if cut. A wait call must end before the machine's 30 min do, or what it gathered is lost.
# bash docs/verification/2026-12-07-visit-u-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-07-visit-u-verl-0.9.sh
GDN_MOE="qwen3.5-moe qwen3-next"
PHASE=${PHASE:-all}  # from the install-base call's environment
THOROUGH=${THOROUGH:-"megatron:qwen3.5 megatron:qwen3-next megatron:qwen3.5-moe megatron:deepseek-v3 megatron:glm4-moe megatron:qwen3-vl"}
FSDP=yes  # set by the plan: no when the env has no flash-attn
SKIP=""   # set by the plan: verify's --skip-package for what the bundle left out
all_families() {
  for v in megatron $([ "$FSDP" = yes ] && echo fsdp); do
    run_named $v-all "$(verify_cmd $v-all --variant $v --only verl $SKIP --family all)"
    echo "M $v $(date +%s) $(cat $R/$v-all.done)"
  done
}
config_runs() {  # the published configs of the new types, megatron, side by side; mark `end`
  run_named megatron-configs "$(verify_cmd megatron-configs --variant megatron --only verl $SKIP \
    $(CONFIGS="GLM-4.5 Qwen3-Next-80B-A3B-Instruct Qwen3.5-35B-A3B" configs) \
    --model-config tests/data/model-configs/Qwen3-30B-A3B/config.json)"
  echo "end $(date +%s) megatron-configs: $(cat $R/megatron-configs.done)"
}
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers, the common steps

case $step in
plan)     # on the node, by itself
  $ENV/bin/python -c "import torch, flash_attn_2_cuda" 2> /dev/null || { FSDP=no; SKIP="--skip-package flash-attn"; }
  echo "A $(date +%s) phase $PHASE fsdp: $FSDP"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  if [ "$PHASE" = gdn ]; then  # what the machine's time still held once --family all was stopped (see the report)
    run_named megatron-gdn "$(verify_cmd megatron-gdn --variant megatron --only verl $SKIP $(families $GDN_MOE) \
      $(CONFIGS=Qwen3-Next-80B-A3B-Instruct configs))"
    echo "M gdn $(date +%s) $(cat $R/megatron-gdn.done)"
    exit 0
  fi
  if [ "$PHASE" = all ]; then
    agreement_runs "$GDN_MOE" &
    all_families
    wait
    echo "G $(date +%s) $(cat $R/agreement.done) drawn: $(cat $R/agreement-drawn.done)"
  fi
  config_runs
  thorough_runs "$THOROUGH" "$SKIP"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
