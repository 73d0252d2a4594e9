"""Print a failure's line (argv[3]) to stderr from a task on the node whose address is argv[2], in the Ray cluster at
argv[1]: the line lands in that node's own worker log, as a worker's failed import would put it there."""
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On

ray.init(address=sys.argv[1], logging_level="ERROR")


@ray.remote(num_cpus=0)
def fail_import(line):
    print(line, file=sys.stderr, flush=True)
    return ray.get_runtime_context().get_node_id()


node = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == sys.argv[2])
assert ray.get(fail_import.options(scheduling_strategy=On(node, soft=False)).remote(sys.argv[3])) == node
