"""recipes/flashinfer-jit-cache: FlashInfer's JIT modules compiled ahead of time into the package FlashInfer loads
them from. Its one module (the GDN prefill for sm_90a) takes about an hour on this machine's 2 cores, so the real
builder runs here for an arch it carries no module for (sm_80: no compile, the same packaging, cache and checks); the
compiled module's own GPU run is benchmarks/flashinfer_gdn_aot.py. What is checked: the catalog, the recipe, its
modules table and data/gpu_code.toml agree; a build covers the requested archs it has kernels for and no others;
the wheel the builder makes is what the env's real FlashInfer reads as its AOT folder, at a version its own check
accepts."""

import json
import subprocess
import sys
import tomllib
import types
import zipfile
from pathlib import Path

import pytest

from verlenv import cubins
from verlenv.catalog import pins, stacks
from verlenv.doctor import diagnose_text
from verlenv.errors import UserError
from verlenv.lock import locks
from verlenv.native import build as builder, recipes

REPO = Path(__file__).resolve().parents[2]
RECIPE_DIR = REPO / "recipes" / "flashinfer-jit-cache"
SRC = RECIPE_DIR / "src"


def setup_module_of_recipe():
    """The recipe's setup.py as a module (its setup() runs only as a script); compiled here, so no bytecode is left
    in the source folder."""
    module = types.ModuleType("flashinfer_jit_cache_setup")
    module.__file__ = str(SRC / "setup.py")
    exec(compile((SRC / "setup.py").read_text(), module.__file__, "exec"), module.__dict__)
    return module


@pytest.fixture(scope="module")
def recipe() -> recipes.Recipe:
    return recipes.load(REPO, "flashinfer-jit-cache")


def test_versions_agree_and_follow_the_locked_flashinfer(recipe):
    cat = stacks.load(REPO / "stacks.toml")
    pinned = {v.key: v.source_build("flashinfer-jit-cache") for v in cat.all_variants()}
    assert pinned["verl-0.9-fsdp"] and pinned["verl-0.9-megatron"]  # megatron extends fsdp
    project = tomllib.loads((SRC / "pyproject.toml").read_text())["project"]
    own = setup_module_of_recipe()
    init = (SRC / "flashinfer_jit_cache" / "__init__.py").read_text()
    for build in filter(None, pinned.values()):
        assert build.version == recipe.source.version == project["version"]
        assert f'__version__ = "{build.version}"' in init
    # FlashInfer loads a jit-cache only at a version that starts with its own: the lock's flashinfer-python.
    locked = pins.read_lock(pins.lock_path(REPO, cat.variant("verl-0.9", "fsdp")))["flashinfer-python"].version
    own.check_flashinfer(recipe.source.version, locked)
    assert project["dependencies"] == [f"flashinfer-python=={locked}"]
    with pytest.raises(SystemExit, match="is for FlashInfer 0.6.12, but this env has flashinfer-python 0.6.11"):
        own.check_flashinfer("0.6.12+verlenv", "0.6.11")


def test_the_resolver_never_sees_it():
    fsdp = stacks.load(REPO / "stacks.toml").variant("verl-0.9", "fsdp")
    build = fsdp.source_build("flashinfer-jit-cache")
    assert not build.indexed and fsdp.source_build("causal-conv1d").indexed
    wanted = locks.resolver_requirements(fsdp)
    assert "causal-conv1d==1.7.0" in wanted and not any(r.startswith("flashinfer-jit-cache") for r in wanted)
    assert "flashinfer-jit-cache" not in locks.uv_flags(fsdp)


def test_the_modules_table_and_gpu_code_name_the_same_archs(recipe):
    modules = setup_module_of_recipe().modules_table()
    assert modules and {m["arch"] for m in modules} == set(cubins.compiles_for("flashinfer-jit-cache"))
    for m in modules:  # FlashInfer's arch name for the module is of the arch it is for (9.0a for 9.0)
        assert m["flashinfer_arch"].rstrip("af") == m["arch"] and m["why"]
    assert recipe.arch_subset and recipe.libcuda_link_stub and recipe.arch_variable == "VERLENV_JIT_ARCHS"


def test_a_build_covers_the_archs_it_has_kernels_for(recipe, capsys):
    own = setup_module_of_recipe()
    table = own.modules_table()
    assert own.wanted_modules(table, ["8.0"]) == []
    assert [m["arch"] for m in own.wanted_modules(table, ["8.0", "9.0", "10.0"])] == ["9.0"]
    assert builder.subset_checked(recipe, ["8.0", "9.0", "10.0"]) == ["9.0"]
    assert "has kernels for 9.0 only: none for 8.0, 10.0" in capsys.readouterr().err
    assert builder.subset_checked(recipe, ["8.0"]) == []
    flash_attn = recipes.load(REPO, "flash-attn")  # every other recipe: all the archs asked for
    assert builder.subset_checked(flash_attn, ["8.0", "9.0"]) == ["8.0", "9.0"]
    with pytest.raises(SystemExit, match="VERLENV_JIT_ARCHS is not set; give the archs"):
        own.requested_archs({})


@pytest.mark.parametrize("line, said", [
    ("arch_subset = 1", "build.arch_subset is 1; valid: true, false"),
    ('libcuda_link_stub = "yes"', "build.libcuda_link_stub is 'yes'; valid: true, false"),
])
def test_a_bad_flag_is_one_line(tmp_path, line, said):
    text = (RECIPE_DIR / "recipe.toml").read_text()
    key = line.split(" =")[0]
    folder = tmp_path / "recipes" / "flashinfer-jit-cache"
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text("\n".join(line if ln.startswith(key + " =") else ln
                                                  for ln in text.splitlines()))
    with pytest.raises(UserError, match=said):
        recipes.load(tmp_path, "flashinfer-jit-cache")


def test_the_builders_wheel_is_flashinfers_aot_folder(env_python, tmp_path):
    """`verlenv build` of the real recipe for sm_80 (no module to compile there): the wheel installs, FlashInfer
    takes it as its AOT folder at its version, and the GDN spec stays a JIT one (it is sm_90's)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO / "src")}
    run = subprocess.run([sys.executable, "-m", "verlenv", "build", "flashinfer-jit-cache", "--python", env_python,
                          "--archs", "8.0", "--no-install", "--wheelhouse", str(tmp_path / "wh"),
                          "--json", str(tmp_path / "built.json")], env=env, capture_output=True, text=True,
                         timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "has kernels for 9.0 only: none for 8.0" in run.stderr
    [built] = json.loads((tmp_path / "built.json").read_text())
    wheel = Path(built["wheel"])
    assert wheel.name == "flashinfer_jit_cache-0.6.12+verlenv-py3-none-linux_x86_64.whl"
    assert built["record"]["inputs"]["archs"] == ["8.0"] and built["record"]["cubins"] == {}
    with zipfile.ZipFile(wheel) as z:
        record = json.loads(z.read("flashinfer_jit_cache/BUILD.json"))
        z.extractall(tmp_path / "site")
    assert record["archs"] == ["8.0"] and record["modules"] == [] and record["flashinfer"] == "0.6.12"
    probe = ("import json; from flashinfer.jit import env; from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module"
             " as gen; print(json.dumps([str(env.FLASHINFER_AOT_DIR), gen().is_aot]))")
    out = subprocess.run([env_python, "-c", probe], env={**env, "PYTHONPATH": str(tmp_path / "site"),
                                                          "FLASHINFER_CUDA_ARCH_LIST": "9.0a"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [str(tmp_path / "site" / "flashinfer_jit_cache" / "jit_cache"),
                                                       False]


def test_a_jit_cache_of_another_flashinfer_is_diagnosed(env_python, tmp_path):
    """The env's real FlashInfer refuses a jit-cache package of another release at import (a test double package
    stands for one left behind by a FlashInfer upgrade); the doctor names the cause and the rebuild."""
    stale = tmp_path / "flashinfer_jit_cache"
    stale.mkdir()
    (stale / "__init__.py").write_text('__version__ = "0.6.11+verlenv"\ndef get_jit_cache_dir():\n    return "."\n')
    out = subprocess.run([env_python, "-c", "import flashinfer.jit.env"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert out.returncode != 0 and "flashinfer-jit-cache version (0.6.11+verlenv) does not match" in out.stderr
    found = diagnose_text(out.stderr)
    assert found[0].id == "F29" and found[0].details == {"cubin": "0.6.11+verlenv", "flashinfer": "0.6.12"}
    assert any("verlenv build flashinfer-jit-cache" in fix for fix in found[0].failure.fix)
