# GPU visit G (one H100 or H200): visit F's bundle and steps (docs/verification/2026-11-28-visit-f-verl-0.9.sh: one
# verl-0.9 bundle of both variants carried in parts, each variant installed offline by the bundle's bootstrap, apex and
# TE's torch part built on the node by their recipes from the bundle's sources, the CPU-built flash-attn wheel carried
# last and sha256-checked). Its aim: the test suite's GPU tests green in both variants' envs, after visit F's fix of
# vLLM's usage stats; then the fsdp `--thorough` families visit F did not reach. The megatron env is installed first
# and its build (not niced) starts at once; then, in one plan that runs on the node by itself:
#   A, while the build runs: the GPU tests in the fsdp env (`pytest -m gpu` in the env's python: the node reaches no
#      index, which `nox -s tests` installs pytest from), with the vLLM usage-stats test beside them; then fsdp
#      `--thorough --only verl`, one family at a time, alone on the GPU, until the build is done;
#   B: the GPU tests in the megatron env (apex, TE, megatron-core's checks: those the fsdp env skips);
#   C: the thorough families A did not reach, then megatron `--thorough --only verl` per text family, while the
#      machine lasts.
# Each report comes back as soon as it is written. The machine is given back 30 s after a call ends: issue each `wait`
# the moment the previous call returns. GPU memory is sampled every 2 s.
# One `run` call per step: bash docs/verification/2026-11-28-visit-g-verl-0.9.sh STEP
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
FSDP=$REPO/.venv-verl-0.9-fsdp; MEGATRON=$REPO/.venv-verl-0.9-megatron
SELF=docs/verification/2026-11-28-visit-g-verl-0.9.sh
VL=tests/data/model-configs/Qwen2.5-VL-3B-Instruct/config.json; MOE=tests/data/model-configs/Qwen3-30B-A3B/config.json
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

gpu_tests() {  # $1 = name, $2 = env: the GPU tests, then the vLLM usage-stats test, in that env's python
  local py=$2/bin/python
  run_named $1 "VERLENV_CLUSTER_ENV=$py PYTHONPATH=$REPO/src $py -m pytest -m gpu -v -p no:cacheprovider" \
            "--junitxml=$R/$1.xml tests/test_kernel_scripts.py tests/test_check_sglang.py; echo gpu tests exit \$?;" \
            "VERLENV_CLUSTER_ENV=$py PYTHONPATH=$REPO/src $py -m pytest -v -p no:cacheprovider" \
            "--junitxml=$R/$1.usage-stats.xml" \
            "tests/test_kernel_scripts.py::test_the_vllm_check_and_verls_vllm_servers_send_no_usage_stats"
}

verify_cmd() {  # $1 = name, rest = verify options: `nox -s verify-h100` offline from the bundle's tools
  local name=$1; shift
  echo "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu)" \
       "--report $R/$name.json --markdown $R/$name.md $*"
}

case $step in
start)    # machine facts, the GPU memory sampler, the first part
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  df -h / | tail -1
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
  part 1 ;;
part)     # $1 = parts expected after this one
  part "$1" ;;
install)  # $1 = the last part's number: both envs, the parts deleted (disk), then the plan starts
  part "$1"
  sync_repo
  boot megatron
  (cd $REPO && setsid nohup bash $SELF build < /dev/null > $R/build.log 2>&1 &)
  rm -f $P/bundle.tar.part*
  boot fsdp
  df -h / | tail -1; held ;;
build)    # on the node, by itself: apex and TE's torch part into the megatron env
  run_named megatron-build "$VERLENV build transformer-engine-torch apex --bundle $P/bundle --stack verl-0.9" \
            "--variant megatron --python $MEGATRON/bin/python --gpu h100 --wheelhouse $W --json $R/megatron-build.json" ;;
piece)    # one piece of flash-attn's wheel (.carry/faN/), kept for the wheel step
  mkdir -p /root/fa; cp .carry/fa[0-9]*/* /root/fa/; ls /root/fa; held ;;
wheel)    # the wheel's last piece: joined into the wheel cache, its sha256 checked, into both envs; the plan starts
  sync_repo
  F=/root/fa; mkdir -p $F; cp .carry/fa[0-9]*/* $F/
  entry=$(cat $F/entry.path); mkdir -p $W/$entry
  cat $F/wheel.part* > $W/$entry/$(cat $F/wheel.name); cp $F/entry.json $W/$entry/
  (cd $W/$entry && sha256sum -c $F/wheel.sha256) || { echo "WHEEL DAMAGED"; exit 5; }
  for v in fsdp megatron; do
    $P/bundle/.tool/bin/uv pip install --offline --no-deps --python $REPO/.venv-verl-0.9-$v/bin/python \
        $W/$entry/*.whl 2>&1 | tail -1
  done
  (cd $REPO && setsid nohup bash $SELF plan < /dev/null > $R/plan.log 2>&1 &)
  cat $R/build.log; tail -2 $R/megatron-build.out; held ;;
plan)     # on the node, by itself
  todo="qwen3-moe qwen2 qwen3"
  echo "A $(date +%s)"
  gpu_tests gpu-tests-fsdp $FSDP
  for family in $todo; do
    [ -f $R/megatron-build.done ] && break
    run_named thorough-$family "$(verify_cmd thorough-$family --thorough --only verl --family $family)"
    todo=${todo#$family}; todo=${todo# }
  done
  while [ ! -f $R/megatron-build.done ]; do sleep 3; done
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  gpu_tests gpu-tests-megatron $MEGATRON
  echo "C $(date +%s) fsdp thorough left: $todo"
  for family in $todo; do
    run_named thorough-$family "$(verify_cmd thorough-$family --thorough --only verl --family $family)"
  done
  for family in qwen3-moe qwen2 qwen3; do
    run_named megatron-thorough-$family \
      "$(verify_cmd megatron-thorough-$family --variant megatron --thorough --only verl --family $family)"
  done
  echo "end $(date +%s)" ;;
wait)     # $1 = seconds at most, until the plan ends; each finished run's files come back as one .tgz
  t0=$(date +%s)
  while ! grep -q '^end' $R/plan.log 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 3; done
  cat $R/plan.log
  for o in $(ls $R/*.out 2>/dev/null); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "^(FAIL|PASS|fail|warn) |verl/trainer/|passed|failed|static checks|Error" $o | cut -c1-260 | tail -14
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"; cp $R/install-*.txt "$OUT/" 2>/dev/null
  ls "$OUT"; nvidia-smi --query-gpu=memory.used --format=csv,noheader; held ;;
esac
