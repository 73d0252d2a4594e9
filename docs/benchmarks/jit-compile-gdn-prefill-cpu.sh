#!/bin/bash
# FlashInfer 0.6.12's GDN prefill (sm_90a) built on this 2-core CPU machine, MAX_JOBS=2; cicc RSS sampled every 2 s.
export FLASHINFER_CUDA_ARCH_LIST=9.0a CUDA_HOME=/work/main/.verlenv/cuda-home-8f42eba19b55 MAX_JOBS=2 FLASHINFER_WORKSPACE_BASE=/work/logs/gdn-cpu/ws
(while :; do echo "$(date +%s) $(ps -C cicc -o rss= | awk '{s+=$1; n++; if($1>m)m=$1} END{print n+0, s/1048576, m/1048576}') $(awk '/MemAvailable/ {print $2/1048576}' /proc/meminfo)"; sleep 2; done > mem.txt) &
s=$!
t=$(date +%s)
/work/main/.venv-verl-0.9-megatron/bin/python -c "
from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module as g
spec = g(); print(spec.name, len(spec.sources) if hasattr(spec,'sources') else '?', flush=True)
spec.build(verbose=False)
print('built', spec.get_library_path() if hasattr(spec, 'get_library_path') else '', flush=True)
" > build.out 2>&1
echo "exit $? wall_s $(( $(date +%s) - t ))" >> build.out
kill $s
