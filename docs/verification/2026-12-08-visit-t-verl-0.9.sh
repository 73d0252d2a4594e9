# GPU visit T (one H100 or H200), prepared 2026-12-07 after visit S; not run yet. Visit Q's bundle again (44 parts;
# see visit R's script for the bundle command). What visit S left, on the node, by itself:
#   1. benchmarks/gdn_algorithm_agreement.py --device cuda on qwen3.5-moe and qwen3-next, calibrated and as drawn: does
#      bf16 rounding flip routing on the GPU as on the CPU, and does the calibration stop it? (No vLLM: no compile.)
#   2. fsdp and megatron at once, qwen3.5-moe and qwen3-next in each, with the calibrated models (they failed the
#      agreement bound on visit R with the models as drawn), after the GDN prefill compile (510 s): four trainers,
#      about 900 s in all on visit R;
#   3. fsdp alone, qwen3-moe, glm4-moe and deepseek-v3 with the calibrated models (visit S's fsdp run was cut; its
#      megatron run passed): three trainers, about 280 s on visit S;
#   4. the published DeepSeek-V3 (fsdp) and GLM-4.5 (megatron) configs side by side, calibrated as the rows are;
#   5. --thorough per family, as long as the machine is held.
#   With 1,800 s of device time, 1-3 fit after the parts (245 s on visit S). With less than about 1,450 s left when the
#   first machine comes, set FIRST=fsdp before the install-base call: step 3 then runs before step 2; with less than
#   about 1,250 s, AGREEMENT=no as well.
# The FlashInfer GDN prefill comes prebuilt (recipes/flashinfer-jit-cache, built on the CPU; its wheelhouse entry is
# carried with the install-base call: carry .verlenv/wheelhouse/flashinfer-jit-cache): the plan first installs it with
# `verlenv build`, a cache hit, as a cluster sharing one wheelhouse would; step 2 then loads the module instead of
# compiling it (about 400 s instead of 900 s). Without the entry, or on a cache miss, the trainers compile it as before.
# Once installed, benchmarks/flashinfer_gdn_aot.py checks the installed module against the float64 rule (mark K).
# A bundle made `--without flash-attn` (a CPU machine that starts bare cannot rebuild its 3.8 h sm_90 build in one
# session) leaves the fsdp actor without its attention kernel: the plan then runs the megatron trainers alone and says
# so on each mark, instead of spending the visit on fsdp runs that must fail. On such a machine, first (about 2.3 h on 2
# cores, measured one by one in docs/builds): `nox -s env -- --variant megatron`, then for each NAME of
#   megatron-bridge transformer-engine-torch apex causal-conv1d flashinfer-jit-cache
# `verlenv build NAME --variant megatron --python .venv-verl-0.9-megatron/bin/python --archs 9.0 --no-install` (with
# `--source` of its git mirror where it has one); then the bundle command of visit R's script, `--without flash-attn`.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 43 (carry .carry/nNNNN), install-base 44, then wait 560 [mark] (G, R-gdn, R-fsdp, end) until the
#   plan ends, partial if cut. A wait call must end before the device time does, or what it gathered is lost.
# bash docs/verification/2026-12-08-visit-t-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-08-visit-t-verl-0.9.sh
GDN_MOE="qwen3.5-moe qwen3-next" OTHER_MOE="qwen3-moe glm4-moe deepseek-v3"
THOROUGH="fsdp:qwen3.5 megatron:qwen3.5 fsdp:qwen3-next megatron:qwen3-next"  # in this order, while held
FIRST=${FIRST:-gdn}  # or fsdp (see above); from the install-base call's environment
AGREEMENT=${AGREEMENT:-yes}  # or no (see above)
FSDP=yes  # set by the plan: no when the env has no flash-attn
gdn_moe() {
  [ "$FSDP" = yes ] && run_named fsdp "$(verify_cmd fsdp --variant fsdp --only verl $(families $GDN_MOE))" &
  run_named megatron "$(verify_cmd megatron --variant megatron --only verl $(families $GDN_MOE))" &
  wait
  echo "R-gdn $(date +%s) fsdp: $(cat $R/fsdp.done 2> /dev/null || echo skipped) megatron: $(cat $R/megatron.done)"
}
fsdp_moe() {
  [ "$FSDP" = yes ] || { echo "R-fsdp $(date +%s) fsdp-moe: skipped, no flash-attn in the env"; return; }
  run_named fsdp-moe "$(verify_cmd fsdp-moe --variant fsdp --only verl $(families $OTHER_MOE))"
  echo "R-fsdp $(date +%s) fsdp-moe: $(cat $R/fsdp-moe.done)"
}
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers (aot_install), the common steps

case $step in
plan)     # on the node, by itself
  $ENV/bin/python -c "import torch, flash_attn_2_cuda" 2> /dev/null || FSDP=no
  echo "A $(date +%s) fsdp: $FSDP"
  aot_install
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  [ "$AGREEMENT" = yes ] && agreement_runs "$GDN_MOE"
  echo "G $(date +%s) $(cat $R/agreement.done 2>/dev/null) drawn: $(cat $R/agreement-drawn.done 2>/dev/null)"
  if [ "$FIRST" = fsdp ]; then fsdp_moe; gdn_moe; else gdn_moe; fsdp_moe; fi
  published_config_runs
  [ "$FSDP" = yes ] || THOROUGH=$(echo $THOROUGH | tr ' ' '\n' | grep -v '^fsdp:' | tr '\n' ' ')
  thorough_runs "$THOROUGH"
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
