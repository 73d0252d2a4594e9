"""The CPU side of the SGLang check (kernels/check_sglang.py and its _engines.py): the engine arguments against
SGLang's own ServerArgs and argument parser, the model and prompts it generates from (the trainer check's _models.py),
the kernel-distribution vetting, the JIT-cache accounting, the child process an engine may kill, and the judging of
the engine's tokens. The generation itself needs a GPU (test marked `gpu`).

SGLang's own classes are used where an env has SGLang ($SGLANG_PYTHON, else this checkout's .venv-verl-0.9-sglang or
another .venv-* with sglang); those tests skip elsewhere. The rest needs only the standard library.
"""

import json
import operator
import os
import select
import subprocess
import sys

import pytest

from test_kernel_scripts import KERNELS, REPO, has_modules, load, results_of
from verlenv.catalog import backends, families, gpus, packages, stacks
from verlenv.cluster.trainer import trainer_spec

IMPORT_SCRIPT = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib.util as u; "
                 "s = u.spec_from_file_location('c', sys.argv[1] + '/check_sglang.py'); "
                 "s.loader.exec_module(u.module_from_spec(s))")
# Versions from locks/verl-0.9-sglang.linux-64.txt.
LOCKED = {"sglang-kernel": "0.4.2.post2", "sgl-kernel": None, "flashinfer-python": "0.6.11.post1",
          "flashinfer-cubin": "0.6.11.post1"}
FAMILIES = {f["name"]: f for f in families.table().rows(list(families.table().families.values()))}


def sglang():
    return load("sglang")


def engines():
    return load("_engines")


def sglang_python() -> str | None:
    """A python whose env has SGLang: $SGLANG_PYTHON, else this checkout's .venv-* envs."""
    candidates = [os.environ.get("SGLANG_PYTHON", ""), str(REPO / ".venv-verl-0.9-sglang" / "bin" / "python")]
    for python in filter(None, candidates + sorted(map(str, REPO.glob(".venv-*/bin/python")))):
        if os.path.exists(python) and has_modules(python, "sglang"):
            return python
    return None


class Profile:
    """The part of _common.Profile the check reads."""

    def __init__(self, trainer=None, thorough=False):
        self.trainer, self.thorough, self.beside = trainer or {}, thorough, ()


# Runs in the SGLang env: the tiny model written as the check writes it (_models, the llama row), then the check's
# engine arguments for both modes through SGLang's ServerArgs (device cpu: the accelerator probe is the only GPU part
# of its __post_init__) and the same settings through its argument parser; the prompts against the tokenizer, and
# transformers' reference on CPU (how many prompts are near ties).
IN_ENV = r'''
import argparse, dataclasses, importlib.util, json, sys
KERNELS, MODEL, FAMILY = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, KERNELS)
spec = importlib.util.spec_from_file_location("check_sglang", KERNELS + "/check_sglang.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)
import _engines, _models, torch
from sglang.srt.server_args import ServerArgs
from transformers import AutoTokenizer

torch.set_num_threads(2)
_models.write_tokenizer(MODEL)
_models.write_model(MODEL, torch, FAMILY)
fields = {f.name for f in dataclasses.fields(ServerArgs)}
out = {}
for mode, thorough in (("fast", False), ("thorough", True)):
    kwargs, missing = check.engine_kwargs(MODEL, thorough, fields)
    args = ServerArgs(**kwargs, device="cpu")
    shown = ("disable_cuda_graph", "disable_piecewise_cuda_graph", "max_total_tokens", "attention_backend",
             "mem_fraction_static", "skip_tokenizer_init")
    out[mode] = {"missing": missing, **{k: getattr(args, k) for k in shown}}
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
cli = parser.parse_args(["--model-path", MODEL, "--disable-cuda-graph", "--disable-piecewise-cuda-graph",
                         "--max-total-tokens", str(check.KV_TOKENS), "--attention-backend", check.ATTENTION[False]])
out["cli"] = {k: getattr(cli, k) for k in ("disable_cuda_graph", "disable_piecewise_cuda_graph", "max_total_tokens",
                                          "attention_backend")}
prompts = check.prompts_for(torch)
tokenizer = AutoTokenizer.from_pretrained(MODEL)
out["prompts"] = [tokenizer.convert_ids_to_tokens(p) for p in prompts]
picks, margins = _engines.transformers_greedy(torch, MODEL, prompts, device="cpu")
out["picks"], out["margins"] = picks, margins
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def in_env(tmp_path_factory) -> dict:
    python = sglang_python()
    if python is None:
        pytest.skip("no python with sglang: set SGLANG_PYTHON or install .venv-verl-0.9-sglang (verlenv install "
                    "--variant sglang)")
    model = tmp_path_factory.mktemp("sglang-model")
    proc = subprocess.run([python, "-c", IN_ENV, str(KERNELS), str(model), json.dumps(FAMILIES["llama"])],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_engine_arguments_are_sglangs_own_and_do_what_the_modes_say(in_env):
    assert in_env["fast"] == {"missing": [], "disable_cuda_graph": True, "disable_piecewise_cuda_graph": True,
                              "max_total_tokens": 4096, "attention_backend": "fa3", "mem_fraction_static": 0.2,
                              "skip_tokenizer_init": True}
    assert in_env["thorough"] == {**in_env["fast"], "disable_cuda_graph": False, "disable_piecewise_cuda_graph": False,
                                  "max_total_tokens": None, "attention_backend": "flashinfer"}
    assert in_env["cli"] == {"disable_cuda_graph": True, "disable_piecewise_cuda_graph": True,
                             "max_total_tokens": 4096, "attention_backend": "fa3"}


@pytest.mark.slow
def test_the_prompts_are_words_of_the_models_tokenizer_and_most_are_judged(in_env):
    """Every prompt starts with <s> and holds ordinary words only (no <unk>, no vision words); the reference's first
    picks are near ties for few prompts, so the judge sees most of them."""
    m = load("_models")
    for tokens in in_env["prompts"]:
        assert tokens[0] == "<s>" and all(t.startswith("w") or t in m.CHAT_WORDS + m.DIGITS for t in tokens[1:])
    judged = [x for x in in_env["margins"] if x >= engines().NEAR_TIE]
    assert len(in_env["picks"]) == engines().PROMPTS and len(judged) >= engines().PROMPTS * 3 // 4, in_env["margins"]
    assert all(len(p) == engines().NEW_TOKENS for p in in_env["picks"])


def test_an_sglang_without_a_setting_gets_the_others_and_says_which():
    # An older SGLang's ServerArgs without piecewise graphs (0.5.12 has them): the switch is left out, not passed.
    fields = {"model_path", "dtype", "mem_fraction_static", "context_length", "random_seed", "attention_backend",
              "skip_tokenizer_init", "log_level", "disable_radix_cache", "disable_cuda_graph", "max_total_tokens"}
    kwargs, missing = sglang().engine_kwargs("/m", False, fields)
    assert missing == ["disable_piecewise_cuda_graph"]
    assert kwargs["disable_cuda_graph"] is True and kwargs["max_total_tokens"] == 4096
    assert "disable_piecewise_cuda_graph" not in kwargs
    thorough, missing = sglang().engine_kwargs("/m", True, fields)
    assert missing == [] and "disable_cuda_graph" not in thorough and "max_total_tokens" not in thorough


def test_the_model_is_the_first_text_family_the_profile_names():
    check = sglang()
    rows = [FAMILIES["qwen2.5-vl"], FAMILIES["qwen3"], FAMILIES["llama"]]
    assert check.text_family(Profile({"families": rows}))["name"] == "qwen3"
    common = load("_common")
    with pytest.raises(common.Skipped, match="names no text model family"):
        check.text_family(Profile({"families": [FAMILIES["qwen2.5-vl"]]}))
    with pytest.raises(common.Skipped):
        check.text_family(Profile())


@pytest.mark.parametrize("versions, complaint", [
    ({**LOCKED, "sgl-kernel": "0.3.21"}, "sglang-kernel 0.4.2.post2 and sgl-kernel 0.3.21 both install sgl_kernel/"),
    ({**LOCKED, "flashinfer-cubin": "0.6.12"}, "flashinfer-cubin 0.6.12 with flashinfer-python 0.6.11.post1"),
])
def test_clashing_kernel_distributions_are_one_line(versions, complaint):
    problem = sglang().kernel_dist_problem(versions)
    assert problem is not None and complaint in problem and "\n" not in problem


def test_the_locked_kernel_distributions_pass():
    assert sglang().kernel_dist_problem(LOCKED) is None
    assert sglang().kernel_dist_problem({**LOCKED, "sglang-kernel": None, "sgl-kernel": "0.3.21"}) is None


def test_output_ids_of_one_answer_or_many():
    check = sglang()
    assert check.output_ids({"text": None, "output_ids": [5, 6], "meta_info": {}}) == [[5, 6]]
    assert check.output_ids([{"output_ids": [1]}, {"output_ids": [2, 3]}, {"text": "x"}]) == [[1], [2, 3], []]


def test_jit_caches_follow_their_env_vars_and_only_nvcc_caches_count_as_builds(tmp_path):
    eng, jit = engines(), load("_jit_caches")
    caches = jit.watched(packages.table().jit_caches, "sglang")
    dirs = eng.jit_cache_dirs(caches, {"TVM_FFI_CACHE_DIR": str(tmp_path / "tvm"),
                                                 "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi"),
                                                 "TRITON_CACHE_DIR": str(tmp_path / "tr"),
                                                 "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "in")})
    assert dirs == {"sglang": str(tmp_path / "tvm"), "flashinfer": str(tmp_path / "fi" / ".cache" / "flashinfer"),
                    "triton": str(tmp_path / "tr"), "torchinductor": str(tmp_path / "in")}
    before = {name: eng.cache_files(path) for name, path in dirs.items()}
    # What a first generation leaves (the layouts of tvm-ffi 0.1.9, FlashInfer 0.6.11, Triton 3.6, seen here).
    made = [tmp_path / "tvm" / "sgl_kernel_jit_activation_bf16_t_true_dce174b0398896c8" / name
            for name in ("build.ninja", "cuda_0.o", "sgl_kernel_jit_activation_bf16_t_true.so")]
    made += [tmp_path / "fi" / ".cache" / "flashinfer" / "0.6.11.post1" / "90a" / "cached_ops" / "sampling" / name
             for name in ("build.ninja", "sampling.so")]
    made += [tmp_path / "tr" / "ab12" / "__triton_launcher.so"]  # compiled by gcc, not nvcc
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    new = eng.new_cache_files(before, dirs)
    assert [len(new[n]) for n in ("sglang", "flashinfer", "triton", "torchinductor")] == [3, 2, 1, 0]
    assert eng.nvcc_built(new, caches) == [str(made[4]), str(made[2])]


def test_the_engines_answer_comes_back_from_its_child(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS))  # the spawned child finds _engines as a script's child does
    assert engines().run_isolated(operator.add, 2, 3) == 5


@pytest.mark.parametrize("fn, args, complaint", [
    (json.loads, ("{",), "the engine failed: JSONDecodeError"),
    # An engine that ends its own process tree (SGLang's SIGQUIT handler calls kill_process_tree on itself).
    (os._exit, (0,), "the engine's process died with exit code 0 before answering"),
    (os.abort, (), "the engine's process died with exit code -6 before answering"),
])
def test_an_engine_that_raises_or_dies_is_a_failure_not_a_lost_result(monkeypatch, fn, args, complaint):
    monkeypatch.syspath_prepend(str(KERNELS))
    common = load("_common")
    with pytest.raises(common.Failed) as caught:
        engines().run_isolated(fn, *args)
    assert complaint in str(caught.value)


def test_an_engine_that_never_answers_is_killed_at_its_timeout(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS))
    common = load("_common")
    with pytest.raises(common.Failed, match="did not answer within 1 s"):
        engines().run_isolated(select.select, [], [], [], timeout=1.0)  # blocks forever: only the timeout ends it


def test_agreement_judges_the_first_token_of_every_prompt_but_near_ties():
    eng = engines()
    n, clear, tie = eng.NEW_TOKENS, 1.0, eng.NEAR_TIE / 2
    want = [[7] * n, [9] * n, [4] * n]
    numbers, problems = eng.agreement([[7] * n, [9] + [1] * (n - 1), [5] * n], want, [clear, clear, tie])
    assert problems == [] and numbers["first_token_matches"] == 2 and numbers["first_token_judged"] == 2
    assert numbers["token_agreement"] == 9 / 24
    _, problems = eng.agreement([[8] * n, [9] * 3, [4] * n], want, [clear, clear, clear])
    assert problems == ["prompts [1] did not get 8 tokens",
                        "first greedy token differs from transformers for 1 of 3 prompts (prompts [0]; near ties of "
                        "the reference not judged)"]
    _, problems = eng.agreement([[7] * n], want, [clear] * 3)
    assert problems[0] == "the engine answered 1 of 3 prompts"


def test_the_script_is_importable_where_only_the_standard_library_is():
    """The runner loads nothing but the stdlib before it knows SGLang is there: the module level must not import it."""
    proc = subprocess.run([sys.executable, "-S", "-c", IMPORT_SCRIPT, str(KERNELS)], check=False, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_rollout_row_reads_sglangs_own_phase_lines():
    """The [rollouts.sglang] row against SGLang 0.5.12's lines as its scheduler prints them (model_runner.py)."""
    phases = load("_phases")
    row = backends.table().rollout("sglang").row()
    texts = ["(TaskRunnerV1 pid=1) reward loop manager initialized",
             "(SGLangHttpServer pid=2) SGLang http server: rollout_mode=<RolloutMode.HYBRID: 'hybrid'>, "
             "replica_rank=0, node_rank=0, nnodes=1, cuda_visible_devices='0', role=null",
             "[2026-11-26 10:00:01 TP0] Init torch distributed ends. elapsed=0.41 s, mem usage=0.09 GB",
             "[2026-11-26 10:00:02 TP0] Load weight end. elapsed=0.18 s, type=LlamaForCausalLM, avail mem=70.11 GB, "
             "mem usage=0.01 GB.",
             "[2026-11-26 10:00:09 TP0] Capture cuda graph end. Time elapsed: 6.52 s. mem usage=0.05 GB. "
             "avail mem=52.10 GB.",
             "[2026-11-26 10:00:20 TP0] Capture piecewise CUDA graph end. Time elapsed: 10.87 s. mem usage=0.02 GB. "
             "avail mem=52.08 GB.",
             "(TaskRunnerV1 pid=1) LLMServerManager: ['127.0.0.1:30000']"]
    lines = [phases.Line(float(i), t) for i, t in enumerate(texts)]
    out = phases.phases(lines, None, 10.0, {}, rollout=row)
    parts = {k.rsplit("/", 1)[1]: v for k, v in out.items() if k.startswith("phase/rollout_server/")}
    assert parts == {"server_process_s": 1.0, "dist_init_s": 0.41, "model_load_s": 0.18, "graph_capture_s": 6.52,
                     "piecewise_graph_capture_s": 10.87}
    assert list(parts) == ["server_process_s", "dist_init_s", "model_load_s", "graph_capture_s",
                           "piecewise_graph_capture_s"]


@pytest.mark.gpu
@pytest.mark.skipif(not gpus.gpu_details(), reason="needs an NVIDIA GPU (SGLang's engine generates on it)")
def test_sglang_generates_on_this_gpu(tmp_path):
    python = sglang_python()
    if python is None:
        pytest.skip("no python with sglang: install .venv-verl-0.9-sglang (verlenv install --variant sglang)")
    variant = stacks.load(REPO / "stacks.toml").variant("verl-0.9", "sglang")
    visible = gpus.gpu_details()
    profile = {**gpus.select_profile("auto", visible).for_checks(len(visible)),
               "trainer": {**trainer_spec(variant), "families": [FAMILIES["llama"]], "parallel": 1}}
    proc = subprocess.run([python, str(KERNELS / "check_sglang.py"), "--out", str(tmp_path / "r.json"), "--profile",
                           json.dumps(profile)], capture_output=True, text=True, timeout=900)
    results = {r["check"]: r for r in results_of(tmp_path / "r.json")}
    assert results["sglang/generate/bf16"]["status"] == "pass", proc.stdout[-3000:]
