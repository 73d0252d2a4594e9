"""Runtime defaults of an env (src/verlenv/env/runtime_env.py): the catalog's runtime_env table becomes a .pth in a real
venv, and every process started with that venv's python sees it (a multiprocessing spawn child too, as vLLM's
EngineCore and Ray workers are), while a value the user exports wins; verify reports it; bad tables are one line.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_verify_profiles import REPO
from verlenv.catalog import stacks
from verlenv.env import runtime_env
from verlenv.errors import UserError
from verlenv.verify import static

CHILD = Path(__file__).parent / "data" / "programs" / "spawned_child_env.py"


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    prefix = tmp_path_factory.mktemp("runtime-env") / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(prefix)], check=True, timeout=120)
    return prefix / "bin" / "python"


@pytest.fixture
def cat():
    return stacks.load(REPO / "stacks.toml")


def spawned_child_sees(python, tmp_path, env=None) -> dict:
    script = tmp_path / "child.py"
    shutil.copy(CHILD, script)  # run from a folder of its own, as the spawn start method re-imports it
    env = {k: v for k, v in (env or os.environ).items() if not k.startswith("VLLM_")}
    proc = subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path, check=True)
    return json.loads(proc.stdout)


def test_the_default_stack_sets_the_vllm_switches(cat):
    assert runtime_env.defaults(cat.path, "verl-0.9") == {"VLLM_USE_FLASHINFER_SAMPLER": "0",
                                                          "VLLM_USE_V2_MODEL_RUNNER": "0"}
    assert runtime_env.defaults(cat.path, "verl-0.7") == {}


def test_every_process_of_the_env_sees_the_defaults_and_the_user_wins(venv, cat, tmp_path):
    variant = cat.variant("verl-0.9", "fsdp")
    path = runtime_env.apply(venv, cat.path, variant)
    assert path.name == runtime_env.PTH_NAME and path.parent.name == "site-packages"
    assert spawned_child_sees(venv, tmp_path) == {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_USE_V2_MODEL_RUNNER": "0"}
    user = {**os.environ, "VLLM_USE_V2_MODEL_RUNNER": "1"}
    script = tmp_path / "one.py"
    script.write_text("import os; print(os.environ['VLLM_USE_V2_MODEL_RUNNER'])")
    assert subprocess.run([str(venv), str(script)], capture_output=True, text=True, env=user,
                          check=True).stdout.strip() == "1"
    # python -S skips site, and with it the .pth: nothing else sets these.
    proc = subprocess.run([str(venv), "-S", "-c", "import os; print(os.environ.get('VLLM_USE_V2_MODEL_RUNNER'))"],
                          capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                               if not k.startswith("VLLM_")}, check=True)
    assert proc.stdout.strip() == "None"


def test_verify_reports_the_defaults_in_effect(venv, cat, monkeypatch):
    variant = cat.variant("verl-0.9", "fsdp")
    for name in ("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_V2_MODEL_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    runtime_env.apply(venv, cat.path, variant)
    r = static.check_runtime_env(venv, cat.path, variant)
    assert (r.name, r.status) == ("env/runtime-defaults", "pass")
    assert r.reason == "VLLM_USE_FLASHINFER_SAMPLER=0, VLLM_USE_V2_MODEL_RUNNER=0"
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    r = static.check_runtime_env(venv, cat.path, variant)
    assert r.status == "pass" and "VLLM_USE_V2_MODEL_RUNNER=1 set by the user (default 0)" in r.reason
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    Path(runtime_env.probe(venv, [])["site"], runtime_env.PTH_NAME).unlink()
    r = static.check_runtime_env(venv, cat.path, variant)
    assert r.status == "warn" and "not set in this env: VLLM_USE_FLASHINFER_SAMPLER, VLLM_USE_V2_MODEL_RUNNER" \
        in r.reason


def test_a_stack_without_defaults_removes_the_file(venv, cat):
    runtime_env.apply(venv, cat.path, cat.variant("verl-0.9", "fsdp"))
    assert runtime_env.apply(venv, cat.path, cat.variant("verl-0.7", "fsdp")) is None
    site = runtime_env.probe(venv, [])["site"]
    assert not os.path.exists(os.path.join(site, runtime_env.PTH_NAME))


@pytest.mark.parametrize("table, complaint", [
    ('"bad name" = "1"', "'bad name' is not an environment variable name"),
    ("X = 1", ".X must be a string or a list of directories, not 1"),
    ('PATH = ["{prefix}/bin", 2]', ".PATH must be a string or a list of directories"),
    ('CUDA_HOME = "{home}"', ".CUDA_HOME: {home} in '{home}'; fields: {prefix}, {cuda_home}"),
    ('X = "{prefix"', ".X: '{prefix' is not a template"),
])
def test_a_bad_table_is_one_line(tmp_path, table, complaint):
    path = tmp_path / "stacks.toml"
    path.write_text(f'[stacks."s".runtime_env]\n{table}\n')
    with pytest.raises(UserError, match="runtime_env") as e:
        runtime_env.defaults(path, "s")
    assert complaint in str(e.value) and "\n" not in str(e.value)


def test_pth_text_is_one_import_line_that_sets_defaults_only():
    text = runtime_env.pth_text({"B": "x'y", "A": "0"})
    assert text.count("\n") == 1 and text.startswith("import os; ")
    env = {"A": "user"}
    exec(text.replace("import os; ", ""), {"os": type("os", (), {"environ": env})})
    assert env == {"A": "user", "B": "x'y"}


def test_the_module_writes_an_env_by_hand_and_refuses_a_bad_python(venv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "verlenv.commands.runtime_env", "--python", str(venv)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("wrote ") and runtime_env.PTH_NAME in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "verlenv.commands.runtime_env", "--python", str(tmp_path / "false")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr


def test_a_variant_adds_its_own_defaults_to_the_stacks(cat):
    stack = runtime_env.defaults(cat.path, "verl-0.9")
    assert runtime_env.defaults(cat.path, "verl-0.9", "fsdp") == stack
    assert runtime_env.defaults(cat.path, "verl-0.9", "megatron") == stack
    assert runtime_env.defaults(cat.path, "verl-0.9", "sglang") == {**stack, "CUDA_HOME": "{cuda_home}",
                                                                     "PATH": ["{prefix}/bin"]}


def test_directories_go_in_front_once_each_first_listed_first():
    text = runtime_env.pth_text({"PATH": ["/env/bin", "/env/cuda/bin"], "A": "0"})
    assert text.count("\n") == 1 and text.startswith("import os; ")
    env = {"PATH": "/usr/bin:/env/cuda/bin"}
    fake_os = type("os", (), {"environ": env, "pathsep": ":"})
    exec(text.replace("import os; ", ""), {"os": fake_os})
    assert env == {"PATH": "/env/bin:/usr/bin:/env/cuda/bin", "A": "0"}  # one already there is left where it is
    exec(text.replace("import os; ", ""), {"os": fake_os})
    assert env["PATH"] == "/env/bin:/usr/bin:/env/cuda/bin"
    unset = {}
    exec(text.replace("import os; ", ""), {"os": type("os", (), {"environ": unset, "pathsep": ":"})})
    assert unset["PATH"] == "/env/bin:/env/cuda/bin"


def test_the_sglang_env_gets_a_cuda_home_and_its_bin_on_path_filled_at_install(venv, cat, tmp_path, monkeypatch):
    """In a real venv with (a test double of) the PyPI CUDA 13 wheels: a CUDA_HOME is assembled inside the env, its
    path and the env's bin reach a spawned child (as a Ray worker of the env), verify reports them; a CUDA_HOME the
    user exports wins."""
    from test_toolchain import pypi_cu13

    sglang = cat.variant("verl-0.9", "sglang")
    site, prefix = runtime_env.probe(venv, [])["site"], runtime_env.probe(venv, [])["prefix"]
    with pytest.raises(UserError, match=r"name \{cuda_home\}, but the env at .* has no PyPI nvcc") as e:
        runtime_env.apply(venv, cat.path, sglang)
    assert "\n" not in str(e.value)
    pypi_cu13(Path(site))
    try:
        runtime_env.apply(venv, cat.path, sglang)
        home = Path(prefix) / "verlenv" / os.listdir(Path(prefix) / "verlenv")[0]
        assert (home / "bin" / "nvcc").exists() and (home / "lib64" / "stubs" / "libcuda.so").exists()
        script = tmp_path / "child.py"
        script.write_text(CHILD.read_text().replace('("VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_V2_MODEL_RUNNER")',
                                        '("CUDA_HOME", "PATH")'))
        env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
        seen = json.loads(subprocess.run([str(venv), str(script)], capture_output=True, text=True, env=env,
                                         cwd=tmp_path, check=True, timeout=120).stdout)
        assert seen["CUDA_HOME"] == str(home)
        assert seen["PATH"].split(os.pathsep)[0] == f"{prefix}/bin" and seen["PATH"].endswith(env["PATH"])
        monkeypatch.delenv("CUDA_HOME", raising=False)
        r = static.check_runtime_env(venv, cat.path, sglang)
        assert r.status == "pass" and f"CUDA_HOME={home}" in r.reason and f"{prefix}/bin on PATH" in r.reason
        monkeypatch.setenv("CUDA_HOME", "/opt/cuda-13.0")
        r = static.check_runtime_env(venv, cat.path, sglang)
        assert r.status == "pass" and f"CUDA_HOME=/opt/cuda-13.0 set by the user (default {home})" in r.reason
        monkeypatch.delenv("CUDA_HOME")
        shutil.rmtree(home)
        r = static.check_runtime_env(venv, cat.path, sglang)
        assert r.status == "warn" and f"the CUDA_HOME the defaults name is not there: {home}" in r.reason
    finally:
        shutil.rmtree(Path(site) / "nvidia", ignore_errors=True)
        shutil.rmtree(Path(prefix) / "verlenv", ignore_errors=True)
        runtime_env.apply(venv, cat.path, cat.variant("verl-0.9", "fsdp"))
