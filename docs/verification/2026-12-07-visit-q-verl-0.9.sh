# GPU visit Q (one H100 or H200), prepared 2026-12-06 after visit P: both actors of the families issue 54 still needs,
# with no build on the node. Every source build comes from the CPU machine's wheelhouse: causal-conv1d, TE's torch part
# and Megatron-Bridge built on visit P's node and sent back; apex built on the CPU machine (sm_90); flash-attn's sm_90
# build (3.8 h on the CPU machine's 2 cores, resumable) when it is done, else the bundle leaves it out and the fsdp
# step is skipped:
#   verlenv bundle --stack verl-0.9 --variant megatron --gpu h100 --wheelhouse .verlenv/wheelhouse
#     --base docs/verification/2026-12-05-h100-node-pip-freeze.txt --split 50MiB [--without flash-attn]
# The plan, by itself once the env is in (visit P's lessons: no builds on the node, the actor's needs checked first):
#   1. the fsdp trainers of qwen3.5, qwen3-next, qwen3.5-moe, glm4-moe and the published Qwen3.5-35B-A3B config, if
#      flash-attn is in the env (verify compiles FlashInfer's GDN prefill once first: 491.8 s on visit P's H100);
#   2. the megatron trainers of qwen3.5, qwen3.5-moe, qwen3-next, deepseek-v3 and the published Qwen3-Next-80B config
#      side by side (the compile is in FlashInfer's cache now);
#   3. benchmarks/gdn_fast_path.py: a Qwen3-Next model's step on the gated-DeltaNet fast path against torch's paths,
#      the ratio in one run (about a minute);
#   4. --thorough per family, as long as the machine is held.
# (Planned first with the benchmark at 0 and megatron before fsdp; before the visit, three failed machine starts cost
# 361 s of the 1,800: the trainers first, fsdp (fewer parts, the warm compile in it) before megatron.)
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part N-1 (carry .carry/nNNNN), install-base N, then wait 560 [mark] until the plan ends, partial if cut.
# bash docs/verification/2026-12-07-visit-q-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
ENV=/opt/torch/.venv  # the node's torch env: the bundle leaves its distributions at the locked version to it
SELF=docs/verification/2026-12-07-visit-q-verl-0.9.sh; VARIANT=megatron
MEGATRON="qwen3.5 qwen3.5-moe qwen3-next deepseek-v3"
FSDP="qwen3.5 qwen3-next qwen3.5-moe glm4-moe"  # gpt-oss: vLLM 0.24.0 (vllm#45830)
CONFIGS="Qwen3-Next-80B-A3B-Instruct"
FSDP_CONFIGS="Qwen3.5-35B-A3B"
THOROUGH="megatron:qwen3.5 fsdp:qwen3.5 megatron:qwen3-next fsdp:qwen3-next"  # in this order, while held
step=$1; shift
. docs/verification/visit-lib.sh  # the helpers; the steps part, install-base, wheels, wait, send, partial

case $step in
plan)     # on the node, by itself: the second machine's plan (plan-first below ran on the first, which went back 30 s
  # after a `wait` call that returned at once, with the plan in its background: 945 s of device time were left).
  # What needs no warm compile: the fast-path ratio, then fsdp's glm4-moe and the published Qwen3-VL-8B config beside
  # megatron's deepseek-v3 (three trainers: what verify runs at once on an 80 GB GPU).
  echo "A $(date +%s)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  run_named gdn-fast-path "$ENV/bin/python benchmarks/gdn_fast_path.py --out $R/gdn-fast-path.json"
  echo "G $(date +%s) $(cat $R/gdn-fast-path.done)"
  run_named megatron "$(verify_cmd megatron --variant megatron --only verl --family deepseek-v3)" &
  run_named fsdp "$(verify_cmd fsdp --variant fsdp --only verl --family glm4-moe \
            $(CONFIGS=Qwen3-VL-8B-Instruct configs))"
  wait
  echo "end $(date +%s) fsdp: $(cat $R/fsdp.done) megatron: $(cat $R/megatron.done)" ;;
plan-first)  # the first machine's plan, as it ran there
  echo "A $(date +%s)"
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  FA=""; $ENV/bin/python -c "import torch, flash_attn_2_cuda" 2> /dev/null || FA="--skip-package flash-attn"
  if [ -z "$FA" ]; then
    run_named fsdp "$(verify_cmd fsdp --variant fsdp --only verl $(families $FSDP) $(CONFIGS=$FSDP_CONFIGS configs))"
    echo "F $(date +%s) fsdp: $(cat $R/fsdp.done)"
  else
    echo "F $(date +%s) fsdp: skipped, no flash-attn in the env"
  fi
  run_named megatron "$(verify_cmd megatron --variant megatron --only verl $FA \
            $(families $MEGATRON) $(configs))"
  echo "M $(date +%s) megatron: $(cat $R/megatron.done)"
  run_named gdn-fast-path "$ENV/bin/python benchmarks/gdn_fast_path.py --out $R/gdn-fast-path.json"
  echo "end $(date +%s) gdn-fast-path: $(cat $R/gdn-fast-path.done)"
  for t in $THOROUGH; do v=${t%%:*}; f=${t#*:}
    [ "$v" = fsdp ] && [ -n "$FA" ] && continue
    run_named thorough-$v-$f "$(verify_cmd thorough-$v-$f --variant $v --only verl $FA --thorough --family $f)"
    echo "T $v $f $(date +%s) $(cat $R/thorough-$v-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
fsdp-beside)  # never ran (the first machine had gone back when it was called). By hand, beside the running plan,
  # whose flash-attn test imported flash_attn_2_cuda before torch (the extension needs torch's libraries loaded: it
  # failed, and the plan skipped fsdp): fsdp's trainers while megatron's run, each run's vLLM KV cache fixed
  # (FlashInfer's lock holds this warm compile until the plan's is done)
  $ENV/bin/python -c "import torch, flash_attn_2_cuda" || exit 1
  (setsid nohup bash -c ". $SELF noop; run_named fsdp \"\$(verify_cmd fsdp --variant fsdp --only verl \$(families \$FSDP) \
      \$(CONFIGS=\$FSDP_CONFIGS configs))\"; echo \"F \$(date +%s) fsdp: \$(cat \$R/fsdp.done)\" >> \$R/plan.log" \
      < /dev/null > $R/fsdp-beside.log 2>&1 &)
  sleep 20; cat $R/fsdp-beside.log; ls $R; held ;;
noop) ;;
*)
  visit_step "$step" "$@" ;;
esac
