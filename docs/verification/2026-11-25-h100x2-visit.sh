# GPU visit on nvidia-h100-x2 (2 x H100): the verl-0.9 bundle of both variants (fsdp + megatron, flash-attn built by the
# recipe on the CPU machine) carried in parts while apex and TE's torch part build there against the host's torch
# (2.11.0+cu130, the stack's); installed offline into two fresh venvs; then the project's own nox sessions, offline,
# from the bundle's tools. One `run` call per step: bash docs/verification/2026-11-25-h100x2-visit.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; mkdir -p $R $P
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
step=$1; shift

sync_repo() {  # this call's working tree onto /root/repo (the envs under it stay)
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}

part() {  # $1 = how many parts $P must hold after this call (each call carries one, under .carry/*.parts/)
  cp -n .carry/*.parts/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, held $(( $(date +%s) - $(cat $R/t0) )) s"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}

bg() {  # $1 = name, rest = command: run in its own session; $R/NAME.out, $R/NAME.done (exit code, wall)
  local name=$1; shift
  setsid nohup bash -c "t=\$(date +%s); cd $REPO && $* > $R/$name.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/$name.done" < /dev/null > /dev/null 2>&1 &
  echo "started $name"
}

verify_nox() {  # $1 = name, $2 = GPU(s), rest = verify options: `nox -s verify-h100` offline, on those GPUs only
  local name=$1 gpus=$2; shift 2
  bg "$name" "CUDA_VISIBLE_DEVICES=$gpus RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --report $R/$name.json --markdown $R/$name.md $*"
}

fresh() {  # R1, a fresh node: fsdp on GPU 0 and megatron on GPU 1 at once, the fast proof, each by `nox -s verify-h100`
  verify_nox fsdp-fresh 0
  verify_nox megatron-fresh 1 --variant megatron
}

case $step in
start)    # machine facts; apex and TE's torch part start building against the host's torch; the parts' index
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  nvidia-smi topo -m | head -4
  sync_repo
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/src/pyelftools-*.whl
  cp -r .carry/src/apex.git .carry/src/transformer_engine_torch-2.12.0.tar.gz /root/
  py=$(command -v python3)
  for b in "apex --source /root/apex.git" "transformer-engine-torch --source /root/transformer_engine_torch-2.12.0.tar.gz"; do
    n=${b%% *}
    bg "build-$n" "PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build $b --stack verl-0.9 --variant megatron --python $py --gpu h100 --jobs 16 --wheelhouse /root/wheelhouse --no-install --json $R/build-$n.json"
  done
  cp .carry/*.parts/SHA256SUMS .carry/*.parts/parts.json $P/; ls $P ;;
part)     # $1 = parts expected after this one
  part "$1" ;;
install)  # the last part; both envs from the one bundle, offline, fresh venvs; apex and TE from the wheel cache; R1
  part "$1"
  sync_repo; cd $REPO
  # The two envs at once (32 cores; unpacking is most of it): megatron's starts once fsdp's bootstrap has put the
  # parts together and unpacked the tools (.tool/.stamp appears only when both are complete).
  for v in fsdp megatron; do
    [ $v = megatron ] && for i in $(seq 120); do [ -f $P/bundle/.tool/.stamp ] && break; sleep 1; done
    ( t=$(date +%s)
      PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant $v --prefix $REPO/.venv-verl-0.9-$v > $R/install-$v.txt 2>&1
      echo "install $v: exit $? in $(( $(date +%s) - t )) s" >> $R/install-$v.txt ) &
  done
  wait; tail -n 5 $R/install-*.txt
  for i in $(seq 60); do [ -f $R/build-apex.done ] && [ -f $R/build-transformer-engine-torch.done ] && break; sleep 5; done
  cat $R/build-*.done; tail -n 2 $R/build-*.out
  for b in "apex --source /root/apex.git" "transformer-engine-torch --source /root/transformer_engine_torch-2.12.0.tar.gz"; do
    $VERLENV build $b --stack verl-0.9 --variant megatron --python $REPO/.venv-verl-0.9-megatron/bin/python \
      --gpu h100 --wheelhouse /root/wheelhouse 2>&1 | tail -3
  done
  echo "held $(( $(date +%s) - $(cat $R/t0) )) s"
  fresh ;;
fresh)    # a fresh node's runs, again (after a fix)
  sync_repo; fresh ;;
warm)     # R2, the same node again, caches warm: the same two runs
  sync_repo
  verify_nox fsdp-warm 0
  verify_nox megatron-warm 1 --variant megatron ;;
thorough) # R3, verl's trainer with verl's defaults (CUDA graphs, torch.compile), each variant on its own GPU
  sync_repo
  verify_nox fsdp-thorough 0 --thorough --only verl
  verify_nox megatron-thorough 1 --variant megatron --thorough --only verl ;;
run)      # $1 = name, $2 = GPUs, rest = verify options (e.g. --rollout-tp 2 on GPUs 0,1)
  sync_repo; verify_nox "$@" ;;
ray2)     # two Ray nodes on this host (127.0.0.1 with GPU 0, 127.0.0.2 with GPU 1), verify --ray over them; $@: options
  # (the second attempt, after the fix of the first's failure, ran with the first's files moved to $R/old/ and
  # waited on ray2.done itself: see the README of this folder)
  sync_repo
  bg ray2 "VERLENV_NODES=per-gpu VERLENV=$VERLENV RAY_TMPDIR=/tmp/ray-c bash scripts/verify-cluster-one-host.sh $REPO/.venv-verl-0.9-fsdp/bin/python $R/ray2.json $*" ;;
wait)     # $1 = seconds at most, until every started run is done; then each run's files come back as one .tgz
  t0=$(date +%s)
  while [ "$(ls $R/*.out 2>/dev/null | grep -v build- | wc -l)" -gt "$(ls $R/*.done 2>/dev/null | grep -v build- | wc -l)" ] \
        && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 5; done
  for o in $(ls $R/*.out | grep -v build-); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"; grep -E "^  (kernel|static)|PASS|FAIL|verify --ray" $o | tail -8
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  ls -la "$OUT"; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; uptime
  echo "held $(( $(date +%s) - $(cat $R/t0) )) s" ;;
files)    # $@ = files under $R to return (build records, install logs)
  for f in "$@"; do cp $R/$f "$OUT/"; done; ls -la "$OUT" ;;
esac
