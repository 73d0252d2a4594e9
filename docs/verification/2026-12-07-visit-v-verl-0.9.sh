# GPU visit V (one H100 or H200), prepared 2026-12-07 after visit U, ran the same day on an H100 (its report: the .md of
# the same name). What visit U taught: with the device time counted 1:1 one machine is all there is (about 1,800 s
# held), the GDN prefill compile (510-708 s) must not be paid on the node, and nothing may run beside it. So the
# bundle carries FlashInfer's GDN prefill prebuilt:
#   verlenv build flashinfer-jit-cache --python .venv-verl-0.9-megatron/bin/python --archs 9.0 --no-install
#   (67 min on 2 cores; a stopped build resumes), then visit U's bundle command without `--without
#   flashinfer-jit-cache`, and `--without flash-attn` unless its sm_90 wheel is in the wheelhouse (3.8 h on 2 cores).
# The install call carries the wheelhouse entry too (carry .verlenv/wheelhouse/flashinfer-jit-cache): the plan installs
# it with `verlenv build`, a cache hit, then checks the installed module against the float64 rule (mark K, seconds).
# By itself on the node, in this order (each step is what the one before leaves most needed):
#   1. the cells still `fail`: qwen3.5-moe and qwen3-next (calibrated) and the published Qwen3-Next-80B-A3B config,
#      megatron, three trainers at once (about 400 s on visits R and U);
#   2. `verify --family all`, megatron: twelve families, 5 at once, 3 rounds (about 1,000 s without the compile);
#   3. the same two steps for fsdp, where the env has flash-attn;
#   4. --thorough per 2026 family, megatron, while held.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part N-1 (carry .carry/nNNNN), install-base N, then wait 560 [mark] (K, M…, T…) until the plan ends,
#   partial if cut. A wait call must end before the device time does, or what it gathered is lost.
# bash docs/verification/2026-12-07-visit-v-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-07-visit-v-verl-0.9.sh
GDN_MOE="qwen3.5-moe qwen3-next"
THOROUGH=${THOROUGH:-"megatron:qwen3.5 megatron:qwen3-next megatron:qwen3.5-moe megatron:deepseek-v3 megatron:glm4-moe megatron:qwen3-vl"}
FSDP=yes  # set by the plan: no when the env has no flash-attn
SKIP=""   # set by the plan: verify's --skip-package for what the bundle left out
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers (aot_install), the common steps

case $step in
plan)     # on the node, by itself
  plan_start
  cells megatron
  all_families megatron
  if [ "$FSDP" = yes ]; then cells fsdp; all_families fsdp; fi
  thorough_runs "$THOROUGH" "$SKIP"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
