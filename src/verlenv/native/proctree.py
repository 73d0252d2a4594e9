"""A build's process tree: run it with its output logged and its progress shown, and stop all of it (pip,
ninja, each compile in a group of its own) when the builder is interrupted."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

NINJA_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]")


def run_logged(cmd: list[str], env: dict, log_path: Path, cwd: Path, append: bool = False) -> int:
    """Run the build, saving its whole output; show [done/total] progress with an ETA from ninja's lines."""
    interactive = sys.stderr.isatty()
    started = time.monotonic()
    with open(log_path, "a" if append else "w") as log, subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True, errors="replace") as p:
        try:
            return _follow(p, log, started, interactive)
        except BaseException:
            # Ctrl-C, SIGTERM or an error in the builder: stop every process of the build, not just pip.
            stop_tree(p)
            raise


def _follow(p: subprocess.Popen, log, started: float, interactive: bool) -> int:
    """Copy the build's output to the log; report ninja's [done/total] with an ETA (each minute when not a tty)."""
    last_report = 0.0
    for line in p.stdout:
        log.write(line)
        m = NINJA_STEP.match(line)
        if not m:
            continue
        done, total = int(m.group(1)), int(m.group(2))
        elapsed = time.monotonic() - started
        eta = elapsed / done * (total - done) if done else 0
        now = time.monotonic()
        if interactive or now - last_report > 60 or done == total:
            end = "\r" if interactive else "\n"
            print(f"  [{done}/{total}] {100 * done // total}%  elapsed {elapsed / 60:.0f} min  eta {eta / 60:.0f} min",
                  end=end, file=sys.stderr, flush=True)
            last_report = now
        log.flush()
    p.wait()
    if interactive:
        print(file=sys.stderr)
    return p.returncode


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...; field 22, the start
    time, is index 19), or None when the process is gone. The name may hold spaces and parentheses: split after the
    last ")"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_stats() -> dict[int, list[str]]:
    """pid -> stat_fields(pid), for every process that is still there when read."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) is not None:
            out[int(entry.name)] = fields
    return out


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid`, from the parent links in /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for child, fields in proc_stats().items():
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal(pids, sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_tree(p: subprocess.Popen) -> None:
    """Kill pip and everything under it. ninja puts each compile in a process group of its own, and a process
    whose parent dies is re-parented away from the tree: so freeze the whole tree first (SIGSTOP; a stopped ninja
    starts nothing new), collect it again, then SIGKILL it. Units cut short never reach ninja's log, so a resumed
    build compiles them again."""
    frozen: set[int] = set()
    for _ in range(20):
        tree = {p.pid, *descendants(p.pid)} - frozen
        if not tree:
            break
        _signal(tree, signal.SIGSTOP)
        frozen |= tree
    _signal(frozen, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=30)
