"""The project's recipes agree with the catalog, and `verlenv build` refuses bad input in one line."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_build_env import build_until
from verlenv import cubins
from verlenv.catalog import pins, stacks
from verlenv.errors import UserError
from verlenv.native import build as builder, recipes, sources, toolchain

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data" / "ext"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def cat() -> stacks.Catalog:
    return stacks.load(REPO / "stacks.toml")


def test_every_source_build_of_the_catalog_has_a_recipe_and_a_pin(cat):
    for variant in cat.all_variants():
        for build in variant.source_builds:
            source = recipes.load(REPO, build.name).source
            if isinstance(source, sources.PypiSdist):
                assert HEX64.match(source.sha256_for(build.version)), (variant.key, build.name)
            elif isinstance(source, sources.LocalDir):
                # This project's own source: the catalog pins the version the recipe's folder builds.
                assert build.version == source.version and not build.indexed, (variant.key, build.name)
                assert sources.tree_digest(REPO / "recipes" / build.name / source.path) == source.tree_sha256
            else:
                # A git pin: the catalog's URL names the very commit the recipe verifies.
                assert isinstance(source, sources.GitCommit), (variant.key, build.name)
                assert build.url.endswith("@" + source.commit), (variant.key, build.name)
                assert build.url.removeprefix("git+").startswith(source.url)
                assert HEX64.match(source.tree_sha256)


def test_recipes_load_and_name_their_knobs():
    assert set(recipes.available(REPO)) >= {"apex", "flash-attn", "megatron-bridge", "transformer-engine-torch"}
    apex = recipes.load(REPO, "apex")
    assert apex.gpu_code and apex.arch_variable == "TORCH_CUDA_ARCH_LIST" and apex.arch_format == "dotted"
    assert apex.concurrent_extensions_variable == "APEX_PARALLEL_BUILD"
    assert apex.env["APEX_CPP_EXT"] == apex.env["APEX_CUDA_EXT"] == "1"
    assert "fused_weight_gradient_mlp_cuda" in apex.extension_modules
    # apex's setup.py refuses another nvcc minor than torch's; torch's own extensions take any of the major.
    assert apex.nvcc_match == "exact"
    assert recipes.load(REPO, "flash-attn").nvcc_match == "major"
    te = recipes.load(REPO, "transformer-engine-torch")
    assert not te.gpu_code and te.arch_variable is None
    assert te.env["NVTE_PYTORCH_FORCE_BUILD"] == "TRUE" and te.env["NVTE_FRAMEWORK"] == "pytorch"
    assert "nvidia/cudnn/include" in te.site_paths["CPATH"]
    # Pure Python from git: only the paths its wheel is built from are exported and digested.
    bridge = recipes.load(REPO, "megatron-bridge")
    assert not bridge.gpu_code and not bridge.extension_modules and bridge.import_name == "megatron.bridge"
    assert bridge.source.kind == "git" and "src" in bridge.source.paths


@pytest.mark.parametrize("targets, flash_attn, apex", [
    (["b200"], "100", "10.0"),
    (["b300"], "100", "10.0"),  # sm_100 cubins run on the B300 (10.3); flash-attn 2.8.3 compiles no 103
    (["h100", "b200"], "90;100", "9.0;10.0"),
    (["rtx-pro-6000", "gb200"], "100;120", "10.0;12.0"),
])
def test_a_blackwell_gpu_reaches_each_recipes_arch_knob(targets, flash_attn, apex):
    from verlenv.catalog import gpus

    archs = gpus.archs_for(targets)
    assert recipes.load(REPO, "flash-attn").arch_value(archs) == flash_attn  # FLASH_ATTN_CUDA_ARCHS
    assert recipes.load(REPO, "apex").arch_value(archs) == apex  # TORCH_CUDA_ARCH_LIST
    assert not cubins.uncompilable("flash-attn", archs)


def test_an_arch_flash_attn_cannot_compile_is_refused_before_anything_is_fetched(cat, tmp_path):
    """setup.py would emit no gencode for 10.3 and build a wheel without its kernels: refused in one line."""
    assert cubins.compiles_for("flash-attn") == ("8.0", "9.0", "10.0", "12.0")
    assert cubins.uncompilable("flash-attn", ["9.0", "10.3", "12.1", "10.0a"]) == ["10.3", "12.1"]
    assert cubins.uncompilable("apex", ["10.3", "12.1"]) == []  # TORCH_CUDA_ARCH_LIST: what torch knows
    with pytest.raises(UserError) as e:
        builder.build_one(REPO, cat.variant("verl-0.9", "fsdp"), "flash-attn", sys.executable, ["9.0", "10.3"],
                          tmp_path / "wheelhouse", tmp_path / "work")
    assert str(e.value).startswith("flash-attn compiles for 8.0, 9.0, 10.0, 12.0 only (data/gpu_code.toml [compiles])")
    assert "not 10.3; a later minor of the same major runs the build of its major's arch" in str(e.value)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "wheelhouse").exists() and not (tmp_path / "work").exists()


def test_a_build_for_a_blackwell_gpu_says_it_never_ran_there():
    from verlenv.catalog import gpus

    b200, b300 = gpus.profile("b200"), gpus.profile("b300")
    lines = builder.verdicts("flash-attn", ["10.0"], [b200, b300], [("NVIDIA H100 80GB HBM3", "9.0")])
    assert lines == ["flash-attn: built and cubin-checked for sm_100, not run on an NVIDIA B200 (180 GB) (run "
                     "`nox -s verify-b200` on one)",
                     "flash-attn: built and cubin-checked for sm_100, not run on an NVIDIA B300 (Blackwell Ultra, 288 "
                     "GB) (run `nox -s verify-b300` on one)"]
    # Built on a B200 itself: still not run by the build, but that is what verify on this machine is for.
    assert builder.verdicts("flash-attn", ["10.0"], [b200], [("NVIDIA B200", "10.0")]) == []


def test_causal_conv1d_compiles_its_own_fixed_arch_list_and_never_downloads():
    """causal-conv1d 1.7.0's setup.py passes its own -gencode list (torch then ignores TORCH_CUDA_ARCH_LIST): the recipe
    names that list, a requested arch outside it is one line, and one build (fingerprinted on the list) serves all."""
    conv = recipes.load(REPO, "causal-conv1d")
    assert conv.gpu_code and conv.arch_variable is None and conv.threads_variable is None
    assert conv.env["CAUSAL_CONV1D_FORCE_BUILD"] == "TRUE" and conv.extension_modules == ("causal_conv1d_cuda",)
    assert conv.archs_built(["9.0"]) == conv.archs_built(["8.0", "9.0"]) == list(conv.fixed_archs)
    assert {"8.0", "9.0", "10.0", "12.0"} <= set(conv.fixed_archs)
    with pytest.raises(UserError, match=r"^causal-conv1d cannot be built for 8\.6: its setup.py compiles a fixed list"):
        conv.archs_built(["8.0", "8.6"])
    flash = recipes.load(REPO, "flash-attn")
    assert flash.archs_built(["9.0"]) == ["9.0"]


@pytest.mark.parametrize("bad, message", [
    ('kind = "svn"', "source.kind is 'svn'; valid: pypi-sdist, git, local-dir"),
    ('arch_format = "sm"', "build.arch_format is 'sm'; valid: nodot, dotted"),
    ("drop arch_variable", "missing key build.arch_variable (or build.fixed_archs, or set build.gpu_code = false)"),
    ('fixed_archs = ["9.0"]',
     "build.arch_variable and build.fixed_archs exclude each other; keep the one setup.py reads"),
    ("drop tree_sha256", "missing key source.tree_sha256"),
    ('nvcc_match = "minor"', "build.nvcc_match is 'minor'; valid: major, exact"),
    ('paths = ["src"]', "source.paths is for git sources only (it names what `git archive` exports)"),
])
def test_a_malformed_recipe_is_refused_in_one_line(tmp_path, bad, message):
    shutil.copytree(DATA / "recipes" / "cuda-ext-probe", tmp_path / "recipes" / "cuda-ext-probe")
    path = tmp_path / "recipes" / "cuda-ext-probe" / "recipe.toml"
    text = path.read_text()
    if bad.startswith("drop "):
        text = "\n".join(line for line in text.splitlines() if not line.startswith(bad[5:]))
    elif bad.startswith("kind"):
        text = text.replace('kind = "local-dir"', bad)
    elif bad.startswith("paths"):
        text = text.replace('kind = "local-dir"', f'kind = "local-dir"\n{bad}')
    elif bad.startswith(("nvcc_match", "fixed_archs")):
        text = text.replace('arch_format = "dotted"', f'arch_format = "dotted"\n{bad}')
    else:
        text = text.replace('arch_format = "dotted"', bad)
    path.write_text(text)
    with pytest.raises(UserError) as e:
        recipes.load(tmp_path, "cuda-ext-probe")
    assert str(e.value) == f"{path}: {message}"


def verlenv_build(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX")}
    return subprocess.run([sys.executable, "-m", "verlenv", "build", *args], capture_output=True, text=True,
                          cwd=root, env={**env, "VERLENV_ROOT": str(root)}, timeout=120)


def refused(r: subprocess.CompletedProcess) -> str:
    """The one line a refusal prints (no traceback), after checking the exit code."""
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verlenv build: "), r.stderr
    return lines[0].removeprefix("verlenv build: ")


@pytest.fixture
def probe_root(tmp_path) -> Path:
    dest = tmp_path / "ext"
    shutil.copytree(DATA, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_an_unknown_package_is_refused(probe_root, tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    r = verlenv_build(probe_root, "nosuch", "--python", sys.executable, "--archs", "9.0", "--wheelhouse",
                      str(wheelhouse))
    assert refused(r) == "no recipe for 'nosuch'; recipes: cuda-ext-probe, sleepy-probe"
    assert not wheelhouse.exists() and not (probe_root / ".verlenv").exists()


def test_a_package_the_variant_does_not_build_is_refused(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    r = verlenv_build(REPO, "apex", "--variant", "fsdp", "--python", sys.executable, "--archs", "9.0",
                      "--wheelhouse", str(wheelhouse))
    line = refused(r)
    assert re.fullmatch(r"verl-[\d.]+-fsdp does not build apex from source; it builds: flash-attn, causal-conv1d, "
                        r"flashinfer-jit-cache", line), line
    assert not wheelhouse.exists()


def test_apex_is_refused_an_nvcc_of_another_minor_before_anything_is_fetched(tmp_path, monkeypatch):
    """The recipe's nvcc_match = "exact" reaches the toolchain: a CUDA 12.5 toolkit is no toolkit for apex."""
    from test_toolchain import NVCC_12_5, fake_torch_python, toolkit

    debian = toolkit(tmp_path / "debian", NVCC_12_5)
    python = fake_torch_python(tmp_path, "12.8", tmp_path / "site-packages")
    monkeypatch.setenv("CUDA_HOME", str(debian))
    variant = stacks.load(REPO / "stacks.toml").variant("verl-0.7", "megatron")
    with pytest.raises(UserError) as e:
        builder.build_one(REPO, variant, "apex", python, ["9.0"], tmp_path / "wheelhouse", tmp_path / "work")
    assert str(e.value).startswith(f"CUDA_HOME={debian} has nvcc 12.5 but apex needs nvcc 12.8 exactly")
    assert not (tmp_path / "wheelhouse").exists() and not (tmp_path / "work").exists()


def test_an_unknown_gpu_is_refused(probe_root, tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    r = verlenv_build(probe_root, "cuda-ext-probe", "--python", sys.executable, "--gpu", "v100",
                      "--wheelhouse", str(wheelhouse))
    assert refused(r) == "unknown GPU 'v100'; valid: a100, h100, h200, b200, gb200, b300, rtx-pro-6000"
    assert not wheelhouse.exists()


def test_an_unknown_variant_is_refused(probe_root):
    r = verlenv_build(probe_root, "cuda-ext-probe", "--variant", "deepspeed", "--python", sys.executable)
    assert refused(r) == "unknown variant 'deepspeed' of stack probe; valid: fsdp"


@pytest.mark.network
def test_a_build_requirement_the_env_lacks_is_named_in_one_line(tmp_path):
    """A real env with ninja, setuptools and wheel but no torch, for the probe's recipe, which requires all four."""
    from test_verify_static import venv

    python = venv(tmp_path / "env", "ninja==1.13.2", "setuptools==81.0.0", "wheel==0.48.0")
    recipe = recipes.load(DATA, "cuda-ext-probe")
    assert recipe.requires == ("torch", "ninja", "setuptools", "wheel")
    with pytest.raises(UserError) as e:
        builder.check_requires(recipe, python)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert str(e.value) == (f"cuda-ext-probe builds in the env of {python} (no build isolation), which lacks torch "
                            f"(build.requires of {recipe.path}); run `verlenv install` again, or install them into "
                            f"that env: uv pip install --python {python} torch")
    # Names are matched as installers match them (case, - or _).
    builder.check_requires(dataclasses.replace(recipe, requires=("Ninja", "setuptools", "wheel")), python)


@pytest.mark.slow
@pytest.mark.network
def test_a_build_in_an_env_without_ninja_stops_before_anything_compiles(probe_root, tmp_path):
    """The build-test env less ninja (torch without ninja would fall back to a slow build): refused in one line,
    exit 2, before a source is copied, a build tree made or the wheelhouse touched."""
    from test_build_env import PINS, base_python

    env = tmp_path / "env"
    for cmd in (["uv", "venv", "-q", "--python", base_python(), str(env)],
                ["uv", "pip", "install", "-q", "--python", str(env / "bin" / "python"),
                 *(pin for pin in PINS if not pin.startswith("ninja=="))]):
        subprocess.run(cmd, check=True, env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
    wheelhouse = tmp_path / "wheelhouse"
    r = verlenv_build(probe_root, "cuda-ext-probe", "--python", str(env / "bin" / "python"), "--archs", "9.0",
                      "--wheelhouse", str(wheelhouse), "--no-install")
    assert r.returncode == 2, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("verlenv build:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert ", which lacks ninja (build.requires of " in errors[0]
    assert errors[0].endswith(f"uv pip install --python {env / 'bin' / 'python'} ninja")
    work = probe_root / ".verlenv"
    assert not list(work.glob("build-*")) and not (work / "sources").exists() and not wheelhouse.exists()


def start_build(package: str, archs: list[str], work: Path, wheelhouse: Path, source: str | None,
                stop_when) -> tuple[str, str]:
    """The real builder on a project recipe (the megatron variant), stopped once stop_when(work) holds."""
    return build_until(REPO, ("verl-0.9", "megatron"), package, archs, work, wheelhouse, source, stop_when)


@pytest.mark.slow
@pytest.mark.network
def test_apex_extension_split_honours_what_the_user_gave(monkeypatch):
    """The 16-core, 125 GiB host: the builder's own split fills the cores (memory allows 42 jobs); the user's
    --jobs or MAX_JOBS is a hard total; the user's APEX_PARALLEL_BUILD sets the extensions at once."""
    apex = recipes.load(REPO, "apex")
    monkeypatch.delenv("APEX_PARALLEL_BUILD", raising=False)
    assert builder.extension_split(apex, 16, False, 42, 16)[:2] == (8, 4)
    assert builder.extension_split(apex, 16, True, 42, 16)[:2] == (4, 4)
    monkeypatch.setenv("APEX_PARALLEL_BUILD", "2")
    assert builder.extension_split(apex, 16, False, 42, 16) == (2, 8, "given by the user")


def test_apex_setup_takes_the_recipe_knobs(tmp_path, monkeypatch):
    """apex's real setup.py, stopped once ninja's build file is written (no compile)."""
    repo = os.environ.get("VERLENV_APEX_GIT")
    if not repo:
        pytest.skip("set VERLENV_APEX_GIT to a clone or mirror of NVIDIA/apex")
    from test_build_env import clean_build_env

    clean_build_env(monkeypatch)
    work, wheelhouse = tmp_path / "work", tmp_path / "wheelhouse"
    def ninja_file_written(w: Path) -> bool:  # torch writes it in one go, its flags before its rules
        found = next(w.glob("build-apex-*/src/apex-*/build/**/build.ninja"), None)
        return found is not None and "rule compile" in found.read_text()

    stderr, log = start_build("apex", ["9.0"], work, wheelhouse, repo, ninja_file_written)
    split = re.search(r"APEX_PARALLEL_BUILD=(\d+) extensions at once x MAX_JOBS=(\d+) jobs each", stderr)
    jobs = re.search(r"parallelism: MAX_JOBS=(\d+)", stderr)
    assert split and jobs, stderr
    assert int(split[1]) * int(split[2]) <= int(jobs[1])
    assert "[apex] Detected APEX_CPP_EXT=1" in log and "[apex] Detected APEX_CUDA_EXT=1" in log
    assert f"[apex] Using parallel build with {split[1]} jobs from APEX_PARALLEL_BUILD" in log
    assert "release 13.0" in log  # apex's own nvcc == torch.version.cuda check ran and passed
    ninja = next(work.glob("build-apex-*/src/apex-*/build/**/build.ninja")).read_text()
    assert "-gencode=arch=compute_90,code=sm_90" in ninja and "compute_80" not in ninja
    assert not wheelhouse.exists() or not list(wheelhouse.rglob("*"))


@pytest.mark.slow
@pytest.mark.network
def test_transformer_engine_torch_compiles_its_first_units(tmp_path, monkeypatch):
    """TE's real sdist (fetched, sha256 checked) through the builder, stopped after its first unit compiled:
    the cuDNN/NCCL headers were found through the recipe's CPATH and no wheel was downloaded."""
    from test_build_env import clean_build_env

    clean_build_env(monkeypatch)
    monkeypatch.setenv("MAX_JOBS", "1")  # one unit at a time (2.5 GiB, a few CPU minutes)
    work, wheelhouse = tmp_path / "work", tmp_path / "wheelhouse"

    def first_unit_done(w: Path) -> bool:
        log = next(w.glob("build-transformer-engine-torch-*/build.log"), None)
        return log is not None and re.search(r"^\s*\[1/\d+\]", log.read_text(errors="replace"), re.M) is not None

    stderr, log = start_build("transformer-engine-torch", ["9.0"], work, wheelhouse, None, first_unit_done)
    assert "MAX_JOBS=1" in stderr
    assert "Guessing wheel URL" not in log  # NVTE_PYTORCH_FORCE_BUILD=TRUE was honoured
    assert "error:" not in log and "No such file or directory" not in log
    units = re.findall(r"^\s*\[1/(\d+)\]", log, re.M)
    assert units == ["28"]  # TE 2.12.0: 28 host C++ units
    assert not wheelhouse.exists() or not list(wheelhouse.rglob("*"))


@pytest.mark.slow
@pytest.mark.network
def test_apex_on_a_cuda_home_without_its_toolkit_header_is_refused_before_anything_compiles(tmp_path, monkeypatch):
    """The real apex recipe, the real verl-0.9 megatron variant, the build-test env's real toolchain (PyPI torch
    2.11 cu130 and PyPI's nvcc 13.0.88, whose CUDA_HOME has no cuda_profiler_api.h): one line naming the header, no
    source fetched, no build tree, no wheelhouse. Without the check this build compiled for 51 min and then failed.
    The megatron variant's lock now pins the wheel that ships the header (the build-test env has no such pin)."""
    from test_build_env import clean_build_env, torch_python

    clean_build_env(monkeypatch)
    python = torch_python()
    variant = stacks.load(REPO / "stacks.toml").variant("verl-0.9", "megatron")
    work, wheelhouse = tmp_path / "work", tmp_path / "wheelhouse"
    with pytest.raises(UserError) as e:
        builder.build_one(REPO, variant, "apex", python, ["10.0"], wheelhouse, work)
    line = str(e.value)
    assert "\n" not in line and e.value.exit_code == 2
    assert re.fullmatch(r"apex includes cuda_profiler_api\.h from the CUDA toolkit \(build\.toolkit_headers of "
                        r"\S+/recipes/apex/recipe\.toml\), which CUDA_HOME=\S+ \(from pypi\) lacks; install "
                        r"nvidia-cuda-profiler-api of CUDA 13\.0 into the env \(the variant's lock pins it: `verlenv "
                        r"install` again\), or build with a full CUDA 13\.0 toolkit \(CUDA_HOME=/usr/local/cuda\)",
                        line), line
    assert not wheelhouse.exists() and not list(work.glob("build-*")) and not list(work.glob("*.tar*"))
    # The same CUDA_HOME has the runtime's headers: the check looks where nvcc looks, and names only what is absent.
    home = re.search(r"CUDA_HOME=(\S+)", line).group(1)
    assert toolchain.missing_headers(home, ("cuda_runtime_api.h", "cuda_profiler_api.h")) == ["cuda_profiler_api.h"]


def test_a_toolkit_header_is_found_in_include_or_a_targets_include(tmp_path):
    """nvcc searches CUDA_HOME/include and targets/<arch>-linux/include; a header in either is present."""
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda.h").write_text("")
    (home / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    (home / "targets" / "x86_64-linux" / "include" / "cuda_profiler_api.h").write_text("")
    assert toolchain.missing_headers(str(home), ("cuda.h", "cuda_profiler_api.h", "nccl.h")) == ["nccl.h"]
    assert recipes.load(REPO, "apex").toolkit_headers == {"cuda_profiler_api.h": "nvidia-cuda-profiler-api"}
    assert recipes.load(REPO, "flash-attn").toolkit_headers == {}


def test_every_wheel_a_recipe_names_for_a_header_is_pinned_by_the_variants_that_build_it(cat):
    """A header's wheel is in the lock of each variant that builds the recipe, at torch's CUDA major: the env then
    holds the header, and the builder's CUDA_HOME (nvidia/cu13/include) with it."""
    checked = 0
    for variant in cat.all_variants():
        for build in variant.source_builds:
            wheels = set(recipes.load(REPO, build.name).toolkit_headers.values())
            if not wheels or not variant.stack.cuda.startswith("13."):  # PyPI's cu13 compiler: CUDA 13 stacks only
                continue
            for platform in variant.stack.platforms:
                assert wheels <= set(pins.read_lock(pins.lock_path(REPO, variant, platform))), (variant.key, platform)
                checked += 1
    assert checked >= 2  # verl-0.9 megatron, linux-64 and linux-aarch64
