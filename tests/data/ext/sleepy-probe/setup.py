# A build that says it has started and then hangs: the tests kill the builder while it runs.
import os
import subprocess
import sys
import time
from pathlib import Path

from setuptools import setup

if marker := os.environ.get("VERLENV_TEST_BUILD_STARTED"):
    # A "compiler" in a process group of its own, as ninja starts each compile command.
    compiler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
    Path(marker).write_text(f"{os.getpid()} {compiler.pid}")
    time.sleep(600)

setup(name="sleepy-probe", version="0.1", py_modules=[])
