# apex built twice in one run on one host: the plain split (--jobs 16: 4 extensions x 4 jobs) and the
# builder's own (extensions at once filled to the cores). Records, ninja logs and a verify of the second.
set -euo pipefail
python3 -m pip install --no-deps --no-index --target /tmp/dep .carry/verify/pyelftools-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/dep:$PWD/src
for run in plain auto; do
  jobs=(); [ $run = plain ] && jobs=(--jobs 16)
  python3 -m verlenv build apex --stack verl-0.9 --variant megatron --python "$(command -v python3)" --gpu auto \
    --source .carry/apex.git --wheelhouse /tmp/wh-$run "${jobs[@]}" 2>&1 | grep -v '^  \[' | tee "$OUT/build-apex-$run.txt"
  entry=$(ls -d /tmp/wh-$run/apex/*/)
  cp "$entry/entry.json" "$OUT/build-apex-$run.json"
  tar -C "$entry" -czf "$OUT/build-apex-$run-logs.tar.gz" build.log ninja
done
python3 -m verlenv verify --gpu auto --stack verl-0.9 --variant megatron --python "$(command -v python3)" --no-lock \
  --only apex --report "$OUT/verify-apex.json" --markdown "$OUT/verify-apex.md" | tail -1 || echo "verify exit $?"
