"""The gated-DeltaNet kernel checks (check_gated_delta_rule.py, check_causal_conv1d.py) on CPU, in an env with torch:
their float64 references agree with independent computations (a scalar loop, fla's naive recurrence, transformers'
own torch fallback, forward and backward), and each check passes a stand-in that computes the right thing at the
kernel's precision and fails a broken one (no decay, state leaking across packed sequences, a tap ahead of time,
convolving across packed sequences). The real kernels run in test_kernel_scripts.py's GPU test."""


import pytest

from test_kernel_scripts import PROGRAMS, has_modules, run_on_cpu

DRIVER = PROGRAMS / "linear_attention_on_cpu.py"

EXPECTED = {
    "reference/gated_delta_rule/scalar-loop": "pass",
    "reference/gated_delta_rule/fla-naive": "pass",
    "reference/gated_delta_rule/transformers-fallback": "pass",
    "reference/causal_conv1d/scalar-loop": "pass",
    "reference/causal_conv1d/update": "pass",
    "gdr/import": "pass", "gdr/chunk": "pass", "gdr/chunk/varlen": "pass", "gdr/fused_recurrent": "pass",
    "gdr/chunk/broken": "fail", "gdr/fused_recurrent/broken": "fail", "gdr/chunk/varlen/broken": "fail",
    "conv/import": "pass", "conv/bf16": "pass", "conv/fp32": "pass", "conv/seq_idx": "pass", "conv/update": "pass",
    "conv/bf16/broken": "fail", "conv/update/broken": "fail", "conv/seq_idx/broken": "fail",
}
# Scenarios that need a module of the env besides torch.
NEEDS = {"reference/gated_delta_rule/fla-naive": "fla",
         "reference/gated_delta_rule/transformers-fallback": "transformers"}


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory) -> dict:
    return run_on_cpu(DRIVER, tmp_path_factory.mktemp("linear-attention-on-cpu"))


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_linear_attention_check_logic_on_cpu(on_cpu, name):
    if name in NEEDS and not has_modules(on_cpu["python"], NEEDS[name]):
        pytest.skip(f"the torch environment lacks {NEEDS[name]}")
    got = on_cpu[name]
    assert got["status"] == EXPECTED[name], got["reason"]
    if name.endswith("/broken"):
        assert "above" in got["reason"], got["reason"]
