# GPU visit C (one H100 or H200): the verl-0.7 fsdp bundle with the flash-attn wheel built on the CPU machine
# (2 cores, CUDA 12.5 nvcc from Debian, same major as torch 2.8.0+cu128, sm_90) carried in parts; the last call
# installs it offline with the bundle's bootstrap into a fresh venv and runs the bundle's own `nox -s verify-h100`
# (static checks, flash-attn's kernel checks, verl 0.7.1's own trainer), its report coming back in the same call:
# this visit has about 12 minutes held. One `run` call per step: bash docs/verification/2026-11-26-visit-c-verl-0.7.sh STEP N
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 RAY_USAGE_STATS_ENABLED=0
R=/root/visit; P=/root/parts; REPO=/root/repo; mkdir -p $R $P
step=$1; shift

held() { echo "held $(( $(date +%s) - $(cat $R/t0) )) s"; }

part() {  # $1 = how many parts $P must hold after this call (each call carries one, under .carry/b07.parts/)
  [ -f $R/t0 ] || date +%s > $R/t0
  cp -n .carry/b07.parts/* $P/ 2>/dev/null; n=$(ls $P | grep -c '\.part'); echo "parts $n, $(held)"
  [ "$n" -eq "$1" ] || { echo "EXPECTED $1 PARTS: machine restarted? start over"; exit 3; }
}

case $step in
part)     # $1 = parts expected after this one
  part "$1" ;;
last)     # $1 = the last part's number: join, install, verify; the report comes back in this call
  part "$1"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; df -h / | tail -1
  mkdir -p $REPO && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C $REPO -xf -; cd $REPO
  t=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap $P --variant fsdp --prefix $REPO/.venv-verl-0.7-fsdp > $R/install.txt 2>&1
  echo "install: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/install.txt; tail -n 3 $R/install.txt
  rm -f $P/bundle.tar.part*  # the joined bundle is all that is needed from here (disk)
  gpu=h100; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && gpu=h200
  t=$(date +%s)
  VERLENV_TRAINER_LOG=$R/trainer.log $P/bundle/.tool/bin/nox -s verify-h100 -- --gpu $gpu --stack verl-0.7 \
      --report $R/verify.json --markdown $R/verify.md > $R/verify.out 2>&1
  echo "verify: exit $? in $(( $(date +%s) - t )) s" | tee -a $R/verify.out
  grep -E "^(PASS|FAIL|pass|fail|warn|skip) " $R/verify.out | grep -vE "^(pass|skip) +(lock|cudalibs|cubins|record)" | cut -c1-220
  tail -n 3 $R/verify.out
  tar -C $R -czf "$OUT/visit-c.tgz" install.txt verify.out verify.json verify.md trainer.log 2>/dev/null
  ls -la "$OUT"; held ;;
esac
