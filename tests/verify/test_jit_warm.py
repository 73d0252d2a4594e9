"""verl's trainer check compiles the kernels the rollout engine would JIT-compile at the first step once, alone, before
its trainers (data/kernel_paths.toml [jit_warm]): GPU visit N's trainers compiled FlashInfer's GDN prefill inside
vLLM, each with a job per core, until Ray's memory monitor killed them; bounded, it outlasts a trainer's time limit."""

import json
import os
import select
import textwrap
import tomllib
import types
from pathlib import Path

import pytest

from test_kernel_scripts import load
from test_verify_runner import settings
from verlenv.catalog import families, gpus, stacks
from verlenv.errors import UserError
from verlenv.verify import kernel_paths, runner

REPO = Path(__file__).resolve().parents[2]

TABLE = families.table()


def rows(*names):
    return TABLE.rows([TABLE.families[n] for n in names])


def test_the_hybrid_families_warm_flashinfers_gdn_prefill_with_vllm_only():
    gdn = kernel_paths.table()["jit_warm"]["flashinfer-gdn-prefill"]
    assert (gdn["module"], gdn["spec"], gdn["archs"]) == ("flashinfer.jit.gdn", "gen_gdn_prefill_sm90_module", ["9.0"])
    for name in ("qwen3.5", "qwen3.5-moe", "qwen3-next"):
        assert list(kernel_paths.warm_rows(rows(name), "vllm", TABLE)) == ["flashinfer-gdn-prefill"], name
    assert kernel_paths.warm_rows(rows("llama", "deepseek-v3", "gpt-oss"), "vllm", TABLE) == {}
    assert kernel_paths.warm_rows(rows("qwen3.5"), "sglang", TABLE) == {}
    # a user's shrunk config has no needs of its own: those of the table's family of the same model class
    shrunk = {**rows("qwen3-next")[0], "name": "config-x", "needs": {}}
    assert list(kernel_paths.warm_rows([shrunk], "vllm", TABLE)) == ["flashinfer-gdn-prefill"]


@pytest.mark.parametrize("change, words", [
    ({"archs": ["sm90"]}, "archs like"), ({"timeout_s": 0}, "timeout_s > 0"), ({"module": 3}, "module (str)"),
    ({"extra": "x"}, "needs exactly"), ({"prebuilt_by": 3}, "may name prebuilt_by (str)"),
])
def test_a_bad_warm_row_is_one_line(tmp_path, change, words):
    row = {**kernel_paths.table()["jit_warm"]["flashinfer-gdn-prefill"], **change}
    with pytest.raises(UserError, match=r"jit_warm\.x needs exactly") as e:
        kernel_paths._jit_warm(tmp_path / "kernel_paths.toml", {"x": row})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_runner_hands_the_rows_and_a_bound_for_one_compile_and_gives_it_time(tmp_path):
    hybrid = settings(tmp_path, families=rows("qwen3.5", "qwen3-next", "llama"))
    trainer = hybrid.trainer()
    assert list(trainer["jit_warm"]) == ["flashinfer-gdn-prefill"]
    assert trainer["jit_warm_max_jobs"] >= trainer["jit_max_jobs"] >= 1  # alone, before the trainers: the most
    plain = settings(tmp_path, families=rows("llama", "qwen3", "qwen2"))
    # 1500 s of compile over the trainer script's 600 s floor: three rounds more than the families' own
    assert runner.trainer_rounds(hybrid) == runner.trainer_rounds(plain) + 3
    json.dumps(trainer)  # it travels to the check as JSON


def test_the_trainer_check_says_how_many_trainers_at_once_and_what_compiles_first_before_it_goes_quiet(tmp_path):
    def plan(names, **kw):
        return runner.trainer_plan(settings(tmp_path, families=rows(*names), **kw))

    # one Settings for both: it reads the host's available memory once, and the count of trainers comes from it
    hybrid = settings(tmp_path, families=rows("qwen3.5", "qwen3-next", "llama"))
    at_once = hybrid.trainer()["parallel"]
    rounds = -(-3 // at_once)
    line = runner.trainer_plan(hybrid)
    assert line.startswith(f"verl's trainer: 3 families, {at_once} at once, {rounds} round")
    assert "flashinfer-gdn-prefill compiled once (up to 1500 s, none where flashinfer-jit-cache is installed)" in line
    assert "compiled" not in plan(["llama", "deepseek-v3"])  # no hybrid family: nothing compiles first
    # an A100 has no sm_90 GDN prefill to compile (the row's archs), so its line names none
    assert "compiled" not in plan(["qwen3.5"], profile=gpus.profile("a100"))
    assert plan(["qwen3"], thorough=True).startswith("verl's trainer: 1 family, 1 at once, 1 round")
    assert runner.trainer_plan(settings(tmp_path, families=[])) is None


# A test double of the engine's JIT module: its spec's build_and_load() records MAX_JOBS, fails, or blocks forever
# beside a child of its own (as ninja's compilers are).
FAKE_JIT = textwrap.dedent("""
    import os, subprocess, sys
    class Spec:
        is_aot = os.environ.get("FAKE_AOT") == "yes"  # as FlashInfer's JitSpec: a jit-cache package holds it
        def get_library_path(self):
            return "/prebuilt/fake.so" if self.is_aot else "/jit/fake.so"
        def build_and_load(self):
            mode = os.environ["FAKE_MODE"]
            if mode == "fail":
                raise RuntimeError("Ninja build failed. FAILED: [code=137] gdn_prefill_kernel_bf16.cuda.o")
            if mode == "hang":
                child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"],
                                         stdin=subprocess.DEVNULL)
                open(os.environ["FAKE_OUT"], "w").write(str(child.pid))
                child.wait()
            open(os.environ["FAKE_OUT"], "w").write(os.environ.get("MAX_JOBS", "unset"))
    def spec():
        return Spec()
""")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    (tmp_path / "fake_jit.py").write_text(FAKE_JIT)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_OUT", str(out))
    return types.SimpleNamespace(row={"module": "fake_jit", "spec": "spec", "timeout_s": 300, "why": "a test double"},
                                 out=out, trainer=load("verl_trainer"), common=load("_common"))


def test_the_compile_gets_the_bound_unless_the_user_set_max_jobs(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "ok")
    monkeypatch.delenv("MAX_JOBS", raising=False)
    numbers, note = fake.trainer.warm(fake.row, 13)
    assert fake.out.read_text() == "13" and numbers["max_jobs"] == 13 and numbers["wall_s"] >= 0
    assert "compiled once before the trainers" in note and "MAX_JOBS=13" in note
    monkeypatch.setenv("MAX_JOBS", "4")
    assert fake.trainer.warm(fake.row, 13)[0]["max_jobs"] == 4 and fake.out.read_text() == "4"


def test_a_prebuilt_module_is_reported_as_loaded_not_compiled(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "ok")
    monkeypatch.setenv("FAKE_AOT", "yes")
    numbers, note = fake.trainer.warm(fake.row, 13)
    assert numbers["prebuilt"] is True and note.startswith("loaded prebuilt from /prebuilt/fake.so, nothing compiled")
    monkeypatch.setenv("FAKE_AOT", "no")
    numbers, note = fake.trainer.warm(fake.row, 13)
    assert numbers["prebuilt"] is False and note.startswith("compiled once before the trainers")
    assert "verlenv build" not in note  # a row no source build carries names none
    note = fake.trainer.warm({**fake.row, "prebuilt_by": "flashinfer-jit-cache"}, 13)[1]
    assert "every node compiles it again unless the env has flashinfer-jit-cache, which carries it prebuilt " \
           "(`verlenv build flashinfer-jit-cache`)" in note


def test_the_prebuilt_by_of_a_row_is_a_source_build_whose_recipe_carries_that_module():
    """A jit_warm row's prebuilt_by names a recipe whose modules table has the row's spec, for the row's archs."""
    rows = tomllib.loads((REPO / "src" / "verlenv" / "data" / "kernel_paths.toml").read_text())["jit_warm"]
    builds = {b.name for v in stacks.load(REPO / "stacks.toml").all_variants() for b in v.source_builds}
    named = {key: row for key, row in rows.items() if row.get("prebuilt_by")}
    assert named
    for key, row in named.items():
        assert row["prebuilt_by"] in builds, key
        table = tomllib.loads((REPO / "recipes" / row["prebuilt_by"] / "src" / "modules.toml").read_text())["module"]
        assert any(m["spec"] == f"{row['module']}:{row['spec']}" and m["arch"] in row["archs"] for m in table), key


def test_a_failed_compile_says_its_error_in_one_line(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "fail")
    with pytest.raises(fake.common.Failed) as e:
        fake.trainer.warm(fake.row, 2)
    assert "fake_jit.spec() (MAX_JOBS=" in str(e.value) and "[code=137]" in str(e.value)


def test_a_compile_past_its_time_is_killed_with_its_children(fake, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "hang")
    with pytest.raises(fake.common.Failed, match="did not compile in 1 s"):
        fake.trainer.warm({**fake.row, "timeout_s": 1}, 2)
    child = int(fake.out.read_text())
    try:
        handle = os.pidfd_open(child)  # readable once the process has ended: an event, not a poll
    except ProcessLookupError:
        return  # gone already
    ready, _, _ = select.select([handle], [], [], 20)
    os.close(handle)
    assert ready, f"the compile's child {child} outlived the kill of its group"


def test_warm_checks_run_first_and_only_for_their_archs(fake):
    profile = types.SimpleNamespace(trainer={"families": [], "parallel": 1, "jit_warm_max_jobs": 5,
                                             "jit_warm": {"gdn": {**fake.row, "archs": ["9.0"]}}}, thorough=True)
    hopper = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=lambda: (9, 0)))
    ampere = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_capability=lambda: (8, 0)))
    names = [n for n, _ in fake.trainer.checks(profile, hopper)]
    assert names[:2] == ["verl/jit-warm/gdn", "verl/trainer/import"]
    assert [n for n, _ in fake.trainer.checks(profile, ampere)] == ["verl/trainer/import"]
