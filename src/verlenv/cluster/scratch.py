"""Temp folders that outlive no run: each one's name holds its owner process (pid and start time), a process it
starts is recorded inside, and every new one first removes the folders of its kind whose processes are all gone.
A SIGKILLed run cannot clean up after itself (SIGKILL is not caught), so the next run does."""

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from verlenv.native import proctree

HELPERS = ".helpers"  # "<pid> <start>" lines: processes the owner started that use the folder (the Ray driver)


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22), None if it is gone or a zombie:
    with the pid it names one process, never a later one that was given the same pid."""
    fields = proctree.stat_fields(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


def _alive(pid: int, start: str) -> bool:
    return start_time(pid) == start


def _pattern(prefix: str) -> re.Pattern:
    return re.compile(re.escape(prefix) + r"(\d+)-(\d+)-")


def stale(prefix: str, root: Path) -> list[Path]:
    """The folders `owned(prefix)` made under root whose owner and helpers have all exited. Folders of older
    verlenvs (no owner in the name) are left: nothing says whether their run still goes on."""
    out = []
    if start_time(os.getpid()) is None:  # no /proc here: no owner can be told alive or gone
        return out
    for folder in sorted(root.glob(f"{prefix}*")):
        m = _pattern(prefix).match(folder.name)
        if not m or folder.is_symlink() or not folder.is_dir() or _alive(int(m[1]), m[2]):
            continue
        try:
            helpers = (folder / HELPERS).read_text().split("\n")
        except FileNotFoundError:
            helpers = []
        except OSError:
            continue  # not ours to read: not ours to remove
        if not any(_alive(int(pid), start) for pid, _, start in (line.partition(" ") for line in helpers if line)):
            out.append(folder)
    return out


@contextlib.contextmanager
def owned(prefix: str):
    """A fresh temp folder named for this process, removed when the block ends; the stale ones of its kind go
    first."""
    root = Path(tempfile.gettempdir())
    for folder in stale(prefix, root):
        shutil.rmtree(folder, ignore_errors=True)
    me = os.getpid()
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{me}-{start_time(me) or 0}-", dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def add_helper(folder: Path, pid: int) -> None:
    """Record a process that uses `folder` (started in a session of its own, it may outlive the owner): the folder
    is stale only once it has exited too."""
    with open(folder / HELPERS, "a") as f:
        f.write(f"{pid} {start_time(pid) or 0}\n")
