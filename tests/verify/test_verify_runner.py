"""The kernel-script runner: each script in its own process with a timeout; crashes, hangs and junk become
failures with the output tail and the doctor's diagnosis; --skip-package and --only; required vs optional.

The scripts here are test doubles (tiny stdlib scripts named like the real ones), so the runner's side of
the contract is exercised on a machine without a GPU.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tables
from test_verify_profiles import REPO
from verlenv.catalog import gpus, packages, stacks
from verlenv.verify import jit_jobs, runner
from verlenv.verify.options import VerifyOptions
from verlenv.verify.results import SKIPPED_BY_REQUEST
from waiting import exited, until

H100 = [gpus.Gpu("NVIDIA H100 80GB HBM3", "9.0", 81559, "580.95.05")]
DATA = Path(__file__).parents[1] / "data"
STAND_IN_S = 300.0  # a stand-in's time limit: met at once by a right runner, on a loaded machine too
HANG_S = 2.0  # the hanging stand-in's limit, counted from its start (hang_after_start)


@pytest.fixture
def kernels(tmp_path, monkeypatch) -> Path:
    """A kernel folder of stand-in scripts (tests/data/runner-kernels): good, crashing, hanging, silent, partial."""
    folder = shutil.copytree(DATA / "runner-kernels", tmp_path / "kernels")
    monkeypatch.setenv("CHILD_PID_FILE", str(tmp_path / "child.pid"))
    monkeypatch.setenv("APEX_RAN", str(tmp_path / "apex.ran"))
    return folder


def settings(kernels: Path, variant: str = "fsdp", **kw) -> runner.Settings:
    """Settings of a run on an H100 of the stand-in scripts; `kw`: VerifyOptions fields, or Settings' own."""
    cat = stacks.load(REPO / "stacks.toml")
    option_names = {f.name for f in dataclasses.fields(VerifyOptions)}
    options = VerifyOptions(**{"timeout": STAND_IN_S, **{k: v for k, v in kw.items() if k in option_names}})
    base = dict(python=sys.executable, catalog=cat, variant=cat.variant(None, variant), profile=gpus.profile("h100"),
                gpus=H100, lock=None, kernels_dir=kernels, options=options)
    return runner.Settings(**{**base, **{k: v for k, v in kw.items() if k not in option_names}})


@pytest.fixture
def hang_after_start(monkeypatch, tmp_path):
    """The hanging stand-in (check_vllm.py) gets HANG_S; its clock starts once it has said it started (test double
    of a fast machine: the runner's wait begins after the stand-in's own start-up, however slow that was). The other
    scripts keep STAND_IN_S."""
    started = tmp_path / "child.pid"

    class StartedFirst(subprocess.Popen):
        def communicate(self, input=None, timeout=None):
            if timeout is not None and Path(self.args[1]).name == "check_vllm.py":
                assert until(lambda: started.exists() or self.poll() is not None), "the stand-in never started"
            return super().communicate(input, timeout)

    monkeypatch.setattr(runner.subprocess, "Popen", StartedFirst)
    monkeypatch.setattr(runner, "timeout_for",
                        lambda script, t, rounds=1: HANG_S if runner.script_key(script) == "vllm" else t)


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


def test_a_failed_checks_diagnosis_names_errors_not_the_warnings_beside_them():
    """A real failed trainer's output (visit F: Megatron-Bridge's Qwen2.5-VL, F54) also holds TE's flash-attn range
    warning, which every healthy megatron run prints: the failure is explained by the error only. The warning once
    stood as the failed check's "known failure"."""
    from verlenv.verify import static

    log = (REPO / "tests/data/logs/F54-verlenv-h200-megatron-qwen2.5-vl-thd.log").read_text()
    assert [d["id"] for d in static.diagnose(log)] == ["F54"]
    warning = next(line for line in log.splitlines() if "Supported flash-attn versions" in line)
    assert static.diagnose(warning) == []  # alone, still no explanation of a failure
    from verlenv.doctor import diagnose_text

    assert [d.id for d in diagnose_text(warning)] == ["F33"]  # while the doctor still reports it, as a warning


def test_a_hanging_script_is_killed_with_its_workers(kernels, tmp_path, hang_after_start):
    r = by_name(runner.run_kernels(settings(kernels, only="vllm")))["vllm/run"]
    assert r.status == "fail" and r.reason == f"check_vllm.py timed out after {HANG_S:.0f} s"
    assert "vllm check started" in r.log
    child = int((tmp_path / "child.pid").read_text())
    assert exited(child), f"worker {child} of the timed-out script is still running"


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
    results = runner.run_kernels(settings(kernels, only="apex", skip_package=("apex",)))
    assert [(r.name, r.status, r.reason) for r in results] == [("apex/kernels", "skip", SKIPPED_BY_REQUEST)]
    assert not (tmp_path / "apex.ran").exists()
    assert SKIPPED_BY_REQUEST == "skipped by request (--skip-package)"


def test_without_a_gpu_kernel_checks_are_skipped_not_failed(kernels, tmp_path):
    results = runner.run_kernels(settings(kernels, profile=None, gpus=[]))
    assert {r.status for r in results} == {"skip"} and len(results) == len({r.name for r in results}) == 7
    assert all(r.reason == "no GPU on this machine: kernel checks need one" for r in results)
    assert not (tmp_path / "apex.ran").exists()


def test_a_whole_run_judges_every_script_and_ends_the_hanging_one(kernels, hang_after_start):
    results = runner.run_kernels(settings(kernels))
    failed = [r.name for r in results if r.status == "fail"]
    assert failed == ["flash-attn/run", "apex/fused-layer-norm", "vllm/run", "nccl/run", "verl/run",
                      "verl/trainer/steps"]
    assert by_name(results)["vllm/run"].reason == f"check_vllm.py timed out after {HANG_S:.0f} s"


def test_the_packaged_scripts_accept_the_profile_verify_sends():
    """Contract: every packaged script takes the profile from gpus.toml and answers with valid results
    (here, without torch: each says its package is not installed)."""
    found = runner.scripts(runner.KERNELS_DIR)
    assert [runner.package_of(p) for p in found] == ["torch", "triton", "flash-attn", "flash-linear-attention",
                                                      "causal-conv1d", "apex", "transformer-engine", "megatron-core",
                                                      "vllm", "sglang", "nccl", "verl", "verl"]
    scope = runner.Scope(packages.table().required("megatron", "vllm"))
    for profile in gpus.profiles().values():
        for script in found:
            results = runner.run_script(sys.executable, script, profile.for_checks(1), 60.0, scope)
            assert results and all(r.status == "skip" and "not installed" in r.reason for r in results), \
                [(r.name, r.status, r.reason) for r in results]


def test_scripts_are_told_the_variant(timed_kernels, tmp_path):
    for variant in ("fsdp", "megatron"):
        runner.run_kernels(settings(timed_kernels, variant, only="torch"))
        assert timeline(tmp_path)["torch"]["profile"]["variant"] == variant


@pytest.fixture
def timed_kernels(tmp_path, monkeypatch) -> Path:
    """Stand-ins that note their start and end, in the order they happen (tests/data/runner-timed/timed_check.py)."""
    folder = tmp_path / "timed-kernels"
    folder.mkdir()
    for name in ("torch", "flash_attn", "vllm", "verl", "verl_trainer"):
        shutil.copy(DATA / "runner-timed" / "timed_check.py", folder / f"check_{name}.py")
    monkeypatch.setenv("TIMELINE", str(tmp_path / "timeline.jsonl"))
    return folder


def timeline(tmp_path) -> dict:
    """{script: {"start": i, "end": j, "profile": ...}}: i and j are the events' places in the order they happened."""
    spans = {}
    for i, line in enumerate((tmp_path / "timeline.jsonl").read_text().splitlines()):
        event = json.loads(line)
        spans.setdefault(event["script"], {})[event["event"]] = i
        spans[event["script"]]["profile"] = event.get("profile")
    return spans


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def one_at_a_time(spans) -> bool:
    ordered = sorted(spans, key=lambda s: s["start"])
    return all(a["end"] < b["start"] for a, b in zip(ordered, ordered[1:]))


def test_the_fast_proof_runs_the_trainer_from_the_start_beside_the_others_one_at_a_time(timed_kernels, tmp_path,
                                                                                       monkeypatch):
    tables.patch_scripts(monkeypatch, verl_trainer={"timeout_s": 600, "lane": 1}, vllm={"timeout_s": 300})  # one lane
    # The others begin once the trainer has begun, and the trainer ends after the last of them.
    monkeypatch.setenv("AFTER", json.dumps({"torch": ["verl_trainer"]}))
    monkeypatch.setenv("HOLD", json.dumps({"verl_trainer": "verl"}))
    results = runner.run_kernels(settings(timed_kernels, timeout=STAND_IN_S))
    assert [r.name for r in results] == ["torch/ran", "flash_attn/ran", "vllm/ran", "verl/ran", "verl_trainer/ran"]
    spans = timeline(tmp_path)
    trainer = spans.pop("verl_trainer")
    # Launched before the first of the others (which was told it runs beside it), and running while they ran.
    assert spans["torch"]["profile"]["beside"] == ["verl_trainer"] and trainer["profile"]["beside"] == []
    assert all(overlap(trainer, s) for s in spans.values()) and trainer["start"] < spans["torch"]["start"]
    assert one_at_a_time(spans.values())  # the rest: one at a time, in ORDER
    assert ([k for k, _ in sorted(spans.items(), key=lambda kv: kv[1]["start"])]
            == ["torch", "flash_attn", "vllm", "verl"])
    assert {s["profile"]["thorough"] for s in [trainer, *spans.values()]} == {False}


def test_thorough_runs_every_script_one_at_a_time_with_the_trainer_last(timed_kernels, tmp_path):
    runner.run_kernels(settings(timed_kernels, timeout=STAND_IN_S, thorough=True, rollout_tp=2, actor_tp=2))
    spans = sorted(timeline(tmp_path).items(), key=lambda kv: kv[1]["start"])
    assert [k for k, _ in spans] == ["torch", "flash_attn", "vllm", "verl", "verl_trainer"]
    assert one_at_a_time([s for _, s in spans])
    profile = spans[-1][1]["profile"]
    assert (profile["thorough"], profile["rollout_tp"], profile["actor_tp"], profile["beside"]) == (True, 2, 2, [])


@pytest.mark.parametrize("thorough", [False, True])
def test_the_static_checks_run_beside_the_kernel_checks_only_in_the_fast_proof(timed_kernels, tmp_path, monkeypatch,
                                                                               thorough):
    from verlenv.verify.results import CheckResult

    line = tmp_path / "timeline.jsonl"

    def note(event):
        with open(line, "a") as f:
            f.write(json.dumps({"script": "static", "event": event}) + "\n")

    def static_checks(s, facts):  # test double: the real static checks need an installed env and its lock
        note("start")
        # The fast proof: still running when the first kernel script starts, which waits for this one to begin (a
        # runner that does not run them side by side leaves one of them waiting until a --timeout).
        if not thorough:
            until(lambda: line.is_file() and '"script": "torch"' in line.read_text())
        note("end")
        return [CheckResult("lock/match", "env", "static", "pass")], "580.95.05"

    monkeypatch.setattr(runner, "run_static", static_checks)
    monkeypatch.setenv("AFTER", json.dumps({"torch": ["static"]}))
    run = runner.verify(settings(timed_kernels, timeout=STAND_IN_S, thorough=thorough))
    assert [r.name for r in run.results][:2] == ["lock/match", "torch/ran"] and run.driver == "580.95.05"
    spans = timeline(tmp_path)
    static = spans.pop("static")
    if thorough:
        assert all(static["end"] < k["start"] for k in spans.values())
    else:
        assert any(overlap(static, k) for k in spans.values())
    assert run.settings.mode == ("thorough" if thorough else "fast")


def test_a_second_lane_runs_beside_the_trainer_and_is_told_so(timed_kernels, tmp_path, monkeypatch):
    tables.patch_scripts(monkeypatch, verl_trainer={"timeout_s": 600, "lane": 1},
                         vllm={"timeout_s": 300, "lane": 2})  # vLLM's own check in a lane of its own
    monkeypatch.setenv("AFTER", json.dumps({"torch": ["verl_trainer", "vllm"]}))
    monkeypatch.setenv("HOLD", json.dumps({"verl_trainer": "verl", "vllm": "verl"}))
    results = runner.run_kernels(settings(timed_kernels, timeout=STAND_IN_S))
    assert [r.name for r in results] == ["torch/ran", "flash_attn/ran", "vllm/ran", "verl/ran", "verl_trainer/ran"]
    spans = timeline(tmp_path)
    trainer, vllm = spans.pop("verl_trainer"), spans.pop("vllm")
    assert (trainer["profile"]["beside"], vllm["profile"]["beside"]) == ([], ["verl_trainer"])
    assert spans["torch"]["profile"]["beside"] == ["verl_trainer", "vllm"]
    assert one_at_a_time(spans.values())
    assert overlap(trainer, vllm) and all(overlap(vllm, s) for s in spans.values())


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


def test_the_trainers_slots_and_their_jit_jobs_come_from_one_reading_of_host_memory(kernels, monkeypatch):
    """The host's free memory changes while a run starts; the slots and the compile jobs must agree on one figure."""
    reads = []
    monkeypatch.setattr(jit_jobs, "host_available_gib", lambda: reads.append(40.0) or 40.0)
    s = settings(kernels, family=["qwen3"])
    trainer = s.trainer()
    expected = jit_jobs.jit_jobs(packages.table().jit_caches, s.variant.rollout, trainer["parallel"], 40.0,
                                 os.cpu_count() or 1)
    assert (trainer["jit_max_jobs"], trainer["jit_warm_max_jobs"] is not None) == (expected.max_jobs, True)
    assert reads == [40.0]
