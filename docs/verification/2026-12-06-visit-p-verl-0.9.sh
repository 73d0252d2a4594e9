# GPU visit P (one H100 or H200), prepared 2026-12-06 (seventeenth session): the megatron actor of the families visit N
# left, with visit N's fixes. This session's CPU machine started without the wheel cache of earlier sessions, and
# flash-attn's sm_90 build takes 3.8 h on its 2 cores, so this bundle has no flash-attn: the megatron variant (whose
# TE attention is cuDNN's, `--skip-package flash-attn` as in visits K-N) runs; the fsdp variant waits for the wheel.
#   verlenv bundle --stack verl-0.9 --variant megatron --gpu h100 --without flash-attn --without causal-conv1d
#     --without apex --without transformer-engine-torch --without megatron-bridge --build-inputs
#     --source apex=<NVIDIA/apex mirror> --source megatron-bridge=<Megatron-Bridge mirror>
#     --wheelhouse .verlenv/wheelhouse
#     --base docs/verification/2026-12-05-h100-node-pip-freeze.txt --split 50MiB
# (216 files, 1906.5 MiB, 39 parts; causal-conv1d, TE's torch part, apex and Megatron-Bridge built on the node from the
# bundle's sources, causal-conv1d's build timed there for the first time; flash-attn's source rides along, unbuilt).
# The plan, by itself once the env is in:
#   1. the source builds, alone; the node's wheelhouse is packed for the next visit (`send wheelhouse.tgz`);
#   2. the megatron trainers of qwen3.5, qwen3.5-moe, qwen3-next, deepseek-v3 and the published Qwen3-Next-80B config
#      side by side: verify compiles FlashInfer's GDN prefill once, alone, first (never run on a GPU yet), and bounds
#      every trainer's MAX_JOBS; FlashInfer's compiled cache is packed for the next visit (`send flashinfer-cache.tgz`);
#   3. --thorough per family, as long as the machine is held.
# One `run` call per step, back to back (a machine is given back 30 s after a call ends):
#   part 1 … part N-1 (carry .carry/nNNNN), install-base N, then wait 560 [mark] until the plan ends, partial if cut.
# bash docs/verification/2026-12-06-visit-p-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
ENV=/opt/torch/.venv  # the node's torch env: the bundle leaves its distributions at the locked version to it
SELF=docs/verification/2026-12-06-visit-p-verl-0.9.sh; VARIANT=megatron
MEGATRON_AGAIN="qwen3.5 qwen3.5-moe qwen3-next deepseek-v3"
CONFIGS="Qwen3-Next-80B-A3B-Instruct"
THOROUGH="qwen3.5 qwen3-next qwen3.5-moe deepseek-v3"  # in this order, as long as the machine is held
step=$1; shift
. docs/verification/visit-lib.sh  # the helpers; the steps part, install-base, wheels, wait, partial, send

case $step in
plan)     # on the node, by itself
  echo "A $(date +%s)"
  # 1. the source builds, alone (16 jobs), against the env's torch and the node's CUDA 13.0 toolkit
  run_named megatron-build "$P/bundle/.tool/bin/verlenv build causal-conv1d transformer-engine-torch apex" \
            "megatron-bridge --bundle $P/bundle --stack verl-0.9 --variant megatron" \
            "--python $ENV/bin/python --gpu $(gpu)" \
            "--wheelhouse $W --jobs 16 --json $R/megatron-build.json"
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  tar -C $W -czf $R/wheelhouse.tgz .
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  # 2. the trainers, side by side in one verify
  run_named megatron-again "$(verify_cmd megatron-again --variant megatron --only verl --skip-package flash-attn \
            $(families $MEGATRON_AGAIN) $(configs))"
  echo "end $(date +%s) megatron: $(cat $R/megatron-again.done)"
  [ -d ~/.cache/flashinfer ] && tar -C ~/.cache -czf $R/flashinfer-cache.tgz flashinfer
  # 3. --thorough per family
  for f in $THOROUGH; do
    run_named megatron-thorough-$f "$(verify_cmd megatron-thorough-$f --variant megatron --only verl \
              --skip-package flash-attn --thorough --family $f)"
    echo "T $f $(date +%s) $(cat $R/megatron-thorough-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
replan)   # as run: causal-conv1d's build took the plan's first 10 min (its setup.py compiles 9 archs, one after the
  # other, in one unit), so once its wheel is in, the plan stops and plan-b goes on without apex (megatron-core's
  # optimizer takes TE's FusedAdam first) and without --thorough
  t0=$(date +%s); while ! grep -q "^verlenv build transformer-engine-torch" $R/megatron-build.out && [ $(( $(date +%s) - t0 )) -lt 200 ]; do sleep 2; done
  tail -3 $R/megatron-build.out; ls $W/*
  grep -q "^verlenv build transformer-engine-torch" $R/megatron-build.out || { echo "causal-conv1d not done"; held; exit 0; }
  pkill -f "$SELF plan"; pkill -f "verlenv build"; sleep 1
  mv $R/megatron-build.out $R/megatron-build-cc1d.out; rm -f $R/megatron-build.done
  rm -rf $REPO && sync_repo; (cd $REPO && setsid nohup bash $SELF plan-b < /dev/null > $R/plan.log 2>&1 &)
  sleep 5; cat $R/plan.log; held ;;
plan-b)   # on the node, by itself, after replan
  echo "A $(date +%s)"
  run_named megatron-build "$P/bundle/.tool/bin/verlenv build transformer-engine-torch megatron-bridge" \
            "--bundle $P/bundle --stack verl-0.9 --variant megatron --python $ENV/bin/python --gpu $(gpu)" \
            "--wheelhouse $W --jobs 16 --json $R/megatron-build.json"
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  tar -C $W -czf $R/wheelhouse.tgz .
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
  run_named megatron-again "$(verify_cmd megatron-again --variant megatron --only verl --skip-package flash-attn \
            --skip-package apex $(families $MEGATRON_AGAIN) $(configs))"
  echo "end $(date +%s) megatron: $(cat $R/megatron-again.done)" ;;
*)
  visit_step "$step" "$@" ;;
esac
