# GPU visit S (one H100 or H200), prepared 2026-12-06 after visit R; not run on 2026-12-06 (no machine came in 1,471 s
# of device time spent on starts). Run 2026-12-07, 01:17-01:29 UTC, on an H100 with FIRST=other and AGREEMENT=no
# (738 s were left when the machine came): step 0, and step 3 up to the megatron verdicts (the fsdp run was cut);
# what happened: 2026-12-07-visit-s-verl-0.9.md. Visit Q's bundle again (44 parts; see visit R's
# script for the bundle command); this call's tree brings the check's MoE models calibrated (families.toml
# routed_influence, kernels/_routed_experts.py). By itself, on the node:
#   1. benchmarks/gdn_algorithm_agreement.py --device cuda on qwen3.5-moe and qwen3-next, calibrated and as drawn: does
#      bf16 rounding flip routing on the GPU as on the CPU, and does the calibration stop it? (No vLLM: no compile.)
#   2. fsdp and megatron at once, qwen3.5-moe and qwen3-next in each (they failed the agreement bound on visit R with
#      the models as drawn), after the GDN prefill compile (510 s on visit R): four trainers;
#   3. fsdp and megatron at once, qwen3-moe, glm4-moe and deepseek-v3 in each (they passed before with the models as
#      drawn; the calibration changed them): six trainers, as on visit R;
#   4. the published DeepSeek-V3 (fsdp) and GLM-4.5 (megatron) configs side by side, calibrated as the rows are;
#   5. --thorough per family, as long as the machine is held.
#   0. First, when the install-base call carries .carry/aot (scripts/flashinfer_aot.py's package, compiled on the CPU
#      machine): benchmarks/flashinfer_gdn_aot.py, a few seconds: does the prebuilt GDN prefill module load, and match
#      the float64 gated delta rule? It runs in its own process only; verify's runs never see the package.
#   With 1,800 s of device time, 1-3 fit after the parts (224 s); with less than about 1,300 s left when the first
#   machine comes, set FIRST=other before the install-base call: step 3 then runs before step 2.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 43 (carry .carry/nNNNN), install-base 44, then wait 560 [mark] (G, R-gdn, R-other, end) until the
#   plan ends, partial if cut. A wait call must end before the device time does, or what it gathered is lost.
# bash docs/verification/2026-12-07-visit-s-verl-0.9.sh STEP [ARG]
set -uo pipefail
SELF=docs/verification/2026-12-07-visit-s-verl-0.9.sh
GDN_MOE="qwen3.5-moe qwen3-next" OTHER_MOE="qwen3-moe glm4-moe deepseek-v3"
THOROUGH="fsdp:qwen3.5 megatron:qwen3.5 fsdp:qwen3-next megatron:qwen3-next"  # in this order, while held
FIRST=other  # or gdn (see above); other: set 2026-12-07 with 1,079 s of device time left before any machine came
AGREEMENT=no  # no: skip step 1 (about 60 s) where step 2 would not fit otherwise (about 900 s on visit R)
gdn_moe() {
  run_named fsdp "$(verify_cmd fsdp --variant fsdp --only verl $(families $GDN_MOE))" &
  run_named megatron "$(verify_cmd megatron --variant megatron --only verl $(families $GDN_MOE))" &
  wait
  echo "R-gdn $(date +%s) fsdp: $(cat $R/fsdp.done) megatron: $(cat $R/megatron.done)"
}
other_moe() {
  run_named fsdp-moe "$(verify_cmd fsdp-moe --variant fsdp --only verl $(families $OTHER_MOE))" &
  run_named megatron-moe "$(verify_cmd megatron-moe --variant megatron --only verl $(families $OTHER_MOE))" &
  wait
  echo "R-other $(date +%s) fsdp-moe: $(cat $R/fsdp-moe.done) megatron-moe: $(cat $R/megatron-moe.done)"
}
step=$1; shift
. docs/verification/visit-lib.sh  # the node's layout (R, P, ENV, NOX...), the helpers, the common steps

case $step in
plan)     # on the node, by itself
  echo "A $(date +%s)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  if [ -d /root/aot/flashinfer_jit_cache ]; then  # the prebuilt GDN prefill module, alone, before any compile of it
    run_named aot "$ENV/bin/python benchmarks/flashinfer_gdn_aot.py --jit-cache /root/aot --out $R/aot.json"
    echo "AOT $(date +%s) $(cat $R/aot.done)"
  fi
  AGREE="PYTHONPATH=src $ENV/bin/python benchmarks/gdn_algorithm_agreement.py --device cuda --seeds 2"
  if [ "$AGREEMENT" = yes ]; then
    run_named agreement "$AGREE $(families $GDN_MOE) --out $R/agreement.json"
    run_named agreement-drawn "$AGREE $(families $GDN_MOE) --routed-influence none --out $R/agreement-drawn.json"
  fi
  echo "G $(date +%s) $(cat $R/agreement.done 2>/dev/null) drawn: $(cat $R/agreement-drawn.done 2>/dev/null)"
  if [ "$FIRST" = other ]; then other_moe; gdn_moe; else gdn_moe; other_moe; fi
  run_named fsdp-config "$(verify_cmd fsdp-config --variant fsdp --only verl $(CONFIGS=DeepSeek-V3 configs))" &
  run_named megatron-config "$(verify_cmd megatron-config --variant megatron --only verl $(CONFIGS=GLM-4.5 configs))" &
  wait
  echo "end $(date +%s) fsdp-config: $(cat $R/fsdp-config.done) megatron-config: $(cat $R/megatron-config.done)"
  thorough_runs "$THOROUGH"
  echo "thorough end $(date +%s)" ;;
install-base)  # when this call carries it (.carry/aot), the AOT package goes where the plan looks for it first
  [ -d .carry/aot/flashinfer_jit_cache ] && mkdir -p /root/aot && cp -r .carry/aot/flashinfer_jit_cache /root/aot/
  visit_step "$step" "$@" ;;
*)
  visit_step "$step" "$@" ;;
esac
