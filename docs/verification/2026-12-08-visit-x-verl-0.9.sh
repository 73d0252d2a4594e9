# GPU visit X (one H100 or H200), prepared 2026-12-07 (its one start that day failed, leaving 342 s of device time),
# run 2026-12-08. Visit W's bundle (46 parts of 48 MiB, flash-attn's sm_90 wheel in
# it), then, by itself on the node:
#   1. deepseek-v3's fixed row (families.toml since 2026-12-07T23:00Z: 2 groups of 4, the top group, then its top 2, so
#      megatron-core scores groups as vLLM does) on both actors side by side, one verify run each, and beside them the
#      megatron run with vLLM's TRITON_MLA backend (idle in visit W): three trainers, each under a Ray job id of its
#      own (verify's fix of 2026-12-08: visit W's trainers all shared one weight-sync socket path); mark X.
#   2. what visit W did not reach: fsdp `--family all` with the published Qwen3-Next-80B, DeepSeek-V3 and GLM-4.5
#      configs (the calibrated MoE families' first fsdp verdicts); mark M.
#   3. --thorough, one family at a time: megatron qwen3-next, qwen3.5-moe, glm4-moe, deepseek-v3, qwen3-vl, then fsdp
#      qwen3.5-moe, qwen3-next, glm4-moe, qwen3.5 (marks T).
# Calls, back to back (a machine is given back 30 s after a call ends): part 1 … part 45 (carry .carry/nNNNN),
# install-base 46 (carry .carry/n0046 and .verlenv/wheelhouse/flashinfer-jit-cache), then `wait 560 MARK` until the
# plan ends; the last call `wait S; partial` ending before the device time does.
# bash docs/verification/2026-12-08-visit-x-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-08-visit-x-verl-0.9.sh
THOROUGH=${THOROUGH:-"megatron:qwen3-next megatron:qwen3.5-moe megatron:glm4-moe megatron:deepseek-v3 megatron:qwen3-vl
  fsdp:qwen3.5-moe fsdp:qwen3-next fsdp:glm4-moe fsdp:qwen3.5"}
FSDP=yes  # set by the plan: no when the env has no flash-attn
SKIP=""   # set by the plan: verify's --skip-package for what the bundle left out
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers, the common steps
case $step in
plan)     # on the node, by itself
  plan_start
  run_named ds-megatron "$(verify_cmd ds-megatron --variant megatron --only verl $SKIP --family deepseek-v3)" &
  [ "$FSDP" = yes ] && run_named ds-fsdp "$(verify_cmd ds-fsdp --variant fsdp --only verl --family deepseek-v3)" &
  run_named ds-triton "$(verify_cmd ds-triton --variant megatron --only verl $SKIP --family deepseek-v3 \
    --trainer-override +actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend=TRITON_MLA)" &
  wait
  echo "X $(date +%s) megatron: $(cat $R/ds-megatron.done); fsdp: $(cat $R/ds-fsdp.done 2>/dev/null || echo skipped)" \
       "triton: $(cat $R/ds-triton.done)"
  if [ "$FSDP" = yes ]; then fsdp_all; else THOROUGH=$(without_fsdp "$THOROUGH"); fi
  thorough_runs "$THOROUGH" "$SKIP"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
