"""benchmarks/flashinfer_gdn_aot.py: a prebuilt FlashInfer GDN prefill module on the GPU against the float64 gated
delta rule. Here (no GPU), in the default env: its comparison takes FlashInfer's layouts (packed tokens, states as
[seq, head, V, K]) and restarts the recurrence at each sequence, so only a kernel that computes the rule passes; and it
refuses a folder without the package, or a machine without an sm_90 GPU, in one line."""

import json
import subprocess
import sys

import pytest

from test_verify_profiles import REPO

BENCH = REPO / "benchmarks" / "flashinfer_gdn_aot.py"

# Three stand-ins for the kernel's answer on CPU, from the float64 recurrence itself: right (each sequence alone, in
# FlashInfer's layouts), its states in the reference's [K, V] layout, and its output run over the packed tokens as one
# sequence (a kernel that ignores cu_seqlens).
CASES = f"""
import json, sys, torch
sys.path.insert(0, {str(BENCH.parent)!r})
import flashinfer_gdn_aot as aot
sys.path.insert(0, str(aot.KERNELS))
import check_gated_delta_rule as rule
x = aot.packed_inputs(torch, rule, "cpu")
names = ("q", "k", "v", "g", "beta")
outs, states = [], []
for start, end in zip(x["bounds"], x["bounds"][1:]):
    o, s = rule.reference(torch, *(x[n][None, start:end].double() for n in names), qk_l2norm=False)
    outs.append(o[0]); states.append(s[0].transpose(-1, -2))
out, state = torch.cat(outs).to(torch.bfloat16), torch.stack(states).float()
whole, _ = rule.reference(torch, *(x[n][None].double() for n in names), qk_l2norm=False)
print(json.dumps({{"right": aot.compare(torch, rule, x, out, state),
                  "state layout": aot.compare(torch, rule, x, out, state.transpose(-1, -2)),
                  "one sequence": aot.compare(torch, rule, x, whole[0].to(torch.bfloat16), state)}}))
"""


@pytest.fixture(scope="module")
def cases(env_python) -> dict:
    out = subprocess.run([env_python, "-c", CASES], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_a_kernel_computing_the_rule_passes_within_bf16_rounding(cases):
    assert cases["right"]["passed"] and cases["right"]["rel_err"]["out"] < 0.01, cases["right"]


@pytest.mark.parametrize("case, part", [("state layout", "state"), ("one sequence", "out")])
def test_a_kernel_that_gets_a_layout_or_the_sequences_wrong_fails(cases, case, part):
    assert not cases[case]["passed"] and cases[case]["rel_err"][part] > cases[case]["limit"], cases[case]


def test_a_folder_without_the_package_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--jit-cache", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "holds no flashinfer_jit_cache package" in out.stderr


def test_without_an_sm90_gpu_it_says_so_in_one_line(env_python):
    probe = subprocess.run([env_python, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True,
                           text=True, timeout=120)
    if probe.stdout.strip() != "False":
        pytest.skip("a GPU is visible: the benchmark would run")
    out = subprocess.run([env_python, str(BENCH)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "needs an sm_90 GPU" in out.stderr
