"""`verlenv` at hand after README's two commands: `verlenv --version` says the tool's version and the catalog's
default stack, anywhere; README's way of putting `verlenv` on PATH (`uv tool install`) gives a working command."""

import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERLENV = Path(sys.executable).with_name("verlenv")


def default_stack_line() -> str:
    data = tomllib.loads((ROOT / "stacks.toml").read_text())
    name = data["default"]
    return f"default stack {name}: {data['stacks'][name]['description']}"


def test_version_prints_the_version_and_the_default_stack():
    env = {k: v for k, v in os.environ.items() if k != "VERLENV_ROOT"}
    proc = subprocess.run([str(VERLENV), "--version"], capture_output=True, text=True, cwd=ROOT / "tests", env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == (f"verlenv {metadata.version('verlenv')}; {default_stack_line()}; "
                           f"catalog {ROOT / 'stacks.toml'}\n")


def test_version_outside_a_checkout_still_answers(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VERLENV_ROOT"}
    proc = subprocess.run([str(VERLENV), "--version"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"verlenv {metadata.version('verlenv')} (no catalog here: no stacks.toml in "
                           f"{tmp_path.resolve()} or above; run inside a verlenv checkout or set VERLENV_ROOT)\n")


def readme_tool_install() -> list[str]:
    """The command README gives for putting `verlenv` on PATH."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^(uv tool install [^\n#]*?)\s+#", text, re.M)
    assert match, "README gives no `uv tool install` command"
    return match.group(1).split()


@pytest.mark.network  # the tool's dependencies come from uv's cache, PyPI for what it lacks
def test_readmes_tool_install_puts_a_working_verlenv_on_path(tmp_path):
    from uv import find_uv_bin

    cmd = readme_tool_install()
    assert cmd[:4] == ["uv", "tool", "install", "--editable"] and cmd[-1] == "."
    bin_dir = tmp_path / "bin"
    env = {**os.environ, "UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(bin_dir),
           "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VERLENV_ROOT", None)
    proc = subprocess.run([find_uv_bin(), *cmd[1:]], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version = subprocess.run([str(bin_dir / "verlenv"), "--version"], capture_output=True, text=True, cwd=ROOT,
                             env=env)
    assert version.returncode == 0 and default_stack_line() in version.stdout, version.stderr
