# GPU visit M (one H100 or H200): visit L's plan on its base route. The fsdp bundle less what the node's torch env has
# at the locked version (`verlenv bundle --stack verl-0.9 --variant fsdp --gpu h100 --wheelhouse <cache> --base
# docs/verification/2026-12-05-h100-node-pip-freeze.txt --split 50MiB`: 202 files, 1879.9 MiB, 38 parts, carried as
# .carry/bNNNN; flash-attn's sm_90 and causal-conv1d's wheels from the CPU machine's cache), installed by the bundle's
# bootstrap into the node's own torch env (`--python /opt/torch/.venv/bin/python3`), then the lean plan: the trainer
# check of qwen3.5, qwen3-next and deepseek-v3 with flash-attn's kernel checks beside it, then `--thorough` per family
# one after the other as long as the machine is held. The megatron re-runs are not on this route (one env on the node).
# The steps are visit L's (2026-12-05-visit-l-verl-0.9.sh, its header says what each does); new here: the GPU memory
# sampler starts with the first part, since the base route has no `start`.
# One `run` call per step: bash docs/verification/2026-12-06-visit-m-verl-0.9.sh STEP [ARG]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; W=/root/wheelhouse; mkdir -p $R $P $W
NOX=$P/bundle/.tool/bin/nox
FSDP=$REPO/.venv-verl-0.9-fsdp; MEGATRON=$REPO/.venv-verl-0.9-megatron
# The base route (install-base): the fsdp variant installed into the node's own torch env, which the bundle leaves
# its 76 distributions at the locked version to (`--base` the node's pip freeze)
BASE_ENV=/opt/torch/.venv; [ -f $R/base ] && FSDP=$BASE_ENV
SELF=docs/verification/2026-12-06-visit-m-verl-0.9.sh
# gpt-oss is left out: vLLM 0.24.0 cannot load it for RL (visit K; the row's known issue).
FSDP_A="qwen3.5 qwen3-next deepseek-v3"; FSDP_B="qwen3.5-moe qwen3-vl glm4-moe"
MEGATRON_AGAIN="qwen3.5 qwen3.5-moe qwen3-next deepseek-v3"
CONFIGS="Qwen3-Next-80B-A3B-Instruct"
THOROUGH="qwen3.5 qwen3-next deepseek-v3 qwen3-vl glm4-moe qwen3.5-moe"  # in this order, as long as the machine is held
step=$1; shift
sync_repo() {  # this call's working tree onto /root/repo (the envs under it stay)
  [ "$(pwd -P)" = "$REPO" ] && return
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -
}
sampler() {  # the GPU's memory every 2 s, whole and per process, into $R/gpumem.csv, for as long as the machine lives
  setsid nohup bash -c "while :; do t=\$(date +%s); nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sed \"s/^/\$t,total,/\"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed \"s/^/\$t,/\"; sleep 2; done >> $R/gpumem.csv" < /dev/null > /dev/null 2>&1 &
}
held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }
part() {  # $1 = how many parts $P must hold after this call (call N carries .carry/eNNNN/: part N, the index with 1)
  [ -f $R/t0 ] || { date +%s > $R/t0; sampler; }  # the base route starts with part 1, not start
  cp -n .carry/[efb][0-9]*/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
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
families() { for f in "$@"; do printf -- ' --family %s' "$f"; done; }
configs() { for c in $CONFIGS; do printf -- ' --model-config /root/published/%s/config.json' "$c"; done; }
verify_cmd() {  # $1 = name, rest = verify options: `nox -s verify-h100` offline from the bundle's tools
  local name=$1; shift
  echo "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu)" \
       "--report $R/$name.json --markdown $R/$name.md --timeout 1500 $*"
}

case $step in
start)    # machine facts, the GPU memory sampler, apex's build started in the background
  date +%s > $R/t0
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
  df -h / | tail -1; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'
  sync_repo
  python3 -m pip install -q --no-index --no-deps --target /root/site .carry/k0/pyelftools-*.whl
  cp .carry/k0/apex-*.tar /root/
  mkdir -p /root/fa; cp .carry/g1/* /root/fa/ 2>/dev/null  # fa-mini's first piece, if this call carries it
  sampler
  (cd $REPO && setsid nohup bash $SELF apex-build < /dev/null > $R/apex-build.log 2>&1 &)
  sleep 15; tail -5 $R/apex-build.out; held ;;
apex-build) # on the node, by itself: apex for sm_90, then for sm_90+sm_100 (h100 + b200), against the node's torch
  # (the stack's) and its full CUDA 13.0 toolkit, same jobs, one after the other; then each wheel's objects read back
  apex() {  # $1 = name, rest = --gpu options
    local name=$1; shift
    run_named $name "PYTHONPATH=$REPO/src:/root/site python3 -m verlenv build apex --stack verl-0.9" \
              "--variant megatron --python \$(which python3) $* --source /root/apex-*.tar --wheelhouse $W" \
              "--no-install --jobs 16 --json $R/$name.json"
  }
  apex apex-build --gpu h100
  # sm_90+sm_100 only once the megatron runs are done: its 16 compile jobs would slow the install, TE's build and the
  # trainers' start, and the device time is short
  while [ ! -f $R/megatron-again.done ]; do sleep 5; done
  apex apex-b200 --gpu h100 --gpu b200
  run_named apex-cubins "PYTHONPATH=$REPO/src:/root/site python3 $REPO/scripts/wheel_archs.py --json $R/apex-cubins.json" \
            "$R/apex-build.json $R/apex-b200.json" ;;
part)     # $1 = parts expected after this one
  part "$1"; tail -1 $R/apex-build.out | cut -c1-200 ;;
install)  # $1 = the last part's number, $2 = "lean" to leave megatron out: the fsdp env, then the plan by itself
  part "$1"
  sync_repo
  boot fsdp
  (cd $REPO && setsid nohup bash $SELF plan ${2:-} < /dev/null > $R/plan.log 2>&1 &)
  df -h / | tail -1; tail -2 $R/apex-build.out; held ;;
install-base) # $1 = the last part's number: the fsdp variant into the node's torch env (the base), then the lean plan
  # ($2 = again-chain: the DeltaNet families' re-run alone, for a second machine with little device time left)
  part "$1"
  sync_repo
  touch $R/base
  t=$(date +%s)
  (cd $REPO && PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --python $BASE_ENV/bin/python3 \
     > $R/install-fsdp.txt 2>&1)
  echo "install fsdp into $BASE_ENV: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install-fsdp.txt
  tail -6 $R/install-fsdp.txt
  (cd $REPO && setsid nohup bash $SELF ${2:-plan lean} < /dev/null > $R/plan.log 2>&1 &)
  df -h / | tail -1; held ;;
plan)     # on the node, by itself; $1 = "lean": the fsdp runs only (the device time left would not hold megatron's)
  echo "A $(date +%s)"
  [ "${1:-}" = lean ] || (boot megatron; rm -f $P/bundle.tar.part*
   $MEGATRON/bin/python tests/data/model-configs/published.py /root/published > /dev/null
   while [ ! -f $R/apex-build.done ]; do sleep 2; done
   run_named megatron-build "$P/bundle/.tool/bin/verlenv build transformer-engine-torch apex megatron-bridge" \
             "--bundle $P/bundle --stack verl-0.9 --variant megatron --python $MEGATRON/bin/python --gpu h100" \
             "--wheelhouse $W --jobs 16 --json $R/megatron-build.json"
   echo "B $(date +%s) build: $(cat $R/megatron-build.done)"
   run_named megatron-again "$(verify_cmd megatron-again --variant megatron --only verl --skip-package flash-attn \
             $(families $MEGATRON_AGAIN) $(configs))"
   echo "C $(date +%s) megatron: $(cat $R/megatron-again.done)") &
  # The fsdp variant whole (every static and kernel check, flash-attn's now too) with three families, and beside it
  # the trainer check alone with the other three: all six at once (one verify runs as many as the GPU's memory holds
  # for one run), so the device time the starts cost is spent on one round.
  # Lean: the trainer check alone, and flash-attn's own kernel checks (the one package new to the env) beside it.
  if [ "${1:-}" = lean ]; then
    run_named fsdp-flash-attn "$(verify_cmd fsdp-flash-attn --variant fsdp --python $FSDP/bin/python --only flash-attn)" &
    run_named fsdp-new "$(verify_cmd fsdp-new --variant fsdp --python $FSDP/bin/python --only verl $(families $FSDP_A))" &
  else
    run_named fsdp-new "$(verify_cmd fsdp-new --variant fsdp --python $FSDP/bin/python $(families $FSDP_A))" &
  fi
  # Lean on an H100 (80 GiB: three trainers a verify by its 24 GiB estimate): the first three families alone
  if [ "${1:-}" = lean ] && [ "$(gpu)" = h100 ]; then wait; else
    run_named fsdp-new-b "$(verify_cmd fsdp-new-b --variant fsdp --python $FSDP/bin/python --only verl $(families $FSDP_B))"
  fi
  wait
  echo "end $(date +%s)"
  # Then verl's and vLLM's own defaults (CUDA graphs, torch.compile, vLLM's memory sizing: 0.5 of the GPU, so one at
  # a time), one family a run so that each finished run's report comes back even if the machine is taken back mid-way.
  for f in $THOROUGH; do
    run_named fsdp-thorough-$f "$(verify_cmd fsdp-thorough-$f --variant fsdp --python $FSDP/bin/python --only verl --thorough --family $f)"
    echo "T $f $(date +%s) $(cat $R/fsdp-thorough-$f.done)"
  done
  echo "thorough end $(date +%s)" ;;
wait)     # $1 = seconds at most, until the plan ends; each finished run's files come back as one .tgz
  t0=$(date +%s); mark=${2:-end}  # $2: the plan.log line's first word that ends the wait (thorough: "thorough")
  while ! grep -q "^$mark" $R/plan.log 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 3; done
  cat $R/plan.log
  sent=0  # at most 8 files come back a call: 6 runs' archives, the memory samples, the installs' output
  for o in $(ls $R/*.out 2>/dev/null); do n=$(basename $o .out)
    echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "^(FAIL|PASS|fail|warn) |passed|failed|Error|ratio|median|\[[0-9]+/[0-9]+\]" $o | cut -c1-300 | tail -14
    [ -f $R/$n.done ] && [ ! -f $R/$n.sent ] && [ $sent -lt 6 ] && sent=$((sent + 1)) &&
      tar -C $R -czf "$OUT/$n.tgz" $(cd $R && ls -d $n.* | grep -v '\.sent$') && touch $R/$n.sent
  done
  for t in $R/*.trainer.log; do [ -f "$t" ] && echo "-- $(basename $t): $(grep -c . $t) lines; $(grep -E 'step:[0-9]+' -o $t | sort -u | tr '\n' ' ')"; done
  gzip -c $R/gpumem.csv > "$OUT/gpumem.csv.gz"
  [ -f $R/install-fsdp.txt ] && tar -C $R -czf "$OUT/installs.tgz" $(cd $R && ls install-*.txt)
  ls -la "$OUT"; nvidia-smi --query-gpu=memory.used --format=csv,noheader; held ;;
wheels)   # apex's sm_90+sm_100 cache entry back to the CPU machine, in pieces of 15 MiB (at most 64 MiB come back a
  # call), for `verlenv bundle --gpu b200` there with it in the wheelhouse
  fp=$(python3 -c "import json; print(json.load(open('$R/apex-b200.json'))[0]['fingerprint'])")
  tar -C $W -cf - apex/$fp | split -b 15M -d -a 1 - "$OUT/apex-b200-entry.tar."
  ls -la "$OUT"; held ;;
fa-mini)  # $1 = piece (1, 2): the fallback when the device time left cannot hold the bundle and its runs: flash-attn's
  # sm_90 wheel built on the CPU machine (sha256 c4355c1c…, two pieces in .carry/g1, .carry/g2), its kernel check
  # (every case against float64, throughput against torch's flash SDPA) with the node's torch 2.11.0+cu130, the stack's
  mkdir -p /root/fa; cp .carry/g$1/* /root/fa/; held
  [ "$1" = 2 ] || exit 0
  whl=/root/fa/flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl; cat /root/fa/fa.whl.* > $whl; sha256sum $whl
  python3 -V; python3 -m pip install -q --no-index --no-deps --target /root/fa/site $whl
  profile=$(python3 -c "import tomllib, json; g=tomllib.load(open('src/verlenv/data/gpus.toml','rb')); k='$(gpu)'
print(json.dumps({'key': k, 'arch': '9.0', 'fp8': True, 'thresholds': {**g['defaults']['thresholds'], **g[k]['thresholds']}}))")
  echo "$profile"
  (cd src/verlenv/verify/kernels && PYTHONPATH=/root/fa/site python3 check_flash_attn.py --out $OUT/fa-mini.json \
     --profile "$profile") 2>&1 | tail -30
  held ;;
freeze)   # the node's own Python packages, for `verlenv bundle --base FREEZE` (leave out what the node has at the
  # locked version): pip freeze of the node's python3, and where each distribution lives
  python3 -V; which python3; python3 -m pip freeze > "$OUT/host-freeze.txt"; wc -l < "$OUT/host-freeze.txt"
  python3 -m pip list -v --format json > "$OUT/host-pip-list.json" 2>/dev/null
  python3 -c 'import sys, site; print(sys.prefix, site.getsitepackages())'; df -h / | tail -1 ;;
again)    # after the fix of the check's CPU calibration (fla's gated RMSNorm on CPU tensors, found by this visit's first
  # round): the plan's thorough chain stopped (its running run goes on), the fixed tree synced, then by itself: the
  # trainer check of the two DeltaNet families again, then --thorough for those left
  kill $(pgrep -o -f "$SELF plan"); sleep 1; sync_repo  # the plan's shell only: its running verify goes on
  (cd $REPO && setsid nohup bash $SELF again-chain < /dev/null >> $R/plan.log 2>&1 &)
  sleep 2; tail -3 $R/plan.log; held ;;
again-chain)
  while pgrep -f "nox -s verify-h100" > /dev/null; do sleep 2; done
  for d in $(ls $R/*.out | sed 's/\.out$//'); do  # the stopped plan's last run: its verdict is in its report
    [ -f $d.done ] || echo "exit unknown (its plan's shell was stopped; the report has the verdict)" > $d.done; done
  echo "again $(date +%s)"
  # on an H200 (139 GiB: five trainers of the verify's 24 GiB estimate in one round) with the three families the fsdp
  # variant has never run beside them
  fams="qwen3.5 qwen3-next"; [ "$(gpu)" = h200 ] && fams="$fams qwen3.5-moe qwen3-vl glm4-moe"
  run_named fsdp-fix "$(verify_cmd fsdp-fix --variant fsdp --python $FSDP/bin/python --only verl $(families $fams))"
  echo "F $(date +%s) $(cat $R/fsdp-fix.done)"
  for f in qwen3.5 qwen3-next glm4-moe qwen3.5-moe; do
    [ -f $R/fsdp-thorough-$f.done ] && ! grep -q "^exit 1" $R/fsdp-thorough-$f.done && continue
    run_named fsdp-thorough2-$f "$(verify_cmd fsdp-thorough2-$f --variant fsdp --python $FSDP/bin/python --only verl --thorough --family $f)"
    echo "T2 $f $(date +%s) $(cat $R/fsdp-thorough2-$f.done)"
  done
  echo "again-end $(date +%s)" ;;
calib)    # when the device time left holds no bundle: the fixed CPU calibration with fla active, on the node's torch, with
  # the env's transformers 5.9.0 and fla 0.5.2 (.carry/n1), then the saved model on the GPU's fast path
  # (2026-12-06-visit-m-calibration.py)
  [ -f $R/t0 ] || date +%s > $R/t0
  python3 -m pip install -q --no-index --no-deps --target /root/site .carry/n1/*.whl
  PYTHONPATH=src:/root/site:src/verlenv/verify/kernels python3 docs/verification/2026-12-06-visit-m-calibration.py \
    $OUT/calibration.json 2>&1 | grep -v "Loading weights\|Writing model" | cut -c1-600 | tail -12
  held ;;
partial)  # the running trainers' logs as they stand (a run cut off by the device time still leaves its evidence)
  for t in $R/*.trainer.log $R/*.out; do [ -f "$t" ] && gzip -c "$t" > "$OUT/$(basename $t).gz"; done
  ls -la "$OUT"; held ;;
esac
