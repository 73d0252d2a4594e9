"""Where verl's trainer spends its time (kernels/_phases.py): the phase parser on the real excerpt of verl's
Megatron trainer output from the 2026-11-25 H100 visit, on a composed full run (a test double whose line formats
are checked against the installed libraries by test_the_markers_are_the_installed_libraries_lines), and on
lines the installed Ray, verl, vLLM and FlashInfer format themselves; and on the whole trainer logs of the 2 x H100
visit of 2026-11-25, against the phases their reports recorded.
"""

import json
import re
import subprocess
import time

import pytest

from test_kernel_scripts import has_modules, load, torch_python
from test_verify_profiles import REPO
from verlenv.catalog import backends

DATA = REPO / "tests" / "data" / "trainer"
PROGRAMS = REPO / "tests" / "data" / "programs"


# The vLLM rollout's row (data/backends.toml), as verify hands it to the trainer check: its server line and reports.
VLLM = backends.table().rollout("vllm").row()


class _WithVllm:
    """kernels/_phases.py with the vLLM rollout's row given, as the trainer check of a vLLM variant calls it."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)

    def phases(self, *args, **kwargs):
        return self._module.phases(*args, **{"rollout": VLLM, **kwargs})

    def milestones(self, *args, **kwargs):
        return self._module.milestones(*args, **{"rollout": VLLM, **kwargs})


def phases():
    return _WithVllm(load("_phases"))


def local(*when) -> float:
    return time.mktime((*when, 0, 0, -1))


def real_excerpt():
    p = phases()
    text = (DATA / "megatron-h100-2026-11-25-excerpt.log").read_text()
    return [p.Line(None, line) for line in text.splitlines() if not line.startswith("# source:")]


def composed():
    p = phases()
    lines, launch_wall = p.read_timed_log((DATA / "fsdp-run-composed.timed.log").read_text())
    assert launch_wall is None and len(lines) == 25  # the fixture's stamps are local time: the test places them
    return lines, local(2026, 11, 26, 10, 0, 0)


def test_the_real_megatron_excerpt_gives_the_phases_its_stamps_bound_and_no_others():
    # That file holds stdout before stderr, so arrival order means nothing there: only stamped lines count.
    p = phases()
    launch = local(2026, 11, 25, 13, 10, 30)
    found, reported = p.milestones(real_excerpt(), launch)
    # Only stamped lines can be placed; the TaskRunner's first line (its config) has no stamp, so its later
    # stamped lines must not stand in for it.
    assert found == {"launch": 0.0, "ray_up": pytest.approx(9.511), "dataloader": pytest.approx(73.566),
                     "workers_spawned": pytest.approx(76.865)}
    assert reported == {}
    out = p.phases(real_excerpt(), launch, exit_s=None, steps={}, wall_s=148.3)
    # The trainer died at the actor's model build: the worker spawn is bounded, nothing after it is guessed.
    assert out == {"phase/workers_spawn_s": pytest.approx(3.299), "phase/total_s": 148.3,
                   "phase/unattributed_s": pytest.approx(148.3 - 3.299)}


def test_the_real_excerpt_with_arrivals_places_stamped_lines_by_their_stamps():
    # Arrivals as the check notes them: the two plain prints when they came, each stamped line 0.3 s after its
    # stamp (Ray forwards a worker's lines with some delay): stamped lines are placed by their own stamps.
    p = phases()
    launch = local(2026, 11, 25, 13, 10, 30)
    plain = {"ray init kwargs: ": 3.0, "{'actor_rollout_ref': ": 25.0}
    lines = []
    for line in real_excerpt():
        text, _ = p.strip(line.text)
        stamped = p.stamp(text, launch)
        arrival = next((t for start, t in plain.items() if text.startswith(start)), None)
        lines.append(p.Line(stamped + 0.3 if stamped is not None else arrival, line.text))
    found, _ = p.milestones(lines, launch)
    assert found == {"launch": 0.0, "ray_init": 3.0, "ray_up": pytest.approx(9.511), "task_runner": 25.0,
                     "dataloader": pytest.approx(73.566), "workers_spawned": pytest.approx(76.865)}
    out = p.phases(lines, launch, exit_s=90.0, steps={})
    assert out == {"phase/driver_start_s": 3.0, "phase/ray_up_s": pytest.approx(6.511),
                   "phase/task_runner_s": pytest.approx(15.489), "phase/trainer_setup_s": pytest.approx(48.566),
                   "phase/workers_spawn_s": pytest.approx(3.299), "phase/total_s": 90.0,
                   "phase/unattributed_s": pytest.approx(90.0 - 76.865)}


def test_a_composed_full_run_splits_into_every_phase_in_order():
    p = phases()
    lines, launch = composed()
    steps = load_trainer().parse_metrics([line.text for line in lines])
    out = p.phases(lines, launch, exit_s=170.0, steps=steps)
    want = {"driver_start": 4.2, "ray_up": 4.92, "task_runner": 4.88, "trainer_setup": 8.412,
            "workers_spawn": 8.538, "workers_init": 14.07, "reward_workers": 0.88, "rollout_server": 50.1,
            "rollout_server/server_process": 9.3, "rollout_server/model_load": 0.412345,
            "rollout_server/torch_compile": 10.52, "rollout_server/autotune": 1.5,
            "rollout_server/graph_capture": 8.0, "rollout_server/engine_init": 21.4,
            "weight_sync": 3.9, "agent_loop": 5.1, "step1": 55.0, "step1/gen": 30.0, "step1/reward": 0.5,
            "step1/old_log_prob": 8.0, "step1/adv": 0.1, "step1/update_actor": 9.0, "step1/update_weights": 2.0,
            "step1/save_checkpoint": 4.0, "between_steps": 0.5, "step2": 3.5, "step2/gen": 1.2,
            "step2/reward": 0.1, "step2/old_log_prob": 0.3, "step2/adv": 0.01, "step2/update_actor": 0.6,
            "step2/update_weights": 0.4, "step2/save_checkpoint": 0.8, "teardown": 6.0, "total": 170.0,
            "unattributed": 0.0}
    assert list(out) == [f"phase/{name}_s" for name in want]
    assert out == {f"phase/{k}_s": pytest.approx(v, abs=1e-6) for k, v in want.items()}


@pytest.mark.parametrize("drop, gone", [
    ("LLMServerManager:", ["rollout_server", "weight_sync"]),  # the marker ends one phase and starts the next
    ("step:2 - ", ["between_steps", "step2", "teardown"]),
    ("Started a local Ray instance", ["ray_up", "task_runner"]),
])
def test_a_missing_marker_leaves_its_phases_out_and_keeps_the_rest(drop, gone):
    p = phases()
    lines, launch = composed()
    kept = [line for line in lines if drop not in line.text]
    steps = load_trainer().parse_metrics([line.text for line in kept])
    out = p.phases(kept, launch, exit_s=170.0, steps=steps)
    full = p.phases(lines, launch, exit_s=170.0, steps=load_trainer().parse_metrics([x.text for x in lines]))
    top = {k.removeprefix("phase/").removesuffix("_s") for k in full if k.count("/") == 1}
    assert {k.removeprefix("phase/").removesuffix("_s") for k in out if k.count("/") == 1} == top - set(gone)
    missing = sum(full[f"phase/{name}_s"] for name in gone)
    assert out["phase/unattributed_s"] == pytest.approx(missing)


def test_junk_empty_and_killed_runs_give_what_they_can_without_a_crash():
    p = phases()
    assert p.phases([], None, exit_s=None, steps={}) == {}
    junk = [p.Line(None, "\x1b[1m"), p.Line(1.0, "step:x - nothing"), p.Line(2.0, "INFO 13-45 99:99:99 [x.py:1] y"),
            p.Line(None, "(WorkerDict pid=1) 2026-02-30 10:00:00,000\tINFO worker.py:1 -- Started a local Ray "
                         "instance.")]
    with pytest.raises((ValueError, OverflowError)):
        time.strptime("2026-02-30", "%Y-%m-%d")  # the stamp above is not a date: it must not be trusted
    out = p.phases(junk, local(2026, 2, 1, 0, 0, 0), exit_s=None, steps={1: {"timing_s/step": "x"}}, wall_s=540.0)
    assert out == {"phase/total_s": 540.0, "phase/unattributed_s": 540.0}
    steps_only = [p.Line(30.0, "step:1 - timing_s/step:nan"), p.Line(35.0, "step:2 - x:1")]
    out = p.phases(steps_only, None, exit_s=40.0, steps={1: {"timing_s/step": float("nan")}, 2: {"x": 1.0}})
    assert out == {"phase/teardown_s": 5.0, "phase/total_s": 40.0, "phase/unattributed_s": 35.0}


def test_a_stamp_that_contradicts_its_arrival_yields_to_the_arrival():
    p = phases()
    launch = local(2026, 11, 26, 10, 0, 0)
    line = "INFO:2026-11-26 10:00:20,000:reward loop manager initialized"
    assert p.when(p.Line(21.0, line), line, launch) == pytest.approx(20.0)
    assert p.when(p.Line(None, line), line, launch) == pytest.approx(20.0)
    assert p.when(p.Line(8.0, line), line, launch) == 8.0  # written 12 s after it arrived: another clock
    other_node = "INFO:2026-11-26 13:00:20,000:reward loop manager initialized"  # three hours off
    assert p.when(p.Line(21.0, other_node), other_node, launch) == 21.0
    # vLLM's stamps have no year: December's lines in a run launched just after New Year are last year's.
    new_year = local(2027, 1, 1, 0, 0, 5)
    assert p.stamp("INFO 12-31 23:59:58 [core.py:1] x", new_year) == pytest.approx(-7.0)


def test_the_timed_log_round_trips_atomically(tmp_path):
    p = phases()
    lines = [p.Line(0.5, "a\tb with a tab"), p.Line(None, "no arrival"), p.Line(2.25, "")]
    path = tmp_path / "trainer.log"
    p.write_timed_log(str(path), lines, 1764151200.5)
    assert p.read_timed_log(path.read_text()) == (lines, 1764151200.5)
    assert [f.name for f in tmp_path.iterdir()] == ["trainer.log"]


def load_trainer():
    return load("verl_trainer")


# A program run in the env; its docstring says what it does.
SOURCES = PROGRAMS / "trainer_phase_markers.py"


@pytest.fixture(scope="module")
def library_lines(tmp_path_factory) -> tuple[list[dict], float]:
    python = torch_python()
    if python is None:
        pytest.skip("no python with torch: set VERLENV_TEST_TORCH_PYTHON or create a .venv-<stack>-<variant> env")
    if not has_modules(python, "verl", "vllm", "ray", "flashinfer"):
        pytest.skip("the torch environment lacks verl, vLLM, Ray or FlashInfer")
    out = tmp_path_factory.mktemp("phases") / "lines.json"
    launch = local(2026, 11, 26, 10, 0, 0)
    proc = subprocess.run([python, str(SOURCES), str(out), str(launch)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), launch


@pytest.mark.slow
def test_the_markers_are_the_installed_libraries_lines(library_lines):
    p = phases()
    cases, launch = library_lines
    reports = {r["name"]: re.compile(r["pattern"]) for r in VLLM["reports"]}
    markers = {m.milestone: m.pattern for m in p.MARKERS}
    for case in cases:
        text, actor = p.strip(case["line"])
        what = case["what"]
        if what in markers:
            assert markers[what].search(text), case
        elif what in reports:
            assert float(reports[what].search(text).group(1)) == pytest.approx(case["number"]), case
        else:
            assert (p.AUTOTUNE_START if what == "autotune_start" else p.AUTOTUNE_END).search(text), case
        if case["stamped"]:  # the stamp each library writes reads back as the time it was written (vLLM: whole s)
            assert p.stamp(text, launch) == pytest.approx(case["at"], abs=1.0 if what in reports else 0.002), case
        else:
            assert p.stamp(text, launch) is None, case
    assert {c["what"] for c in cases} >= {m.milestone for m in p.MARKERS}
    # The composed fixture's lines have the same shapes: each of its markers is one the libraries print.
    lines, _ = composed()
    found, reported = p.milestones(lines, local(2026, 11, 26, 10, 0, 0))
    assert set(found) - {"launch", "task_runner", "serve_args", "step1_end", "step2_end"} <= set(markers)
    assert set(reported) - {"autotune"} <= set(reports)


def benchmark():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trainer_phases", REPO / "benchmarks" / "trainer_phases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_reads_the_committed_reports_numbers():
    columns = {c["report"]: c for c in benchmark().collect(REPO / "docs" / "verification")}
    fsdp = columns["2026-11-24-h100-verl-0.9-fsdp.json"]
    assert fsdp["summary"] == {"whole verify": 591.5, "vLLM check: generate": 101.9, "vLLM check: engine start": 79.9,
                               "trainer check": 374.2, "trainer: launch to exit": 373.4,
                               "trainer: launch to step 1": 309.3, "trainer: launch to end of first rollout": 321.5,
                               "trainer: step 1": 55.4, "trainer: step 1 rollout": 12.2, "trainer: step 2": 3.5,
                               "trainer: step 2 rollout": 2.2}
    assert (fsdp["mode"], fsdp["phases"], fsdp["trainer"]) == ("thorough (before the fast proof)", {}, "pass")
    megatron = columns["2026-11-25-h100-verl-0.9-megatron-relocked.json"]
    assert megatron["summary"]["whole verify"] == 712.3 and megatron["summary"]["trainer check"] == 404.9
    died = columns["2026-11-25-h100-verl-0.9-megatron-verl.json"]  # the trainer died at model build
    assert died["trainer"] == "fail" and "trainer: step 1" not in died["summary"]
    assert "2026-11-22-h200x2-nccl.json" not in columns  # no trainer check there


def test_the_benchmark_prints_a_phase_table_for_a_report_with_phases(tmp_path):
    bench = benchmark()
    lines, launch = composed()
    numbers = phases().phases(lines, launch, 170.0, load("verl_trainer").parse_metrics([x.text for x in lines]))
    report = json.loads((REPO / "docs" / "verification" / "2026-11-24-h100-verl-0.9-fsdp.json").read_text())
    trainer = bench.trainer_check(report)
    trainer["numbers"] = {**trainer["numbers"], **numbers}
    report["mode"] = "fast"
    (tmp_path / "new.json").write_text(json.dumps(report))
    (tmp_path / "not-a-report.json").write_text("[1, 2]")
    out = tmp_path / "bench" / "trainer-phases"
    out.parent.mkdir()
    assert bench.main(["--reports", str(tmp_path), "--out", str(out)]) == 0
    md = out.with_suffix(".md").read_text()
    assert "| mode | fast |" in md and "| rollout_server | 50.1 |" in md and "| &nbsp;&nbsp;model_load | 0.4 |" in md
    data = json.loads(out.with_suffix(".json").read_text())
    assert [c["report"] for c in data["reports"]] == ["new.json"] and data["reports"][0]["phases"]["step1"] == 55.0
    assert sorted(p.name for p in out.parent.iterdir()) == ["trainer-phases.json", "trainer-phases.md"]
    assert bench.main(["--reports", str(tmp_path / "bench")]) == 2  # no report there: said, exit 2


# The whole trainer logs of the 2 x H100 visit (VERLENV_TRAINER_LOG, each line with its arrival), and the reports
# those runs wrote: the phases read again from each log must be the ones its report recorded, and cover the run.
VISIT = REPO / "docs" / "verification"
VISIT_RUNS = ["fsdp-fresh", "megatron-fresh", "fsdp-thorough", "megatron-thorough", "fsdp-tp2", "megatron-tp2"]


@pytest.mark.parametrize("run", VISIT_RUNS)
def test_a_whole_real_log_gives_again_the_phases_its_report_recorded(run):
    import tarfile

    p, check = phases(), load("verl_trainer")
    with tarfile.open(VISIT / "2026-11-25-h100x2-logs.tar.gz") as tar:
        text = tar.extractfile(f"{run}.trainer.log").read().decode()
    report = json.loads((VISIT / f"2026-11-25-h100x2-verl-0.9-{run}.json").read_text())
    numbers = next(c for c in report["checks"] if c["name"].endswith("-steps"))["numbers"]
    lines, launch_wall = p.read_timed_log(text)
    assert launch_wall is not None and len(lines) > 1000
    again = p.phases(lines, launch_wall, numbers["wall_s"], check.parse_metrics([line.text for line in lines]),
                     wall_s=numbers["wall_s"])
    recorded = {k: v for k, v in numbers.items() if k.startswith("phase/")}
    assert again == pytest.approx(recorded, abs=0.005)  # the log keeps each arrival to the millisecond
    chain = [k.split("/")[1][:-2] for k in again if k.count("/") == 1]
    assert chain[:2] == ["driver_start", "ray_up"] and chain[-3:] == ["teardown", "total", "unattributed"]
    for phase in ("workers_init", "rollout_server", "agent_loop", "step1", "step2"):
        assert phase in chain, (phase, chain)
    assert again["phase/unattributed_s"] < 1.0 and again["phase/total_s"] == pytest.approx(numbers["wall_s"])


def test_readmes_phase_table_is_the_benchmarks():
    """README quotes three runs' phases; each number must be the one benchmarks/trainer_phases.py wrote."""
    runs = {r["report"]: r for r in json.loads((REPO / "docs/benchmarks/trainer-phases.json").read_text())["reports"]}
    column = {"fsdp, fresh": "fsdp-fresh", "megatron, fresh": "megatron-fresh", "fsdp, --thorough": "fsdp-thorough"}
    rows = [line.strip("|").split("|") for line in (REPO / "README.md").read_text().splitlines()
            if line.startswith("| ")]
    header = next(r for r in rows if r[0].strip() == "phase (s), H100")
    names = [column[c.strip()] for c in header[1:]]
    body = rows[rows.index(header) + 1:rows.index(header) + 13]
    assert [r[0].strip() for r in body][-1] == "total"
    for row in body:
        for name, cell in zip(names, row[1:]):
            phases_ = runs[f"2026-11-25-h100x2-verl-0.9-{name}.json"]["phases"]
            assert float(cell) == pytest.approx(phases_[row[0].strip()], abs=0.05), (name, row)
