"""`verlenv verify` and `install` run with only what docs/verification/README.md says the tool needs (Python,
packaging, rich, pyelftools): pyyaml and conda-lock, which render and lock use, are imported where used."""

import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# A None entry in sys.modules makes `import name` raise ImportError, as if the package were not installed.
BLOCKED = ("yaml", "conda_lock")
PRELUDE = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in BLOCKED)


def run_without_optional(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("command", ["verify", "install"])
def test_command_help_runs_without_pyyaml_and_conda_lock(command):
    proc = run_without_optional(f"import runpy\nsys.argv = ['verlenv', {command!r}, '--help']\n"
                                "runpy.run_module('verlenv', run_name='__main__')\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: verlenv {command}")


def test_the_modules_verify_and_install_run_import_without_them():
    modules = ["verlenv.verify.runner", "verlenv.verify.static", "verlenv.verify.report", "verlenv.env.install",
               "verlenv.doctor.probes", "verlenv.lock.locks", "verlenv.lock.render"]
    proc = run_without_optional("import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
                                + f"print(sorted(n for n in {BLOCKED!r} if sys.modules.get(n) is not None))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_block_is_real():
    """The same prelude does stop a module that imports pyyaml at the top."""
    proc = run_without_optional("import yaml\n")
    assert proc.returncode == 1 and "ModuleNotFoundError: import of yaml halted" in proc.stderr


def test_each_command_is_registered_by_its_own_module():
    """verlenv/commands/<name>.py registers `name`; a wrong name would hide the subcommand."""
    import argparse
    import importlib

    from verlenv import cli

    for command in cli.COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers(dest="command")
        importlib.import_module(cli.command_module(command)).register(sub)
        assert list(sub.choices) == [command], command


def test_a_doctor_run_imports_only_the_doctor():
    proc = subprocess.run([sys.executable, "-c", "import sys\nfrom verlenv import cli\ncli.parser(['doctor', '-'])\n"
                           "print(sorted(m for m in ('conda_lock', 'rattler', 'verlenv.lock.locks',"
                           " 'verlenv.verify.runner', 'verlenv.commands.bundle', 'verlenv.cluster.launch')"
                           " if m in sys.modules))\n"],
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_tools_own_import_folders_leave_pythonpath():
    """A tool started as `PYTHONPATH=src:<tool wheels>` must not lend its packages to the env it checks."""
    import os

    import packaging

    from verlenv import cli

    tool_site = os.path.dirname(os.path.dirname(packaging.__file__))
    environ = {"PYTHONPATH": os.pathsep.join([str(SRC), tool_site, "/opt/user-code"])}
    cli._drop_tool_paths(environ)
    assert environ["PYTHONPATH"] == "/opt/user-code"
    environ = {"PYTHONPATH": os.pathsep.join([str(SRC), tool_site])}
    cli._drop_tool_paths(environ)
    assert "PYTHONPATH" not in environ
