"""benchmarks/gdn_algorithm_agreement.py: the token-probability agreement of verify's tiny gated-DeltaNet and MoE
models under the two DeltaNet algorithms, bf16 rounding and routing's choice (GPU visit R's failures). Here (no GPU):
it runs on transformers' torch paths in the env, switches every DeltaNet layer between the algorithms, selects every
expert where asked, and refuses bad input in one line."""

import json
import os
import subprocess
import sys

import pytest

from test_verify_profiles import REPO

BENCH = str(REPO / "benchmarks" / "gdn_algorithm_agreement.py")
sys.path.insert(0, str(REPO / "benchmarks"))

import gdn_algorithm_agreement as g  # noqa: E402

from verlenv.catalog import families  # noqa: E402


def run(env_python, *args, **environ):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), **environ}
    return subprocess.run([env_python, BENCH, *args], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)


def test_a_run_on_cpu_measures_each_comparison_where_it_applies(env_python, tmp_path):
    out = tmp_path / "agreement.json"
    done = run(env_python, "--device", "cpu", "--family", "qwen3-next", "--family", "qwen3", "--seeds", "1",
               "--length", "8", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    rows = {(r["family"], r.get("experts")): r for r in record["results"]}
    assert set(rows) == {("qwen3-next", None), ("qwen3-next", "all selected"), ("qwen3", None)}  # qwen3: no experts
    hybrid = rows[("qwen3-next", None)]
    assert hybrid["deltanet_layers"] >= 1 and hybrid["tokens"] == 8 * 8
    # The recurrent algorithm really ran: torch's two algorithms differ in the last bits, never bit for bit.
    assert 0 < hybrid["chunk_vs_recurrent"]["probs_diff_max"] < 0.05
    assert "chunk_vs_recurrent" not in rows[("qwen3", None)]
    assert all(-1 <= r["chunk_vs_float32"]["pearson"] <= 1 for r in record["results"])
    assert record["device"] == "cpu" and record["command"].endswith("--out " + str(out))


def test_every_expert_is_selected_only_for_a_family_with_routed_experts():
    table = families.table()
    for name in ("qwen3-next", "qwen3.5-moe", "qwen3-moe", "glm4-moe", "deepseek-v3"):
        [row] = table.rows([table.families[name]])
        text = g.all_experts(row)["config"]
        text = text.get("text_config", text)
        experts = text.get("num_experts", text.get("n_routed_experts"))
        assert text["num_experts_per_tok"] == experts > 1, name
        original = row["config"].get("text_config", row["config"])
        assert original["num_experts_per_tok"] < experts, f"{name}: the row itself is left as it was"
    assert g.all_experts(table.rows([table.families["qwen3.5"]])[0]) is None


def test_the_recurrent_function_takes_the_chunked_calls_arguments_or_refuses():
    def recurrent(q, k, v, g=None, beta=None, initial_state=None, output_final_state=False):
        return (q, initial_state)
    call = g.as_chunked_call(recurrent)
    assert call(1, 2, 3, g=4, beta=5, initial_state=None, output_final_state=False, cu_seqlens=None) == (1, None)
    with pytest.raises(ValueError, match="cu_seqlens"):  # packed sequences: refused, never run unpacked
        call(1, 2, 3, cu_seqlens=[0, 4])


def test_bad_input_is_one_line_and_exit_2(env_python):
    done = run(env_python, "--device", "cpu", "--family", "no-such-family")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "unknown family no-such-family; valid:" in done.stderr and "qwen3.5" in done.stderr
    done = run(env_python, "--device", "cpu", "--seeds", "0")
    assert done.returncode == 2 and "at least 1" in done.stderr
    done = run(env_python, "--family", "qwen3-next", CUDA_VISIBLE_DEVICES="")  # --device cuda, no GPU visible
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no GPU visible" in done.stderr
