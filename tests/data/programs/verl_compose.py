"""Both of verl's Hydra-compose checks in one interpreter, so verl, Hydra, Ray and vLLM are imported once: the cluster
job's config for N nodes x G GPUs (cluster_trainer_compose.py), then the kernel check's for every size and mode
(verl_trainer_compose.py). argv: verlenv's src, the kernels folder, the output file (JSON: {"cluster", "check"})."""
import contextlib
import io
import json
import os
import runpy
import sys

src, kernels, out = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
printed = io.StringIO()
sys.argv = [os.path.join(here, "cluster_trainer_compose.py"), src]
with contextlib.redirect_stdout(printed):
    runpy.run_path(sys.argv[0], run_name="__main__")
check = out + ".check.json"
sys.argv = [os.path.join(here, "verl_trainer_compose.py"), kernels, check, src]
runpy.run_path(sys.argv[0], run_name="__main__")
with open(check) as f, open(out, "w") as o:
    json.dump({"cluster": json.loads(printed.getvalue().strip().splitlines()[-1]), "check": json.load(f)}, o)
