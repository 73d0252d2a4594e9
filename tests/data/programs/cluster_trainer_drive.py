"""The driver's side, as verlenv.cluster.driver runs it once every node passed: verl's trainer across the cluster,
once per SETTING=LOG argument (the workers see JOB_SETTING=SETTING; LOG is the trainer log), one after the other.
argv: verlenv's src, the cluster's address, the stand-in main_ppo, SETTING=LOG..."""
import json
import os
import sys

sys.path.insert(0, sys.argv[1])
import ray  # noqa: E402

import verlenv  # noqa: E402
from verlenv.catalog import families, stacks  # noqa: E402
from verlenv.cluster import driver, trainer  # noqa: E402
from verlenv.verify.options import VerifyOptions  # noqa: E402

address, standin, jobs = sys.argv[2], sys.argv[3], [a.split("=", 1) for a in sys.argv[4:]]
# The stand-in nodes share this machine's cores: their tasks get time limits no real node needs (hang guards).
LIMITS = {"node_task_s": 1200, "trainer_s": 1800}
ray.init(address=address, runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
nodes = driver.alive_nodes()
names = driver.labels(nodes)
# Stand-in for each node's own check, which saw the GPU that Ray gives it (none exists here).
answered = {i: {"state": "checked", "fingerprint": {"gpu:count": str(int(n["Resources"].get("GPU", 0)))}}
            for i, n in nodes.items()}
check = trainer.check_module()
verls = check.command
check.command = lambda python, paths, *rest, **sizes: [python, standin, *verls(python, paths, *rest, **sizes)[3:]]
cat = stacks.load(os.path.join(os.path.dirname(sys.argv[1]), "stacks.toml"))
llama = families.table().rows(families.table().select(["llama"], False))[0]
results = {}
for setting, log in jobs:
    spec = {"runtime_env": {"env_vars": {"JOB_SETTING": setting}}, "trainer_log": log, "families": [llama], **LIMITS}
    results[setting] = trainer.run(answered, nodes, names, spec, VerifyOptions(ray=address),
                                   cat.variant("verl-0.9", "fsdp"), lambda line: print(line, file=sys.stderr))
ray.shutdown()
print(json.dumps({"results": results, "names": names}))
