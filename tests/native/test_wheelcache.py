"""The wheel cache: a changed input is a new fingerprint; a killed store or build leaves no entry; corruption shows."""

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from project_files import ROOT
from test_build_env import DATA, clean_build_env, kill_session, torch_python
from test_build_sources import commit_all
from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.native import build, ninja_stats, recipes, toolchain, wheelcache
from verlenv.native.sources import tree_digest
from waiting import exited, until

REPO = Path(__file__).resolve().parents[2]

TORCH = toolchain.TorchInfo(python="/env/bin/python", python_tag="cp312", torch="2.11.0+cu130", cuda="13.0",
                            cxx11_abi=True, torch_lib="/env/torch/lib", purelib="/env/site-packages")


def inputs(recipe: recipes.Recipe, **change) -> dict:
    info = dataclasses.replace(TORCH, **{k: v for k, v in change.items()
                                         if k in ("torch", "cuda", "python_tag", "cxx11_abi")})
    return build.fingerprint_inputs(recipe, change.get("version", "2.8.3.post2"),
                                    change.get("source", "sha256:" + "0" * 64), info,
                                    change.get("archs", ["8.0", "9.0"]), change.get("nvcc"))


@pytest.fixture
def recipe(tmp_path) -> recipes.Recipe:
    shutil.copytree(REPO / "recipes" / "flash-attn", tmp_path / "recipes" / "flash-attn")
    return recipes.load(tmp_path, "flash-attn")


@pytest.mark.parametrize("change", [
    {"version": "2.8.3"},
    {"source": "sha256:" + "1" * 64},
    {"torch": "2.11.1+cu130"},
    {"cuda": "12.8"},
    {"python_tag": "cp311"},
    {"cxx11_abi": False},
    {"archs": ["9.0"]},
    {"archs": ["8.0", "9.0", "10.0"]},
])
def test_each_input_changes_the_fingerprint(recipe, change):
    assert wheelcache.fingerprint(inputs(recipe, **change)) != wheelcache.fingerprint(inputs(recipe))


def test_each_blackwell_arch_set_is_a_cache_entry_of_its_own(recipe):
    """--gpu b200 beside --gpu h100 (or both, or rtx-pro-6000) never takes another set's wheel; b300 builds the b200's
    (sm_100 runs on 10.3), and the order the GPUs are named in changes nothing."""
    from verlenv.catalog import gpus

    sets = {tuple(g): wheelcache.fingerprint(inputs(recipe, archs=gpus.archs_for(g)))
            for g in (["h100"], ["b200"], ["h100", "b200"], ["rtx-pro-6000"], ["b200", "rtx-pro-6000"])}
    assert len(set(sets.values())) == len(sets)
    assert wheelcache.fingerprint(inputs(recipe, archs=gpus.archs_for(["b300"]))) == sets[("b200",)]
    assert wheelcache.fingerprint(inputs(recipe, archs=gpus.archs_for(["b200", "h100"]))) == sets[("h100", "b200")]


def test_an_nvcc_equal_to_torchs_cuda_leaves_the_fingerprint_as_it_was(recipe):
    """Entries built before the nvcc could differ (every committed record) keep their fingerprints."""
    committed = json.loads((ROOT / "docs" / "builds" / "2026-11-25-h100-flash-attn.json").read_text())[0]["record"]
    assert committed["toolchain"]["nvcc"] == committed["inputs"]["cuda"] == "13.0"
    assert inputs(recipe, nvcc="13.0") == inputs(recipe)
    assert set(inputs(recipe, nvcc="13.0")) == set(committed["inputs"])
    assert wheelcache.fingerprint(committed["inputs"]) == committed["fingerprint"]


def committed_builds() -> list[dict]:
    """The records of the builds this project committed (docs/builds, docs/verification), each with its inputs."""
    out = []
    for path in sorted([*(ROOT / "docs" / "builds").glob("*.json"),
                        *(ROOT / "docs" / "verification").glob("*-build-*.json")]):
        data = json.loads(path.read_text())
        out += [entry.get("record", entry) for entry in (data if isinstance(data, list) else [data])]
    return out


def test_a_wheel_built_from_an_unchanged_recipe_keeps_its_fingerprint():
    """The recipe's source, read as its kind's type, gives the version and source id the committed builds recorded,
    so every entry built from a recipe not edited since is found again in the cache."""
    checked = []
    for record in committed_builds():
        inputs = record["inputs"]
        recipe = recipes.load(ROOT, inputs["package"])
        if recipe.digest != inputs["recipe"]:
            continue  # an older recipe: a new fingerprint by design
        version = recipe.source.version_for(inputs["version"])
        info = dataclasses.replace(TORCH, **{k: inputs[k] for k in ("torch", "cuda", "python_tag", "cxx11_abi")})
        again = build.fingerprint_inputs(recipe, version, recipe.source.source_id(version), info, inputs["archs"],
                                         record["toolchain"]["nvcc"])
        assert again == inputs and wheelcache.fingerprint(again) == record["fingerprint"]
        checked.append(inputs["package"])
    assert {"flash-attn", "transformer-engine-torch"} <= set(checked)


def test_each_source_kind_names_its_source_as_before():
    """A git commit and a local folder, whose committed builds came from recipes edited since: their ids keep the
    form the builder wrote before the kinds were types (an apex record's; the probe's from its old builder)."""
    apex = next(r["inputs"] for r in committed_builds() if r["inputs"]["package"] == "apex")
    assert recipes.load(ROOT, "apex").source.source_id("0.1") == apex["source"]
    probe = recipes.load(DATA, "cuda-ext-probe").source
    assert (probe.version_for("9"), probe.source_id("0.1")) == (
        "0.1", "dir:tree-sha256:45a2652828abfcae009fee418c67dde975af59d7e474e1231d09b7d8b3cc4924")


def test_a_same_major_nvcc_is_a_fingerprint_input(recipe):
    cu128 = {"torch": "2.8.0+cu128", "cuda": "12.8"}
    exact = inputs(recipe, nvcc="12.8", **cu128)
    debian = inputs(recipe, nvcc="12.5", **cu128)
    assert "nvcc" not in exact and debian["nvcc"] == "12.5"
    fingerprints = {wheelcache.fingerprint(i) for i in (exact, debian, inputs(recipe, nvcc="12.4", **cu128))}
    assert len(fingerprints) == 3


def test_an_edited_recipe_changes_the_fingerprint(recipe):
    before = wheelcache.fingerprint(inputs(recipe))
    recipe.path.write_text(recipe.path.read_text().replace("mem_per_job_gib = 6.5", "mem_per_job_gib = 7"))
    assert wheelcache.fingerprint(inputs(recipes.load(recipe.path.parent.parent.parent, "flash-attn"))) != before


def test_the_same_inputs_in_any_order_give_the_same_fingerprint(recipe):
    a = inputs(recipe, archs=["9.0", "8.0"])
    b = dict(reversed(list(inputs(recipe).items())))
    assert wheelcache.fingerprint(a) == wheelcache.fingerprint(b)


def make_wheel(folder: Path, size: int = 1000) -> Path:
    wheel = folder / "probe-0.1-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(os.urandom(size))
    return wheel


def test_store_then_lookup_returns_the_entry(tmp_path):
    wheel = make_wheel(tmp_path)
    stored = wheelcache.store(tmp_path / "wh", "probe", "fp1", wheel, {"wall_s": 1.0})
    found = wheelcache.lookup(tmp_path / "wh", "probe", "fp1")
    assert found == stored and found.wheel.read_bytes() == wheel.read_bytes()
    assert found.record["fingerprint"] == "fp1" and found.record["wall_s"] == 1.0
    assert wheelcache.lookup(tmp_path / "wh", "probe", "fp2") is None
    assert [p.name for p in (tmp_path / "wh" / "probe").iterdir()] == ["fp1"]  # no temp folder left


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "delete"])
def test_a_corrupted_entry_is_detected_by_its_hash(tmp_path, damage):
    entry = wheelcache.store(tmp_path / "wh", "probe", "fp1", make_wheel(tmp_path), {})
    data = entry.wheel.read_bytes()
    if damage == "flip a byte":
        entry.wheel.write_bytes(data[:500] + bytes([data[500] ^ 1]) + data[501:])
    elif damage == "truncate":
        entry.wheel.write_bytes(data[:-1])
    else:
        entry.wheel.unlink()
    with pytest.raises(wheelcache.Corrupt):
        wheelcache.lookup(tmp_path / "wh", "probe", "fp1")
    wheelcache.remove(tmp_path / "wh", "probe", "fp1")
    assert wheelcache.lookup(tmp_path / "wh", "probe", "fp1") is None


def test_a_store_killed_midway_leaves_no_entry(tmp_path):
    big = make_wheel(tmp_path)
    wheelhouse = tmp_path / "wh"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "data" / "programs" / "store_then_wait.py"),
                             str(wheelhouse), "big", "fp1", str(big)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "copied", "store ended before its copy was done"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    leftovers = list((wheelhouse / "big").iterdir())
    assert [p.name.startswith(".tmp-fp1-") for p in leftovers] == [True]  # it was killed inside store
    assert wheelcache.lookup(wheelhouse, "big", "fp1") is None
    assert not list(wheelhouse.rglob(wheelcache.ENTRY_FILE))
    # The leftover does not stand in the way of the next, complete store.
    assert wheelcache.store(wheelhouse, "big", "fp1", big, {}).wheel.read_bytes() == big.read_bytes()
    shutil.rmtree(leftovers[0])


@pytest.fixture
def probe_root(tmp_path) -> Path:
    dest = tmp_path / "ext"
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def wait_until_started(proc: subprocess.Popen, marker: Path) -> None:
    """Until the sleepy-probe build has written its marker (a non-empty file) while the builder still runs."""
    assert until(lambda: proc.poll() is not None or (marker.exists() and marker.read_text())), "no build started"
    assert proc.poll() is None, "the builder exited before its build started"


@pytest.mark.slow
@pytest.mark.network
def test_a_build_killed_midway_leaves_no_entry(probe_root, tmp_path, monkeypatch):
    clean_build_env(monkeypatch)
    python = torch_python()
    started = tmp_path / "build-started"
    wheelhouse, work = tmp_path / "wh", tmp_path / "work"
    code = textwrap.dedent(f"""
        from pathlib import Path
        from verlenv.catalog import stacks
        from verlenv.native import build
        root = Path({str(probe_root)!r})
        variant = stacks.load(root / "stacks.toml").variant(None, "fsdp")
        build.build_one(root, variant, "sleepy-probe", {python!r}, ["9.0"], Path({str(wheelhouse)!r}),
                        Path({str(work)!r}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                            env={**os.environ, "VERLENV_TEST_BUILD_STARTED": str(started)})
    try:
        wait_until_started(proc, started)
    finally:
        kill_session(proc.pid)  # the builder and the pip build under it
        proc.wait()
    assert list(work.glob("build-sleepy-probe-*/build.log"))  # it was killed inside the build
    assert not list(wheelhouse.rglob(wheelcache.ENTRY_FILE)) and not list(wheelhouse.rglob("*.whl"))
    variant = stacks.load(probe_root / "stacks.toml").variant(None, "fsdp")
    # The next run finds nothing cached and builds (the hang is only on request).
    result = build.build_one(probe_root, variant, "sleepy-probe", python, ["9.0"], wheelhouse, work)
    assert not result.cached and wheelcache.lookup(wheelhouse, "sleepy-probe", result.fingerprint)


@pytest.mark.slow
@pytest.mark.network
def test_sigterm_to_the_builder_alone_stops_its_whole_build(probe_root, tmp_path, monkeypatch):
    """`kill <builder>` (or a scheduler's SIGTERM) must not leave pip and its compilers running as orphans."""
    clean_build_env(monkeypatch)
    python = torch_python()
    started = tmp_path / "build-started"
    wheelhouse = tmp_path / "wh"
    code = ("import sys; from verlenv import cli; sys.exit(cli.main(['build', 'sleepy-probe', '--variant', 'fsdp', "
            f"'--python', {python!r}, '--archs', '9.0', '--wheelhouse', {str(wheelhouse)!r}, '--no-install']))")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, cwd=probe_root, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, "VERLENV_TEST_BUILD_STARTED": str(started)})
    try:
        wait_until_started(proc, started)
        setup_pid, compiler_pid = map(int, started.read_text().split())
        # The "compiler" sits in a process group of its own, as ninja's compile jobs do.
        assert os.getpgid(compiler_pid) == compiler_pid != os.getpgid(setup_pid)
        proc.send_signal(signal.SIGTERM)  # the builder only, not its session
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 128 + signal.SIGTERM
        assert "verlenv build: terminated (SIGTERM)" in err
        assert exited(setup_pid) and exited(compiler_pid)
    finally:
        kill_session(proc.pid)
        proc.wait()
    assert not list(wheelhouse.rglob(wheelcache.ENTRY_FILE)) and not list(wheelhouse.rglob("*.whl"))


@pytest.mark.slow
@pytest.mark.network
def test_the_builder_rebuilds_a_corrupted_entry(probe_root, tmp_path, monkeypatch):
    clean_build_env(monkeypatch)
    python = torch_python()
    wheelhouse, work = tmp_path / "wh", tmp_path / "work"
    variant = stacks.load(probe_root / "stacks.toml").variant(None, "fsdp")
    first = build.build_one(probe_root, variant, "sleepy-probe", python, ["9.0"], wheelhouse, work)
    # Host-only code: the archs are not an input, so any GPU target finds the same entry.
    assert build.build_one(probe_root, variant, "sleepy-probe", python, ["8.0"], wheelhouse, work).cached
    first.wheel.write_bytes(first.wheel.read_bytes() + b"\0")
    again = build.build_one(probe_root, variant, "sleepy-probe", python, ["9.0"], wheelhouse, work)
    assert not again.cached and again.fingerprint == first.fingerprint
    assert wheelcache.lookup(wheelhouse, "sleepy-probe", first.fingerprint) is not None  # whole again


@pytest.mark.slow
@pytest.mark.network
def test_an_edited_recipe_is_a_new_fingerprint_and_a_rebuild(probe_root, tmp_path, monkeypatch):
    clean_build_env(monkeypatch)
    python = torch_python()
    wheelhouse, work = tmp_path / "wh", tmp_path / "work"
    variant = stacks.load(probe_root / "stacks.toml").variant(None, "fsdp")
    before = build.build_one(probe_root, variant, "sleepy-probe", python, ["9.0"], wheelhouse, work)
    recipe = probe_root / "recipes" / "sleepy-probe" / "recipe.toml"
    recipe.write_text(recipe.read_text().replace("mem_per_job_gib = 0.5", "mem_per_job_gib = 0.75"))
    after = build.build_one(probe_root, variant, "sleepy-probe", python, ["9.0"], wheelhouse, work)
    assert not after.cached and after.fingerprint != before.fingerprint
    assert after.record["inputs"]["recipe"] != before.record["inputs"]["recipe"]
    assert wheelcache.lookup(wheelhouse, "sleepy-probe", before.fingerprint) is not None  # the old entry stays


def resume_probe(root: Path, tmp_path: Path, kind: str) -> tuple[Path | None, str]:
    """A real package (resume-probe 0.1) whose setup.py fails while VERLENV_TEST_FAIL is set, as an sdist with its
    sha256 pinned, or pinned by tree digest as a folder beside its recipe or a commit of a clone, added to the test
    catalog's source builds.
    Returns (the --source to give, the name of the tree the builder places)."""
    tree = tmp_path / "resume_probe-0.1"
    tree.mkdir()
    (tree / "setup.py").write_text(textwrap.dedent("""\
        import os
        from setuptools import setup
        if os.environ.get("VERLENV_TEST_FAIL"):
            raise SystemExit("resume-probe: failing on request")
        setup(name="resume-probe", version="0.1", py_modules=["resume_probe"])
        """))
    (tree / "resume_probe.py").write_text("VALUE = 1\n")
    recipe = root / "recipes" / "resume-probe"
    recipe.mkdir()
    if kind == "pypi-sdist":
        sdist = tmp_path / "resume_probe-0.1.tar.gz"
        with tarfile.open(sdist, "w:gz") as t:
            t.add(tree, arcname=tree.name)
        source = f'kind = "pypi-sdist"\n[source.sha256]\n"0.1" = "{hashlib.sha256(sdist.read_bytes()).hexdigest()}"'
        given, placed = sdist, tree.name
    elif kind == "local-dir":
        shutil.copytree(tree, recipe / "src")
        source = f'kind = "local-dir"\npath = "src"\nversion = "0.1"\ntree_sha256 = "{tree_digest(tree)}"'
        given, placed = None, "resume-probe-0.1"
    else:  # a clone holding the pinned commit
        commit, digest = commit_all(tree, tmp_path / "checkout")
        source = (f'kind = "git"\nurl = "https://example.invalid/resume-probe"\ncommit = "{commit}"\n'
                  f'version = "0.1"\ntree_sha256 = "{digest}"')
        given, placed = tree, f"resume-probe-{commit[:12]}"
    (recipe / "recipe.toml").write_text(
        f'package = "resume-probe"\nimport_name = "resume_probe"\n[source]\n{source}\n'
        "[build]\ngpu_code = false\nmem_per_job_gib = 0.5\n")
    catalog_file = root / "stacks.toml"
    catalog_file.write_text(catalog_file.read_text().replace('"sleepy-probe==0.1",',
                                                             '"sleepy-probe==0.1", "resume-probe==0.1",'))
    return given, placed


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("kind", ["pypi-sdist", "local-dir", "git"])
def test_a_stopped_build_is_resumed_only_while_its_sources_are_intact(probe_root, tmp_path, monkeypatch, capsys,
                                                                      kind):
    clean_build_env(monkeypatch)
    python = torch_python()
    given, placed = resume_probe(probe_root, tmp_path, kind)
    variant = stacks.load(probe_root / "stacks.toml").variant(None, "fsdp")
    wheelhouse, work = tmp_path / "wh", tmp_path / "work"

    def run(fail: bool):
        if fail:
            monkeypatch.setenv("VERLENV_TEST_FAIL", "1")
        else:
            monkeypatch.delenv("VERLENV_TEST_FAIL", raising=False)
        capsys.readouterr()
        try:
            return build.build_one(probe_root, variant, "resume-probe", python, ["9.0"], wheelhouse, work, source=given)
        finally:
            monkeypatch.delenv("VERLENV_TEST_FAIL", raising=False)

    with pytest.raises(UserError):
        run(fail=True)
    [stopped] = list(work.glob("build-resume-probe-*"))
    assert "(the next run resumes it)" in capsys.readouterr().err
    # A tree whose sources were edited is never resumed: a fresh tree is made.
    source_file = stopped / "src" / placed / "resume_probe.py"
    source_file.write_text("VALUE = 2\n")
    with pytest.raises(UserError):
        run(fail=True)
    assert "resuming" not in capsys.readouterr().err
    assert len(list(work.glob("build-resume-probe-*"))) == 2
    shutil.rmtree(stopped)
    # The intact stopped tree is resumed (its log grows), and removed once the wheel is cached.
    [intact] = list(work.glob("build-resume-probe-*"))
    before = (intact / "build.log").read_text()
    result = run(fail=False)
    err = capsys.readouterr().err
    assert f"resuming the stopped build in {intact}" in err and "(0 done)" in err  # setuptools alone: no ninja
    assert not intact.exists() and not result.cached and result.record["resumed"] is True
    assert "resume-probe: failing on request" in before
    assert wheelcache.lookup(wheelhouse, "resume-probe",
                             result.fingerprint).path.joinpath("build.log").read_text().startswith(before)


def test_ninja_stats_add_up_the_runs_of_a_resumed_build(tmp_path):
    """Times in .ninja_log restart at each run: the compile wall is the sum of the runs' walls."""
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / ".ninja_log").write_text(
        "# ninja log v7\n"
        "0\t100000\t1\ta.o\th\n" "0\t150000\t1\tb.o\th\n" "100000\t260000\t1\tc.o\th\n"   # run 1: 260 s
        "0\t120000\t1\td.o\th\n" "0\t125000\t1\te.o\th\n")                                      # run 2: 125 s
    stats = ninja_stats.ninja_stats(tmp_path, cores=2)
    assert stats["runs"] == 2 and stats["units"] == 5
    assert stats["sum_unit_s"] == 655.0 and stats["compile_wall_s"] == 385.0
    assert stats["ideal_wall_s"] == 327.5 and stats["efficiency"] == round(327.5 / 385, 3)
    # A unit compiled again (its header changed) is one unit done; another extension's log counts its own.
    with open(tmp_path / "build" / ".ninja_log", "a") as log:
        log.write("0\t90000\t1\td.o\th\n")
    write_ninja_log(tmp_path / "build" / "ext" / ".ninja_log", [(0, 10, 1, "a.o")])
    assert ninja_stats.units_done(tmp_path) == 6


def write_ninja_log(path: Path, lines: list[tuple[float, float, float, str]]) -> None:
    """A ninja log v7 of (start s, end s, mtime s since the epoch, output) lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# ninja log v7\n" + "".join(
        f"{round(a * 1000)}\t{round(b * 1000)}\t{round(m * 1e9)}\t{out}\th\n" for a, b, m, out in lines))


@pytest.mark.parametrize("stamp", ["start", "end"])
def test_ninja_stats_time_extensions_built_at_once_on_one_clock(tmp_path, stamp):
    """apex builds each extension with its own ninja, at the same time: their logs are placed on the epoch clock
    from the mtime column, which some ninja releases stamp with the unit's start and others with its end."""
    t0 = 1_795_300_000.0

    def unit(a, b, out, run_start):
        return (a, b, run_start + (a if stamp == "start" else b), out)

    # Extension A runs from t0 for 300 s; extension B starts 100 s later and ends at t0 + 500.
    write_ninja_log(tmp_path / "build" / "a" / ".ninja_log",
                    [unit(0, 200, "a1.o", t0), unit(0, 300, "a2.o", t0)])
    write_ninja_log(tmp_path / "build" / "b" / ".ninja_log",
                    [unit(0, 250, "b1.o", t0 + 100), unit(250, 400, "b2.o", t0 + 100)])
    stats = ninja_stats.ninja_stats(tmp_path, cores=2)
    assert stats["logs"] == 2 and stats["units"] == 4 and stats["sum_unit_s"] == 900.0
    assert stats["compile_wall_s"] == 500.0  # not 300 + 400: the two ran side by side
    assert stats["efficiency"] == 0.9


def test_ninja_stats_leave_the_wall_open_when_several_logs_cannot_be_placed(tmp_path):
    write_ninja_log(tmp_path / "a" / ".ninja_log", [(0, 200, 1e-9, "a1.o"), (0, 300, 1e-9, "a2.o")])
    write_ninja_log(tmp_path / "b" / ".ninja_log", [(0, 250, 1e-9, "b1.o")])
    stats = ninja_stats.ninja_stats(tmp_path, cores=2)
    assert stats["units"] == 3 and stats["sum_unit_s"] == 750.0
    assert stats["compile_wall_s"] is None and stats["efficiency"] is None


@pytest.mark.parametrize("log", sorted((ROOT / "docs" / "builds").glob("*.ninja_log")), ids=lambda p: p.name)
def test_ninja_stats_read_the_same_wall_from_the_clock_as_from_the_runs(tmp_path, log):
    """Real flash-attn logs from this project's builds, one stamped by start, one by end: the epoch clock and
    ninja's own relative times must give the same compile wall."""
    shutil.copy(log, tmp_path / ".ninja_log")
    spans = ninja_stats._ninja_spans(tmp_path / ".ninja_log")
    assert ninja_stats._epoch_intervals([spans]) is not None
    relative = sum(max(s[1] for s in run) - min(s[0] for s in run) for run in ninja_stats._runs(spans)) / 1000
    assert ninja_stats.ninja_stats(tmp_path, cores=2)["compile_wall_s"] == pytest.approx(relative, abs=1.0)


@pytest.mark.parametrize("record", sorted((ROOT / "docs" / "verification").glob("*-h100-build-apex*.json")),
                         ids=lambda p: p.name)
def test_ninja_stats_of_apex_read_all_twelve_logs(tmp_path, record):
    """The ninja logs kept by real apex builds on an H100 host give back the figures of their records."""
    with tarfile.open(record.with_name(record.stem + "-logs.tar.gz")) as t:
        t.extractall(tmp_path / "entry", filter="data")
    for i, log in enumerate(sorted((tmp_path / "entry" / "ninja").glob("*.ninja_log"))):
        (tmp_path / "tree" / str(i)).mkdir(parents=True)
        shutil.copy(log, tmp_path / "tree" / str(i) / ".ninja_log")
    entry = json.loads(record.read_text())
    stats = ninja_stats.ninja_stats(tmp_path / "tree", entry["parallelism"]["cores"])
    assert stats == entry["ninja"] and stats["logs"] == 12 and stats["units"] == 37
