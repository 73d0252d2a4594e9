# GPU visit B on nvidia-h200 (one H200), visit A's plan after that machine was lost mid-visit: the same verl-0.9
# bundle (fsdp, megatron, sglang; Megatron-Bridge's wheel in it, flash-attn, apex and TE's torch part as verified
# sources) carried in parts while flash-attn (sm_90, 12 jobs) and apex (4 jobs) build by their recipes against the
# host's torch (2.11.0+cu130, the stack's) from copies of their sources carried in the first call; the three envs
# installed offline by the bundle's bootstrap; TE's torch part built on the node from the bundle's sources. The runs
# are staged by what they need: SGLang's engine first; the megatron families while flash-attn still builds (verl
# 0.9.1's Megatron engine path does not import flash_attn: `--skip-package flash-attn`, said in its report); the fsdp
# families and SGLang's trainer once flash-attn is installed. GPU memory is sampled every 2 s for the whole visit.
# One `run` call per step: bash docs/verification/2026-11-26-h200-visit-b.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv
VARIANTS="fsdp megatron sglang"
step=$1; shift

sync_repo() {  # this call's working tree onto /root/repo (the envs under it stay); nothing from /root/repo itself
  [ "$(pwd -P)" = "$REPO" ] && return
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
  # On an H200 its own profile (the session is verify-h100: a later --gpu wins).
  bg "$name" "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu h200 --report $R/$name.json --markdown $R/$name.md $*"
}

host_build() {  # $1 = package, rest = its build options: against the host's torch, into the host's wheel cache
  local name=$1; shift
  bg "build-$name" "PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build $name --stack verl-0.9 --python $(command -v python3) --gpu h100 --wheelhouse $W --no-install --json $R/build-$name.json $*"
}

wait_for() {  # $1 = seconds at most, rest = names whose .done must exist
  local limit=$1; shift; local t0; t0=$(date +%s)
  for n in "$@"; do while [ ! -f $R/$n.done ] && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do sleep 3; done; done
}

case $step in
start)    # machine facts; flash-attn and apex start building against the host's torch; the parts' index
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  gcc --version | head -1; grep PRETTY /etc/os-release; ls /usr/lib/x86_64-linux-gnu/libnuma.so.1 2>&1
  sync_repo
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/src/*.whl
  cp .carry/src/flash_attn-2.8.3.post2.tar.gz .carry/src/apex-*.tar /root/
  # GPU memory in use, total and per process, every 2 s: what trainers side by side really take.
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
  host_build flash-attn --source /root/flash_attn-2.8.3.post2.tar.gz --jobs 12
  host_build apex --variant megatron --source "$(ls /root/apex-*.tar)" --jobs 4
  cp .carry/*.parts/SHA256SUMS .carry/*.parts/parts.json $P/; ls $P | head -3; held ;;
part)     # $1 = parts expected after this one
  part "$1" ;;
install)  # the last part; the three envs from the one bundle, offline, fresh venvs: fsdp's first (its bootstrap joins
          # the parts and unpacks the tools), then the other two at once
  part "$1"
  sync_repo; cd $REPO
  boot() {
    local v=$1 t; t=$(date +%s)
    PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant $v --prefix $REPO/.venv-verl-0.9-$v > $R/install-$v.txt 2>&1
    echo "install $v: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install-$v.txt
  }
  boot fsdp
  for v in megatron sglang; do boot $v & done; wait
  # visit A's sglang install failed once (uv exit -6) beside the megatron one; again alone if so
  grep -q "install sglang: exit 0" $R/install-sglang.txt || boot sglang
  # apex and TE's torch part against the megatron env, from the bundle's verified sources (no index), at low priority
  # beside flash-attn's build; installed into that env when built.
  # TE's torch part against the megatron env from the bundle's verified source; apex: the host's build, a cache hit.
  bg build-megatron "$VERLENV build transformer-engine-torch apex --bundle $P/bundle --stack verl-0.9 --variant megatron --python $REPO/.venv-verl-0.9-megatron/bin/python --gpu h100 --jobs 4 --wheelhouse $W --json $R/build-megatron.json"
  tail -n 1 $R/build-*.out; held ;;
early)    # before flash-attn: SGLang's own engine generating on the GPU (its JIT kernels built with this host's gcc)
  sync_repo
  verify_nox sglang-engine --variant sglang --only sglang
  held ;;
gpu-tests) # the test suite's GPU tests (-m gpu), in the envs they are for (the bundle's nox has no test session: the
          # tests install their tools from PyPI; the envs carry pytest)
  sync_repo
  bg gpu-tests "PYTHONPATH=$REPO/src $REPO/.venv-verl-0.9-fsdp/bin/python -m pytest -m gpu -v -p no:cacheprovider tests/test_kernel_scripts.py; PYTHONPATH=$REPO/src $REPO/.venv-verl-0.9-sglang/bin/python -m pytest -m gpu -v -p no:cacheprovider tests/test_check_sglang.py"
  held ;;
wheels)   # the source-built wheels from the host's cache into each env that needs them (verlenv build: cache hits)
  sync_repo
  wait_for "${1:-1}" build-flash-attn
  cat $R/build-flash-attn.done 2>/dev/null || { tail -n 2 $R/build-flash-attn.out; held; exit 4; }
  for v in $VARIANTS; do  # the host's build is a cache hit for each env (same torch, CUDA, Python, ABI, arch)
    $VERLENV build flash-attn --bundle $P/bundle --stack verl-0.9 --variant $v --python $REPO/.venv-verl-0.9-$v/bin/python --gpu h100 --wheelhouse $W 2>&1 | tail -1
  done
  wait_for 300 build-megatron; cat $R/build-megatron.done; tail -n 3 $R/build-megatron.out
  held ;;
megatron) # the megatron families once TE's torch part and apex are in that env, before flash-attn is
  sync_repo
  wait_for "${1:-1}" build-megatron
  cat $R/build-megatron.done 2>/dev/null || { tail -n 3 $R/build-megatron.out; held; exit 4; }
  verify_nox megatron-families --variant megatron --family all --skip-package flash-attn
  held ;;
final)    # flash-attn in every env (wheels), its wheel back in pieces; then the fsdp families, SGLang's trainer, GPU tests
  sync_repo
  wait_for "${1:-1}" build-flash-attn
  cat $R/build-flash-attn.done 2>/dev/null || { tail -n 2 $R/build-flash-attn.out; held; exit 4; }
  for v in $VARIANTS; do
    $VERLENV build flash-attn --bundle $P/bundle --stack verl-0.9 --variant $v --python $REPO/.venv-verl-0.9-$v/bin/python --gpu h100 --wheelhouse $W 2>&1 | tail -1
  done
  verify_nox sglang-llama --variant sglang --family llama
  verify_nox fsdp-families --family all
  bg gpu-tests "PYTHONPATH=$REPO/src $REPO/.venv-verl-0.9-fsdp/bin/python -m pytest -m gpu -v -p no:cacheprovider tests/test_kernel_scripts.py; PYTHONPATH=$REPO/src $REPO/.venv-verl-0.9-sglang/bin/python -m pytest -m gpu -v -p no:cacheprovider tests/test_check_sglang.py"
  whl=$(ls $W/flash-attn/*/*.whl | head -1); echo "$whl"; sha256sum "$whl" | tee "$OUT/flash-attn.sha256"
  echo "$whl" | sed "s|$W/||" >> "$OUT/flash-attn.sha256"
  split -b 15M -d "$whl" "$OUT/flash-attn.whl.part"; cp $R/build-flash-attn.json "$OUT/" 2>/dev/null
  ls -la "$OUT"; held ;;
auto)     # after the disk filled (the parts, the joined bundle, uv's cache and three envs: 64 GiB) and one flash-attn
          # object failed: a watcher resumes flash-attn's kept tree, installs it, starts the fsdp families and SGLang's
          # trainer; the megatron families (two) start when TE's torch part and apex are in that env
  sync_repo
  bg auto-fa "while [ ! -f $R/build-flash-attn.done ]; do sleep 2; done; grep -q '^exit 0' $R/build-flash-attn.done || { mv $R/build-flash-attn.done $R/build-flash-attn.first-done; PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build flash-attn --stack verl-0.9 --python \$(command -v python3) --gpu h100 --wheelhouse $W --no-install --json $R/build-flash-attn.json --source /root/flash_attn-2.8.3.post2.tar.gz --jobs 16 > $R/build-flash-attn.resumed.out 2>&1; echo \"exit \$?\" > $R/build-flash-attn.done; }; for v in $VARIANTS; do $VERLENV build flash-attn --bundle $P/bundle --stack verl-0.9 --variant \$v --python $REPO/.venv-verl-0.9-\$v/bin/python --gpu h100 --wheelhouse $W 2>&1 | tail -1; done; bash docs/verification/2026-11-26-h200-visit-b.sh run sglang-llama --variant sglang --family llama; bash docs/verification/2026-11-26-h200-visit-b.sh run fsdp-families --family all"
  bg auto-megatron "while [ ! -f $R/build-megatron.done ]; do sleep 2; done; cat $R/build-megatron.done; bash docs/verification/2026-11-26-h200-visit-b.sh run megatron-families --variant megatron --family qwen3-moe --family qwen2.5-vl --skip-package flash-attn"
  held ;;
run)      # $1 = name, rest = verify options
  sync_repo; verify_nox "$@"; held ;;
wait)     # $1 = seconds at most, until every started run is done; then each finished run's files come back as one .tgz
  t0=$(date +%s)
  while [ "$(ls $R/*.out 2>/dev/null | grep -v build- | wc -l)" -gt "$(ls $R/*.done 2>/dev/null | grep -v build- | wc -l)" ] \
        && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 5; done
  for o in $(ls $R/*.out | grep -v build-); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"; grep -E "^  (kernel|static)|PASS|FAIL|passed|failed" $o | tail -8
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  tail -n 1 $R/build-*.out; cat $R/build-*.done 2>/dev/null
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"; tar -C $R -czf "$OUT/builds.tgz" $(cd $R && ls build-* install-*)
  ls -la "$OUT"; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; uptime; held ;;
wheel)    # $1 = package: its cached wheel and build record back in pieces of 15 MiB (sha256 of the whole listed)
  whl=$(ls $W/$1/*/*.whl | head -1); echo "$whl"; sha256sum "$whl" | tee "$OUT/$1.sha256"
  echo "$whl" | sed "s|$W/||" >> "$OUT/$1.sha256"
  split -b 15M -d "$whl" "$OUT/$1.whl.part"; cp $R/build-$1.json "$OUT/" 2>/dev/null
  gzip -c $R/build-$1.out > "$OUT/build-$1.out.gz" 2>/dev/null; ls -la "$OUT"; held ;;
esac
