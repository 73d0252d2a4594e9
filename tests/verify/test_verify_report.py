"""The report of `verlenv verify`: a real CPU run against a real (small) venv gives a JSON document that
matches the schema, a markdown summary and a table; exit codes follow the required checks only."""

import copy
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_verify_profiles import H100, empty_env, machine  # noqa: F401  (fixtures)
from verlenv.catalog import backends
from verlenv.cli import main
from verlenv.verify import report, runner
from verlenv.verify.results import SKIPPED_BY_REQUEST

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (test dependency) validates reports against SCHEMA")


@pytest.fixture
def cpu_run(machine, empty_env, tmp_path, capsys):  # noqa: F811
    machine()  # nvidia-smi answers with no GPU
    out = {"json": tmp_path / "reports" / "r.json", "md": tmp_path / "r.md"}
    code = main(["verify", "--python", empty_env, "--no-lock", "--report", str(out["json"]), "--markdown",
                 str(out["md"])])
    printed = capsys.readouterr()
    return code, json.loads(out["json"].read_text()), out, printed


def test_cpu_run_writes_a_report_that_matches_the_schema(cpu_run):
    code, data, out, _ = cpu_run
    jsonschema.validate(data, report.SCHEMA)
    assert code == 1 == data["exit_code"] and data["result"] == "fail"  # torch, vllm, ... are not installed
    assert data["profile"] is None and data["gpus"] == [] and data["selection"]["gpu"] == "cpu"
    assert data["stack"] == "verl-0.9" and data["variant"] == "fsdp"
    assert data["command"][:4] == ["verlenv", "verify", "--gpu", "auto"] and "--no-lock" in data["command"]
    t = data["totals"]
    assert sum(t[s] for s in ("pass", "warn", "fail", "skip")) == t["checks"] == len(data["checks"])
    assert t["required_failed"] == sum(c["required"] and c["status"] == "fail" for c in data["checks"]) > 0
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["installed/torch"]["status"] == "fail" and checks["installed/torch"]["required"]
    assert checks["lock/match"]["status"] == "skip"
    kernels = [c for c in data["checks"] if c["kind"] == "kernel"]
    assert all(c["status"] == "skip" and "no GPU" in c["reason"] for c in kernels)
    assert data["versions"]["torch"] is None and data["env"]["python_version"].startswith("3.")
    assert [p.name for p in out["json"].parent.iterdir()] == ["r.json"]  # atomic write left no temp file


def test_markdown_and_table_summarise_the_same_report(cpu_run):
    _, data, out, printed = cpu_run
    md = out["md"].read_text()
    assert md.startswith("# verlenv verify: verl-0.9 / fsdp / cpu\n")
    assert "**FAIL**" in md and "- GPU: none (static checks only)" in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| status")]
    assert len(rows) == len(data["checks"])
    assert "| fail | installed/torch | torch | yes |" in md
    assert "installed/torch" in printed.out and "FAIL: " in printed.out and data["verdict"] in printed.out
    assert "no GPU: static checks only" in printed.err and f"report: {out['json']}" in printed.err


def test_markdown_keeps_a_failed_checks_output(cpu_run):
    _, data, _, _ = cpu_run
    data = copy.deepcopy(data)
    failed = next(c for c in data["checks"] if c["status"] == "fail")
    failed["log"] = "(EngineCore pid=7) RuntimeError: CUDA out of memory\nEngine core initialization failed"
    md = report.markdown(data)
    section = md.split("## Output of failed checks", 1)[1]
    assert f"### {failed['name']}" in section and "RuntimeError: CUDA out of memory" in section
    passed = next(c for c in data["checks"] if c["status"] != "fail")
    passed["log"] = "not shown"
    assert "not shown" not in report.markdown(data)


def test_the_schema_can_fail(cpu_run):
    _, data, _, _ = cpu_run
    for mutate in (lambda d: d["checks"][0].update(status="ok"), lambda d: d.pop("versions"),
                   lambda d: d.update(exit_code=2), lambda d: d["checks"][0].pop("required"),
                   lambda d: d["totals"].update(pass_="x")):
        bad = copy.deepcopy(data)
        mutate(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, report.SCHEMA)


def kernels_dir(folder: Path, name: str, status: str) -> Path:
    """One kernel script (a test double) that reports `status` for its package and marks that it ran."""
    folder.mkdir(parents=True, exist_ok=True)
    package = name.replace("_", "-")
    (folder / f"check_{name}.py").write_text(
        "import argparse, json, pathlib\n"
        "p = argparse.ArgumentParser(); p.add_argument('--out'); p.add_argument('--profile'); a = p.parse_args()\n"
        f"pathlib.Path(a.out).with_name('ran').touch()\n"
        f"pathlib.Path({str(folder / 'ran')!r}).touch()\n"
        f"json.dump([{{'check': '{package}/kernel', 'package': '{package}', 'status': '{status}', "
        "'reason': 'test double'}], open(a.out, 'w'))\n")
    return folder


@pytest.mark.parametrize("variant, expected", [("fsdp", 0), ("megatron", 1)])
def test_exit_code_counts_required_checks_only(machine, empty_env, tmp_path, variant, expected):  # noqa: F811
    machine(H100)
    kernels = kernels_dir(tmp_path / "k", "megatron_core", "fail")
    r = tmp_path / "r.json"
    code = main(["verify", "--variant", variant, "--only", "megatron-core", "--python", empty_env, "--no-lock",
                 "--kernels-dir", str(kernels), "--report", str(r)])
    data = json.loads(r.read_text())
    kernel = next(c for c in data["checks"] if c["name"] == "megatron-core/kernel")
    assert kernel["status"] == "fail" and kernel["required"] == (variant == "megatron")
    assert code == expected == data["exit_code"]


def test_skip_package_records_skips_and_runs_nothing(machine, empty_env, tmp_path):  # noqa: F811
    machine(H100)
    kernels = kernels_dir(tmp_path / "k", "vllm", "fail")
    r = tmp_path / "r.json"
    code = main(["verify", "--only", "vllm", "--skip-package", "vllm", "--python", empty_env, "--no-lock",
                 "--kernels-dir", str(kernels), "--report", str(r)])
    data = json.loads(r.read_text())
    assert code == 0 and not (kernels / "ran").exists()
    assert {(c["name"], c["status"], c["reason"]) for c in data["checks"]} == {
        ("installed/vllm", "skip", SKIPPED_BY_REQUEST), ("objects/vllm", "skip", SKIPPED_BY_REQUEST),
        ("vllm/kernels", "skip", SKIPPED_BY_REQUEST)}
    assert data["selection"]["skipped_packages"] == ["vllm"]


def test_default_report_path():
    when = datetime(2026, 11, 22, 1, 2, 3, tzinfo=timezone.utc)
    assert report.default_path(Path("/r"), "verl-0.9", "fsdp", "h100", when) == \
        Path("/r/reports/verify-verl-0.9-fsdp-h100-20261122T010203Z.json")


def test_verify_imports_without_uv_or_conda_lock():
    """The GPU machine has only torch, packaging, rich, pyyaml and pyelftools: none of the verify path may need more."""
    code = ("import sys\n"
            "for blocked in ('conda_lock', 'uv', 'yaml'):\n"
            "    sys.modules[blocked] = None\n"
            "import argparse, verlenv.commands.verify, verlenv.verify.runner, verlenv.verify.static, "
            "verlenv.verify.report\n"
            "verlenv.commands.verify.register(argparse.ArgumentParser().add_subparsers())\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_report_says_which_mode_ran(cpu_run):
    _, data, out, printed = cpu_run
    assert data["mode"] == "fast"  # the default
    assert "- mode: fast (the fast proof: vLLM eager, checks side by side)" in out["md"].read_text()
    old = copy.deepcopy(data)
    old.pop("mode")  # a report written before the fast proof still validates, and says what it ran
    jsonschema.validate(old, report.SCHEMA)
    assert "- mode: thorough (written before the fast proof)" in report.markdown(old)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "mode": "quick"}, report.SCHEMA)


def test_the_markdown_prints_the_trainers_phase_table(cpu_run):
    from test_trainer_phases import composed, load

    _, data, _, _ = cpu_run
    lines, launch = composed()
    numbers = load("_phases").phases(lines, launch, 170.0, load("verl_trainer").parse_metrics([x.text for x in lines]),
                                     rollout=backends.table().rollout("vllm").row())
    data = copy.deepcopy(data)
    trainer = next(c for c in data["checks"] if c["kind"] == "kernel")
    trainer["name"] = "verl/trainer/fsdp/grpo-2-steps"
    trainer["numbers"] = {"step1_step_s": 55.0, **numbers}
    md = report.markdown(data)
    section = md.split("## Where verl/trainer/fsdp/grpo-2-steps spent its time", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| phase")]
    assert len(rows) == len(numbers)
    assert rows[0] == "| driver_start | 4.2 | 2% |"
    assert "| rollout_server | 50.1 | 29% |" in rows and "| &nbsp;&nbsp;torch_compile | 10.5 | 6% |" in rows
    assert rows.index("| rollout_server | 50.1 | 29% |") < rows.index("| &nbsp;&nbsp;torch_compile | 10.5 | 6% |")
    assert "| **total** | 170.0 |  |" in rows and rows[-1] == "| unattributed | 0.0 | 0% |"
    assert report.phase_rows({"step1_step_s": 1.0, "phase/flag_s": True}) == []  # only phase numbers
    assert "spent its time" not in report.markdown(copy.deepcopy(cpu_run[1]))  # no phases, no section


def test_thorough_and_the_tp_sizes_reach_the_scripts_and_the_report(machine, empty_env, tmp_path):  # noqa: F811
    machine(H100)
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "check_verl_trainer.py").write_text(  # test double: echoes what verify told it
        "import argparse, json\n"
        "p = argparse.ArgumentParser(); p.add_argument('--out'); p.add_argument('--profile'); a = p.parse_args()\n"
        "profile = json.loads(a.profile)\n"
        "json.dump([{'check': 'verl/trainer/told', 'package': 'verl', 'status': 'pass', 'numbers': "
        "{k: profile[k] for k in ('thorough', 'rollout_tp', 'actor_tp')}}], open(a.out, 'w'))\n")
    r = tmp_path / "r.json"
    code = main(["verify", "--variant", "megatron", "--only", "verl", "--python", empty_env, "--no-lock",
                 "--kernels-dir", str(folder), "--report", str(r), "--thorough", "--rollout-tp", "2", "--actor-tp",
                 "2"])
    data = json.loads(r.read_text())
    told = next(c for c in data["checks"] if c["name"] == "verl/trainer/told")
    assert told["numbers"] == {"thorough": True, "rollout_tp": 2, "actor_tp": 2}
    assert data["mode"] == "thorough" and code == data["exit_code"]
    assert data["command"][-5:] == ["--thorough", "--rollout-tp", "2", "--actor-tp", "2"]


def test_piped_output_is_one_full_row_per_check_never_folded(cpu_run):
    _, data, _, printed = cpu_run  # pytest captures stdout: not a terminal, as under CI, nohup or a pipe
    lines = printed.out.splitlines()
    for c in data["checks"]:  # each check on a line of its own, its reason whole
        (row,) = [line for line in lines if line.split()[1:2] == [c["name"]]]
        assert row.endswith(c["reason"]) and c["package"] in row, row
    assert max(map(len, lines)) > 80  # nothing was cut to a terminal's width
    assert not any(ch in printed.out for ch in "│┃━")


def test_on_a_terminal_the_table_is_drawn(cpu_run):
    from rich.console import Console

    _, data, _, _ = cpu_run
    console = Console(record=True, force_terminal=True, width=120)
    report.print_table(data, console)
    text = console.export_text()
    assert "┃ status " in text and "│ installed/torch " in text and "FAIL: " in text


def passed_without_a_gpu(data: dict) -> dict:
    """The CPU run's report as a fully installed env would have it: every failed check passes."""
    from verlenv.verify.results import totals

    data = copy.deepcopy(data)
    for c in data["checks"]:
        if c["status"] == "fail":
            c["status"] = "pass"
    data["totals"] = totals([report._as_result(c) for c in data["checks"]])
    data.update(result="incomplete", exit_code=0)  # the required GPU checks still did not run
    return data


def test_without_a_gpu_the_verdict_says_what_was_proven_and_the_counts_add_up(cpu_run):
    from rich.console import Console

    _, data, _, _ = cpu_run
    checks = data["checks"]
    static, kernel = (sum(c["kind"] == k for c in checks) for k in ("static", "kernel"))
    not_run = [c["name"] for c in checks if c["required"] and c["status"] == "skip"
               and not c["reason"].startswith("skipped by request")]
    # One skipped result per packaged kernel check script: there is no GPU to run them on.
    assert (static + kernel == len(checks) == data["totals"]["checks"]
            and kernel == len(runner.scripts(runner.KERNELS_DIR)))
    assert {"verl/verl_trainer/kernels", "flash-attn/kernels", "driver"} <= set(not_run)
    head, rest = report.verdict(data)
    assert (head, rest.split("; ")[1]) == ("FAIL", f"{len(not_run)} required GPU checks not run (no GPU here)")
    assert f"{len(checks)} checks ({static} static, {kernel} kernel): " in rest

    passed = passed_without_a_gpu(data)
    head, rest = report.verdict(passed)
    assert head == "static checks passed" and rest.startswith(f"{len(not_run)} required GPU checks not run (no GPU "
                                                                f"here); {len(checks)} checks ({static} static, "
                                                                f"{kernel} kernel)")
    assert passed["totals"]["required_not_run"] == len(not_run)
    md = report.markdown(passed)
    assert "**static checks passed**: " in md and "**PASS**" not in md and f"Not run: {', '.join(not_run)}." in md
    console = Console(record=True, width=80)  # not a terminal
    report.print_table(passed, console)
    text = console.export_text()
    assert f"static checks passed: {len(not_run)} required GPU checks not run" in text and "PASS" not in text
    assert f"  not run: {', '.join(not_run)}" in text
    # With a GPU and every required check run, it is a plain PASS.
    gpu = copy.deepcopy(passed)
    gpu["profile"] = {"key": "h100", "title": "H100", "arch": "9.0", "fp8": True, "forced": False, "thresholds": {}}
    for c in gpu["checks"]:
        if c["name"] in not_run:
            c["status"] = "pass"
    assert report.verdict(gpu)[0] == "PASS"


def _run_of(results: list, profile=None) -> SimpleNamespace:
    """A stand-in for runner.Run with only what report.build reads: the results decide the verdict."""
    stack, variant = SimpleNamespace(name="verl-0.9", cuda="13.0"), SimpleNamespace(name="fsdp", actor="fsdp",
                                                                                   rollout="vllm")
    settings = SimpleNamespace(profile=profile, forced=False, gpus=[], stack=stack, variant=variant, no_lock=True,
                               lock=None, skipped=set(), only=None, scope=SimpleNamespace(required={"torch"}),
                               mode="fast", families=[], trainer_override=())
    facts = SimpleNamespace(torch=None, executable=sys.executable, version="3.12.0", prefix=sys.prefix,
                            distributions=[])
    return SimpleNamespace(settings=settings, facts=facts, driver=None, results=results, seconds=1.0,
                           exit_code=1 if any(r.blocking for r in results) else 0)


def test_the_jsons_result_and_verdict_say_what_the_screen_says(capsys):
    """A CPU run whose static checks pass and whose required GPU checks could not run was `"result": "pass"` in the
    JSON while the screen said they were not run: both now come from result_of, and the JSON holds the line."""
    from rich.console import Console

    from verlenv.verify.results import CheckResult

    static = CheckResult("installed/torch", "torch", "static", "pass", required=True)
    no_gpu = CheckResult("torch/kernels", "torch", "kernel", "skip", "no GPU", required=True)
    started = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for results, result, head in [([static, no_gpu], "incomplete", "static checks passed"),
                                  ([static], "pass", "PASS"),
                                  ([CheckResult("installed/torch", "torch", "static", "fail", required=True),
                                    no_gpu], "fail", "FAIL")]:
        data = report.build(_run_of(results), ["verlenv", "verify"], started)
        jsonschema.validate(data, report.SCHEMA)
        assert (data["result"], data["verdict"].split(": ")[0]) == (result, head)
        assert data["totals"]["required_not_run"] == (no_gpu in results)
        console = Console(record=True, width=200)
        report.print_table(data, console)
        assert data["verdict"] in console.export_text()
