"""Waiting for an event in a test, never for a length of time: a process's exit as the kernel reports it (a pidfd),
or a condition checked until it holds. The guard only ends a wait for an event that never comes."""

import os
import select
import threading
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


class StreamLines:
    """A process's output stream, read line by line as it comes, in a thread of its own."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.ended = threading.Event()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line)
        self.ended.set()

    def wait_for(self, text: str, guard_s: float = GUARD_S) -> bool:
        """True once a line holds text; False when the stream ended without one (or after guard_s)."""
        until(lambda: self.ended.is_set() or any(text in line for line in self.lines), guard_s)
        return any(text in line for line in self.lines)

    def text(self, guard_s: float = GUARD_S) -> str:
        """Everything, once the stream has ended."""
        self.ended.wait(guard_s)
        return "".join(self.lines)
