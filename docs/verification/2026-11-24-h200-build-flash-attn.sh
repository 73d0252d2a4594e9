# Device: copy the repo to /root/repo and start the flash-attn build there in its own session (it outlives
# this call); then wait for it like wait.sh does. Writes host facts to $OUT.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
nproc; free -g | head -2
python3 -m pip freeze > "$OUT/host-freeze.txt" 2>/dev/null
python3 -m pip list --format json > "$OUT/host-pip-list.json" 2>/dev/null
python3 -c "import torch,sys; print(sys.version); print('torch', torch.__version__, torch.version.cuda); t=torch.empty(1<<20, pin_memory=True); print('pinned', t.is_pinned())" 2>&1 | tee "$OUT/host-torch.txt"
rm -rf /root/repo && mkdir -p /root/repo && tar --exclude=./.carry --exclude=./.git -cf - . | tar -C /root/repo -xf -
mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --target /root/site .carry/fa/pyelftools-*.whl
cp .carry/fa/flash_attn-2.8.3.post2.tar.gz /root/
cd /root/repo
export PYTHONPATH=/root/repo/src:/root/site
date +%s > /root/fa-start
setsid nohup python3 -m verlenv build flash-attn --stack verl-0.9 --variant fsdp --python "$(command -v python3)" \
  --gpu h100 --jobs 16 --source /root/flash_attn-2.8.3.post2.tar.gz --wheelhouse /root/wheelhouse --no-install \
  --json /root/fa-build.json > /root/fa-build.out 2>&1 < /dev/null &
echo "started pid $!"
sleep 20; cat /root/fa-build.out
# Device: wait (at most $1 s) for the background flash-attn build; when it is done, return its cache entry in parts.
set -uo pipefail
limit=${1:-560}; t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do
  if [ -s /root/fa-build.json ] || ! pgrep -f "verlenv build flash-attn" >/dev/null; then break; fi
  sleep 10
done
echo "elapsed since start: $(( $(date +%s) - $(cat /root/fa-start) )) s"
n=$(find /root/repo/.verlenv -name '*.o' 2>/dev/null | wc -l); echo "objects: $n"
free -g | head -2; uptime
tail -5 /root/fa-build.out
if [ -s /root/fa-build.json ]; then
  entry=$(dirname "$(python3 -c "import json;print(json.load(open('/root/fa-build.json'))[0]['wheel'])")")
  ls -la "$entry"
  whl=$(ls "$entry"/*.whl); sha256sum "$whl" > /root/wheel.sha256; cat /root/wheel.sha256
  mkdir -p /root/meta && cp /root/fa-build.json /root/fa-build.out "$entry/entry.json" /root/wheel.sha256 /root/meta/
  (cd "$entry" && tail -n 3000 build.log > /root/meta/build.log.tail; cp -r ninja /root/meta/ 2>/dev/null)
  tar -C /root/meta -czf "$OUT/meta.tgz" .
  whl=$(ls "$entry"/*.whl); sha256sum "$whl" | tee "$OUT/wheel.sha256"
  split -b 15M -d "$whl" "$OUT/wheel.part"
  ls -la "$OUT"
  echo BUILD-DONE
fi
