"""The cross-node all-reduce when a rank cannot take part, on a real Ray cluster (tests/ray_nodes.py): a rank whose node
is not in the cluster (it left after its checks), an NCCL rank on a node without a GPU, an NCCL rank whose node's one
GPU a leftover job's placement group holds, and NCCL ranks on nodes that Ray gives a GPU resource but that have none.
The results go to one JSON file.
Usage: python allreduce_faults.py SRC_DIR CLUSTER_ADDRESS OUT_JSON"""

import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import ray  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402

import verlenv  # noqa: E402
from verlenv.cluster import allreduce  # noqa: E402

ray.init(address=sys.argv[2], runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
head = next(n["NodeID"] for n in alive if not n["Resources"].get("GPU"))
gpu_nodes = [n for n in alive if n["Resources"].get("GPU")]
gpus = [n["NodeID"] for n in gpu_nodes]
gone = "ab" * (len(head) // 2)  # a node id no node of this cluster has: one that left after its checks
names = {head: "the-head"}
out = {
    "node_gone": allreduce.run([(head, 1), (gone, 1)], "gloo", names=names),
    "no_gpu_node": allreduce.run([(head, 1)], "nccl", names=names),
}
# A leftover job's placement group (verl reserves its resource pools so) holds the first GPU node's one GPU: the rank
# placed there cannot start while it does.
held = placement_group([{"GPU": 1, f"node:{gpu_nodes[0]['NodeManagerAddress']}": 0.001}])
ray.get(held.ready())
out["gpu_taken"] = allreduce.run([(gpus[0], 1)], "nccl", timeout_s=2)
remove_placement_group(held)
out["gpu_unseen"] = allreduce.run([(node_id, 1) for node_id in gpus], "nccl")
out.update(gpus=gpus, head=head, gone=gone)
ray.shutdown()
with open(sys.argv[3], "w") as f:
    json.dump(out, f, indent=1)
