"""A healthy Ray job on the cluster at argv[1]: a task and an actor on every alive node, each printing what jobs
print (progress to stdout, a warning to stderr); prints the nodes' IPs and the actors' answers."""
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On

ray.init(address=sys.argv[1], logging_level="ERROR")


@ray.remote(num_cpus=0)
def step(i):
    print(f"step {i}: loss 0.{i}", flush=True)
    print(f"step {i}: WARNING nothing to do", file=sys.stderr, flush=True)
    return ray.util.get_node_ip_address()


@ray.remote(num_cpus=0)
class Counter:
    def add(self, n):
        print("added", n, flush=True)
        return n


alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
print(sorted(ray.get([step.options(scheduling_strategy=On(n, soft=False)).remote(i) for i, n in enumerate(alive)])))
counters = [Counter.options(scheduling_strategy=On(n, soft=False)).remote() for n in alive]
print(ray.get([c.add.remote(1) for c in counters]))
