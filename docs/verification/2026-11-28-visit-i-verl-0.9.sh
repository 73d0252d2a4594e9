# GPU visit I (one H100 or H200): the suite's GPU tests as README says to run them, `nox -s tests -- -m gpu`, offline on
# the node from the bundle's own nox and test tools (`verlenv bundle --tests`), in the fsdp env, then in the megatron env
# once apex and TE's torch part are built on the node; then megatron `--thorough --only verl` for qwen2 and qwen3 (visit
# H did not reach them). The bundle: visit G's command plus --tests (362 files, 4689 MiB, 91 parts of 52 MiB, tar
# sha256 b4cbda75…). Both envs are installed by the bundle's bootstrap, offline; the CPU-built flash-attn wheel is
# carried last and sha256-checked; then the plan runs on the node by itself. The machine is given back 30 s after a
# call ends: issue each call the moment the previous one returns. GPU memory is sampled every 2 s.
# One `run` call per step: bash docs/verification/2026-11-28-visit-i-verl-0.9.sh STEP
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
FSDP=$REPO/.venv-verl-0.9-fsdp; MEGATRON=$REPO/.venv-verl-0.9-megatron
SELF=docs/verification/2026-11-28-visit-i-verl-0.9.sh
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
gpu_tests() {  # $1 = name, $2 = env: README's `nox -s tests -- -m gpu` with the bundle's nox, that env the tests' env;
  # then the vLLM usage-stats test (not marked gpu: it needs vLLM, not a GPU)
  local py=$2/bin/python
  run_named $1 "VERLENV_CLUSTER_ENV=$py $NOX -s tests -- -m gpu -v -p no:cacheprovider --junitxml=$R/$1.xml;" \
            "echo gpu tests exit \$?; VERLENV_CLUSTER_ENV=$py $NOX -s tests -- -v -p no:cacheprovider -n 0" \
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
install)  # $1 = the last part's number: both envs, the megatron build started, the parts deleted (disk)
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
  echo "A $(date +%s)"
  gpu_tests gpu-tests-fsdp $FSDP
  while [ ! -f $R/megatron-build.done ]; do sleep 3; done
  echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
  gpu_tests gpu-tests-megatron $MEGATRON
  echo "C $(date +%s)"
  for family in qwen2 qwen3; do
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
