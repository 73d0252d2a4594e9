# The GPU visit, step by step (one `run` call each): carry the default env's bundle in parts, install it offline,
# verify it with verl's own trainer; then the megatron delta. Usage: bash device.sh STEP [ARGS]
set -uo pipefail
export PYTHONUNBUFFERED=1
step=$1; shift
R=/root/visit; mkdir -p $R
case $step in
builds)   # apex and TE's torch part against the host's torch 2.11.0 (the stack's): background, own session
  rm -rf /root/repo-build && mkdir -p /root/repo-build && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo-build -xf -
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/mega/pyelftools-*.whl
  cp -r .carry/mega/apex.git .carry/mega/transformer_engine_torch-2.12.0.tar.gz /root/
  cd /root/repo-build
  ( export PYTHONPATH=/root/repo-build/src:/root/site
    setsid nohup bash -c "python3 -m verlenv build apex --stack verl-0.9 --variant megatron --python $(command -v python3) --gpu h100 --source /root/apex.git --wheelhouse /root/wheelhouse --no-install --json $R/build-apex.json > $R/build-apex.out 2>&1; python3 -m verlenv build transformer-engine-torch --stack verl-0.9 --variant megatron --python $(command -v python3) --gpu h100 --source /root/transformer_engine_torch-2.12.0.tar.gz --wheelhouse /root/wheelhouse --no-install --json $R/build-te.json > $R/build-te.out 2>&1" < /dev/null > /dev/null 2>&1 & )
  date +%s > $R/builds-start; echo "builds started"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader ;;
part)     # $1 = the directory name under .carry holding the part, $2 = how many parts /root/<dir> must hold after
  d=$1; mkdir -p /root/$d; cp -n .carry/$d/* /root/$d/; n=$(ls /root/$d | grep -c '\.part'); echo "parts $n"
  [ "$n" -eq "$2" ] || { echo "EXPECTED $2 PARTS: machine restarted? start over"; exit 3; } ;;
install)  # the default env from its parts, offline, into a fresh venv; then verify it whole, in the background
  t0=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap /root/b/verl-0.9-fsdp.parts --prefix /root/verl-env 2>&1 | tail -25 | tee $R/install.txt
  echo "install_wall_s $(( $(date +%s) - t0 ))" | tee -a $R/install.txt
  /root/verl-env/bin/python -c "import torch, flash_attn, vllm, verl, transfer_queue; print('imports ok', torch.__version__, flash_attn.__version__, vllm.__version__, verl.__version__)" 2>&1 | tail -2 | tee -a $R/install.txt
  tool=$(dirname "$(find /root/b -path '*/.tool/site' -type d | head -1)")/site; echo "tool site $tool"
  echo "$tool" > $R/tool-site
  rm -rf /root/repo-verify && mkdir -p /root/repo-verify && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo-verify -xf -
  cd /root/repo-verify
  setsid nohup bash -c "t=\$(date +%s); PYTHONPATH=/root/repo-verify/src:$tool python3 -m verlenv verify --gpu auto --stack verl-0.9 --variant fsdp --python /root/verl-env/bin/python --report $R/verify-fsdp.json --markdown $R/verify-fsdp.md > $R/verify-fsdp.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/verify-fsdp.done" < /dev/null > /dev/null 2>&1 &
  echo "verify started" ;;
wait)     # $1 = name of the run to wait for (verify-fsdp...), $2 = seconds at most
  t0=$(date +%s)
  while [ ! -f $R/$1.done ] && [ $(( $(date +%s) - t0 )) -lt "$2" ]; do sleep 5; done
  grep -E "kernel checks|static checks|PASS|FAIL" $R/$1.out | tail -30; cat $R/$1.done 2>/dev/null
  if [ -f $R/$1.done ]; then cp $R/$1.json $R/$1.md $R/$1.out "$OUT/" 2>/dev/null; cp $R/install.txt "$OUT/" 2>/dev/null; fi
  uptime ;;
rerun)    # $1 = name, rest = extra verify args (e.g. --only vllm): a second (warm) run, in the background
  name=$1; shift; tool=$(cat $R/tool-site); cd /root/repo-verify
  setsid nohup bash -c "t=\$(date +%s); PYTHONPATH=/root/repo-verify/src:$tool python3 -m verlenv verify --gpu auto --python /root/verl-env/bin/python $* --report $R/$name.json --markdown $R/$name.md > $R/$name.out 2>&1; echo \"exit \$? wall_s \$(( \$(date +%s) - t ))\" > $R/$name.done" < /dev/null > /dev/null 2>&1 &
  echo "$name started" ;;
mega)     # the megatron delta over the verified fsdp env, and the apex/TE wheels built here at the start
  tool=$(cat $R/tool-site); t0=$(date +%s)
  PYTHONPATH=src python3 -m verlenv.bundle.bootstrap /root/bm/verl-0.9-megatron.parts --python /root/verl-env/bin/python 2>&1 | tail -15 | tee $R/install-mega.txt
  cd /root/repo-verify
  PYTHONPATH=/root/repo-verify/src:$tool python3 -m verlenv build apex transformer-engine-torch --stack verl-0.9 --variant megatron --python /root/verl-env/bin/python --gpu h100 --wheelhouse /root/wheelhouse --source /root/apex.git 2>&1 | tail -8 | tee -a $R/install-mega.txt
  echo "mega install_wall_s $(( $(date +%s) - t0 ))" | tee -a $R/install-mega.txt ;;
status)
  tail -2 $R/build-apex.out $R/build-te.out 2>/dev/null; ls /root/wheelhouse/*/ 2>/dev/null; uptime ;;
esac
