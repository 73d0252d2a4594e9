# GPU visit D (one H100 or H200): the verl-0.9 bundle of the fsdp and sglang variants (`--without flash-attn`: its
# wheel was still compiling on the CPU machine, 2 cores, PyPI's CUDA 13.0 nvcc, sm_90, when the parts started) carried
# in parts; both envs installed offline by the bundle's bootstrap into fresh venvs; the flash-attn wheel carried last
# with its wheel-cache entry and installed into each env by `verlenv build flash-attn --wheelhouse` (a cache hit: the
# same torch, CUDA, Python, ABI and arch); then, by the bundle's own `nox -s verify-h100`: the fsdp families side by
# side (fast) with the test suite's GPU tests beside them, SGLang's trainer, the two published configs shrunk
# (--model-config), and what time is left --thorough (alone on the GPU: vLLM sizes its KV cache from free memory).
# GPU memory is sampled every 2 s. One `run` call per step: bash docs/verification/2026-11-26-visit-d-verl-0.9.sh STEP
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; mkdir -p $R $P
NOX=$P/bundle/.tool/bin/nox; VERLENV=$P/bundle/.tool/bin/verlenv; W=/root/wheelhouse
step=$1; shift

sync_repo() {  # this call's working tree onto /root/repo (the envs under it stay)
  [ "$(pwd -P)" = "$REPO" ] && return
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}

held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }

part() {  # $1 = how many parts $P must hold after this call (each call carries one, under .carry/b09.parts/)
  cp -n .carry/b09.parts/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}

bg() {  # $1 = name, rest = command: run in its own session; $R/NAME.out, $R/NAME.done (exit code, wall)
  local name=$1; shift
  setsid nohup bash -c "t=\$(date +%s); cd $REPO && $* > $R/$name.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/$name.done" < /dev/null > /dev/null 2>&1 &
  echo "started $name"
}

gpu() { nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100; }

verify_nox() {  # $1 = name, rest = verify options: `nox -s verify-h100` offline from the bundle's tools
  local name=$1; shift
  bg "$name" "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu) --report $R/$name.json --markdown $R/$name.md $*"
}

boot() {  # $1 = variant: the bundle's bootstrap, offline, into a fresh venv
  local v=$1 t; t=$(date +%s)
  (cd $REPO && PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant $v --prefix $REPO/.venv-verl-0.9-$v > $R/install-$v.txt 2>&1)
  echo "install $v: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install-$v.txt
}

case $step in
start)    # machine facts, the GPU memory sampler, the parts' index and the first part
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  df -h / | tail -1
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
  part 1 ;;
part)     # $1 = parts expected after this one
  part "$1" ;;
install)  # $1 = the last part's number: fsdp's env (its bootstrap joins the parts), the parts deleted (disk), sglang's env
  part "$1"
  sync_repo
  boot fsdp
  rm -f $P/bundle.tar.part*
  boot sglang
  df -h / | tail -1; held ;;
wheel)    # flash-attn's wheel and cache entry (under .carry/fa09/, in pieces) into the wheel cache, then into each env
          # (a cache hit); the fsdp families and the GPU tests start
  sync_repo
  F=/root/fa09; mkdir -p $F; cp .carry/fa09/* $F/  # the pieces of earlier calls (step piece) are there already
  entry=$(cat $F/entry.path); mkdir -p $W/$entry
  cat $F/wheel.part* > $W/$entry/$(cat $F/wheel.name); cp $F/entry.json $W/$entry/
  (cd $W/$entry && sha256sum -c $F/wheel.sha256) || { echo "WHEEL DAMAGED"; exit 5; }
  # `verlenv build flash-attn --bundle $P/bundle --wheelhouse $W` refused: it wants the source even for a cache hit,
  # and this bundle carries none. So the checked wheel goes in by the bundle's uv (what ran on the machine).
  for v in fsdp sglang; do
    $P/bundle/.tool/bin/uv pip install --offline --no-deps --python $REPO/.venv-verl-0.9-$v/bin/python $W/$entry/*.whl 2>&1 | tail -1
  done
  # The device time left (this machine counted its held time in full: about 5 minutes when the wheel arrived)
  # takes one round at once: the three text families the fsdp variant had not run in verify (llama has, qwen2.5-vl
  # is the known verl#7899) and SGLang's trainer.
  verify_nox fsdp-families --family qwen2 --family qwen3 --family qwen3-moe
  verify_nox sglang-llama --variant sglang --family llama
  held ;;
piece)    # one piece of flash-attn's wheel kept for the wheel step
  mkdir -p /root/fa09; cp .carry/fa09/* /root/fa09/; ls /root/fa09; held ;;
run)      # $1 = name, rest = verify options
  sync_repo; verify_nox "$@"; held ;;
tests)    # the sglang env's GPU tests
  sync_repo
  bg gpu-tests-sglang "PYTHONPATH=$REPO/src $REPO/.venv-verl-0.9-sglang/bin/python -m pytest -m gpu -v -p no:cacheprovider tests/test_check_sglang.py"
  held ;;
wait)     # $1 = seconds at most, until every started run is done; each finished run's files come back as one .tgz
  t0=$(date +%s)
  while [ "$(ls $R/*.out 2>/dev/null | wc -l)" -gt "$(ls $R/*.done 2>/dev/null | wc -l)" ] \
        && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 3; done
  for o in $(ls $R/*.out); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "^(FAIL|PASS|fail|warn) |verl/trainer/|passed|failed" $o | cut -c1-260 | tail -12
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"; tar -C $R -czf "$OUT/installs.tgz" $(cd $R && ls install-*)
  ls "$OUT"; nvidia-smi --query-gpu=memory.used --format=csv,noheader; held ;;
esac
