# GPU visit W (one H100 or H200), prepared 2026-12-07 after visit V; run on 2026-12-07 (H100) as far as its five
# deepseek-v3 runs (2026-12-07-visit-w-verl-0.9.md: two of them made no step before the machine went). Visit V left
# three things: why deepseek-v3 failed step 2's agreement bound on the megatron actor (pearson 0.9808; visit S passed it
# at 0.9979), the megatron --thorough runs of the 2026 families but qwen3.5, and every fsdp run of the calibrated MoE
# families (they need flash-attn's sm_90 wheel: built on the CPU machine on 2026-12-07,
# docs/builds/2026-12-07-cpu-flash-attn-resumed.json).
# The bundle: visit V's command (docs/verification/2026-12-07-visit-v-verl-0.9.md) without `--without flash-attn`, now
# that the wheelhouse holds its sm_90 wheel: 46 parts of 48 MiB, 2.2 GiB. Made from 63c994c or later: the bundle's own
# verlenv must know `--trainer-override`. The install call carries the wheelhouse's flashinfer-jit-cache entry
# (carry .verlenv/wheelhouse/flashinfer-jit-cache), as visit V's did.
# By itself on the node, in this order:
#   1. deepseek-v3, megatron, five verify runs side by side (about 250 s; visit V: 5 trainers at once, one round 180 s):
#      twice as it is (does the failure repeat?), once with megatron-core's router-bias update off (Megatron-Bridge
#      0.5.2's DeepSeek-V3 bridge keeps megatron-core's 1e-3 a step; its GLM-4.5 bridge sets 0, and glm4-moe agrees
#      at 0.9998), once with the TE cross-entropy fusion off (the one warning only deepseek-v3's log has), once with
#      vLLM's TRITON_MLA backend instead of FLASH_ATTN_MLA (step 1, before any update, already agrees least of the MoE
#      families: 0.9908 and 0.9937, so MLA's two implementations are a suspect too). The last three go through
#      `--trainer-override`, so their reports are no verdict in the compat matrix; the two plain runs are.
#   2. fsdp, where the env has flash-attn: `--family all` (the calibrated MoE families' first fsdp verdicts) with the
#      published Qwen3-Next-80B, DeepSeek-V3 and GLM-4.5 configs, one run (15 trainers, 5 at once: 3 rounds, as visit
#      V's 12 families took). Without flash-attn, the same on sdpa attention (`--trainer-override`; the DeltaNet layers
#      never use flash-attn): evidence of the calibrated models' agreement on the fsdp actor, not a verdict.
#   3. --thorough, one family at a time, while held: megatron's 2026 families not yet run so, then fsdp's.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part N-1 (carry .carry/nNNNN), install-base N, then wait 560 [mark] (K, D, M…, T…) until the plan ends,
#   partial if cut. A wait call must end before the device time does, or what it gathered is lost.
# bash docs/verification/2026-12-07-visit-w-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-07-visit-w-verl-0.9.sh
THOROUGH=${THOROUGH:-"megatron:qwen3-next megatron:qwen3.5-moe megatron:glm4-moe megatron:deepseek-v3 megatron:qwen3-vl
  fsdp:qwen3.5-moe fsdp:qwen3-next fsdp:glm4-moe fsdp:qwen3.5"}
FSDP=yes  # set by the plan: no when the env has no flash-attn
SKIP=""   # set by the plan: verify's --skip-package for what the bundle left out
MCORE=actor_rollout_ref.actor.megatron.override_transformer_config
deepseek_runs() {  # the five deepseek-v3 runs side by side; mark D
  local base="--variant megatron --only verl $SKIP --family deepseek-v3"
  run_named ds-a "$(verify_cmd ds-a $base)" &
  run_named ds-b "$(verify_cmd ds-b $base)" &
  run_named ds-bias0 "$(verify_cmd ds-bias0 $base --trainer-override +$MCORE.moe_router_bias_update_rate=0)" &
  run_named ds-ce "$(verify_cmd ds-ce $base --trainer-override +$MCORE.cross_entropy_loss_fusion=False)" &
  run_named ds-triton "$(verify_cmd ds-triton $base \
    --trainer-override +actor_rollout_ref.rollout.engine_kwargs.vllm.attention_backend=TRITON_MLA)" &
  wait
  echo "D $(date +%s) a: $(cat $R/ds-a.done); b: $(cat $R/ds-b.done); bias0: $(cat $R/ds-bias0.done);" \
       "ce: $(cat $R/ds-ce.done); triton: $(cat $R/ds-triton.done)"
}
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers (aot_install), the common steps

case $step in
plan)     # on the node, by itself
  plan_start
  deepseek_runs
  if [ "$FSDP" = yes ]; then fsdp_all
  else fsdp_all "--trainer-override ++actor_rollout_ref.model.override_config.attn_implementation=sdpa"; fi
  [ "$FSDP" = yes ] || THOROUGH=$(without_fsdp "$THOROUGH")
  thorough_runs "$THOROUGH" "$SKIP"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
