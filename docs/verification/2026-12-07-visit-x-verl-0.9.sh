# GPU visit X (one H100 or H200), 2026-12-07, with the session's last 462 s of device time: visit W's bundle (46 parts,
# flash-attn's sm_90 wheel in it), then deepseek-v3's fixed row (families.toml: 2 groups of 4, the top group, then its
# top 2, so megatron-core scores groups as vLLM does) on both actors side by side, one verify run each.
# Calls: part 1 … part 45 (carry .carry/nNNNN), install-base 46 (carry .carry/n0046 and the wheelhouse's
# flashinfer-jit-cache entry), then one `wait SECONDS X` ending before the device time does, `partial` if cut.
# bash docs/verification/2026-12-07-visit-x-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-07-visit-x-verl-0.9.sh
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers, the common steps
case $step in
plan)     # on the node, by itself
  FSDP=yes; SKIP=""
  plan_start
  run_named ds-megatron "$(verify_cmd ds-megatron --variant megatron --only verl $SKIP --family deepseek-v3)" &
  [ "$FSDP" = yes ] && run_named ds-fsdp "$(verify_cmd ds-fsdp --variant fsdp --only verl --family deepseek-v3)" &
  wait
  echo "X $(date +%s) megatron: $(cat $R/ds-megatron.done); fsdp: $(cat $R/ds-fsdp.done 2>/dev/null || echo skipped)" ;;
*)
  visit_step "$step" "$@" ;;
esac
