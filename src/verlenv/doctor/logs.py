"""The logs a path names, each diagnosed on its own: a file (plain or gzipped), stdin, or a directory read
recursively (a Ray job's `session_latest/logs`), the findings of several files merged with their file.

A directory may be live (a job writing it): files appear, vanish, rotate, grow or shrink during the scan. Each
file is read as it was when opened (up to the size it had then); one that cannot be read, or ends early, is a
note beside the findings, never the end of the scan, and what was read of it still counts. Binary files and
archives other than gzip (wheels, core dumps, tarballs) are recognised by their first bytes and skipped unread.
A big directory is read logs first, source code skipped by name (tree.py), within a bound of files and bytes;
what the bound left unread is a note.
"""

import gzip
import io
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from verlenv.doctor import tree
from verlenv.doctor.matcher import Diagnosis, Matcher, lines_of, merged
from verlenv.errors import UserError

try:
    from verlenv.doctor import scan
except ImportError:  # no google-re2 (a GPU host with only the verify path's packages): read line by line
    scan = None

GZIP_MAGIC = b"\x1f\x8b"
VALID = "give a log file, a directory of logs, or - for stdin"
SNIFF = 8192  # bytes looked at to tell a binary file from a log
# (offset, magic, what): formats that are never a log. gzip is not here: a rotated log is often gzipped.
MAGIC = (
    (0, b"PK\x03\x04", "a zip archive (wheel, jar, checkpoint)"),
    (0, b"PK\x05\x06", "a zip archive"),
    (0, b"\x7fELF", "an ELF binary (program, library or core dump)"),
    (257, b"ustar", "a tar archive"),
    (0, b"\xfd7zXZ\x00", "an xz archive"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd archive"),
    (0, b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (0, b"Rar!\x1a\x07", "a rar archive"),
    (0, b"\x04\x22\x4d\x18", "an lz4 archive"),
    (0, b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (0, b"PAR1", "a parquet file"),
    (0, b"\x93NUMPY", "a numpy array"),
    (0, b"SQLite format 3\x00", "an SQLite database"),
)
# Reading a file can fail mid-way when it changes under the reader: these make a note, not an abort.
READ_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError
MAX_FILES = 20_000  # files of a directory opened by default (logs first); 0: no bound
MAX_BYTES = 10 << 30  # bytes of a directory read by default (about 50 s at the scanner's speed); 0: no bound
BINARY_NOTE = "not a log: skipped"  # the end of every note for a file skipped by its first bytes


class Note(NamedTuple):
    file: str
    kind: str  # skipped (not read: binary, source code, vanished, unreadable), shrank, damaged (a gzip cut short),
    # stopped (unreadable part-way), left (not reached: the directory's bound)
    text: str

    @property
    def read(self) -> bool:
        """Part of the file was read, and its findings count."""
        return self.kind not in ("skipped", "left")


class Reading(NamedTuple):
    source: str  # what was read, for the report's first line
    diagnoses: list[Diagnosis]
    notes: list[Note]  # files skipped, or read only in part


class Progress(NamedTuple):
    """Where a directory scan is, after each file: for a caller that reports long scans."""

    done: int  # files opened
    planned: int  # files it means to open (the bound applied)
    found: int  # files under the directory
    read_bytes: int
    findings: int  # files with a finding so far


def binary_kind(head: bytes) -> str | None:
    """What a file is, from its first bytes, when it is not text; None for text (a log)."""
    for offset, magic, what in MAGIC:
        if head[offset:offset + len(magic)] == magic:
            return what
    if head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] == b"1AY&SY":
        return "a bzip2 archive"
    # NUL bytes after text: binary. A leading run of NULs is kept as text: a log truncated under a writer that
    # does not append (logrotate's copytruncate) starts with a hole.
    if b"\0" in head.lstrip(b"\0"):
        return "binary (NUL bytes)"
    return None


def diagnose_stream(stream: BinaryIO, file: str = "") -> list[Diagnosis]:
    matcher = _matcher()
    _feed(stream, matcher)
    return matcher.result(file)


def _matcher() -> Matcher:
    if scan is None:
        return Matcher()
    return Matcher(contexts_found_elsewhere=True, holds_keyword=scan.holds_keyword())


def _feed(stream: BinaryIO, matcher: Matcher) -> None:
    if scan is None:
        for line in lines_of(stream):
            matcher.feed(line)
    else:
        scan.scan(stream, matcher)


def diagnose_text(text: str) -> list[Diagnosis]:
    """Known failures in a log held in memory (for build and verify to call on a failing step)."""
    return diagnose_stream(io.BytesIO(text.encode("utf-8", errors="replace")))


def diagnose_path(log: str, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                  progress: Callable[[Progress], None] | None = None) -> Reading:
    """What LOG holds: `-` (stdin), a file, or a directory (read within max_files and max_bytes; 0: no bound)."""
    if log == "-":
        return Reading("stdin", diagnose_stream(sys.stdin.buffer), [])
    path = Path(log)
    if path.is_dir():
        return diagnose_dir(path, max_files, max_bytes, progress)
    if not path.exists():
        raise UserError(f"{log}: no such file or directory ({VALID})")
    if not path.is_file():
        raise UserError(f"{log}: not a regular file ({VALID})")
    diagnoses, note = diagnose_file(path, str(path))
    # The one file asked for, not read or damaged with nothing found: that is the answer. (A log that shrank while
    # read is a live log; what was read is its answer.)
    if note and not diagnoses and note.kind == "skipped":
        raise UserError(f"{log}: {note.text} ({VALID})")
    if note and not diagnoses and note.kind == "damaged":
        raise UserError(f"{log}: {note.text}; nothing found in what could be read")
    return Reading(str(path), diagnoses, [note] if note else [])


def diagnose_dir(path: Path, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                 progress: Callable[[Progress], None] | None = None, files: Iterable[Path] | None = None) -> Reading:
    """The findings of a directory's files (`files`: a chosen subset of it), logs first, within the bounds."""
    todo = tree.plan(_files_under(path) if files is None else files)
    if not todo.found:
        raise UserError(f"{path}: a directory with no files in it ({VALID})")
    planned = min(len(todo.order), max_files) if max_files else len(todo.order)
    per_file, notes = [], []
    read_bytes = done = 0
    for f in todo.order:
        if done >= planned or (max_bytes and read_bytes >= max_bytes):
            break
        diagnoses, note, size = _diagnose_counted(f, str(f.relative_to(path)))
        done += 1
        read_bytes += size
        if diagnoses:
            per_file.append(diagnoses)
        notes += [note] if note else []
        if progress:
            progress(Progress(done, planned, todo.found, read_bytes, len(per_file)))
    notes += [Note(f"*{suffix}", "skipped", f"{count} file(s) skipped by name: source code or documentation, not logs")
              for suffix, count in sorted(todo.skipped_by_name.items())]
    if left := todo.order[done:]:
        logs_left = max(0, todo.logs - done)
        bound = (f"--max-files {max_files}" if done >= planned else f"--max-gb {max_bytes / (1 << 30):g}")
        notes.append(Note(str(left[0].relative_to(path)), "left",
                          f"{len(left)} file(s) left unread ({logs_left} with a log's name) after the bound "
                          f"{bound} (logs are read first); raise it, or 0 for none, to read them too"))
    return Reading(f"{path} ({todo.found} files)", merged(per_file), notes)


def _diagnose_counted(path: Path, name: str) -> tuple[list[Diagnosis], Note | None, int]:
    """diagnose_file, and the bytes of the file it read (its size when opened)."""
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    diagnoses, note = diagnose_file(path, name)
    return diagnoses, note, size if not (note and note.kind == "skipped") else 0


def diagnose_file(path: Path, name: str) -> tuple[list[Diagnosis], Note | None]:
    """(findings, note) for one file; the note says why it was skipped or read only in part. Never raises for a
    file that changes or vanishes while it is read."""
    try:
        f = open(path, "rb")
    except OSError as e:
        why = ("vanished before it was read" if isinstance(e, FileNotFoundError)
               else f"cannot be read ({e.strerror or e})")
        return [], Note(name, "skipped", why)
    matcher = None  # made after the binary test: a tree of libraries needs none
    with f:
        try:
            raw = Snapshot(f)
            stream, binary = _opened(f, raw)
            if binary:
                return [], Note(name, "skipped", f"{binary}, {BINARY_NOTE}")
            matcher = _matcher()
            _feed(stream, matcher)
            note = (Note(name, "shrank", f"shrank while read (truncated or rewritten): {raw.read_bytes} of {raw.size} "
                         "bytes read") if raw.shrank else None)
        except READ_ERRORS as e:
            matcher = matcher or _matcher()  # what was fed before the error still counts
            if isinstance(e, (EOFError, zlib.error, gzip.BadGzipFile)):
                note = Note(name, "damaged", f"a damaged gzip file ({e}), cut short or still being written: read up "
                            "to there")
            else:
                note = Note(name, "stopped", f"stopped being readable ({e.strerror or e}): read up to there")
        return matcher.result(name), note


class Snapshot(io.RawIOBase):
    """A file as it was when opened: reading stops at the size it had then, so a log still being written does not
    keep the scan going; one that shrank under the reader ends early, and says so."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.size = os.fstat(f.fileno()).st_size
        self.read_bytes = 0
        self.shrank = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.size - self.read_bytes
        if left <= 0:
            return 0
        n = self.f.readinto(memoryview(buffer)[:left]) or 0
        self.read_bytes += n
        self.shrank |= n == 0
        return n


def _opened(f: BinaryIO, raw: Snapshot) -> tuple[BinaryIO | None, str | None]:
    """(the text stream of an open file, gzip unpacked, None) or (None, what it is) for a binary file, which is
    looked at by its first bytes only."""
    head = f.read(SNIFF)
    f.seek(0)
    if head[:2] != GZIP_MAGIC:
        what = binary_kind(head)
        return (None, what) if what else (raw, None)
    # A .tar.gz is a gzip of a tar archive: unpack what the first bytes hold (a stream cut short is fine here).
    inner = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(head, SNIFF)
    what = binary_kind(inner)
    if what:
        return None, f"a gzip of {what}"
    return Unpacked(raw), None


class Unpacked(io.RawIOBase):
    """A gzip file's text, handing over what it unpacked before the packed file ended early or broke (a rotated log
    still being compressed); the error comes at the next read, so the findings in that text are kept."""

    def __init__(self, raw: BinaryIO):
        self.z = gzip.GzipFile(fileobj=raw)
        self.error: Exception | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.error is not None:
            raise self.error
        view, n = memoryview(buffer), 0
        while n < len(view):
            try:
                chunk = self.z.read1(len(view) - n)
            except READ_ERRORS as e:
                self.error = e
                break
            if not chunk:
                break
            view[n:n + len(chunk)] = chunk
            n += len(chunk)
        if n == 0 and self.error is not None:
            raise self.error
        return n


def format_notes(notes: list[Note], shown: int = 10) -> list[str]:
    """Lines after the findings: the files skipped or read in part (binary files counted, not listed one by one)."""
    if not notes:
        return []
    binary, others = [], []  # one pass: a tree can hold hundreds of thousands of binary files
    for n in notes:
        (binary if n.text.endswith(BINARY_NOTE) else others).append(n)
    out = [""]
    out += [f"note: {n.file}: {n.text}" for n in others[:shown]]
    if len(others) > shown:
        out.append(f"note: {len(others) - shown} more file(s) skipped or read in part (--json lists them)")
    if binary:
        out.append(f"note: {len(binary)} binary file(s) skipped unread (archives, libraries), e.g. {binary[0].file}")
    return out


def _files_under(root: Path) -> Iterator[Path]:
    return tree.files_under(root)
