"""Slow paths said in words: families.toml's `needs` and `attention` keys, the static check family-kernels/<family>,
and data/kernel_paths.toml with the trainer check's reader of it (verify/kernels/_kernel_paths.py), checked against
the real lines transformers and vLLM print (read from their sources in the default env) and vLLM's own backend order."""

import ast
import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from test_kernel_scripts import PROGRAMS, has_modules, load, torch_python
from verlenv.catalog import families
from verlenv.errors import UserError
from verlenv.verify import kernel_paths

paths = load("_kernel_paths")
TABLE = kernel_paths.table()
# A Qwen3-Next-like row, as the lead will write it.
NEXT = textwrap.dedent("""
    [defaults]
    logit_std = 1.0
    embedding_scale = 1.0
    routed_influence = 0.4
    fast = ["qwen3-next"]
    [shrink.text]
    [families.qwen3-next]
    description = "d"
    exercises = "e"
    config_class = "Qwen3NextConfig"
    model_class = "Qwen3NextForCausalLM"
    [families.qwen3-next.needs]
    causal-conv1d = "its gated-DeltaNet short convolution on torch's path"
    flash-linear-attention = "its gated delta rule on torch's chunked path"
    [families.deepseek-v3]
    description = "d"
    exercises = "e"
    config_class = "DeepseekV3Config"
    model_class = "DeepseekV3ForCausalLM"
    attention = "mla"
    config = { kv_lora_rank = 512, qk_rope_head_dim = 64 }
    """)


def table_of(tmp_path, text=NEXT) -> families.Table:
    path = tmp_path / "families.toml"
    path.write_text(text)
    return families.load(path)


def test_a_rows_needs_and_attention_reach_the_trainer_check(tmp_path):
    t = table_of(tmp_path)
    row = t.rows([t.families["qwen3-next"]])[0]
    assert row["needs"]["causal-conv1d"] == "its gated-DeltaNet short convolution on torch's path"
    assert row["attention"] is None and t.families["deepseek-v3"].attention == "mla"
    kernel_paths.check_rows(t)
    kernel_paths.check_rows(families.table())  # the packaged rows name real packages and kinds


@pytest.mark.parametrize("edit, message", [
    (('[families.qwen3-next.needs]', '[families.qwen3-next.needs]\nno-such-package = "x"'),
     "families.qwen3-next.needs: 'no-such-package' is no package"),
    (('attention = "mla"', 'attention = "linear"'), "families.deepseek-v3.attention is 'linear'; valid: mla, sinks"),
])
def test_a_row_naming_an_unknown_package_or_attention_kind_is_one_line(tmp_path, edit, message):
    with pytest.raises(UserError, match=message):
        kernel_paths.check_rows(table_of(tmp_path, NEXT.replace(*edit)))


@pytest.mark.parametrize("edit, message", [
    (('[families.qwen3-next.needs]', '[families.qwen3-next.needs]\napex = ""'),
     "needs must be a table of package = what runs slowly"),
    (('attention = "mla"', 'attention = ""'), "attention must be a non-empty string"),
])
def test_a_malformed_needs_or_attention_is_one_line(tmp_path, edit, message):
    with pytest.raises(UserError, match=message):
        table_of(tmp_path, NEXT.replace(*edit))


def results(t, installed, provided=("causal-conv1d", "flash-linear-attention"), unbuilt_ok=(), rows=None):
    rows = rows if rows is not None else t.rows([t.families["qwen3-next"]])
    return kernel_paths.check_family_kernels(rows, installed, frozenset(provided), frozenset(unbuilt_ok), t)


def test_a_family_without_its_fast_kernels_is_said_in_words(tmp_path):
    t = table_of(tmp_path)
    both = {"causal-conv1d": ["1.7.0"], "flash-linear-attention": ["0.5.2"]}
    [ok] = results(t, both)
    assert ok.status == "pass" and ok.name == "family-kernels/qwen3-next"
    [missing] = results(t, {"flash-linear-attention": ["0.5.2"]})
    assert missing.status == "fail" and missing.blocking
    assert missing.reason.startswith("family qwen3-next would run its gated-DeltaNet short convolution on torch's "
                                     "path: causal-conv1d is not importable (the env should have causal-conv1d")
    # Not built yet where no GPU is there to target: said, not failed; a stack without it: said, not failed.
    assert results(t, {"flash-linear-attention": ["0.5.2"]}, unbuilt_ok=("causal-conv1d",))[0].status == "warn"
    [old] = results(t, {}, provided=())
    assert old.status == "warn" and "flash-linear-attention is not importable" in old.reason and not old.blocking
    # A family with no needs gets no result; a shrunk config.json takes the needs of the table's row of its class.
    assert results(t, {}, rows=t.rows([t.families["deepseek-v3"]])) == []
    shrunk = {"name": "config-qwen3-next-80b", "model_class": "Qwen3NextForCausalLM", "needs": {}}
    assert results(t, {}, rows=[shrunk])[0].reason.startswith("family config-qwen3-next-80b would run")


def test_the_kernel_paths_table_is_checked_when_read(tmp_path):
    good = (Path(kernel_paths.DATA)).read_text()
    bad = good.replace('backend = "TRITON_MLA"\narchs = []', 'backend = "TRITON_MLA"\narchs = ["9.0"]')
    (tmp_path / "k.toml").write_text(bad)
    with pytest.raises(UserError, match="attention.mla: the last row must take any arch and head size"):
        kernel_paths.load(tmp_path / "k.toml")
    (tmp_path / "k.toml").write_text(good.replace('signature = "The fast path', 'signature = "(The fast path'))
    with pytest.raises(UserError, match="fallbacks.transformers-fast-path.signature: not a regular expression"):
        kernel_paths.load(tmp_path / "k.toml")


# ---- the trainer check's reader, on the lines the libraries really print ----

def env_file(module_path: str) -> Path:
    """A file of the default env's packages, found without importing them."""
    python = torch_python()
    if python is None or not has_modules(python, module_path.split(".")[0]):
        pytest.skip(f"no env with {module_path.split('.')[0]}")
    code = f"import importlib.util; print(importlib.util.find_spec({module_path!r}).origin)"
    return Path(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def warning_once_texts(path: Path) -> list[str]:
    """The messages of every logger.warning_once call of a file whose message is string constants."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "warning_once" and node.args:
            try:
                out.append(ast.literal_eval(node.args[0]))
            except ValueError:
                pass
    return out


def test_transformers_fallback_line_is_caught_as_it_is_printed():
    source = env_file("transformers.models.qwen3_next.modeling_qwen3_next")
    [line] = [t for t in warning_once_texts(source) if t.startswith("The fast path")]
    log = f"(WorkerDict pid=812) [transformers] {line}\n(TaskRunner pid=700) step:1 - loss:0.3"
    [said] = paths.slow_paths([log], TABLE["fallbacks"], "qwen3-next")
    assert said.startswith("family qwen3-next trained on a slow path (transformers-fast-path): transformers trained "
                           "a layer on its torch fallback")
    assert paths.slow_paths(["(TaskRunner pid=700) step:1 - loss:0.3"], TABLE["fallbacks"], "qwen3-next") == []
    # Mamba-style layers print another list after the same words.
    mamba = env_file("transformers.models.mamba2.modeling_mamba2")
    assert any(paths.slow_paths([t], TABLE["fallbacks"], "x") for t in warning_once_texts(mamba))


@pytest.fixture(scope="module")
def vllm_facts() -> dict:
    python = torch_python()
    if python is None or not has_modules(python, "vllm"):
        pytest.skip("no env with vLLM")
    names = sorted({r["backend"] for rows in TABLE["attention"].values() for r in rows})
    proc = subprocess.run([python, str(PROGRAMS / "vllm_backend_facts.py"), *names], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_backend_lines_vllm_prints_are_read(vllm_facts):
    chosen, selected = vllm_facts["formats"]
    text = "\n".join([
        "(EngineCore_DP0 pid=9) INFO 12-05 12:00:01 [cuda.py:448] "
        + chosen % ("FLASH_ATTN_MLA", "['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA']"),
        "(EngineCore_DP0 pid=9) INFO 12-05 12:00:02 [cuda.py:420] " + selected % "AttentionBackendEnum.TRITON_ATTN",
        "(vLLM) INFO [cuda.py:521] Using backend AttentionBackendEnum.FLASH_ATTN for vit attention",
    ])
    assert paths.backends_used([text]) == ["FLASH_ATTN_MLA", "TRITON_ATTN"]


def test_the_table_follows_vllms_own_order_and_conditions(vllm_facts):
    order, backends = vllm_facts["order"], vllm_facts["backends"]
    for kind, key in (("mla", "mla"), ("sinks", "mha")):
        rows = [r["backend"] for r in TABLE["attention"][kind]]
        for arch in TABLE["attention_archs"]:
            vllm_order = [b for b in order[f"{key}/{arch}"] if b in rows]
            assert vllm_order == rows, (kind, arch)
    assert backends["FLASH_ATTN_MLA"] == {"imported": False, "bases": ["MLACommonBackend"],
                                          "defines_head_sizes": False, "capability": "capability.major == 9"}
    assert backends["FLASHMLA"]["head_sizes"] == [320, 576] and backends["FLASHMLA"]["archs"] == ["9.0"]
    assert backends["TRITON_MLA"]["head_sizes"] == [] and backends["TRITON_MLA"]["archs"] == ["8.0", "9.0"]
    assert backends["FLASH_ATTN"]["sink_refused"] == {"8.0": "sink not supported on compute capability < 9.0",
                                                      "9.0": None}
    assert backends["TRITON_ATTN"]["sink_refused"] == {"8.0": None, "9.0": None}


@pytest.mark.parametrize("attention, config, arch, want", [
    ("mla", {"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "9.0", "FLASH_ATTN_MLA"),
    ("mla", {"text_config": {"kv_lora_rank": 256, "qk_rope_head_dim": 64}}, "9.0", "FLASH_ATTN_MLA"),
    ("mla", {"kv_lora_rank": 32, "qk_rope_head_dim": 16}, "9.0", "TRITON_MLA"),  # a shrunk one
    ("mla", {"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "8.0", "TRITON_MLA"),
    ("sinks", {}, "9.0", "FLASH_ATTN"),
    ("sinks", {}, "8.0", "TRITON_ATTN"),
])
def test_the_expected_backend_per_family_and_arch(attention, config, arch, want):
    row = paths.expected_backend(TABLE["attention"][attention], arch, paths.mla_head_size(config))
    assert row["backend"] == want


def test_a_rollout_on_another_backend_is_said_in_words():
    family = {"name": "deepseek-v3", "attention": "mla", "config": {"kv_lora_rank": 512, "qk_rope_head_dim": 64}}
    line = "INFO [cuda.py:448] Using {} attention backend out of potential backends: ['{}']."
    assert paths.backend_problem(family, TABLE, "9.0", [line.format("FLASH_ATTN_MLA", "FLASH_ATTN_MLA")]) is None
    said = paths.backend_problem(family, TABLE, "9.0", [line.format("TRITON_MLA", "TRITON_MLA")])
    assert said.startswith("family deepseek-v3's rollout used backend TRITON_MLA, not FLASH_ATTN_MLA (mla attention "
                           "on sm_90: FlashAttention 3's MLA kernel")
    assert "logged no attention backend" in paths.backend_problem(family, TABLE, "9.0", ["no vLLM here"])
    assert paths.backend_problem(family, TABLE, "12.0", []) is None  # the table was not read for Blackwell
    assert paths.backend_problem({"name": "llama", "config": {}}, TABLE, "9.0", []) is None


def test_the_trainer_check_fails_a_family_run_on_its_slow_path_or_another_backend():
    """check_verl_trainer judges each family's run with the packaged table: a family that needs the DeltaNet kernels
    fails when transformers printed its fallback line, an MLA or sinks family when vLLM chose another backend than its
    own order gives on sm_90; a family that names neither is not judged so."""
    trainer = load("verl_trainer")
    table = kernel_paths.table()
    rows = {f.name: f.row(families.table().defaults) for f in families.table().families.values()}
    fallback = ("[transformers] The fast path is not available because one of the required library is not "
                "installed. Falling back to torch implementation.")
    chosen = "INFO cuda.py:1 Using {} attention backend out of potential backends: ['FLASH_ATTN_MLA', 'FLASHMLA']."
    problems = trainer.kernel_path_problems(rows["qwen3-next"], table, "9.0", ["step:1", fallback])
    assert len(problems) == 1 and problems[0].startswith("family qwen3-next trained on a slow path"), problems
    assert trainer.kernel_path_problems(rows["qwen3-next"], table, "9.0", ["step:1"]) == []
    assert trainer.kernel_path_problems(rows["llama"], table, "9.0", [fallback]) == []  # needs nothing: not judged
    mla = rows["deepseek-v3"]
    assert trainer.kernel_path_problems(mla, table, "9.0", [chosen.format("FLASH_ATTN_MLA")]) == []
    wrong = trainer.kernel_path_problems(mla, table, "9.0", [chosen.format("TRITON_MLA")])
    assert len(wrong) == 1 and "used backend TRITON_MLA, not FLASH_ATTN_MLA" in wrong[0], wrong
    assert trainer.kernel_path_problems(mla, None, "9.0", [chosen.format("TRITON_MLA")]) == []  # an older profile
