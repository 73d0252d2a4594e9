"""Waiting for an event in a test, never for a length of time: a process's exit as the kernel reports it (a pidfd),
or a condition checked until it holds. The guard only ends a wait for an event that never comes."""

import os
import select
import time

GUARD_S = 600  # a hang guard only: a test whose event never comes fails after it, whatever the machine's speed


def exited(pid: int, guard_s: float = GUARD_S) -> bool:
    """True once process `pid` has exited (or is gone already); False if it still runs after guard_s."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # readable once the process has exited, reaped or not
        return bool(poller.poll(guard_s * 1000))
    finally:
        os.close(fd)


def until(condition, guard_s: float = GUARD_S, every_s: float = 0.01) -> bool:
    """True once condition() holds, checked every every_s; False if it still does not after guard_s. For events
    that leave no descriptor to wait on (a line in a file another process appends to)."""
    deadline = time.monotonic() + guard_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True
