"""The GPU kernel check scripts (src/verlenv/verify/kernels), run where there is no GPU: the result-file contract,
argument errors, the pure helpers and references, and - with an environment that has torch - every check's
comparison logic on CPU, against stand-ins for the GPU-only packages that must pass when right and fail when
broken.
"""

import importlib.util
import json
import math
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import verlenv
from verlenv.catalog import packages

KERNELS = Path(verlenv.__file__).parent / "verify" / "kernels"
REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).parents[1] / "data" / "programs"
PROFILE = json.dumps({"key": "h100", "arch": "9.0", "fp8": True, "thresholds": {}})
# Script -> the skip reason it gives where nothing but the standard library is importable.
NOT_INSTALLED = {
    "torch": "torch not installed",
    "flash_attn": "flash-attn not installed",
    "gated_delta_rule": "flash-linear-attention not installed",
    "causal_conv1d": "causal-conv1d not installed",
    "apex": "NVIDIA apex not installed",
    "transformer_engine": "transformer-engine not installed",
    "megatron_core": "megatron-core not installed",
    "vllm": "vllm not installed",
    "sglang": "sglang not installed",
    "triton": "triton not installed",
    "nccl": "torch not installed",
    "verl": "verl not installed",
    "verl_trainer": "verl not installed",
}
# The package a script's results are filed under, where it is not the script's name.
PACKAGE_OF = {"verl_trainer": "verl", "gated_delta_rule": "flash-linear-attention"}
FIELDS = {"check", "package", "status", "reason", "numbers", "seconds"}


# The kernel folder's helpers (`_` files), importable by the scripts as top-level modules.
HELPERS = ("_common", "_jit_caches", "_engines", "_routed_experts", "_models", "_phases", "_kernel_paths")


def load(name: str):
    """A kernel script (or a helper: _common, _phases) as a module, the way the script itself finds its
    helpers (the kernel folder is its sys.path[0])."""
    for helper in HELPERS:
        if helper not in sys.modules:
            spec = importlib.util.spec_from_file_location(helper, KERNELS / f"{helper}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[helper] = module
            spec.loader.exec_module(module)
    if name in HELPERS:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(f"kernel_check_{name}", KERNELS / f"check_{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(name: str, out: Path, profile: str = PROFILE, python: str = sys.executable, env: dict | None = None):
    # -S: no site-packages, so none of the checked packages can be imported, whatever this machine has.
    return subprocess.run([python, "-S", str(KERNELS / f"check_{name}.py"), "--out", str(out), "--profile", profile],
                          capture_output=True, text=True, timeout=120, env=env)


def results_of(out: Path) -> list[dict]:
    def no_nan(token):
        raise AssertionError(f"{out} holds {token}, which is not JSON")

    results = json.loads(out.read_text(), parse_constant=no_nan)
    assert isinstance(results, list)
    for r in results:
        assert set(r) == FIELDS, r
        assert r["status"] in {"pass", "fail", "skip"}
        assert isinstance(r["check"], str) and isinstance(r["reason"], str) and isinstance(r["numbers"], dict)
        assert isinstance(r["seconds"], (int, float))
    return results


def test_every_script_is_there():
    assert sorted(p.stem.removeprefix("check_") for p in KERNELS.glob("*.py") if not p.name.startswith("_")) == \
        sorted(NOT_INSTALLED)


# What an env imports at top level: its stdlib and every module on its sys.path (run outside the kernels folder).
TOP_LEVEL = ("import pkgutil, sys; print('\\n'.join(set(sys.stdlib_module_names) | set(sys.builtin_module_names)"
             " | {m.name for m in pkgutil.iter_modules()}))")


def catalog_modules() -> set[str]:
    """Import names of everything the catalog pins or builds (flash-attn -> flash_attn)."""
    from packaging.requirements import Requirement

    from verlenv.catalog import stacks

    names = set()
    for variant in stacks.load(REPO / "stacks.toml").all_variants():
        names |= {canonicalize_name(Requirement(r).name) for r in variant.requirements}
        names |= {canonicalize_name(b.name) for b in variant.source_builds}
    return {n.replace("-", "_") for n in names} | {"apex", "megatron", "transformer_engine", "flash_attn"}


def test_no_kernel_module_is_named_like_an_importable_package(tmp_path):
    # The folder is on the path of every child a script spawns (vLLM's EngineCore, NCCL workers): a vllm.py or
    # flash_attn.py there shadows the real package (transformers then failed with KeyError: 'flash_attn').
    taken = catalog_modules()
    for python in filter(None, {sys.executable, torch_python()}):
        listing = subprocess.run([python, "-c", TOP_LEVEL], capture_output=True, text=True, cwd=tmp_path, check=True)
        taken |= set(listing.stdout.split())
    assert {"os", "verlenv", "flash_attn", "vllm"} <= taken  # the listing is real: stdlib, this env, the catalog
    modules = {p.stem for p in KERNELS.glob("*.py")} | {p.name for p in KERNELS.iterdir() if p.is_dir()}
    assert sorted(modules & taken) == []
    assert all(m.startswith(("check_", "_")) for m in modules), sorted(modules)


@pytest.mark.parametrize("name", [*NOT_INSTALLED, *HELPERS])
def test_script_compiles(name, tmp_path):
    path = KERNELS / (f"{name}.py" if name.startswith("_") else f"check_{name}.py")
    py_compile.compile(str(path), cfile=str(tmp_path / "out.pyc"), doraise=True)


@pytest.mark.parametrize("name", NOT_INSTALLED)
def test_without_its_package_a_script_writes_one_skip_and_exits_0(name, tmp_path):
    out = tmp_path / "deep" / "results.json"
    proc = run(name, out)
    assert proc.returncode == 0, proc.stderr
    [result] = results_of(out)
    assert result["status"] == "skip"
    assert result["reason"] == NOT_INSTALLED[name]
    # The runner files results under the script's canonical name.
    assert result["package"] == canonicalize_name(PACKAGE_OF.get(name, name))
    assert f"SKIP {result['check']}" in proc.stdout


@pytest.mark.parametrize("profile, complaint", [
    ("not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"key": "h100", "fp8": true}', "lacks arch"),
    ('{"key": "h100", "arch": "sm_90", "fp8": true}', "arch must be a compute capability"),
    ('{"key": "h100", "arch": "9.0", "fp8": "yes"}', "fp8 must be true or false"),
    ('{"key": "h100", "arch": "9.0", "fp8": true, "thresholds": {"bf16_max_rel_err": "big"}}',
     "must be a finite number"),
    ('{"key": "h100", "arch": "9.0", "fp8": true, "thorough": "yes"}', "thorough must be true or false"),
    ('{"key": "h100", "arch": "9.0", "fp8": true, "rollout_tp": 0}', "rollout_tp must be a positive integer"),
    ('{"key": "h100", "arch": "9.0", "fp8": true, "actor_tp": 1.5}', "actor_tp must be a positive integer"),
    ('{"key": "h100", "arch": "9.0", "fp8": true, "beside": "verl_trainer"}', "beside must be a list"),
])
def test_a_bad_profile_is_one_line_and_exit_2(profile, complaint, tmp_path):
    out = tmp_path / "results.json"
    proc = run("flash_attn", out, profile=profile)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and complaint in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("name", NOT_INSTALLED)
def test_every_script_rejects_a_bad_profile(name, tmp_path):
    proc = run(name, tmp_path / "results.json", profile='{"key": "h100"}')
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_missing_out_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "-S", str(KERNELS / "check_torch.py"), "--profile", PROFILE],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == ["check_torch.py: the following arguments are "
                                                                         "required: --out"]


def test_each_result_is_written_before_the_next_check(tmp_path):
    out = tmp_path / "results.json"
    code = textwrap.dedent(f"""\
        import os, sys
        sys.path.insert(0, {str(KERNELS)!r})
        import _common
        report = _common.Report({str(out)!r})
        report.add("x/first", "x", "pass", numbers={{"a": 1.0}})
        os._exit(3)  # dies like a segfaulting kernel: no cleanup, no atexit
        """)
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert [r["check"] for r in results_of(out)] == ["x/first"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no temp file left behind


def test_one_check_raising_does_not_stop_the_others(tmp_path):
    common = load("_common")
    report = common.Report(str(tmp_path / "r.json"))

    def broken():
        raise ZeroDivisionError("boom")

    def skipped():
        raise common.Skipped("profile has no fp8")

    def failing():
        raise common.Failed("out relative error 0.5 above 0.01", {"out_rel_err": 0.5})

    common.run_check(report, "x/raises", "x", broken)
    common.run_check(report, "x/skip", "x", skipped)
    common.run_check(report, "x/fail", "x", failing)
    common.run_check(report, "x/pass", "x", lambda: ({"tflops": 350.0}, "fast enough"))
    common.run_check(report, "x/nan", "x", lambda: {"err": math.nan, "big": math.inf})
    got = {r["check"]: r for r in results_of(tmp_path / "r.json")}
    assert [r["status"] for r in got.values()] == ["fail", "skip", "fail", "pass", "pass"]
    assert got["x/raises"]["reason"] == "ZeroDivisionError: boom"
    assert got["x/skip"]["reason"] == "profile has no fp8"
    assert got["x/fail"]["numbers"] == {"out_rel_err": 0.5}
    assert got["x/pass"]["reason"] == "fast enough" and got["x/pass"]["numbers"] == {"tflops": 350.0}
    assert got["x/nan"]["numbers"] == {"err": "nan", "big": "inf"}


def test_profile_thresholds_override_the_defaults():
    common = load("_common")
    profile = common.parse_profile('{"key": "a100", "arch": "8.0", "fp8": false, '
                                   '"thresholds": {"bf16_max_rel_err": 0.02, "nccl_min_busbw_gbs_8gpu": 125}}')
    assert (profile.key, profile.arch, profile.fp8) == ("a100", "8.0", False)
    assert profile.max_rel_err("bf16") == 0.02
    assert profile.max_rel_err("fp16") == common.DEFAULT_THRESHOLDS["fp16_max_rel_err"] == 2e-3
    assert profile.threshold("flash_attn_min_ratio_vs_sdpa") == 1.0
    assert profile.optional_threshold("nccl_min_busbw_gbs_8gpu") == 125.0
    assert profile.optional_threshold("nccl_min_busbw_gbs_2gpu") is None
    # What the runner adds: the fast proof by default, one rollout and actor TP size, nothing running beside.
    assert (profile.thorough, profile.rollout_tp, profile.actor_tp, profile.beside) == (False, 1, 1, ())
    run = common.parse_profile('{"key": "h100", "arch": "9.0", "fp8": true, "thorough": true, "rollout_tp": 2, '
                               '"actor_tp": 2, "beside": ["verl_trainer"]}')
    assert (run.thorough, run.rollout_tp, run.actor_tp, run.beside) == (True, 2, 2, ("verl_trainer",))


def test_timing_stats():
    assert load("_common").timing_stats([3.0, 1.0, 2.0, 10.0]) == {"median_ms": 2.5, "min_ms": 1.0, "max_ms": 10.0,
                                                                   "repeats": 4}


def test_flop_counts_and_rates():
    common = load("_common")
    # 4 * B * S^2 * H * D, halved for causal: B=4 S=4096 H=32 D=128 is 2^40 FLOPs, 2^39 causal.
    assert common.attention_flops(4, 4096, 32, 128, causal=False) == 2.0**40
    assert common.attention_flops(4, 4096, 32, 128, causal=True) == 2.0**39
    assert common.matmul_flops(4096, 4096, 4096) == 2.0 * 4096**3
    assert common.tflops(1e12, 1.0) == pytest.approx(1000.0)  # 1e12 FLOPs in 1 ms
    # The measured H200 point: 2^39 FLOPs in 1.544 ms is 356 TFLOP/s.
    assert common.tflops(2.0**39, 1.544) == pytest.approx(356.1, abs=0.1)


def test_bus_bandwidth():
    common = load("_common")
    assert common.algbw_gbps(10**9, 10.0) == pytest.approx(100.0)
    assert common.busbw_gbps(10**9, 10.0, 8) == pytest.approx(175.0)  # 100 * 2 * 7 / 8
    assert common.busbw_gbps(10**9, 10.0, 2) == pytest.approx(100.0)
    assert common.busbw_gbps(10**9, 10.0, 1) == 0.0


def test_relative_error_and_nan():
    common = load("_common")
    assert common.relative_error_values([1.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == pytest.approx(1 / math.sqrt(14))
    assert common.relative_error_values([[1.0], [2.0]], [[1.0], [2.0]]) == 0.0
    assert common.relative_error_values([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert common.relative_error_values([1.0, 0.0], [0.0, 0.0]) == math.inf
    assert not common.within(common.relative_error_values([math.nan], [1.0]), 1e-2)
    assert not common.at_least(math.nan, 1.0) and common.at_least(1.0, 1.0)
    with pytest.raises(ValueError):
        common.relative_error_values([1.0], [1.0, 2.0])


def test_gae_reference_by_hand():
    verl = load("verl")
    # gamma 0.5, lambda 1, values 0: advantages are discounted rewards-to-go.
    assert verl.gae_advantages([[0, 0, 1]], [[0, 0, 0]], [[1, 1, 1]], 0.5, 1.0) == [[0.25, 0.5, 1.0]]
    # With values: delta_t = r_t + gamma v_{t+1} - v_t; A_2 = 1 - 1 = 0, A_1 = 0 + 0.5*1 - 0.5 + 0.5*0 = 0,
    # A_0 = 0 + 0.5*0.5 - 0 + 0.5*0 = 0.25.
    assert verl.gae_advantages([[0, 0, 1]], [[0, 0.5, 1]], [[1, 1, 1]], 0.5, 1.0) == [[0.25, 0.0, 0.0]]
    # A masked-out tail token is skipped: the last real token sees next value 0 and no running GAE.
    assert verl.gae_advantages([[0, 1, 7]], [[0, 0, 9]], [[1, 1, 0]], 0.5, 1.0)[0][:2] == [0.5, 1.0]


def test_masked_whiten_by_hand():
    verl = load("verl")
    # mean 2.5, unbiased variance 5/3: (x - 2.5) / sqrt(5/3).
    [first, second] = verl.masked_whiten([[1.0, 2.0], [3.0, 4.0]], [[1, 1], [1, 1]])
    scale = math.sqrt(5 / 3)
    assert first + second == pytest.approx([-1.5 / scale, -0.5 / scale, 0.5 / scale, 1.5 / scale], rel=1e-6)
    # Masked elements are left out of the statistics (and still shifted and scaled, as verl does).
    got = verl.masked_whiten([[1.0, 3.0, 100.0]], [[1, 1, 0]])
    assert got[0][:2] == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-6)


def test_grpo_reference_by_hand():
    verl = load("verl")
    rewards = [[0, 1], [0, 0], [1, 0], [0, 0], [0, 0.5]]
    mask = [[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]]
    advantages, returns = verl.grpo_reference(rewards, mask, ["a", "a", "a", "a", "solo"])
    # Group a scores 1, 0, 1, 0: mean 0.5, sample std sqrt(1/3); a group of one keeps its score.
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    flat = [x for row in advantages for x in row]
    assert flat == pytest.approx([a, a, -a, -a, a, 0, -a, -a, 0.5 / (1 + 1e-6), 0.5 / (1 + 1e-6)], rel=1e-9)
    assert returns == advantages


def fake_torch(capabilities, arch_list, available=True, cuda="13.0"):
    """A stand-in for torch's device queries (no GPU here): one device per capability."""
    from types import SimpleNamespace

    cuda_api = SimpleNamespace(
        is_available=lambda: available, device_count=lambda: len(capabilities) if available else 0,
        get_device_capability=lambda i: capabilities[i], get_device_name=lambda i: f"GPU {i}",
        get_arch_list=lambda: arch_list)
    return SimpleNamespace(cuda=cuda_api, __version__="2.11.0", version=SimpleNamespace(cuda=cuda))


def test_the_arch_check_fails_loudly_on_the_wrong_profile(capsys):
    common, torch_checks = load("_common"), load("torch")
    h100 = common.parse_profile('{"key": "h100", "arch": "9.0", "fp8": true}')
    numbers, note = torch_checks.check_arch(fake_torch([(9, 0), (9, 0)], ["sm_80", "sm_90", "sm_100"]), h100)
    assert numbers == {"devices": 2} and note.startswith("sm_90 of sm_80 sm_90 sm_100 runs on sm_90")
    torch_checks.check_arch(fake_torch([(9, 0)], ["sm_80", "sm_90a"]), h100)  # sm_90a code runs on sm_90
    with pytest.raises(common.Failed, match=r"device 1 \(GPU 1\) is compute capability 8.0 but profile 'h100'"):
        torch_checks.check_arch(fake_torch([(9, 0), (8, 0)], ["sm_80", "sm_90"]), h100)
    assert "ERROR: device 1" in capsys.readouterr().err
    with pytest.raises(common.Failed, match="has no kernels that run on sm_90"):
        torch_checks.check_arch(fake_torch([(9, 0)], ["sm_80", "sm_86"]), h100)


def test_the_arch_check_takes_the_family_code_verlenv_hands_over():
    """A B300 (sm_103) runs torch 2.11's sm_100 cubins, an RTX PRO 6000 (sm_120) does not: the profile verify hands the
    script (gpus.for_checks) names what runs there, by data/gpu_code.toml's rules."""
    from verlenv.catalog import gpus

    common, torch_checks = load("_common"), load("torch")
    torch_211 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # its get_arch_list(): data/gpu_code.toml
    b300 = common.parse_profile(json.dumps(gpus.profile("b300").for_checks(1)))
    _, note = torch_checks.check_arch(fake_torch([(10, 3)], torch_211), b300)
    assert note == "sm_100 of sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 runs on sm_103"
    rtx = common.parse_profile(json.dumps(gpus.profile("rtx-pro-6000").for_checks(1)))
    with pytest.raises(common.Failed, match="has no kernels that run on sm_120"):
        torch_checks.check_arch(fake_torch([(12, 0)], ["sm_90", "sm_100"]), rtx)


def test_cuda_state_tells_no_gpu_from_an_unusable_one(monkeypatch):
    common = load("_common")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert common.cuda_state(fake_torch([(9, 0)], ["sm_90"])) == ("ready", "")
    monkeypatch.setattr(os.path, "exists", lambda path: False)
    assert common.cuda_state(fake_torch([], [], available=False)) == ("skip", "no CUDA device")
    monkeypatch.setattr(os.path, "exists", lambda path: path == "/dev/nvidiactl")
    status, reason = common.cuda_state(fake_torch([], [], available=False))
    assert status == "fail" and "has an NVIDIA GPU but torch 2.11.0 (CUDA 13.0) cannot use it" in reason
    status, reason = common.cuda_state(fake_torch([], [], available=False, cuda=None))
    assert status == "fail" and "CPU-only build" in reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert common.cuda_state(fake_torch([], [], available=False))[0] == "skip"


def test_nccl_expected_sum():
    nccl = load("nccl")
    assert [nccl.expected_sum(n) for n in (1, 2, 4, 8)] == [1, 3, 10, 36]


def test_triton_libcuda_failure_is_recognised():
    triton = load("triton")
    link = subprocess.CalledProcessError(1, ["/usr/bin/gcc", "/tmp/main.c", "-O3", "-shared", "-l:libcuda.so.1",
                                             "-L/usr/lib/x86_64-linux-gnu"])
    assert triton.libcuda_failure(link)
    assert triton.libcuda_failure(RuntimeError("/usr/bin/ld: cannot find -lcuda: No such file or directory"))
    assert triton.libcuda_failure(AssertionError("libcuda.so cannot found!\nPlease make sure GPU is set up"))
    assert not triton.libcuda_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not triton.libcuda_failure(subprocess.CalledProcessError(1, ["/usr/bin/gcc", "x.c", "-lpython3.12"]))


def test_apex_layout_decides_whether_it_is_nvidia_apex(tmp_path, monkeypatch):
    apex = load("apex")
    # Stand-ins for the two layouts: NVIDIA apex has apex/normalization/fused_layer_norm.py, PyPI's has not.
    nvidia, web = tmp_path / "nvidia", tmp_path / "web"
    (nvidia / "apex" / "normalization").mkdir(parents=True)
    (nvidia / "apex" / "__init__.py").write_text("")
    (nvidia / "apex" / "normalization" / "fused_layer_norm.py").write_text("")
    (web / "apex").mkdir(parents=True)
    (web / "apex" / "__init__.py").write_text("from pyramid_mailer.interfaces import IMailer\n")
    monkeypatch.setattr(sys, "path", [str(nvidia), *sys.path])
    assert apex.wrong_apex() is None
    monkeypatch.setattr(sys, "path", [str(web), *sys.path[1:]])
    assert "not NVIDIA apex" in apex.wrong_apex()


@pytest.mark.network
def test_the_pypi_apex_fails_with_a_clear_reason(tmp_path):
    target = tmp_path / "site"
    subprocess.run(["uv", "pip", "install", "--quiet", "--target", str(target), "--no-deps", "--python",
                    sys.executable, "apex==0.9.10dev"], check=True, timeout=300)
    out = tmp_path / "results.json"
    proc = run("apex", out, env={**os.environ, "PYTHONPATH": str(target)})
    assert proc.returncode == 0, proc.stderr
    [result] = results_of(out)
    assert (result["check"], result["status"]) == ("apex/import", "fail")
    assert "not NVIDIA apex" in result["reason"] and "Pyramid" in result["reason"], result["reason"]


def torch_python() -> str | None:
    """A python whose environment has torch: $VERLENV_TEST_TORCH_PYTHON, or the default stack's env, or another of
    the repo's .venv-* envs (the tests are written for the default stack's verl and vLLM)."""
    default = REPO / ".venv-verl-0.9-fsdp" / "bin" / "python"
    candidates = [os.environ.get("VERLENV_TEST_TORCH_PYTHON", ""), str(default)] + sorted(
        map(str, REPO.glob(".venv-*/bin/python")))
    for python in filter(None, candidates):
        if not os.path.isfile(python):
            continue
        if has_modules(python, "torch"):
            return python
    return None


def has_modules(python: str, *names: str) -> bool:
    """The env of `python` holds every named top-level module: found by its import system, not imported (importing
    verl, vLLM or transformers takes several seconds of CPU; a program that needs them imports them itself, and a
    broken import then fails that program's test, with its error)."""
    code = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(n) is None for n in sys.argv[1:]))"
    return subprocess.run([python, "-c", code, *names], capture_output=True).returncode == 0


# A program run in the env; its docstring says what it does.
CPU_DRIVER = PROGRAMS / "kernel_checks_on_cpu.py"

EXPECTED = {
    "triton/vector-add": "pass", "triton/softmax": "pass",
    "verl/gae": "pass", "verl/grpo": "pass", "verl/gae/broken": "fail",
    "vllm/tiny-model": "pass",
    "flash_attn/bf16/causal": "pass", "flash_attn/fp16/noncausal": "pass", "flash_attn/varlen": "pass",
    "flash_attn/bf16/causal/broken": "fail", "flash_attn/varlen/broken": "fail",
    "apex/layer_norm": "pass", "apex/rms_norm": "pass", "apex/fused_adam": "pass", "apex/wgrad/fp32": "pass",
    "apex/wgrad/fp16": "pass", "apex/fused_adam/broken": "fail",
    "te/layer_norm": "pass", "te/rms_norm": "pass", "te/linear": "pass", "te/fp8": "pass",
    "te/fp8/no-fp8-profile": "skip", "te/fp8/broken": "fail",
}
NEEDS = {"triton": "triton", "verl": "verl", "vllm": "transformers and tokenizers"}


def run_on_cpu(driver: Path, out: Path) -> dict:
    """A program that runs kernel checks' CPU scenarios in the torch env (skipped without one): its driver.json."""
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    proc = subprocess.run([python, str(driver), str(KERNELS), str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"python": python, **json.loads((out / "driver.json").read_text())}


@pytest.fixture(scope="module")
def on_cpu(tmp_path_factory) -> dict:
    return run_on_cpu(CPU_DRIVER, tmp_path_factory.mktemp("kernels-on-cpu"))


def test_an_envs_modules_are_found_without_importing_them(tmp_path, monkeypatch):
    # A module that fails when imported is found all the same: the probe only looks for it.
    (tmp_path / "exits_on_import.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert has_modules(sys.executable, "json", "exits_on_import")
    assert not has_modules(sys.executable, "json", "no_such_module_here")


@pytest.mark.slow
def test_without_a_gpu_a_script_with_torch_skips(on_cpu):
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("this machine has a GPU")
    result = on_cpu["torch/main"]
    assert (result["check"], result["status"], result["reason"]) == ("torch", "skip", "no CUDA device")


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_check_logic_on_cpu(on_cpu, name):
    family = name.split("/")[0]
    if name not in on_cpu:
        pytest.skip(f"the torch environment lacks {NEEDS.get(family, family)}")
    got = on_cpu[name]
    assert got["status"] == EXPECTED[name], got["reason"]
    if name.endswith("/broken"):
        assert "above" in got["reason"] or "did not run" in got["reason"], got["reason"]


def test_vllm_jit_caches_follow_their_env_vars_and_new_flashinfer_ops_are_nvcc_builds(tmp_path):
    """The caches vLLM's check watches are data/packages.toml's [jit_caches] rows for vllm, as --profile hands them."""
    eng, jit = load("_engines"), load("_jit_caches")
    caches = jit.watched(packages.table().jit_caches, "vllm")
    assert set(caches) == {"flashinfer", "triton", "vllm", "torchinductor"}
    dirs = eng.jit_cache_dirs(caches, {"FLASHINFER_WORKSPACE_BASE": str(tmp_path / "fi"),
                                                "TRITON_CACHE_DIR": str(tmp_path / "tr"),
                                                "VLLM_CACHE_ROOT": str(tmp_path / "vl"),
                                                "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "in")})
    assert dirs["flashinfer"] == str(tmp_path / "fi" / ".cache" / "flashinfer")
    assert dirs["triton"] == str(tmp_path / "tr")
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "old.cubin").write_text("")
    before = {name: eng.cache_files(path) for name, path in dirs.items()}
    (tmp_path / "tr" / "new.cubin").write_text("")
    ops = Path(dirs["flashinfer"]) / "0.6.12" / "90" / "cached_ops" / "sampling"
    ops.mkdir(parents=True)
    (ops / "sampling.so").write_text("")
    (Path(dirs["flashinfer"]) / "cubins").mkdir()
    (Path(dirs["flashinfer"]) / "cubins" / "downloaded.cubin").write_text("")
    new = eng.new_cache_files(before, dirs)
    assert [len(new[n]) for n in ("flashinfer", "triton", "vllm", "torchinductor")] == [2, 1, 0, 0]
    assert eng.nvcc_built(new, caches) == [str(ops / "sampling.so")]
    # Without its variable, vLLM's own cache follows XDG_CACHE_HOME, as vllm/envs.py has it.
    assert jit.folder(caches["vllm"], {"XDG_CACHE_HOME": str(tmp_path / "xdg")}) == str(tmp_path / "xdg" / "vllm")


class FakeCuda:
    """Test double for torch.cuda's events: wall-clock stamps instead of device ones (no GPU here)."""

    class Event:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return (end.t - self.t) * 1000

    @staticmethod
    def synchronize():
        pass


def test_flash_attn_and_sdpa_are_timed_in_turn_so_a_load_beside_slows_both_alike():
    fa = load("flash_attn")
    calls = []
    kernels = {"fa": lambda: calls.append("fa"), "sdpa": lambda: calls.append("sdpa")}
    times = fa.interleaved_ms(types.SimpleNamespace(cuda=FakeCuda), kernels, calls=4, warmup=1)
    assert calls == ["fa", "sdpa"] + ["fa", "sdpa", "sdpa", "fa", "fa", "sdpa", "sdpa", "fa"]
    assert [len(t) for t in times.values()] == [4, 4] and all(ms >= 0 for t in times.values() for ms in t)


@pytest.mark.parametrize("rounds_of_ms, want_rounds, complaint", [
    # A trainer beside it slowed the first round's calls: the second round's best calls meet the floors.
    ([{"fa": [9.0, 8.0], "sdpa": [2.0, 9.0]}, {"fa": [1.5, 1.6], "sdpa": [1.7, 1.8]}], 2, None),
    # A bad build is slow in every round: all rounds run, and both floors are missed.
    ([{"fa": [4.0, 4.1], "sdpa": [1.7, 1.8]}] * 3, 3,
     "137 TFLOP/s is below the floor of 190; 0.42x torch's flash SDPA"),
    # Clean: one round.
    ([{"fa": [1.5, 1.6], "sdpa": [1.7, 1.8]}], 1, None),
])
def test_throughput_floors_are_judged_on_the_best_calls_of_up_to_three_rounds(rounds_of_ms, want_rounds, complaint):
    fa, common = load("flash_attn"), load("_common")
    profile = common.parse_profile('{"key": "h100", "arch": "9.0", "fp8": true, "thresholds": '
                                   '{"flash_attn_min_tflops": 190, "flash_attn_min_ratio_vs_sdpa": 1.0}}')
    rounds = iter(rounds_of_ms)
    flops = common.attention_flops(*fa.PERF_SHAPE, causal=True)  # 1.1 PFLOP: 1.5 ms is 367 TFLOP/s
    best = fa.best_of_rounds(lambda: next(rounds), flops, profile)
    assert best["rounds"] == want_rounds and len(best["times"]["fa"]) == 2 * want_rounds
    assert best["tflops"] == common.tflops(flops, min(best["times"]["fa"]))
    if complaint is None:
        assert best["problems"] == []
    else:
        assert complaint in "; ".join(best["problems"])


@pytest.mark.parametrize("beside, status", [([], "fail"), (["verl_trainer"], "pass")])
def test_the_nccl_floor_is_judged_on_the_best_all_reduce_when_the_trainer_runs_beside(beside, status):
    nccl, common = load("nccl"), load("_common")
    profile = common.parse_profile(json.dumps({"key": "h100", "arch": "9.0", "fp8": True, "beside": beside,
                                               "thresholds": {"nccl_min_busbw_gbs_2gpu": 190}}))
    nbytes = 2**29  # a median slowed to 150 GB/s by a job sharing the GPUs; the best all-reduce at 300 GB/s
    row = {"bytes": nbytes, "median_ms": 1.79, "min_ms": 1.79 / 2, "max_ms": 9.0, "repeats": 20,
           "algbw_gbps": 300.0, "busbw_gbps": 150.0, "best_busbw_gbps": 300.0}
    state = {"result": {"world": 2, "rows": [row]}}
    if status == "pass":
        numbers, note = nccl.check_bandwidth(profile, state)
        assert note == "300 GB/s bus bandwidth at 512 MiB, bf16 (best of 20, beside verl_trainer) (floor 190)"
    else:
        with pytest.raises(common.Failed) as failed:
            nccl.check_bandwidth(profile, state)
        assert str(failed.value).startswith("150 GB/s bus bandwidth at 512 MiB (median of 20) is below the floor of "
                                            "190")
        numbers = failed.value.numbers
    assert numbers["512MiB_best_busbw_gbps"] == 300.0 and numbers["512MiB_busbw_gbps"] == 150.0


def test_vllms_check_fixes_its_kv_cache_only_where_that_vllm_has_the_setting():
    import dataclasses

    vllm = load("vllm")

    @dataclasses.dataclass
    class NewEngineArgs:  # test doubles for vllm.engine.arg_utils.EngineArgs of two vLLM generations
        gpu_memory_utilization: float = 0.9
        kv_cache_memory_bytes: int | None = None

    @dataclasses.dataclass
    class OldEngineArgs:
        gpu_memory_utilization: float = 0.9

    kwargs = {"gpu_memory_utilization": 0.2}
    assert vllm.fixed_kv_cache(kwargs, NewEngineArgs) and kwargs["kv_cache_memory_bytes"] == 1 << 28
    kwargs = {"gpu_memory_utilization": 0.2}
    assert not vllm.fixed_kv_cache(kwargs, OldEngineArgs) and kwargs == {"gpu_memory_utilization": 0.2}


# ---- on a GPU: every check script for real, in the default env, as verify runs it (`nox -s tests -- -m gpu`) ----

SCRIPTS = sorted(NOT_INSTALLED)
# Where the checked libraries keep caches in a home folder. The scripts run with a home of their own (the scratch
# folder's) and every cache variable set to a scratch folder; nothing may land in these under that home (a library
# falling back to its home default instead of the variable). The machine's real home is not scanned: other jobs of the
# same user write there meanwhile (a verify beside the GPU tests did, 2026-11-28), so a scan could not tell whose
# files it found.
HOME_CACHES = (".cache/vllm", ".cache/flashinfer", ".cache/torch", ".cache/huggingface", ".cache/triton",
               ".cache/torch_extensions", ".triton", ".nv", ".config/vllm")


@pytest.fixture(scope="module")
def on_this_gpu(env_python):
    """(the visible GPUs' profile as verify sends it, the env's variant, the environment the scripts run in: every
    cache, temp and home folder in one scratch folder, removed afterwards)."""
    from verlenv.catalog import gpus

    visible = gpus.gpu_details()
    profile = gpus.select_profile("auto", visible)
    marker = Path(env_python).parent.parent / "verlenv-env.json"
    variant = json.loads(marker.read_text())["variant"] if marker.is_file() else "fsdp"
    scratch = Path(tempfile.mkdtemp(prefix="vgpu", dir="/tmp"))  # short: Ray's socket paths stay under 108 bytes
    env = {"HOME": "home", "XDG_CACHE_HOME": "cache", "TMPDIR": "tmp", "TRITON_CACHE_DIR": "triton",
           "VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "inductor", "FLASHINFER_WORKSPACE_BASE": "flashinfer",
           "HF_HOME": "hf", "CUDA_CACHE_PATH": "nv"}
    for name, folder in env.items():
        (scratch / folder).mkdir()
        env[name] = str(scratch / folder)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ beside the check scripts in this checkout
    sent = {**profile.for_checks(len(visible)), "variant": variant, "thorough": False, "rollout_tp": 1, "actor_tp": 1,
            "beside": []}
    try:
        yield sent, variant, env
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def written_since(start_ns: int, home: Path) -> list[str]:
    """Files under the home caches the checked libraries use, written since start_ns."""
    found = []
    for folder in (home / c for c in HOME_CACHES):
        for dirpath, _, files in os.walk(folder):
            found += [os.path.join(dirpath, f) for f in files
                      if os.lstat(os.path.join(dirpath, f)).st_mtime_ns >= start_ns]
    return found


def required_in(variant: str) -> frozenset[str]:
    """The packages whose checks are required in the default stack's VARIANT (the packages table, as verify reads
    it for the variant's actor and rollout)."""
    from verlenv.catalog import packages, stacks

    v = stacks.load(REPO / "stacks.toml").variant(None, variant)
    return packages.table().required(v.actor, v.rollout)


def where_from(absent: set[str]) -> str:
    """Where the absent packages of skipped checks (their results' package, as the catalog names it) come from: the
    default stack's variants whose checks require them (their env: `verlenv install --variant V`, then `nox -s
    build` for the source-built ones). A reason names a package as users know it ("NVIDIA apex"), not as the
    catalog does."""
    from verlenv.catalog import stacks

    stack = stacks.load(REPO / "stacks.toml").stack(None)
    homes = {p: [v for v in stack.variants if p in required_in(v)] for p in sorted(absent)}
    return "; ".join(f"{p}: the {' or '.join(v)} variant's env" if v else f"{p}: no variant of {stack.name} needs it"
                     for p, v in homes.items()) + " (`verlenv install --variant V`, then `nox -s build`)"


def test_a_gpu_skip_names_the_variant_that_has_the_absent_packages():
    assert where_from({"sglang"}).startswith("sglang: the sglang variant's env")
    assert where_from({"apex"}).startswith("apex: the megatron variant's env")
    # Visit I's skip said "NVIDIA apex: no variant of verl-0.9 needs it": the reason's name, not the package's.
    assert where_from({"transformer-engine", "megatron-core"}) == (
        "megatron-core: the megatron variant's env; transformer-engine: the megatron variant's env "
        "(`verlenv install --variant V`, then `nox -s build`)")


def test_the_gpu_tests_scope_is_the_variants_required_packages():
    """What the GPU test below requires, read on CPU: a table rename broke it once, unseen where GPU tests skip."""
    assert {"flash-attn", "verl", "vllm", "torch"} <= required_in("fsdp")
    assert {"megatron-core", "megatron-bridge", "transformer-engine", "apex"} <= required_in("megatron")
    assert "megatron-core" not in required_in("fsdp")


@pytest.mark.gpu
@pytest.mark.parametrize("name", SCRIPTS)
def test_each_check_script_passes_on_this_gpu(name, on_this_gpu, env_python, monkeypatch):
    from verlenv.verify import runner

    sent, variant, env = on_this_gpu
    home, start = Path(env["HOME"]), time.time_ns()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    script = KERNELS / f"check_{name}.py"
    scope = runner.Scope(required_in(variant))
    results = runner.run_script(env_python, script, sent, runner.timeout_for(script, 150.0), scope)
    assert written_since(start, home) == []  # each library took the cache folder it was given
    failed = [f"{r.name}: {r.reason}\n{r.log[-3000:]}" for r in results if r.status == "fail"]
    assert not failed, "\n\n".join(failed)
    absent = [r for r in results if r.status == "skip" and r.reason.endswith("not installed")]
    if absent and not any(r.status in ("pass", "warn") for r in results):
        pytest.skip(f"{'; '.join(sorted(r.reason for r in absent))} in {env_python} "
                    f"({where_from({r.package for r in absent})})")
    assert any(r.status in ("pass", "warn") for r in results), [(r.name, r.status, r.reason) for r in results]


# ---- vLLM's usage stats: a file under $HOME/.config/vllm and a report sent out, from every engine a check starts ----

def vllm_usage_stats(python: str, env: dict, script: str = "-") -> bool:
    proc = subprocess.run([python, str(PROGRAMS / "vllm_usage_stats.py"), str(KERNELS), script], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["usage_stats"]


@pytest.fixture
def clean_env(env_python, tmp_path):
    """The environment without any of vLLM's opt-outs, and a home without its do_not_track file."""
    opt_outs = ("VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "DO_NOT_TRACK")
    return {**{k: v for k, v in os.environ.items() if k not in opt_outs}, "HOME": str(tmp_path)}


def test_the_vllm_check_and_verls_vllm_servers_send_no_usage_stats(env_python, clean_env):
    """The GPU tests found vLLM's usage_stats.json in the check's home (visit F, 2026-11-28): the vLLM check and the
    trainer's environment turn vLLM's usage stats off, as vLLM itself reads it, unless the user set otherwise."""
    trainer = load("verl_trainer")
    assert vllm_usage_stats(env_python, clean_env) is True  # vLLM's default: on
    assert vllm_usage_stats(env_python, clean_env, "check_vllm") is False
    assert vllm_usage_stats(env_python, trainer.trainer_env(clean_env)) is False
    # A user who wants them keeps them (vLLM reads "0" as on: the default case above).
    assert trainer.trainer_env({**clean_env, "VLLM_NO_USAGE_STATS": "0"})["VLLM_NO_USAGE_STATS"] == "0"
