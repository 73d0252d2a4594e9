"""The driver's side, as verlenv.cluster.driver runs it once every node passed."""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import ray
import verlenv
from verlenv.cluster import driver, trainer

address, standin, log, setting = sys.argv[2:6]
ray.init(address=address, runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]}, logging_level="WARNING",
         log_to_driver=False)
nodes = driver.alive_nodes()
names = driver.labels(nodes)
# Stand-in for each node's own check, which saw the GPU that Ray gives it (none exists here).
answered = {i: {"state": "checked", "fingerprint": {"gpu:count": str(int(n["Resources"].get("GPU", 0)))}}
            for i, n in nodes.items()}
check = trainer.check_module()
verls = check.command
check.command = lambda python, paths, variant, **sizes: [python, standin, *verls(python, paths, variant, **sizes)[3:]]
spec = {"address": address, "variant": "fsdp", "runtime_env": {"env_vars": {"JOB_SETTING": setting}},
        "trainer_log": log}
result = trainer.run(answered, nodes, names, spec, lambda line: print(line, file=sys.stderr))
ray.shutdown()
print(json.dumps({"result": result, "names": names}))
