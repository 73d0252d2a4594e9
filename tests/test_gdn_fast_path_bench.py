"""benchmarks/gdn_fast_path.py: the step time of a Qwen3-Next model on the gated-DeltaNet fast path against torch's
paths, in one run on a GPU. Here (no GPU): its modes put each DeltaNet layer of a real transformers model on the
paths they name, and it refuses to run without a GPU or with a bad size, in one line."""

import subprocess
import sys

import pytest

from test_verify_profiles import REPO

BENCH = str(REPO / "benchmarks" / "gdn_fast_path.py")

MODES = f"""
import sys, types
sys.path.insert(0, {str(REPO / "benchmarks")!r})
import gdn_fast_path as g
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
from transformers.models.qwen3_next import modeling_qwen3_next as real
cfg = dict(g.CONFIG, hidden_size=64, num_attention_heads=4, head_dim=16, linear_num_key_heads=2,
           linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, intermediate_size=64,
           moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4)
model = Qwen3NextForCausalLM(Qwen3NextConfig(**cfg))
# A stand-in for the fast kernels (they need CUDA): two named functions where the env's imports would be.
def conv_fast(*a, **k): pass
def rule_fast(*a, **k): pass
kernels = types.SimpleNamespace(causal_conv1d_fn=conv_fast, chunk_gated_delta_rule=rule_fast,
                                torch_chunk_gated_delta_rule=real.torch_chunk_gated_delta_rule)
for mode in g.MODES:
    n = g.set_mode(model, mode, kernels)
    layer = next(m for m in model.modules() if type(m).__name__ == "Qwen3NextGatedDeltaNet")
    conv = layer.causal_conv1d_fn.__name__ if layer.causal_conv1d_fn else None
    print(mode, n, conv, layer.chunk_gated_delta_rule.__name__)
"""


def test_each_mode_puts_every_deltanet_layer_on_its_paths(env_python):
    out = subprocess.run([env_python, "-c", MODES], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-4:-1] == [
        "fast 3 conv_fast rule_fast",
        "conv-torch 3 None rule_fast",  # an env without causal-conv1d: fla's delta rule, torch's convolution
        "all-torch 3 None torch_chunk_gated_delta_rule",
    ]


@pytest.mark.parametrize("args, words", [(["--seq", "0"], "--seq: 0: give a whole number of at least 1"),
                                         (["--repeat", "x"], "--repeat: invalid")])
def test_a_bad_size_is_one_line(args, words):
    out = subprocess.run([sys.executable, BENCH, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and words in out.stderr.splitlines()[-1]


def test_without_a_gpu_it_says_where_to_run_it(env_python):
    probe = subprocess.run([env_python, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                           text=True, timeout=120)
    if probe.stdout.strip() != "False":
        pytest.skip("a GPU is visible: the benchmark would run")
    out = subprocess.run([env_python, BENCH], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no GPU visible" in out.stderr
