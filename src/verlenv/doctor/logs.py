"""The logs a path names, each diagnosed on its own: a file (plain or gzipped), stdin, or a directory read
recursively (a Ray job's `session_latest/logs`), the findings of several files merged with their file."""

import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from verlenv.doctor.matcher import Diagnosis, Matcher, lines_of, merged
from verlenv.errors import UserError

try:
    from verlenv.doctor import scan
except ImportError:  # no google-re2 (a GPU host with only the verify path's packages): read line by line
    scan = None

GZIP_MAGIC = b"\x1f\x8b"
VALID = "give a log file, a directory of logs, or - for stdin"


def diagnose_stream(stream: BinaryIO, file: str = "") -> list[Diagnosis]:
    if scan is None:
        matcher = Matcher()
        for line in lines_of(stream):
            matcher.feed(line)
        return matcher.result(file)
    matcher = Matcher(contexts_found_elsewhere=True, holds_keyword=scan.holds_keyword())
    return scan.scan(stream, matcher).result(file)


def diagnose_text(text: str) -> list[Diagnosis]:
    """Known failures in a log held in memory (for build and verify to call on a failing step)."""
    return diagnose_stream(io.BytesIO(text.encode("utf-8", errors="replace")))


def diagnose_path(log: str) -> tuple[str, list[Diagnosis]]:
    """(what was read, its diagnoses) for LOG: `-` (stdin), a file, or a directory."""
    if log == "-":
        return "stdin", diagnose_stream(sys.stdin.buffer)
    path = Path(log)
    if path.is_dir():
        files = list(_files_under(path))
        if not files:
            raise UserError(f"{log}: a directory with no files in it ({VALID})")
        per_file = []
        for f in files:
            with _open(f) as stream:
                per_file.append(diagnose_stream(stream, str(f.relative_to(path))))
        return f"{path} ({len(files)} files)", merged(per_file)
    if not path.exists():
        raise UserError(f"{log}: no such file or directory ({VALID})")
    if not path.is_file():
        raise UserError(f"{log}: not a regular file ({VALID})")
    with _open(path) as stream:
        return str(path), diagnose_stream(stream)


def _files_under(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if p.is_file() and not p.is_symlink():
                yield p


@contextmanager
def _open(path: Path) -> Iterator[BinaryIO]:
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot be read ({e.strerror})") from None
    with f:
        if f.peek(2)[:2] != GZIP_MAGIC:
            yield f
            return
        try:
            with gzip.GzipFile(fileobj=f) as z:
                yield z
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise UserError(f"{path}: a damaged gzip file ({e}); give it unpacked, or the whole .gz") from None
