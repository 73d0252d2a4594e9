# GPU visit 2 of 2026-11-25: the verl-0.9 megatron env (its bundle, built wheels included: flash-attn, apex and TE's
# torch part made on the visit-1 H100 by the recipes) carried in parts, installed offline into a fresh venv, then
# `verlenv verify --gpu auto` (verl's own trainer with the Megatron actor) and `verlenv verify --ray` on a one-node
# Ray cluster. One `run` call per step: bash docs/verification/2026-11-25-h100-verl-0.9-megatron.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1
R=/root/visit; B=/root/b/verl-0.9-megatron.parts; mkdir -p $R $B
step=$1; shift
case $step in
part)     # $1 = how many parts $B must hold after this call (the carried part is in .carry/mega.parts/)
  cp -n .carry/mega.parts/* $B/; n=$(ls $B | grep -c '\.part'); echo "parts $n"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; } ;;
install)  # the env from its parts, offline, into a fresh venv; then verify it whole, in the background
  t0=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $B --prefix /root/verl-env 2>&1 | tail -25 | tee $R/install.txt
  echo "install_wall_s $(( $(date +%s) - t0 ))" | tee -a $R/install.txt
  /root/verl-env/bin/python -c "import torch, flash_attn, apex, transformer_engine.pytorch, megatron.core, mbridge, vllm, verl; print('imports ok', torch.__version__, flash_attn.__version__, transformer_engine.__version__, megatron.core.__version__, vllm.__version__, verl.__version__)" 2>&1 | tail -2 | tee -a $R/install.txt
  tool=$(dirname "$(find /root/b -path '*/.tool/site' -type d | head -1)")/site; echo "$tool" > $R/tool-site
  rm -rf /root/repo && mkdir -p /root/repo && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo -xf -
  cd /root/repo
  # Device time left for this visit allowed one verify's length, not two: the package checks (vLLM left to the
  # trainer's rollout) and verl's trainer run side by side, as two reports of the same env.
  for run in "pkgs --skip-package verl --skip-package vllm" "verl --only verl"; do set -- $run; name=verify-megatron-$1; shift
  setsid nohup bash -c "t=\$(date +%s); PYTHONPATH=/root/repo/src:$tool python3 -m verlenv verify --gpu auto --stack verl-0.9 --variant megatron --python /root/verl-env/bin/python $* --report $R/$name.json --markdown $R/$name.md > $R/$name.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/$name.done" < /dev/null > /dev/null 2>&1 &
  done
  echo "verify started" ;;
wait)     # $1 = seconds at most: until every started run is done; returns what each has written so far
  t0=$(date +%s)
  while ls $R/*.out >/dev/null 2>&1 && [ "$(ls $R/*.done 2>/dev/null | wc -l)" -lt "$(ls $R/verify-*.out | wc -l)" ] && [ $(( $(date +%s) - t0 )) -lt "$1" ]; do sleep 5; done
  for o in $R/verify-*.out; do n=$(basename $o .out); echo "== $n: $(cat $R/$n.done 2>/dev/null || echo running)"
    grep -E "kernel|static|PASS|FAIL|step|rollout" $o | tail -12; cp $R/$n.json $R/$n.md "$OUT/" 2>/dev/null; tail -c 2000000 $o > "$OUT/$n.out"; done
  cp $R/install.txt "$OUT/" 2>/dev/null; nvidia-smi --query-gpu=memory.used --format=csv,noheader; uptime ;;
log)      # $1 = name: return the full output and the newest trainer log of a run
  cp $R/$1.out "$OUT/" 2>/dev/null; find /tmp /root -name 'verl-trainer*.log' -newer $R/install.txt 2>/dev/null | head -3 | xargs -r -I{} cp {} "$OUT/"; ls -la "$OUT" ;;
ray)      # a one-node Ray cluster over this host's GPU; verify --ray with one vLLM engine per node ($@: verify options)
  # Not run in this visit (no device time left); it ran in 2026-11-25-h100-verl-0.9-megatron-relocked.sh. Its first
  # draft passed --markdown, which verify --ray refuses (its report is the JSON and the tables).
  tool=$(cat $R/tool-site); cd /root/repo
  cat > $R/verlenv <<EOS
#!/bin/bash
PYTHONPATH=/root/repo/src:$tool exec python3 -m verlenv "\$@"
EOS
  chmod +x $R/verlenv
  setsid nohup bash -c "t=\$(date +%s); VERLENV=$R/verlenv bash scripts/verify-cluster-one-host.sh /root/verl-env/bin/python $R/verify-ray.json --stack verl-0.9 --variant megatron --gpu auto $* > $R/verify-ray.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/verify-ray.done" < /dev/null > /dev/null 2>&1 &
  echo "verify --ray started" ;;
esac
