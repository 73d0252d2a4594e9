# GPU visit J (one H100 or H200): the seven 2026 families (families.toml: qwen3.5, qwen3.5-moe, qwen3-vl, qwen3-next,
# gpt-oss, deepseek-v3, glm4-moe) through verl 0.9.1's own trainer, side by side, in the megatron variant (verl's
# default Megatron-Bridge path) and, once flash-attn is built on the node, in the fsdp variant.
# - Call `start` carries flash-attn's sdist (sha256 of the lock's recipe) and pyelftools, and starts `verlenv build
#   flash-attn` for sm_90 against the node's own torch 2.11.0+cu130 (the stack's torch) in the background: it is the
#   longest step (21-27 min on 16 cores), so it runs while the bundle travels.
# - The bundle: `verlenv bundle --stack verl-0.9 --variant fsdp --variant megatron --gpu h100 --without apex
#   --without transformer-engine-torch --without flash-attn --without megatron-bridge --build-inputs
#   --source apex=<NVIDIA/apex mirror> --source megatron-bridge=<Megatron-Bridge mirror> --wheelhouse <cache>`,
#   cut into 52 MiB parts (the working tree travels with each part: 64 MiB a call), one part a call, back to back.
# - `install` (the last part): both envs by the bundle's bootstrap, offline; apex, TE's torch part and
#   Megatron-Bridge built into the megatron env from the bundle's sources; then the plan runs on the node by itself.
# One `run` call per step: bash docs/verification/2026-12-05-visit-j-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
FSDP=$REPO/.venv-verl-0.9-fsdp; MEGATRON=$REPO/.venv-verl-0.9-megatron
SELF=docs/verification/2026-12-05-visit-j-verl-0.9.sh
NEW="qwen3.5 qwen3.5-moe qwen3-vl qwen3-next gpt-oss deepseek-v3 glm4-moe"
step=$1; shift
sync_repo() {  # this call's working tree onto /root/repo (the envs under it stay)
  [ "$(pwd -P)" = "$REPO" ] && return
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}
held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }
part() {  # $1 = how many parts $P must hold after this call (call N carries .carry/eNNNN/: part N, the index with 1)
  cp -n .carry/e[0-9]*/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}
gpu() { nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100; }
boot() {  # $1 = variant: the bundle's bootstrap (the first one joins the parts), offline, into a fresh venv
  local v=$1 t; t=$(date +%s)
  (cd $REPO && PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant $v --prefix $REPO/.venv-verl-0.9-$v \
     > $R/install-$v.txt 2>&1)
  echo "install $v: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install-$v.txt
  tail -3 $R/install-$v.txt
}
run_named() {  # $1 = name, rest = command: in the foreground, $R/NAME.out, then $R/NAME.done (exit code, wall)
  local name=$1 t; shift; t=$(date +%s)
  (cd $REPO && eval "$*") > $R/$name.out 2>&1
  echo "exit $? wall_s $(( $(date +%s) - t ))" > $R/$name.done
}
families() { for f in $NEW; do printf -- ' --family %s' "$f"; done; }
verify_cmd() {  # $1 = name, rest = verify options: `nox -s verify-h100` offline from the bundle's tools
  local name=$1; shift
  echo "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu)" \
       "--report $R/$name.json --markdown $R/$name.md --timeout 1500 $*"
}

case $step in
start)    # machine facts, the GPU memory sampler, flash-attn's build started in the background
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  df -h / | tail -1; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'
  sync_repo
  python3 -m pip install -q --no-index --no-deps --target /root/site .carry/v1/pyelftools-*.whl
  cp .carry/v1/flash_attn-*.tar.gz /root/
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
  (cd $REPO && setsid nohup bash $SELF fa-build < /dev/null > $R/fa-build.log 2>&1 &)
  sleep 20; cat $R/fa-build.log; tail -5 $R/fa-build.out; held ;;
fa-build) # on the node, by itself: flash-attn for sm_90 against the node's torch (the stack's), into the wheel cache
  run_named fa-build "PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build flash-attn --python \$(which python3)" \
            "--gpu h100 --source /root/flash_attn-2.8.3.post2.tar.gz --wheelhouse $W --no-install --jobs 12" \
            "--threads 1 --json $R/fa-build.json" ;;
part)     # $1 = parts expected after this one
  part "$1"; tail -1 $R/fa-build.out | cut -c1-200 ;;
install)  # $1 = the last part's number: both envs, the megatron build and the plan started, the parts deleted (disk)
  part "$1"
  sync_repo
  boot megatron
  rm -f $P/bundle.tar.part*
  (cd $REPO && setsid nohup bash $SELF plan < /dev/null > $R/plan.log 2>&1 &)
  df -h / | tail -1; tail -2 $R/fa-build.out; held ;;
plan)     # on the node, by itself
  echo "A $(date +%s)"
  run_named megatron-build "$VERLENV build transformer-engine-torch apex megatron-bridge --bundle $P/bundle" \
            "--stack verl-0.9 --variant megatron --python $MEGATRON/bin/python --gpu h100 --wheelhouse $W --jobs 4" \
            "--json $R/megatron-build.json" &
  boot fsdp
  wait
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  run_named megatron-new "$(verify_cmd megatron-new --variant megatron --only verl --skip-package flash-attn $(families))" &
  # flash-attn's build was stopped: this H100 host built 1 of 73 units in its first minute (eta 62 min), more than the
  # visit's device time. gpt-oss's row trains in eager attention (its sinks), so the fsdp variant can train it without.
  run_named fsdp-gpt-oss "$(verify_cmd fsdp-gpt-oss --variant fsdp --only verl --skip-package flash-attn --family gpt-oss)"
  wait
  echo "end $(date +%s)" ;;
wait)     # $1 = seconds at most, until the plan ends; each finished run's files come back as one .tgz
  t0=$(date +%s)
  while ! grep -q '^end' $R/plan.log 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 3; done
  cat $R/plan.log
  for o in $(ls $R/*.out 2>/dev/null); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "^(FAIL|PASS|fail|warn) |passed|failed|Error|\[[0-9]+/73\]" $o | cut -c1-300 | tail -12
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"; cp $R/install-*.txt "$OUT/" 2>/dev/null
  ls -la "$OUT"; nvidia-smi --query-gpu=memory.used --format=csv,noheader; held ;;
fa-wheel) # the flash-attn wheel and its cache entry back, in pieces of 15 MiB (the files that come back: 16 MiB each)
  entry=$(cd $W && dirname "$(ls */*flash_attn*.whl | head -1)")
  echo "$entry"; ls -la $W/$entry
  (cd $W/$entry && sha256sum *.whl > "$OUT/wheel.sha256" && split -b 15M -d *.whl "$OUT/wheel.part")
  cp $W/$entry/*.json "$OUT/" 2>/dev/null; echo "$entry" > "$OUT/entry.path"; ls -la "$OUT"; held ;;
esac
