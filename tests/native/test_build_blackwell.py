"""Builds for Blackwell with the real toolchain (PyPI torch 2.11 and nvcc 13.0, no GPU): the probe extension
(tests/data/ext/cuda-ext-probe) built for sm_90 alone holds no code a B200 runs, and the checks say so; built for
sm_100 it passes the B200's and, by the arch-family rules, the B300's (sm_103), not the RTX PRO 6000's (sm_120); each
arch set is a cache entry of its own. One arch per build keeps each compile small on 2 cores."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from test_build_env import DATA, clean_build_env, torch_python
from verlenv import cubins
from verlenv.bundle import make
from verlenv.catalog import gpus, stacks
from verlenv.errors import UserError
from verlenv.native import build, recipes, wheelcache

pytestmark = [pytest.mark.slow, pytest.mark.network]

PACKAGE = "cuda-ext-probe"


@pytest.fixture(scope="module")
def env():
    with pytest.MonkeyPatch.context() as mp:
        clean_build_env(mp)
        yield torch_python()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("catalog") / "ext"
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("build")
    return {"wheelhouse": base / "wheelhouse", "work": base / "work"}


def run_build(root: Path, python: str, dirs: dict, gpu: str) -> build.BuildResult:
    """`verlenv build --gpu <gpu>` of the probe: the profile's build arch, checked for the GPU's own arch too."""
    variant = stacks.load(root / "stacks.toml").variant(None, "fsdp")
    profile = gpus.profile(gpu)
    result = build.build_one(root, variant, PACKAGE, python, gpus.archs_for([gpu]), dirs["wheelhouse"], dirs["work"],
                             jobs=2, threads=1, devices=[profile.arch])
    print(f"{PACKAGE} for {gpu} (archs {gpus.archs_for([gpu])}): {result.record['wall_s']} s", file=sys.stderr)
    return result


@pytest.fixture(scope="module")
def hopper(root, env, dirs) -> build.BuildResult:
    return run_build(root, env, dirs, "h100")


@pytest.fixture(scope="module")
def blackwell(root, env, dirs, hopper) -> build.BuildResult:
    return run_build(root, env, dirs, "b300")  # builds sm_100, checked for sm_103 as well


def objects(result: build.BuildResult, dest: Path) -> list[Path]:
    found = cubins.wheel_shared_objects(result.wheel, dest)
    assert [o.name.split(".")[0] for o in found] == ["cuda_ext_probe"]
    return found


def test_a_wheel_built_for_sm_90_alone_fails_the_b200_check(hopper, root, tmp_path):
    assert hopper.record["cubins"] == {next(iter(hopper.record["cubins"])): [90]}
    so = objects(hopper, tmp_path)
    b200 = gpus.profile("b200")
    assert cubins.missing_archs(so, [b200.arch]) == {str(so[0]): [100]}
    # The builder's own check, had the build been asked for the B200: it fails, in one line.
    recipe = recipes.load(root, PACKAGE)
    with pytest.raises(UserError) as e:
        build._check_cubins(recipe, so, ["9.0", b200.arch], tmp_path / "build.log")
    assert str(e.value) == (f"{PACKAGE}: requested archs missing after the build: {so[0].name} has no cubin for "
                            "sm_100")
    # And `bundle --gpu b200` will not carry it.
    with pytest.raises(UserError, match="has no cubin that runs on sm_100; rebuild it for that GPU"):
        make.check_runs_on(make.Built(PACKAGE, hopper.wheel, "", hopper.fingerprint, {}), [b200.arch])


def test_a_wheel_built_for_sm_100_passes_the_b200_and_b300_checks_not_the_rtx_pro_6000s(blackwell, tmp_path):
    assert not blackwell.cached
    assert list(blackwell.record["cubins"].values()) == [[100]]
    assert blackwell.record["inputs"]["archs"] == ["10.0"]
    so = objects(blackwell, tmp_path)
    built = make.Built(PACKAGE, blackwell.wheel, "", blackwell.fingerprint, {})
    entries = cubins.shared_object_archs(so[0])
    assert {e.name for e in entries if e.kind == "elf"} == {"sm_100"}  # plain sm_100: torch's -gencode code=sm_100
    for gpu in ("b200", "gb200", "b300"):
        assert cubins.missing_archs(so, [gpus.profile(gpu).arch]) == {}, gpu
        make.check_runs_on(built, [gpus.profile(gpu).arch])
    assert cubins.missing_archs(so, [gpus.profile("rtx-pro-6000").arch]) == {str(so[0]): [120]}


def test_each_arch_set_is_its_own_cache_entry(hopper, blackwell, root, env, dirs):
    assert hopper.fingerprint != blackwell.fingerprint
    entries = sorted(p.parent.name for p in (dirs["wheelhouse"] / PACKAGE).glob(f"*/{wheelcache.ENTRY_FILE}"))
    assert entries == sorted([hopper.fingerprint, blackwell.fingerprint])
    again = run_build(root, env, dirs, "b200")  # the B300's build is the B200's: a hit, nothing compiled
    assert again.cached and again.fingerprint == blackwell.fingerprint


def test_wheel_archs_reads_each_wheels_code_and_the_profiles_it_runs_on(hopper, blackwell, tmp_path):
    """scripts/wheel_archs.py, what the GPU visits run on the wheels they build: from a wheel or a build's JSON."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    import wheel_archs

    record = tmp_path / "build.json"
    record.write_text(json.dumps([{"wheel": str(blackwell.wheel)}]))
    out = tmp_path / "archs.json"
    assert wheel_archs.main([str(hopper.wheel), str(record), "--json", str(out)]) == 0
    sm90, sm100 = json.loads(out.read_text())
    assert sm90["bytes"] == hopper.wheel.stat().st_size
    assert list(sm90["cuda_objects"].values()) == [["sm_90"]] and list(sm100["cuda_objects"].values()) == [["sm_100"]]
    assert [k for k, ok in sm90["runs_on"].items() if ok] == ["h100", "h200"]
    assert [k for k, ok in sm100["runs_on"].items() if ok] == ["b200", "gb200", "b300"]
    assert wheel_archs.main([str(tmp_path / "nope.whl")]) == 2
