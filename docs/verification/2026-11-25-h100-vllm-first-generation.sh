# GPU visit: what a fresh node's first vLLM generation costs, and how much of it is Triton's JIT. The relocked
# verl-0.9 megatron bundle is carried in parts and installed offline into a fresh venv; then vLLM's check runs three
# times on that node: cold (fresh venv, empty caches), warm (same again), and warm but with Triton's cache emptied.
# One `run` call per step: bash docs/verification/2026-11-25-h100-vllm-first-generation.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1
R=/root/visit; B=/root/b/verl-0.9-megatron.parts; mkdir -p $R $B
step=$1; shift
case $step in
part)     # $1 = how many parts $B must hold after this call (the carried part is in .carry/mega.parts/)
  cp -n .carry/mega.parts/* $B/ 2>/dev/null; n=$(ls $B | grep -c '\.part'); echo "parts $n"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; } ;;
install)  # the env from its parts, offline, into a fresh venv; then the three vLLM runs, one after another
  t0=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $B --prefix /root/verl-env 2>&1 | tail -6 | tee $R/install.txt
  echo "install_wall_s $(( $(date +%s) - t0 ))" | tee -a $R/install.txt
  tool=$(dirname "$(find /root/b -path '*/.tool/site' -type d | head -1)")/site
  rm -rf /root/repo && mkdir -p /root/repo && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo -xf -
  cd /root/repo
  ls ~/.triton/cache ~/.cache/vllm ~/.cache/flashinfer 2>&1 | head -3 | tee -a $R/install.txt   # empty on a fresh node
  v="PYTHONPATH=/root/repo/src:$tool python3 -m verlenv verify --gpu auto --stack verl-0.9 --variant megatron --python /root/verl-env/bin/python --only vllm"
  setsid nohup bash -c "for run in 1-cold 2-warm 3-triton-emptied; do
      [ \$run = 3-triton-emptied ] && rm -rf ~/.triton/cache
      t=\$(date +%s); $v --report $R/vllm-\$run.json > $R/vllm-\$run.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/vllm-\$run.done
    done" < /dev/null > /dev/null 2>&1 &
  echo "runs started" ;;
wait)     # $1 = seconds at most: until the three runs are done; returns their reports
  t0=$(date +%s)
  while [ "$(ls $R/*.done 2>/dev/null | wc -l)" -lt 3 ] && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 5; done
  for o in $R/vllm-*.out; do n=$(basename $o .out); echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "vllm/generate" $o | tail -2; cp $R/$n.json "$OUT/" 2>/dev/null; cp $o "$OUT/"; done
  cp $R/install.txt "$OUT/" ;;
esac
