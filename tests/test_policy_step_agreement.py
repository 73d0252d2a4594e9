"""benchmarks/policy_step_agreement.py: whether a training step of verify's tiny MoE models breaks their own bf16
agreement (GPU visit V's deepseek-v3 step 2). Here (no GPU): it builds the check's model, moves its weights with the
check's learning rate, measures before and after, and refuses bad input in one line."""

import json
import os
import re
import subprocess
import sys

import pytest

from test_verify_profiles import REPO

BENCH = str(REPO / "benchmarks" / "policy_step_agreement.py")
sys.path.insert(0, str(REPO / "benchmarks"))

import policy_step_agreement as p  # noqa: E402


def run(env_python, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([env_python, BENCH, *args], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def test_the_update_moves_the_policy_and_both_states_are_measured(env_python, tmp_path):
    out = tmp_path / "step.json"
    done = run(env_python, "--family", "deepseek-v3", "--seeds", "1", "--length", "8", "--steps", "2", "--lr", "1e-3",
               "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    [r] = json.loads(out.read_text())["results"]
    before, after = r["before"], r["after"]
    assert (r["family"], r["steps"], r["lr"]) == ("deepseek-v3", 2, 1e-3)
    assert abs(before["entropy"] - after["entropy"]) > 0.01  # the weights moved the policy
    assert 0.2 < before["routed_influence"] < 0.3  # calibrated as the check's (families.toml routed_influence 0.25)
    for s in (before, after):
        assert -1 <= s["bf16_vs_float32"]["pearson"] <= 1 and s["bf16_vs_float32"]["probs_diff_mean"] >= 0


def test_its_learning_rate_is_the_checks():
    source = (REPO / "src" / "verlenv" / "verify" / "kernels" / "check_verl_trainer.py").read_text()
    assert float(re.search(r'optim\.lr=([0-9.e-]+)"', source).group(1)) == p.CHECK_LR


@pytest.mark.parametrize("args, words", [
    (["--family", "nope"], "unknown family nope; valid:"), (["--steps", "0"], "at least 1"),
    (["--lr", "-1"], "give a positive number"), (["--lr", "x"], "give a positive number"),
])
def test_bad_input_is_one_line(env_python, args, words):
    done = run(env_python, *args)
    assert done.returncode == 2 and words in done.stderr and done.stdout == ""
