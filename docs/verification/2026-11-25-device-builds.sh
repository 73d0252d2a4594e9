# GPU visit 1 of 2026-11-25: build the three source-built wheels of the verl-0.9 megatron variant (flash-attn,
# apex, TE's torch part) by the recipes, against the host's torch 2.11.0+cu130 (the stack's), and return their
# wheel-cache entries. One `run` call per step: bash docs/verification/2026-11-25-device-builds.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1
R=/root/visit; mkdir -p $R
step=$1; shift
case $step in
start)    # copy the repo aside; start flash-attn and (one after the other) apex and TE, each in its own session
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt; nproc; free -g | head -2
  rm -rf /root/repo && mkdir -p /root/repo && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo -xf -
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/fa/pyelftools-*.whl
  cp -r .carry/fa/apex.git .carry/fa/*.tar.gz /root/
  cd /root/repo; export PYTHONPATH=/root/repo/src:/root/site; py=$(command -v python3)
  date +%s > $R/start
  setsid nohup bash -c "python3 -m verlenv build flash-attn --stack verl-0.9 --variant fsdp --python $py --gpu h100 --jobs ${1:-14} --source /root/flash_attn-2.8.3.post2.tar.gz --wheelhouse /root/wheelhouse --no-install --json $R/build-fa.json > $R/build-fa.out 2>&1; echo \$? > $R/build-fa.done" < /dev/null > /dev/null 2>&1 &
  setsid nohup bash -c "python3 -m verlenv build apex --stack verl-0.9 --variant megatron --python $py --gpu h100 --source /root/apex.git --wheelhouse /root/wheelhouse --no-install --json $R/build-apex.json > $R/build-apex.out 2>&1; echo \$? > $R/build-apex.done; python3 -m verlenv build transformer-engine-torch --stack verl-0.9 --variant megatron --python $py --gpu h100 --source /root/transformer_engine_torch-2.12.0.tar.gz --wheelhouse /root/wheelhouse --no-install --json $R/build-te.json > $R/build-te.out 2>&1; echo \$? > $R/build-te.done" < /dev/null > /dev/null 2>&1 &
  sleep 30; tail -3 $R/build-fa.out $R/build-apex.out ;;
wait)     # $1 = seconds at most: until flash-attn is done; progress in objects compiled
  t0=$(date +%s)
  while [ ! -f $R/build-fa.done ] && [ $(( $(date +%s) - t0 )) -lt "${1:-540}" ]; do sleep 10; done
  echo "elapsed since start: $(( $(date +%s) - $(cat $R/start) )) s"
  echo "flash-attn objects: $(find /root/repo/.verlenv /root/.verlenv /tmp -name '*.o' -path '*flash*' 2>/dev/null | wc -l)"
  for b in fa apex te; do echo "$b: $(cat $R/build-$b.done 2>/dev/null || echo running)"; tail -2 $R/build-$b.out 2>/dev/null; done
  free -g | head -2; uptime ;;
give)     # $@ = packages: their wheel-cache entries (wheel, entry.json) as a tar split in 15 MiB pieces, and the records
  cd /root/wheelhouse && tar -cf /root/give.tar $(for p in "$@"; do ls -d $p/*/ | grep -v '/\.tmp'; done)
  sha256sum /root/give.tar | tee "$OUT/give.sha256"; split -b 15M -d /root/give.tar "$OUT/give.part"
  if [ "$(ls "$OUT" | grep -c part)" -lt 8 ]; then tar -C $R -czf "$OUT/records.tgz" $(cd $R && ls | grep -v '^start$'); fi
  ls -la "$OUT" ;;
save)     # flash-attn not done: stop it (the builder keeps its tree for a resume) and return the tree in 15 MiB pieces
  pkill -INT -f "verlenv build flash-attn"; for i in $(seq 30); do pgrep -f "verlenv build flash-attn" >/dev/null || break; sleep 2; done
  t=$(ls -d /root/repo/.verlenv/build-flash-attn-* | head -1); echo "tree $t"; du -sh $t
  tar -C / -czf /root/fa-tree.tgz "${t#/}"; sha256sum /root/fa-tree.tgz | tee "$OUT/fa-tree.sha256"
  split -b 15M -d /root/fa-tree.tgz /root/fa-tree.part; ls -la /root/fa-tree.part* ;;
piece)    # $@ = piece names to return (fa-tree.part00 ...)
  for f in "$@"; do cp /root/$f "$OUT/"; done; ls -la "$OUT" ;;
esac
