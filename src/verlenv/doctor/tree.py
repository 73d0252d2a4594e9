"""Which files of a directory the doctor reads, and in what order: logs first, source code never.

A directory handed to `doctor` may be a Ray session folder or a whole /tmp with envs in it (hundreds of thousands
of files). Files whose names say log (Ray's *.log/*.err/*.out, rotated or gzipped) are read first; source code
and documentation are skipped by name (their text quotes error messages: reading them would only add false
alarms); the rest follow, and binary files among them are still told apart by their first bytes (logs.py).
"""

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Whatever their place, these name a log; a rotated or packed one too (worker-3.err.1, raylet.out.2.gz).
LOG_SUFFIXES = frozenset({".log", ".err", ".out", ".txt", ".stderr", ".stdout"})
LOG_NAMES = frozenset({"stdout", "stderr", "nohup.out", "debug_state.txt"})
# Source code and documentation: they quote error messages (vLLM's own source holds "EngineCore failed to start").
SOURCE_SUFFIXES = frozenset({
    ".py", ".pyi", ".pyx", ".pxd", ".pyc", ".h", ".hpp", ".hh", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".cu",
    ".js", ".mjs", ".ts", ".java", ".rs", ".go", ".md", ".rst", ".ipynb", ".html", ".css", ".jinja", ".j2",
})
_ROTATION = re.compile(r"(?:\.\d+|\.gz|\.bz2|\.xz)+$")


def kind_by_name(name: str) -> str:
    """"log", "source" (never read) or "other" (read after the logs, binaries skipped by their first bytes)."""
    base = _ROTATION.sub("", name.lower())
    suffix = os.path.splitext(base)[1]
    if base in LOG_NAMES or suffix in LOG_SUFFIXES:
        return "log"
    if suffix in SOURCE_SUFFIXES:
        return "source"
    return "other"


@dataclass
class Plan:
    found: int  # files under the directory
    order: list[Path]  # the files to read, logs first
    logs: int  # how many of `order` have a log's name
    skipped_by_name: Counter = field(default_factory=Counter)  # suffix -> files skipped as source code


def plan(files: Iterable[Path]) -> Plan:
    logs: list[Path] = []
    others: list[Path] = []
    skipped: Counter = Counter()
    found = 0
    for f in files:
        found += 1
        kind = kind_by_name(f.name)
        if kind == "log":
            logs.append(f)
        elif kind == "source":
            skipped[os.path.splitext(f.name)[1].lower()] += 1
        else:
            others.append(f)
    return Plan(found, logs + others, len(logs), skipped)


def files_under(root: Path) -> Iterator[Path]:
    """Regular files under `root` (symlinks not followed), each folder's entries in name order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink():
                yield p
