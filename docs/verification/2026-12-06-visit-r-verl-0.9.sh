# GPU visit R (one H100 or H200), 2026-12-06: both actors of the three gated-DeltaNet families issue 54 still needs
# (qwen3.5, qwen3.5-moe, qwen3-next), which need FlashInfer's GDN prefill compiled first (491.8 s on visit P's H100).
# Visit Q's bundle, unchanged (every source build from the CPU machine's wheelhouse, no build on the node):
#   verlenv bundle --stack verl-0.9 --variant megatron --gpu h100 --wheelhouse .verlenv/wheelhouse
#     --base docs/verification/2026-12-05-h100-node-pip-freeze.txt --split 50MiB      (216 files, 2,184.7 MiB, 44 parts)
# The plan, by itself once the env is in:
#   1. fsdp's and megatron's verify runs at once, three families each: fsdp's compiles the GDN prefill while
#      megatron's waits on FlashInfer's lock for it (then loads it from the cache), and the six trainers run together
#      (visit Q: three trainers peaked at 17.3 GiB of GPU memory; the host kept 83 GiB available);
#   2. the published Qwen3.5-35B-A3B (fsdp) and Qwen3-Next-80B-A3B-Instruct (megatron) configs, side by side;
#   3. --thorough per family, as long as the machine is held.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part 43 (carry .carry/nNNNN), install-base 44, then wait 560 [mark] until the plan ends, partial if cut.
# bash docs/verification/2026-12-06-visit-r-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
ENV=/opt/torch/.venv  # the node's torch env: the bundle leaves its distributions at the locked version to it
SELF=docs/verification/2026-12-06-visit-r-verl-0.9.sh; VARIANT=megatron
GDN="qwen3.5 qwen3.5-moe qwen3-next"
THOROUGH="fsdp:qwen3.5 megatron:qwen3.5 fsdp:qwen3-next megatron:qwen3-next"  # in this order, while held
CONFIGS=""
step=$1; shift
. docs/verification/visit-lib.sh  # the helpers; the steps part, install-base, wheels, wait, send, partial

case $step in
plan)     # on the node, by itself
  echo "A $(date +%s)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  FA=""; $ENV/bin/python -c "import torch, flash_attn_2_cuda" 2> /dev/null || FA="--skip-package flash-attn"
  [ -z "$FA" ] || echo "F $(date +%s) fsdp: skipped, flash_attn_2_cuda does not import"
  [ -z "$FA" ] && run_named fsdp "$(verify_cmd fsdp --variant fsdp --only verl $(families $GDN))" &
  run_named megatron "$(verify_cmd megatron --variant megatron --only verl $FA $(families $GDN))" &
  wait
  echo "R1 $(date +%s) fsdp: $(cat $R/fsdp.done 2>/dev/null) megatron: $(cat $R/megatron.done)"
  [ -z "$FA" ] && run_named fsdp-config "$(verify_cmd fsdp-config --variant fsdp --only verl \
            $(CONFIGS=Qwen3.5-35B-A3B configs))" &
  run_named megatron-config "$(verify_cmd megatron-config --variant megatron --only verl $FA \
            $(CONFIGS=Qwen3-Next-80B-A3B-Instruct configs))" &
  wait
  echo "end $(date +%s) fsdp-config: $(cat $R/fsdp-config.done 2>/dev/null) megatron-config: $(cat $R/megatron-config.done)"
  for t in $THOROUGH; do v=${t%%:*}; f=${t#*:}
    [ "$v" = fsdp ] && [ -n "$FA" ] && continue
    run_named thorough-$v-$f "$(verify_cmd thorough-$v-$f --variant $v --only verl $FA --thorough --family $f)"
    echo "T $v $f $(date +%s) $(cat $R/thorough-$v-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
*)
  visit_step "$step" "$@" ;;
esac
