"""A node's own trainer check, as verify --ray runs it: a Ray task on one node of the cluster starts verl's trainer,
whose ray.init() would join the instance it finds (the cluster, whose GPUs the node checks hold: on 2 x H100 it
failed with "Total available GPUs 0 is less than total desired GPUs 1"). Here a bare ray.init() (a test double of
verl's main_ppo, named so) takes verl's place."""
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])
import ray

import verlenv
from verlenv.cluster import trainer

ray.init(address=sys.argv[2], runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
STARTS_RAY = "import ray; ray.init(); print('GCS', ray.get_runtime_context().gcs_address, flush=True)"


@ray.remote(num_gpus=1)
def node_check():
    # A node whose environment names its cluster, as ray.init() finds it: RAY_ADDRESS (exported on the node, or a
    # Ray job's), else the address file the last `ray start` wrote (/tmp/ray/ray_current_cluster by default).
    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    with tempfile.TemporaryDirectory() as cwd:
        lines, code, _ = trainer.check_module().run_trainer([sys.executable, "-c", STARTS_RAY], cwd, timeout=300)
    return {"code": code, "gcs": [line.text.split()[1] for line in lines if line.text.startswith("GCS ")],
            "cluster": ray.get_runtime_context().gcs_address}


print(json.dumps(ray.get(node_check.remote())))
