# GPU visit A on nvidia-h200 (one H200): the verl-0.9 fsdp bundle (no source-built wheels) carried in parts while
# flash-attn (sm_90) and apex build by the recipes against the host's torch (2.11.0+cu130, the stack's); the env
# installed offline by the bundle's bootstrap; `nox -s verify-h100` (the bundle's nox) without flash-attn and verl's
# trainer meanwhile; once flash-attn is built, the trainer check for every model family side by side; the wheels come
# back in pieces of 15 MiB. One `run` call per step: bash docs/verification/2026-11-26-h200-visit-a.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
ENV=$REPO/.venv-verl-0.9-fsdp
step=$1; shift

sync_repo() {  # this call's working tree onto /root/repo (the env under it stays)
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}

held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }

part() {  # $1 = how many parts $P must hold after this call (each call carries one, under .carry/*.parts/)
  cp -n .carry/*.parts/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}

bg() {  # $1 = name, rest = command: run in its own session; $R/NAME.out, $R/NAME.done (exit code, wall)
  local name=$1; shift
  setsid nohup bash -c "t=\$(date +%s); cd $REPO && $* > $R/$name.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/$name.done" < /dev/null > /dev/null 2>&1 &
  echo "started $name"
}

verify_nox() {  # $1 = name, rest = verify options: `nox -s verify-h100` offline from the bundle's tools
  local name=$1; shift
  bg "$name" "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --report $R/$name.json --markdown $R/$name.md $*"
}

case $step in
start)    # machine facts; flash-attn and apex start building against the host's torch; the parts' index
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  gcc --version | head -1; cat /etc/os-release | grep PRETTY
  sync_repo
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/src/pyelftools-*.whl
  cp -r .carry/src/apex.git .carry/src/flash_attn-2.8.3.post2.tar.gz /root/
  py=$(command -v python3)
  bg build-flash-attn "PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build flash-attn --source /root/flash_attn-2.8.3.post2.tar.gz --stack verl-0.9 --python $py --gpu h100 --jobs 16 --wheelhouse $W --no-install --json $R/build-flash-attn.json"
  # apex beside it, at low priority: flash-attn is the long pole.
  bg build-apex "PYTHONPATH=$REPO/src:/root/site nice -n 15 python3 -m verlenv build apex --source /root/apex.git --stack verl-0.9 --variant megatron --python $py --gpu h100 --jobs 4 --wheelhouse $W --no-install --json $R/build-apex.json"
  cp .carry/*.parts/SHA256SUMS .carry/*.parts/parts.json $P/; ls $P | head -3; held ;;
part)     # $1 = parts expected after this one
  part "$1" ;;
install)  # the last part; the env from the bundle, offline, a fresh venv; then verify without flash-attn and the trainer
  part "$1"
  sync_repo; cd $REPO
  t=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant fsdp --prefix $ENV > $R/install-fsdp.txt 2>&1
  echo "install fsdp: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install-fsdp.txt; tail -n 4 $R/install-fsdp.txt
  tail -n 1 $R/build-*.out
  verify_nox nofa --skip-package flash-attn --skip-package verl
  held ;;
families) # flash-attn from the host's build into the env (the wheel cache), then verl's trainer for every family
  sync_repo
  for i in $(seq "${1:-1}"); do [ -f $R/build-flash-attn.done ] && break; sleep 5; done
  cat $R/build-flash-attn.done 2>/dev/null || { tail -n 2 $R/build-flash-attn.out; held; exit 4; }
  $VERLENV build flash-attn --source /root/flash_attn-2.8.3.post2.tar.gz --stack verl-0.9 --python $ENV/bin/python --gpu h100 --wheelhouse $W 2>&1 | tail -3
  verify_nox families --only verl --family all
  held ;;
run)      # $1 = name, rest = verify options
  sync_repo; verify_nox "$@"; held ;;
wait)     # $1 = seconds at most, until every started run is done; then each run's files come back as one .tgz
  t0=$(date +%s)
  while [ "$(ls $R/*.out 2>/dev/null | grep -v build- | wc -l)" -gt "$(ls $R/*.done 2>/dev/null | grep -v build- | wc -l)" ] \
        && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 5; done
  for o in $(ls $R/*.out | grep -v build-); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"; grep -E "^  (kernel|static)|PASS|FAIL" $o | tail -8
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  tail -n 1 $R/build-*.out; cat $R/build-*.done 2>/dev/null
  ls -la "$OUT"; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; uptime; held ;;
wheel)    # $1 = package: its cached wheel and build record back in pieces of 15 MiB (sha256 of the whole listed)
  whl=$(ls $W/$1/*/*.whl | head -1); echo "$whl"; sha256sum "$whl" | tee "$OUT/$1.sha256"
  echo "$whl" | sed "s|$W/||" >> "$OUT/$1.sha256"
  split -b 15M -d "$whl" "$OUT/$1.whl.part"; cp $R/build-$1.json $R/build-$1.out "$OUT/" 2>/dev/null
  gzip -f "$OUT/build-$1.out" 2>/dev/null; ls -la "$OUT"; held ;;
esac
