"""benchmarks/router_agreement.py: how much one routing rule of megatron-core (a group scored by its top
num_experts_per_tok // topk_group experts) or of vLLM (bf16 router logits) moves the probabilities of verify's tiny MoE
models, against transformers' routing. Here (no GPU, the env's transformers): its copy of transformers' routing is
exact, the megatron rule moves deepseek-v3's earlier row (2 // 2 = 1 expert a group) and not the row of now or
glm4-moe's (ungrouped), and bad input is one line."""

import json
import os
import subprocess

import pytest

from test_verify_profiles import REPO

BENCH = str(REPO / "benchmarks" / "router_agreement.py")


def run(env_python, *args):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([env_python, BENCH, *args], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def results(env_python, tmp_path, *args) -> list[dict]:
    out = tmp_path / "routing.json"
    done = run(env_python, "--seeds", "1", "--length", "24", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())["results"]


def test_megatrons_group_score_moves_only_a_row_whose_groups_it_scores_otherwise(env_python, tmp_path):
    now = {r["family"]: r for r in results(env_python, tmp_path)}
    [earlier] = results(env_python, tmp_path, "--family", "deepseek-v3", "--set", "n_group=4", "--set", "topk_group=2")
    assert now["deepseek-v3"]["routing"] == {"n_routed_experts": 8, "n_group": 2, "topk_group": 1,
                                             "num_experts_per_tok": 2}
    assert earlier["routing"]["n_group"] == 4 and earlier["routing"]["topk_group"] == 2
    for r in (*now.values(), earlier):
        for state in (r["before"], r["after"]):
            # The copy of transformers' routing gives transformers' probabilities exactly.
            assert state["copy_vs_transformers"]["probs_diff_max"] == 0, r["family"]
    for r in now.values():  # 2 // 1 = 2 (deepseek-v3), one group (glm4-moe): the same rule
        assert r["before"]["megatron_groups_vs_transformers"]["probs_diff_max"] == 0, r["family"]
    # 2 // 2 = 1: some tokens' groups, and so their experts, differ.
    assert earlier["before"]["megatron_groups_vs_transformers"]["probs_diff_max"] > 1e-3


@pytest.mark.parametrize("args, words", [
    (["--family", "nope"], "unknown family nope; valid:"), (["--set", "n_group"], "give KEY=N"),
    (["--set", "n_group=x"], "give KEY=N"), (["--seeds", "0"], "at least 1"),
])
def test_bad_input_is_one_line(env_python, args, words):
    done = run(env_python, *args)
    assert done.returncode == 2 and words in done.stderr and done.stdout == ""
