# GPU visit O (one H100 or H200), prepared 2026-12-06 after visit N: the same bundle as visit N (the megatron variant
# of verl-0.9 less the node's torch env, 44 parts carried as .carry/nNNNN; how to make it: visit N's header), with
# visit N's lessons in the order of the plan:
#   1. the source builds first, alone (an env is verified after its builds: visit N's fsdp runs met TE's core without
#      its torch part); their wheels come back (a later bundle carries them, no builds on the node);
#   2. the fsdp trainers of the four hybrid / MoE families side by side, then the megatron re-runs with the
#      published Qwen3-Next-80B config, then --thorough per family as long as the machine is held. verify's trainer
#      check compiles FlashInfer's GDN prefill once, alone, before its trainers (its check verl/jit-warm/..., timed),
#      and bounds MAX_JOBS (visit N: vLLM compiled it in each trainer with a job per core; the host ran out of memory).
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 43 (carry .carry/nNNNN), install-base 44, then wait 560 [mark] until the plan ends, partial if cut.
# bash docs/verification/2026-12-08-visit-o-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
ENV=/opt/torch/.venv  # the node's torch env: the bundle leaves its 84 distributions at the locked version to it
SELF=docs/verification/2026-12-08-visit-o-verl-0.9.sh; VARIANT=megatron
FSDP_NEW="qwen3.5 qwen3-next qwen3.5-moe glm4-moe"  # gpt-oss: vLLM 0.24.0 (vllm#45830)
MEGATRON_AGAIN="qwen3.5 qwen3.5-moe qwen3-next deepseek-v3"
CONFIGS="Qwen3-Next-80B-A3B-Instruct"
THOROUGH="qwen3.5 qwen3-next glm4-moe qwen3.5-moe"  # in this order, as long as the machine is held
step=$1; shift
. docs/verification/visit-lib.sh  # the helpers; the steps part, install-base, wheels, wait, partial

case $step in
plan)     # on the node, by itself
  echo "A $(date +%s)"
  # 1. the source builds, alone (16 jobs), against the env's torch and the node's CUDA 13.0 toolkit; wheels come back
  run_named megatron-build "$P/bundle/.tool/bin/verlenv build transformer-engine-torch apex megatron-bridge" \
            "--bundle $P/bundle --stack verl-0.9 --variant megatron --python $ENV/bin/python --gpu $(gpu)" \
            "--wheelhouse $W --jobs 16 --json $R/megatron-build.json"
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  # 2. the trainers
  run_named fsdp-new "$(verify_cmd fsdp-new --variant fsdp --only verl $(families $FSDP_NEW))"
  echo "F $(date +%s) fsdp: $(cat $R/fsdp-new.done)"
  run_named megatron-again "$(verify_cmd megatron-again --variant megatron --only verl --skip-package flash-attn \
            $(families $MEGATRON_AGAIN) $(configs))"
  echo "end $(date +%s) megatron: $(cat $R/megatron-again.done)"
  for f in $THOROUGH; do
    run_named fsdp-thorough-$f "$(verify_cmd fsdp-thorough-$f --variant fsdp --only verl --thorough --family $f)"
    echo "T $f $(date +%s) $(cat $R/fsdp-thorough-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
