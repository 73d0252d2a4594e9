"""verify --ray's NCCL all-reduce on this host's GPUs, through a one-node Ray that ray.init() starts here: one rank per
GPU with exact sums and bus bandwidth, then the same while another job's placement group holds every GPU: each rank
must be named as not started. The results go to one JSON file.
Usage: python allreduce_gpus.py SRC_DIR OUT_JSON"""

import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import ray  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402

import verlenv  # noqa: E402
from verlenv.cluster import allreduce  # noqa: E402

ray.init(runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
node = ray.get_runtime_context().get_node_id()
gpus = int(ray.cluster_resources().get("GPU", 0))
out = {"gpus": gpus, "node": node, "all": allreduce.run([(node, gpus)], "nccl", names={node: "this-host"})}
# Another job's placement group holds every GPU (Ray frees the killed ranks' GPUs a moment after ray.kill returns:
# it waits for them): no rank can start.
held = placement_group([{"GPU": gpus}])
ray.get(held.ready())
out["held"] = allreduce.run([(node, gpus)], "nccl", timeout_s=5, names={node: "this-host"})
remove_placement_group(held)
ray.shutdown()
with open(sys.argv[2], "w") as f:
    json.dump(out, f, indent=1)
