# The helpers and the common steps of a GPU visit's script (visit O on), sourced by it from the repo root after it set
# SELF (the visit's script) and, where it differs from the defaults below, R (results), P (parts), REPO (the synced
# tree), W (wheelhouse), ENV (the node's torch env), NOX, VARIANT (the bundle's variant) and CONFIGS (published configs
# for --model-config). The visit's script keeps its own `plan` step and hands every other one to visit_step. Visits
# E-N carry their own copies, as they ran; visits O-R set all of these themselves.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    RAY_USAGE_STATS_ENABLED=0
: "${R:=/root/visit}" "${P:=/root/parts}" "${REPO:=/root/repo}" "${W:=/root/wheelhouse}" "${VARIANT:=megatron}"
: "${ENV:=/opt/torch/.venv}"  # the node's torch env: the bundle leaves its distributions at the locked version to it
: "${NOX:=$P/bundle/.tool/bin/nox}" "${CONFIGS:=}"
mkdir -p "$R" "$P" "$W"
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
thorough_runs() {  # $1 = "variant:family ...", in that order; $2 = verify options for every run (e.g. a --skip-package)
  local t v f
  for t in $1; do v=${t%%:*}; f=${t#*:}
    run_named thorough-$v-$f "$(verify_cmd thorough-$v-$f --variant $v --only verl ${2:-} --thorough --family $f)"
    echo "T $v $f $(date +%s) $(cat $R/thorough-$v-$f.done)"
  done
}
cells() {  # $1 = variant: the GDN MoE families ($GDN_MOE) and the published Qwen3-Next config, side by side;
  # $SKIP: verify options for what the bundle left out
  run_named $1-gdn "$(verify_cmd $1-gdn --variant $1 --only verl $SKIP $(families $GDN_MOE) \
    $(CONFIGS=Qwen3-Next-80B-A3B-Instruct configs))"
  echo "M $1 gdn $(date +%s) $(cat $R/$1-gdn.done)"
}
all_families() {  # $1 = variant: --family all; $SKIP as for cells
  run_named $1-all "$(verify_cmd $1-all --variant $1 --only verl $SKIP --family all)"
  echo "M $1 all $(date +%s) $(cat $R/$1-all.done)"
}
agreement_runs() {  # $1 = families: benchmarks/gdn_algorithm_agreement.py on the GPU, calibrated and as drawn
  local agree="PYTHONPATH=src $ENV/bin/python benchmarks/gdn_algorithm_agreement.py --device cuda --seeds 2"
  run_named agreement "$agree $(families $1) --out $R/agreement.json"
  run_named agreement-drawn "$agree $(families $1) --routed-influence none --out $R/agreement-drawn.json"
}
fsdp_all() {  # --family all and three published configs on the fsdp actor, one run (visits W, X); $1: the verify
  # options for an env without flash-attn (sdpa attention), none with it; $SKIP as for cells
  CONFIGS="Qwen3-Next-80B-A3B-Instruct DeepSeek-V3 GLM-4.5"
  run_named fsdp-all "$(verify_cmd fsdp-all --variant fsdp --only verl $SKIP --family all $(configs) ${1:-})"
  echo "M fsdp all $(date +%s) $(cat $R/fsdp-all.done)"
}
without_fsdp() { printf '%s\n' $1 | grep -v '^fsdp:' | tr '\n' ' '; }  # $1 = "variant:family ...", fsdp's taken out
published_config_runs() {  # the published DeepSeek-V3 (fsdp, unless FSDP=no) and GLM-4.5 (megatron) configs side
  # by side; mark `end`
  [ "${FSDP:-yes}" = yes ] &&
    run_named fsdp-config "$(verify_cmd fsdp-config --variant fsdp --only verl $(CONFIGS=DeepSeek-V3 configs))" &
  run_named megatron-config "$(verify_cmd megatron-config --variant megatron --only verl $(CONFIGS=GLM-4.5 configs))" &
  wait
  echo "end $(date +%s) fsdp-config: $(cat $R/fsdp-config.done 2> /dev/null || echo skipped)" \
       "megatron-config: $(cat $R/megatron-config.done)"
}
aot_install() {  # the carried wheelhouse's flashinfer-jit-cache into the env: a cache hit, or nothing (60 s at most)
  [ -d $REPO/.verlenv/wheelhouse/flashinfer-jit-cache ] || { echo "aot: no wheelhouse entry carried"; return; }
  (cd $REPO && PATH=$P/bundle/.tool/bin:$PATH PYTHONPATH=src:$P/bundle/.tool/site timeout 60 python3 -m verlenv build \
     flashinfer-jit-cache --python $ENV/bin/python --archs 9.0 --wheelhouse .verlenv/wheelhouse) > $R/aot.out 2>&1
  echo "aot exit $? $(date +%s) $(grep -o 'cache hit[^(]*' $R/aot.out | head -1)"
  grep -q "installed and imported" $R/aot.out || return 0
  # The installed module on the GPU, against the float64 gated delta rule (as visit S checked the script's build).
  run_named aot-check "timeout 180 $ENV/bin/python benchmarks/flashinfer_gdn_aot.py --out $R/aot-check.json"
  echo "K $(date +%s) aot-check: $(cat $R/aot-check.done)"
}
plan_start() {  # a plan's first steps: FSDP and SKIP from whether the env has flash-attn (a bundle without its wheel),
  # the carried kernel cache, the published configs under /root/published
  $ENV/bin/python -c "import torch, flash_attn_2_cuda" 2> /dev/null || { FSDP=no; SKIP="--skip-package flash-attn"; }
  echo "A $(date +%s) fsdp: $FSDP"
  aot_install
  $ENV/bin/python tests/data/model-configs/published.py /root/published > /dev/null
}
configs() { for c in $CONFIGS; do printf -- ' --model-config /root/published/%s/config.json' "$c"; done; }
verify_cmd() {  # $1 = name, rest = verify options: `nox -s verify-<gpu>` offline from the bundle's tools, in the env
  local name=$1; shift
  echo "RAY_TMPDIR=/tmp/ray-$name VERLENV_TRAINER_LOG=$R/$name.trainer.log $NOX -s verify-h100 -- --gpu $(gpu)" \
       "--python $ENV/bin/python --report $R/$name.json --markdown $R/$name.md --timeout 1500 $*"
}

visit_step() {  # $1 = the step, rest = its arguments
  local step=$1; shift
  case $step in
part)     # $1 = parts expected after this one
  part "$1" ;;
install-base) # $1 = the last part's number: the bundle's variant into the node's torch env, then the plan by itself
  part "$1"
  sync_repo
  t=$(date +%s)
  (cd $REPO && PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant $VARIANT --python $ENV/bin/python3 \
     > $R/install.txt 2>&1)
  echo "install $VARIANT into $ENV: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install.txt
  tail -6 $R/install.txt
  rm -f $P/bundle.tar.part*
  (cd $REPO && setsid nohup bash $SELF plan < /dev/null > $R/plan.log 2>&1 &)
  df -h / | tail -1; held ;;
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
send)     # $1 = a file of $R, $2 = its first piece (default 0): 8 pieces of 15 MiB at most come back a call
  f=$R/$1; first=${2:-0}; [ -f "$f" ] || { echo "no $f yet"; held; exit 0; }
  [ -d $R/$1.pieces ] || { mkdir -p $R/$1.pieces && split -b 15M -d -a 3 "$f" $R/$1.pieces/$1.; }
  echo "$1: $(stat -c %s "$f") bytes, $(ls $R/$1.pieces | wc -l) pieces, sha256 $(sha256sum "$f" | cut -c1-64)"
  ls $R/$1.pieces | sort | tail -n +$((first + 1)) | head -8 | while read -r p; do cp $R/$1.pieces/$p "$OUT/"; done
  ls -la "$OUT"; held ;;
partial)  # the running trainers' logs as they stand (a run cut off by the device time still leaves its evidence)
  for t in $R/*.trainer*.log $R/*.out; do [ -f "$t" ] && gzip -c "$t" > "$OUT/$(basename $t).gz"; done
  ls -la "$OUT"; held ;;
*) echo "unknown step $step: valid part, install-base, wheels, wait, send, partial, plan"; exit 2 ;;
  esac
}
