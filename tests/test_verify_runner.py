"""The kernel-script runner: each script in its own process with a timeout; crashes, hangs and junk become
failures with the output tail and the doctor's diagnosis; --skip-package and --only; required vs optional.

The scripts here are test doubles (tiny stdlib scripts named like the real ones), so the runner's side of
the contract is exercised on a machine without a GPU.
"""

import sys
import textwrap
import time
from pathlib import Path

import pytest

import tables
from test_verify_profiles import REPO
from verlenv import catalog, gpus, packages
from verlenv.verify import runner
from verlenv.verify.results import SKIPPED_BY_REQUEST

H100 = [gpus.Gpu("NVIDIA H100 80GB HBM3", "9.0", 81559, "580.95.05")]
WRITE = textwrap.dedent("""\
    import argparse, json
    p = argparse.ArgumentParser(); p.add_argument("--out"); p.add_argument("--profile")
    args = p.parse_args()
    def write(results):
        json.dump(results, open(args.out, "w"))
    """)
UNDEFINED = ("ImportError: /env/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: "
             "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
SCRIPTS = {
    "_common.py": "def result(check, status, **kw):\n    return {'check': check, 'package': 'torch', 'status': status, **kw}\n",
    "check_torch.py": WRITE + "import _common\nwrite([_common.result('torch/matmul', 'pass', numbers={'tflops': 600.0}, seconds=0.2)])\n",
    "check_flash_attn.py": "import sys\nprint('loading flash_attn')\n"
                     f"sys.stderr.write({UNDEFINED!r} + '\\n')\nsys.exit(1)\n",
    "check_vllm.py": WRITE + textwrap.dedent("""\
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open(os.environ["CHILD_PID_FILE"], "w").write(str(child.pid))
        print("vllm check started", flush=True)
        time.sleep(600)
        """),
    "check_verl.py": "print('no results from me')\n",
    "check_nccl.py": WRITE + "write([{'check': 'nccl/all-reduce/1gpu', 'package': 'nccl', 'status': 'pass'}])\n"
                       "raise SystemExit(3)\n",
    # A check that fails after its child process printed why: the report keeps that check's own output.
    "check_verl_trainer.py": WRITE + textwrap.dedent("""\
        import subprocess, sys
        print("PASS verl/trainer/setup", flush=True)
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('EngineCore died: out of memory\\n')"])
        print("FAIL verl/trainer/steps (Engine core initialization failed)", flush=True)
        write([{'check': 'verl/trainer/setup', 'package': 'verl', 'status': 'pass'},
               {'check': 'verl/trainer/steps', 'package': 'verl', 'status': 'fail',
                'reason': 'Engine core initialization failed'}])
        """),
    "check_apex.py": WRITE + "import os\nopen(os.environ['APEX_RAN'], 'w').write('ran')\n"
                       "write([{'check': 'apex/fused-layer-norm', 'package': 'apex', 'status': 'fail', 'reason': 'err 0.5'}])\n",
}


@pytest.fixture
def kernels(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "kernels"
    folder.mkdir()
    for name, text in SCRIPTS.items():
        (folder / name).write_text(text)
    monkeypatch.setenv("CHILD_PID_FILE", str(tmp_path / "child.pid"))
    monkeypatch.setenv("APEX_RAN", str(tmp_path / "apex.ran"))
    return folder


def settings(kernels: Path, variant: str = "fsdp", **kw) -> runner.Settings:
    cat = catalog.load(REPO / "stacks.toml")
    base = dict(python=sys.executable, catalog=cat, variant=cat.variant(None, variant), profile=gpus.profile("h100"),
                gpus=H100, lock=None, kernels_dir=kernels, timeout=3.0)
    return runner.Settings(**{**base, **kw})


def by_name(results) -> dict:
    return {r.name: r for r in results}


def test_scripts_run_in_order_and_helpers_are_not_checks(kernels):
    assert [p.name for p in runner.scripts(kernels)] == ["check_torch.py", "check_flash_attn.py", "check_apex.py",
                                                         "check_vllm.py", "check_nccl.py", "check_verl.py",
                                                         "check_verl_trainer.py"]
    assert "_common" not in runner.known_packages(kernels)


def test_a_good_script_reports_its_results(kernels):
    r = by_name(runner.run_kernels(settings(kernels, only="torch")))
    assert list(r) == ["torch/matmul"]
    assert (r["torch/matmul"].status, r["torch/matmul"].kind, r["torch/matmul"].required) == ("pass", "kernel", True)
    assert r["torch/matmul"].numbers == {"tflops": 600.0} and r["torch/matmul"].seconds == 0.2


def test_a_crash_is_a_failure_with_the_output_tail_and_the_doctors_diagnosis(kernels):
    r = by_name(runner.run_kernels(settings(kernels, only="flash-attn")))["flash-attn/run"]
    assert r.status == "fail" and r.blocking
    assert r.reason.startswith("check_flash_attn.py crashed (exit code 1): ImportError:")
    assert "loading flash_attn" in r.log and "undefined symbol" in r.log
    assert r.diagnosis[0]["id"] == "F1" and r.diagnosis[0]["fix"]


def test_a_hanging_script_is_killed_with_its_workers(kernels, tmp_path, monkeypatch):
    tables.patch_scripts(monkeypatch, vllm={})  # the stand-in vLLM check hangs: --timeout alone bounds it
    start = time.monotonic()
    r = by_name(runner.run_kernels(settings(kernels, only="vllm", timeout=2.0)))["vllm/run"]
    assert time.monotonic() - start < 20
    assert r.status == "fail" and r.reason == "check_vllm.py timed out after 2 s"
    assert "vllm check started" in r.log
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(50):  # the killed child is reaped by init shortly after
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"worker {child} of the timed-out script is still running")


def test_no_results_and_partial_results(kernels):
    r = by_name(runner.run_kernels(settings(kernels, only="verl")))["verl/run"]
    assert r.status == "fail" and "wrote no results to --out" in r.reason and "no results from me" in r.log
    r = by_name(runner.run_kernels(settings(kernels, only="nccl")))
    assert r["nccl/all-reduce/1gpu"].status == "pass"
    assert r["nccl/run"].status == "fail" and "crashed (exit code 3)" in r["nccl/run"].reason
    assert r["nccl/run"].numbers["results_before"] == 1


def test_a_failed_check_keeps_its_own_output_and_its_childrens(kernels):
    r = by_name(runner.run_kernels(settings(kernels, only="verl")))
    failed, passed = r["verl/trainer/steps"], r["verl/trainer/setup"]
    assert failed.status == "fail" and failed.package == "verl" and failed.blocking
    assert "EngineCore died: out of memory" in failed.log and "PASS" not in failed.log
    assert passed.log == ""


def test_the_trainer_script_checks_verl_with_its_own_timeout():
    trainer = runner.KERNELS_DIR / "check_verl_trainer.py"
    assert runner.package_of(trainer) == "verl" and runner.label_of(trainer) == "verl/verl_trainer"
    assert runner.label_of(runner.KERNELS_DIR / "check_flash_attn.py") == "flash-attn"
    assert runner.timeout_for(trainer, 150.0) == 600.0 and runner.timeout_for(trainer, 1200.0) == 1200.0
    assert runner.timeout_for(runner.KERNELS_DIR / "check_vllm.py", 150.0) == 300.0  # a fresh engine beside the trainer
    assert runner.timeout_for(runner.KERNELS_DIR / "check_torch.py", 150.0) == 150.0


def test_check_outputs_split_on_result_lines():
    log = "a\nPASS x/one\nb\nc\nFAIL x/two (why)\nd"
    assert runner.check_outputs(log) == {"x/one": "a", "x/two": "b\nc"}


def test_optional_failures_do_not_block_but_required_ones_do(kernels):
    fsdp = by_name(runner.run_kernels(settings(kernels, only="apex")))["apex/fused-layer-norm"]
    assert fsdp.status == "fail" and not fsdp.required and not fsdp.blocking
    megatron = by_name(runner.run_kernels(settings(kernels, "megatron", only="apex")))["apex/fused-layer-norm"]
    assert megatron.blocking


def test_skip_package_does_not_run_the_script_and_says_why(kernels, tmp_path):
    results = runner.run_kernels(settings(kernels, only="apex", skipped=frozenset({"apex"})))
    assert [(r.name, r.status, r.reason) for r in results] == [("apex/kernels", "skip", SKIPPED_BY_REQUEST)]
    assert not (tmp_path / "apex.ran").exists()
    assert SKIPPED_BY_REQUEST == "skipped by request (--skip-package)"


def test_without_a_gpu_kernel_checks_are_skipped_not_failed(kernels, tmp_path):
    results = runner.run_kernels(settings(kernels, profile=None, gpus=[]))
    assert {r.status for r in results} == {"skip"} and len(results) == len({r.name for r in results}) == 7
    assert all(r.reason == "no GPU on this machine: kernel checks need one" for r in results)
    assert not (tmp_path / "apex.ran").exists()


def test_the_whole_run_stays_fast(kernels, monkeypatch):
    """Overheads are one interpreter start per script; the hanging one is the only slow part."""
    tables.patch_scripts(monkeypatch, vllm={})  # the stand-in vLLM check hangs: --timeout alone bounds it
    start = time.monotonic()
    results = runner.run_kernels(settings(kernels, timeout=2.0))
    wall = time.monotonic() - start
    assert len([r for r in results if r.status == "fail"]) == 6  # flash-attn, vllm, nccl, verl, trainer, apex
    assert wall < 2.0 + 10, wall


def test_the_packaged_scripts_accept_the_profile_verify_sends():
    """Contract: every packaged script takes the profile from gpus.toml and answers with valid results
    (here, without torch: each says its package is not installed)."""
    found = runner.scripts(runner.KERNELS_DIR)
    assert [runner.package_of(p) for p in found] == ["torch", "triton", "flash-attn", "apex", "transformer-engine",
                                                      "megatron-core", "vllm", "sglang", "nccl", "verl", "verl"]
    scope = runner.Scope(packages.table().required("megatron", "vllm"))
    for profile in gpus.profiles().values():
        for script in found:
            results = runner.run_script(sys.executable, script, profile.for_checks(1), 60.0, scope)
            assert results and all(r.status == "skip" and "not installed" in r.reason for r in results), \
                [(r.name, r.status, r.reason) for r in results]


def test_scripts_are_told_the_variant(tmp_path):
    folder = tmp_path / "variant-kernels"
    folder.mkdir()
    (folder / "check_torch.py").write_text(
        WRITE + "import json\nvariant = json.loads(args.profile)['variant']\n"
        "write([{'check': 'torch/' + variant, 'package': 'torch', 'status': 'pass'}])\n")
    for variant in ("fsdp", "megatron"):
        r = by_name(runner.run_kernels(settings(folder, variant, only="torch")))
        assert list(r) == [f"torch/{variant}"]


# Test doubles that note when they ran and what profile they got: the trainer takes longest, as the real one does.
TIMED = WRITE + textwrap.dedent("""\
    import json, os, sys, time
    name = os.path.basename(sys.argv[0])[len("check_"):-len(".py")]
    def note(event):
        with open(os.environ["TIMELINE"], "a") as f:
            f.write(json.dumps({"script": name, "event": event, "t": time.time(),
                                "profile": json.loads(args.profile)}) + "\\n")
    note("start")
    time.sleep({"verl_trainer": 2.0}.get(name, 0.3))
    note("end")
    write([{"check": name + "/ran", "package": {"verl_trainer": "verl", "flash_attn": "flash-attn"}.get(name, name),
            "status": "pass"}])
    """)


@pytest.fixture
def timed_kernels(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "timed-kernels"
    folder.mkdir()
    for name in ("torch", "flash_attn", "vllm", "verl", "verl_trainer"):
        (folder / f"check_{name}.py").write_text(TIMED)
    monkeypatch.setenv("TIMELINE", str(tmp_path / "timeline.jsonl"))
    return folder


def timeline(tmp_path) -> dict:
    spans = {}
    for line in (tmp_path / "timeline.jsonl").read_text().splitlines():
        event = __import__("json").loads(line)
        spans.setdefault(event["script"], {})[event["event"]] = event["t"]
        spans[event["script"]]["profile"] = event["profile"]
    return spans


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_the_fast_proof_runs_the_trainer_from_the_start_beside_the_others_one_at_a_time(timed_kernels, tmp_path,
                                                                                       monkeypatch):
    tables.patch_scripts(monkeypatch, verl_trainer={"timeout_s": 600, "lane": 1}, vllm={"timeout_s": 300})  # one lane
    results = runner.run_kernels(settings(timed_kernels, timeout=30.0))
    assert [r.name for r in results] == ["torch/ran", "flash_attn/ran", "vllm/ran", "verl/ran", "verl_trainer/ran"]
    spans = timeline(tmp_path)
    trainer = spans.pop("verl_trainer")
    # Launched before the first of the others (which was told it runs beside it), and running while they ran.
    assert spans["torch"]["profile"]["beside"] == ["verl_trainer"] and trainer["profile"]["beside"] == []
    assert any(overlap(trainer, s) for s in spans.values())
    others = sorted(spans.values(), key=lambda s: s["start"])
    assert all(a["end"] <= b["start"] for a, b in zip(others, others[1:]))  # the rest: one at a time, in ORDER
    assert [k for k, _ in sorted(spans.items(), key=lambda kv: kv[1]["start"])] == ["torch", "flash_attn", "vllm", "verl"]
    assert {s["profile"]["thorough"] for s in [trainer, *spans.values()]} == {False}


def test_thorough_runs_every_script_one_at_a_time_with_the_trainer_last(timed_kernels, tmp_path):
    runner.run_kernels(settings(timed_kernels, timeout=30.0, thorough=True, rollout_tp=2, actor_tp=2))
    spans = sorted(timeline(tmp_path).items(), key=lambda kv: kv[1]["start"])
    assert [k for k, _ in spans] == ["torch", "flash_attn", "vllm", "verl", "verl_trainer"]
    assert all(a["end"] <= b["start"] for (_, a), (_, b) in zip(spans, spans[1:]))
    profile = spans[-1][1]["profile"]
    assert (profile["thorough"], profile["rollout_tp"], profile["actor_tp"], profile["beside"]) == (True, 2, 2, [])


@pytest.mark.parametrize("thorough", [False, True])
def test_the_static_checks_run_beside_the_kernel_checks_only_in_the_fast_proof(timed_kernels, tmp_path, monkeypatch,
                                                                               thorough):
    from verlenv.verify.results import CheckResult

    static = {}

    def slow_static(s, facts):  # test double: the real static checks need an installed env and its lock
        static["start"] = time.time()
        time.sleep(1.5)
        static["end"] = time.time()
        return [CheckResult("lock/match", "env", "static", "pass")], "580.95.05"

    monkeypatch.setattr(runner, "run_static", slow_static)
    run = runner.verify(settings(timed_kernels, timeout=30.0, thorough=thorough))
    assert [r.name for r in run.results][:2] == ["lock/match", "torch/ran"] and run.driver == "580.95.05"
    kernels = timeline(tmp_path).values()
    assert any(overlap(static, k) for k in kernels) is not thorough
    assert run.settings.mode == ("thorough" if thorough else "fast")


def test_a_second_lane_runs_beside_the_trainer_and_is_told_so(timed_kernels, tmp_path, monkeypatch):
    tables.patch_scripts(monkeypatch, verl_trainer={"timeout_s": 600, "lane": 1},
                         vllm={"timeout_s": 300, "lane": 2})  # vLLM's own check in a lane of its own
    results = runner.run_kernels(settings(timed_kernels, timeout=30.0))
    assert [r.name for r in results] == ["torch/ran", "flash_attn/ran", "vllm/ran", "verl/ran", "verl_trainer/ran"]
    spans = timeline(tmp_path)
    trainer, vllm = spans.pop("verl_trainer"), spans.pop("vllm")
    assert (trainer["profile"]["beside"], vllm["profile"]["beside"]) == ([], ["verl_trainer"])
    assert spans["torch"]["profile"]["beside"] == ["verl_trainer", "vllm"]
    rest = sorted(spans.values(), key=lambda s: s["start"])
    assert all(a["end"] <= b["start"] for a, b in zip(rest, rest[1:]))
    assert overlap(trainer, vllm)


def test_a_known_upstream_failure_is_reported_with_its_link_and_not_against_the_env():
    scope = runner.Scope(frozenset({"verl"}))
    known = {"url": "https://github.com/verl-project/verl/issues/7899", "fix": "PR 7901", "summary": "s"}
    entry = {"check": "verl/trainer/fsdp/qwen2.5-vl/grpo-2-steps", "package": "verl", "status": "fail",
             "reason": "verl's trainer exited with 1", "known_issue": known}
    r = runner._result(entry, "verl", scope)
    assert r.status == "fail" and not r.blocking and r.reason.startswith("known upstream failure https://github.com")
    plain = runner._result({k: v for k, v in entry.items() if k != "known_issue"}, "verl", scope)
    assert plain.status == "fail" and plain.blocking
    passed = runner._result({**entry, "status": "pass"}, "verl", scope)  # fixed upstream: a plain pass
    assert passed.status == "pass" and passed.blocking is False and passed.required
