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
SELF=docs/verification/2026-12-08-visit-o-verl-0.9.sh
FSDP_NEW="qwen3.5 qwen3-next qwen3.5-moe glm4-moe"  # gpt-oss: vLLM 0.24.0 (vllm#45830)
MEGATRON_AGAIN="qwen3.5 qwen3.5-moe qwen3-next deepseek-v3"
CONFIGS="Qwen3-Next-80B-A3B-Instruct"
THOROUGH="qwen3.5 qwen3-next glm4-moe qwen3.5-moe"  # in this order, as long as the machine is held
step=$1; shift
sync_repo() {  # this call's working tree onto /root/repo (the background plan runs from there)
  [ "$(pwd -P)" = "$REPO" ] && return
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}
sampler() {  # the GPU's memory every 2 s, whole and per process, into $R/gpumem.csv, for as long as the machine lives
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
}
hostmem() {  # the host's available memory (KiB) and its compilers' (cicc) resident memory every 5 s: what one trainer
  # holds besides its JIT compiles (verify/jit_jobs.py TRAINER_HOST_GIB is an upper bound from visit N, to measure)
  setsid nohup bash -c "while :; do echo \"\$(date +%s),\$(awk '/MemAvailable/ {print \$2}' /proc/meminfo),\$(ps -C cicc -o rss= | awk '{s+=\$1} END {print s+0}')\"; sleep 5; done >> $R/hostmem.csv" < /dev/null > /dev/null 2>&1 &
}
held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }
part() {  # $1 = how many parts $P must hold after this call (call N carries .carry/nNNNN/: part N, the index with 1)
  [ -f $R/t0 ] || { date +%s > $R/t0; sampler; hostmem; }
  cp -n .carry/n[0-9]*/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}
gpu() { nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100; }
run_named() {  # $1 = name, rest = command: in the foreground, $R/NAME.out, then $R/NAME.done (exit code, wall)
  local name=$1 t; shift; t=$(date +%s)
  (cd $REPO && eval "$*") > $R/$name.out 2>&1
  echo "exit $? wall_s $(( $(date +%s) - t ))" > $R/$name.done
}
families() { for f in "$@"; do printf -- ' --family %s' "$f"; done; }
configs() { for c in $CONFIGS; do printf -- ' --model-config /root/published/%s/config.json' "$c"; done; }
verify_cmd() {  # $1 = name, rest = verify options: `nox -s verify-<gpu>` offline from the bundle's tools, in the env
  local name=$1; shift
  echo "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu)" \
       "--python $ENV/bin/python --report $R/$name.json --markdown $R/$name.md --timeout 1500 $*"
}

case $step in
part)     # $1 = parts expected after this one
  part "$1" ;;
install-base) # $1 = the last part's number: the megatron variant into the node's torch env, then the plan by itself
  part "$1"
  sync_repo
  t=$(date +%s)
  (cd $REPO && PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant megatron --python $ENV/bin/python3 \
     > $R/install.txt 2>&1)
  echo "install megatron into $ENV: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install.txt
  tail -6 $R/install.txt
  rm -f $P/bundle.tar.part*
  (cd $REPO && setsid nohup bash $SELF plan < /dev/null > $R/plan.log 2>&1 &)
  df -h / | tail -1; held ;;
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
wheels)   # the node's built wheels (the ABI-keyed wheelhouse), for a bundle that needs no builds on the node
  (cd $W && find . -name '*.whl' -size -60M | head -8 | while read -r w; do cp "$w" "$OUT/"; done)
  ls -la "$OUT"; held ;;
wait)     # $1 = seconds at most, until the plan.log line starting with $2 (default "end"); finished runs come back
  t0=$(date +%s); mark=${2:-end}
  while ! grep -q "^$mark" $R/plan.log 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 3; done
  cat $R/plan.log
  sent=0  # at most 8 files come back a call: 5 runs' archives, the two memory samples, the install's output
  for o in $(ls $R/*.out 2>/dev/null); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "^(FAIL|PASS|fail|warn) |passed|failed|Error|\[[0-9]+/[0-9]+\]" $o | cut -c1-300 | tail -14
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && [ $sent -lt 5 ] && sent=$((sent + 1)) &&
      tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  for t in $R/*.trainer*.log; do [ -f "$t" ] && echo "-- $(basename $t): $(grep -c . $t) lines; $(grep -E 'step:[0-9]+' -o $t | sort -u | tr '\n' ' ')"; done
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"
  [ -f $R/hostmem.csv ] && gzip -c $R/hostmem.csv > "$OUT/hostmem.csv.gz"
  [ -f $R/install.txt ] && gzip -c $R/install.txt > "$OUT/install.txt.gz"
  ls -la "$OUT"; nvidia-smi --query-gpu=memory.used --format=csv,noheader; held ;;
partial)  # the running trainers' logs as they stand (a run cut off by the device time still leaves its evidence)
  for t in $R/*.trainer*.log $R/*.out; do [ -f "$t" ] && gzip -c "$t" > "$OUT/$(basename $t).gz"; done
  ls -la "$OUT"; held ;;
esac
