"""Two nodes sharing a filesystem (two raylets of one host) write the inputs to one path at once; a third node
elsewhere writes them to its own disk (another path here): the same bytes everywhere."""
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, sys.argv[1])
from verlenv.catalog import families
from verlenv.cluster import trainer

root = sys.argv[2]
LLAMA = families.table().rows(families.table().select(["llama"], False))[0]
shared, other = os.path.join(root, "shared", "inputs"), os.path.join(root, "other", "inputs")
with ProcessPoolExecutor(3) as pool:
    results = list(pool.map(trainer.write_inputs_here, [shared, shared, other], [16] * 3, [LLAMA] * 3))
before = trainer.weights_here(shared, results[0]["layout"])
import shutil

actor = os.path.join(shared, "checkpoints", "global_step_2", "actor", "huggingface")
shutil.copytree(os.path.join(shared, "model"), actor)  # as verl saves it: the same tensors, unchanged
after = trainer.weights_here(shared, results[0]["layout"])
removed = [trainer.remove_here(shared), trainer.remove_here(shared)]
print(json.dumps({"results": results, "before": before, "after": after, "removed": removed,
                  "left": sorted(os.listdir(os.path.join(root, "shared")))}))
