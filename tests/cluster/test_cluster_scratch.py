"""No `verlenv-ray-*` temp folder outlives its run: a `verify --ray` SIGKILLed while its Ray driver runs leaves its
folder (SIGKILL is not caught), the next run removes it once the driver is gone too, and keeps the folders of runs
still going. Real processes, driven by a file handshake and a pipe, never by sleeps."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from verlenv.cluster import launch, scratch
from verlenv.errors import UserError
from waiting import exited, until

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "tests" / "data" / "programs" / "ray_driver_stand_in.py"


def _folders(root: Path) -> list[Path]:
    return sorted(root.glob(f"{launch.TEMP_PREFIX}*"))


def test_a_sigkilled_run_leaves_its_folder_and_the_next_run_removes_it(tmp_path, monkeypatch):
    root = tmp_path / "tmp"
    root.mkdir()
    python = tmp_path / "python"  # the env's interpreter as run_driver starts it, running the stand-in
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {STAND_IN} \"$@\"\n")
    python.chmod(0o755)
    handshake = tmp_path / "driver.pid"
    program = f"from verlenv.cluster import launch; launch.run_driver({str(python)!r}, {{'options': {{}}}}, 3600)"
    env = {**os.environ, "TMPDIR": str(root), "HANDSHAKE": str(handshake),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "run.err", "w") as err:
        run = subprocess.Popen([sys.executable, "-c", program], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=err)
    try:
        assert until(lambda: handshake.exists() or run.poll() is not None) and handshake.exists(), \
            (tmp_path / "run.err").read_text()
        driver = int(handshake.read_text())
        (folder,) = _folders(root)
        run.send_signal(signal.SIGKILL)
        run.wait()
        assert _folders(root) == [folder]  # what SIGKILL does: nothing cleans up

        assert scratch.stale(launch.TEMP_PREFIX, root) == []  # its driver still runs (own session) and uses it
        run.stdin.close()  # the driver's stdin: it reads EOF and exits
        assert exited(driver)
        assert until(lambda: scratch.start_time(driver) is None)  # reaped by whoever adopted it
        assert scratch.stale(launch.TEMP_PREFIX, root) == [folder]

        monkeypatch.setattr(tempfile, "tempdir", str(root))
        with pytest.raises(UserError, match="the Ray driver failed"):  # the next run: a driver that fails at once
            launch.run_driver("/bin/false", {"options": {}}, 60)
        assert _folders(root) == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_the_folders_of_live_runs_and_of_older_verlenvs_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    older = tmp_path / f"{launch.TEMP_PREFIX}k2j4x9ab"  # no owner in its name: nothing says its run has ended
    older.mkdir()
    with scratch.owned(launch.TEMP_PREFIX) as mine:
        assert mine.name.startswith(f"{launch.TEMP_PREFIX}{os.getpid()}-{scratch.start_time(os.getpid())}-")
        with scratch.owned(launch.TEMP_PREFIX) as other:  # a second run of this machine, its sweep first
            assert mine.is_dir() and other.is_dir() and older.is_dir()
    assert sorted(tmp_path.iterdir()) == [older]


def test_a_recycled_pid_does_not_keep_a_stale_folder_alive(tmp_path):
    """The pid alone could name a later process; the start time names one process."""
    me = os.getpid()
    stale = tmp_path / f"{launch.TEMP_PREFIX}{me}-{int(scratch.start_time(me)) - 1}-abc"
    stale.mkdir()
    assert scratch.stale(launch.TEMP_PREFIX, tmp_path) == [stale]
