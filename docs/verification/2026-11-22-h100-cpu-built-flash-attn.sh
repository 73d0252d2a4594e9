# Install the CPU-built flash-attn wheel into the device's torch 2.11 and verify it there.
# usage: bash .carry/fa-cpu/device.sh <expected wheel sha256>
set -euo pipefail
wheel=$(ls .carry/fa-cpu/flash_attn-*.whl)
got=$(sha256sum "$wheel" | cut -d' ' -f1)
echo "wheel $wheel sha256 $got (expected $1)" | tee "$OUT/wheel.txt"
[ "$got" = "$1" ]
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install --no-deps --no-index --target /tmp/fa-site "$wheel" .carry/verify/pyelftools-*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/fa-site:$PWD/src
python3 -c "import torch, flash_attn, flash_attn_2_cuda; print('torch', torch.__version__, 'flash_attn', flash_attn.__version__, flash_attn_2_cuda.__file__)" | tee "$OUT/import.txt"
python3 -m verlenv verify --gpu auto --stack verl-0.9 --variant fsdp --python "$(command -v python3)" --no-lock \
  --skip-package vllm --skip-package verl \
  --report "$OUT/verify-cpu-built-flash-attn.json" --markdown "$OUT/verify-cpu-built-flash-attn.md" || echo "verify exit $?"
