"""verify --ray's NCCL all-reduce on this machine's GPUs (tests/data/programs/allreduce_gpus.py, in the default env:
Ray and torch). Marked gpu: skipped where no NVIDIA GPU is visible."""

import json
import subprocess

import pytest

from test_kernel_scripts import REPO, has_modules

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1800)]


def test_the_nccl_allreduce_sums_exactly_on_every_gpu_and_names_the_ranks_left_without_one(env_python, tmp_path):
    if not has_modules(env_python, "ray", "torch"):
        pytest.skip(f"{env_python} has no Ray or no torch")
    out = tmp_path / "allreduce.json"
    proc = subprocess.run([env_python, str(REPO / "tests" / "data" / "programs" / "allreduce_gpus.py"),
                           str(REPO / "src"), str(out)], capture_output=True, text=True, timeout=1500, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    print(json.dumps(data, indent=1))  # the numbers, for the report
    whole = data["all"]
    assert data["gpus"] >= 1 and whole["ok"], whole
    assert (whole["world"], whole["nodes"], whole["wrong_elements"]) == (data["gpus"], 1, 0), whole
    assert whole["nccl"] and all(row["algbw_gbps"] > 0 for row in whole["rows"]), whole
    # Another job's placement group holds every GPU: each rank waits for one, and all are named once the step's
    # bound is up.
    where = ", ".join(f"{i} (node this-host)" for i in range(data["gpus"]))
    assert data["held"]["error"] == f"rank{'s' if data['gpus'] > 1 else ''} {where} did not start within 5 s", data
