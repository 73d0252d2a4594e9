# A build that says it has started and then hangs: the tests kill the builder while it runs.
import os
import time
from pathlib import Path

from setuptools import setup

if marker := os.environ.get("VERLENV_TEST_BUILD_STARTED"):
    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)

setup(name="sleepy-probe", version="0.1", py_modules=[])
