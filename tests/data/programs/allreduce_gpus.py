"""verify --ray's NCCL all-reduce on this host's GPUs, through a one-node Ray that ray.init() starts here: one rank per
GPU with exact sums and bus bandwidth, then one rank more than there are GPUs (the GPUs held, as by a leftover job's
actors), which must be named as the rank that did not start. The results go to one JSON file.
Usage: python allreduce_gpus.py SRC_DIR OUT_JSON"""

import json
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
import ray  # noqa: E402

import verlenv  # noqa: E402
from verlenv.cluster import allreduce  # noqa: E402

ray.init(runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
node = ray.get_runtime_context().get_node_id()
gpus = int(ray.cluster_resources().get("GPU", 0))
out = {"gpus": gpus, "node": node, "all": allreduce.run([(node, gpus)], "nccl", names={node: "this-host"})}
# Ray frees a killed actor's GPU a moment after ray.kill returns: every GPU free again before the next all-reduce.
deadline = time.monotonic() + 120
while ray.available_resources().get("GPU", 0) < gpus and time.monotonic() < deadline:
    time.sleep(0.2)
out["one_more"] = allreduce.run([(node, gpus + 1)], "nccl", timeout_s=5, names={node: "this-host"})
ray.shutdown()
with open(sys.argv[2], "w") as f:
    json.dump(out, f, indent=1)
