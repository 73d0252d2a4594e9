"""`verlenv doctor DIR` on a live directory (a Ray session's logs while the job runs): files that vanish, shrink,
rotate, grow or are half-written gzip while the scan reads them are notes, never the end of the scan, and what
was read of them still counts; binary files and archives are recognised by their first bytes and skipped unread.
The changes are made to real files by a second file handle at the moment the reader is inside the file, and,
repeated, by a writer thread racing real scans."""

import bz2
import gzip
import io
import json
import lzma
import os
import random
import shutil
import sys
import tarfile
import threading
import zipfile
from pathlib import Path
from typing import ClassVar

import pytest

from test_doctor_match import LOGS
from verlenv.cli import main
from verlenv.doctor import diagnose_path, logs, scan
from verlenv.errors import UserError

LINKER = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"  # F10
HEALTHY = b"".join(p.read_bytes() for p in sorted(LOGS.glob("healthy-*.log")))


def ids(reading) -> set[str]:
    return {d.id for d in reading.diagnoses}


def notes(reading) -> dict[str, str]:
    return {n.file: n.text for n in reading.notes}


def wheel_bytes(failing: bool = True) -> bytes:
    """A zip whose members hold a failure's words: if it were read, the doctor would report them."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("pkg/build.log", (LINKER if failing else b"") * 100)
    return buf.getvalue()


def tar_bytes(compression: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=f"w:{compression}") as t:
        data = LINKER * 100
        info = tarfile.TarInfo("build.log")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_binary_files_and_archives_are_skipped_by_their_first_bytes_not_their_names(tmp_path):
    # Every name ends in .log: only the content tells.
    files = {
        "wheel.log": wheel_bytes(),
        "elf.log": Path(sys.executable).resolve().read_bytes()[:200_000] + LINKER,
        "tar.log": tar_bytes(),
        "targz.log": tar_bytes("gz"),
        "xz.log": lzma.compress(LINKER * 100),
        "bz2.log": bz2.compress(LINKER * 100),
        "nul.log": b"abc\0\0\x01" * 1000 + LINKER,
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    # Text that must still be read: a gzipped log, and a log truncated under a writer that does not append
    # (copytruncate), which starts with a hole of NULs.
    (tmp_path / "rotated.log.1").write_bytes(gzip.compress(HEALTHY + LINKER))
    (tmp_path / "hole.log").write_bytes(b"\0" * 100_000 + LINKER)
    reading = diagnose_path(str(tmp_path))
    assert [(d.id, sorted({e.file for e in d.evidence})) for d in reading.diagnoses] == [
        ("F10", ["hole.log", "rotated.log.1"])]
    assert notes(reading) == {
        "wheel.log": "a zip archive (wheel, jar, checkpoint), not a log: skipped",
        "elf.log": "an ELF binary (program, library or core dump), not a log: skipped",
        "tar.log": "a tar archive, not a log: skipped",
        "targz.log": "a gzip of a tar archive, not a log: skipped",
        "xz.log": "an xz archive, not a log: skipped",
        "bz2.log": "a bzip2 archive, not a log: skipped",
        "nul.log": "binary (NUL bytes), not a log: skipped"}
    assert not any(n.read for n in reading.notes)


class CountingFile(io.FileIO):
    """A real file whose bytes read from the disk are counted, per path (test double of the builtin open)."""

    read_from: ClassVar[dict[str, int]] = {}

    def readinto(self, buffer):
        n = super().readinto(buffer) or 0
        name = os.path.basename(self.name)
        type(self).read_from[name] = type(self).read_from.get(name, 0) + n
        return n


def test_a_huge_binary_is_skipped_without_being_read(tmp_path, monkeypatch):
    big = tmp_path / "flash_attn-2.8.3-cp312-linux_x86_64.whl"
    with open(big, "wb") as f:
        f.write(wheel_bytes())
        f.truncate(4 << 30)  # 4 GiB, sparse
    (tmp_path / "worker.err").write_bytes(LINKER)
    monkeypatch.setattr(CountingFile, "read_from", {})
    monkeypatch.setattr(logs, "open", lambda path, mode="rb": io.BufferedReader(CountingFile(path, "r")), raising=False)
    reading = diagnose_path(str(tmp_path))
    assert ids(reading) == {"F10"} and list(notes(reading)) == [big.name]
    # Its first bytes were looked at (one buffer's worth at most), not its 4 GiB; the log was read whole.
    assert 0 < CountingFile.read_from[big.name] <= logs.SNIFF + io.DEFAULT_BUFFER_SIZE
    assert CountingFile.read_from["worker.err"] >= len(LINKER)


def test_an_explicit_binary_file_is_one_line_and_exit_2(tmp_path, capsys):
    target = tmp_path / "dist.whl"
    target.write_bytes(wheel_bytes())
    with pytest.raises(UserError, match="a zip archive .*not a log: skipped"):
        diagnose_path(str(target))
    assert main(["doctor", str(target)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


class Meddling(logs.Snapshot):
    """A real change to the file, made through another handle the first time the reader is inside it."""

    change = staticmethod(lambda path: None)
    path: Path = None

    def readinto(self, buffer):
        if self.read_bytes and self.path is not None:
            type(self).change(self.path)
            type(self).path = None
        return super().readinto(buffer)


@pytest.fixture
def meddle(monkeypatch):
    monkeypatch.setattr(scan, "BLOCK", 64 << 10)  # the reader is inside the file after its first block

    def arm(path: Path, change):
        monkeypatch.setattr(Meddling, "change", staticmethod(change))
        monkeypatch.setattr(Meddling, "path", path)
        monkeypatch.setattr(logs, "Snapshot", Meddling)
    return arm


def test_a_file_truncated_while_read_keeps_what_was_read_and_says_so(tmp_path, meddle):
    log = tmp_path / "worker.err"
    log.write_bytes(LINKER + HEALTHY * 4)
    size = log.stat().st_size
    meddle(log, lambda p: os.truncate(p, 100_000))
    reading = diagnose_path(str(tmp_path))
    assert ids(reading) == {"F10"}
    (note,) = reading.notes
    assert note.kind == "shrank" and note.text.startswith("shrank while read (truncated or rewritten): ")
    assert note.text.endswith(f" of {size} bytes read")


def test_a_file_rotated_while_read_is_read_as_it_was_opened(tmp_path, meddle):
    log = tmp_path / "raylet.out"
    log.write_bytes(HEALTHY * 4 + LINKER)

    def rotate(p):
        p.rename(p.with_name("raylet.out.1"))
        p.write_bytes(b"fresh\n")
    meddle(log, rotate)
    reading = diagnose_path(str(tmp_path))
    f10 = next(d for d in reading.diagnoses if d.id == "F10")
    assert {e.file for e in f10.evidence} == {"raylet.out"} and reading.notes == []


def test_a_file_growing_while_read_is_read_to_its_size_at_open(tmp_path, meddle):
    log = tmp_path / "worker.out"
    log.write_bytes(HEALTHY * 4)
    meddle(log, lambda p: p.open("ab").write(LINKER))  # appended after the scan began: the next scan's
    reading = diagnose_path(str(tmp_path))
    assert reading.diagnoses == [] and reading.notes == []
    assert ids(diagnose_path(str(tmp_path))) == {"F10"}


def test_a_file_that_vanished_before_it_was_opened_is_a_note(tmp_path, monkeypatch):
    (tmp_path / "stable.err").write_bytes(LINKER)
    (tmp_path / "gone.err").write_bytes(LINKER)
    listed = list(logs._files_under(tmp_path))
    (tmp_path / "gone.err").unlink()  # between the listing and the reading
    monkeypatch.setattr(logs, "_files_under", lambda root: iter(listed))
    reading = diagnose_path(str(tmp_path))
    assert ids(reading) == {"F10"} and notes(reading) == {"gone.err": "vanished before it was read"}


def test_a_gzip_still_being_written_keeps_its_findings(tmp_path):
    packed = gzip.compress(LINKER + HEALTHY * 8)
    cut = tmp_path / "worker.err.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    reading = diagnose_path(str(tmp_path))
    assert ids(reading) == {"F10"}
    (note,) = reading.notes
    assert note.kind == "damaged" and note.read
    assert note.text.startswith("a damaged gzip file (") and "still being written" in note.text
    assert ids(diagnose_path(str(cut))) == {"F10"}  # the file alone: its findings, with the note


def test_the_cli_prints_the_notes_and_keeps_the_exit_code_of_the_findings(tmp_path, capsys):
    (tmp_path / "worker.err").write_bytes(LINKER)
    (tmp_path / "dist.whl").write_bytes(wheel_bytes())
    (tmp_path / "half.gz").write_bytes(gzip.compress(HEALTHY * 4)[:3000])
    assert main(["doctor", str(tmp_path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {n["file"]: n["read"] for n in report["notes"]} == {"dist.whl": False, "half.gz": True}
    assert main(["doctor", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "[F10]" in out and "note: half.gz: a damaged gzip file" in out
    assert "note: 1 binary file(s) skipped unread (archives, libraries), e.g. dist.whl" in out


class Churn(threading.Thread):
    """What a running job does to its log folder, as fast as it can: rewrite, truncate, append, rotate into gzip
    (written in pieces), delete, create, and turn a log into a binary file. Besides racing freely, it answers a
    reader that asks (`meddle`, called while the reader holds a file open) with one action begun after the asking:
    every file read sees a change made while it was open, however the two threads are scheduled."""

    def __init__(self, root: Path, seed: int):
        super().__init__(daemon=True)
        self.root, self.rng, self.stop = root, random.Random(seed), threading.Event()
        self.actions = self.asked = self.answered = 0
        self._ask, self._answer = threading.Event(), threading.Event()

    def meddle(self):
        self.asked += 1
        self._answer.clear()
        self._ask.set()
        assert self._answer.wait(timeout=600), "the writer thread stopped answering"  # a hang guard, not a bound

    def run(self):
        while not self.stop.is_set():
            asked = self._ask.is_set()
            self.act()
            if asked:
                self._ask.clear()
                self.answered += 1
                self._answer.set()

    def act(self):
        path = self.root / f"churn-{self.rng.randrange(8)}.log"
        action = self.rng.choice(["rewrite", "truncate", "append", "rotate", "delete", "binary"])
        try:
            if action == "rewrite":
                path.write_bytes(HEALTHY[: self.rng.randrange(1, len(HEALTHY))])
            elif action == "truncate" and path.exists():
                os.truncate(path, self.rng.randrange(0, 4096))
            elif action == "append":
                with open(path, "ab") as f:
                    f.write(HEALTHY[:50_000])
            elif action == "rotate" and path.exists():
                rotated = path.with_suffix(".log.1.gz")
                data = gzip.compress(path.read_bytes())
                path.unlink()
                with open(rotated, "wb") as f:  # gzip written in pieces, as a compressor streams it
                    for i in range(0, len(data), 8192):
                        f.write(data[i:i + 8192])
                        f.flush()
            elif action == "delete":
                for p in (path, path.with_suffix(".log.1.gz")):
                    p.unlink(missing_ok=True)
            elif action == "binary":
                path.write_bytes(wheel_bytes(failing=False))
        except FileNotFoundError:  # another action of this thread got there first
            pass
        self.actions += 1


@pytest.mark.parametrize("seed", range(5))
def test_scans_racing_a_writer_never_abort_and_keep_the_stable_findings(tmp_path, seed, monkeypatch):
    (tmp_path / "stable").mkdir()
    (tmp_path / "stable" / "worker-1.err").write_bytes(HEALTHY + LINKER)
    for i in range(8):
        (tmp_path / f"churn-{i}.log").write_bytes(HEALTHY)
    writer = Churn(tmp_path, seed)

    class Raced(logs.Snapshot):
        """A file the reader has just opened: the writer makes a change before the reader goes on."""

        def __init__(self, f):
            super().__init__(f)
            writer.meddle()

    monkeypatch.setattr(logs, "Snapshot", Raced)
    writer.start()
    try:
        for _ in range(10):
            reading = diagnose_path(str(tmp_path))
            f10 = next(d for d in reading.diagnoses if d.id == "F10")
            assert "stable/worker-1.err" in {e.file for e in f10.evidence}
    finally:
        writer.stop.set()
        writer.join()
    # Every file each scan opened (the stable one at least) was changed under it at least once.
    assert writer.answered == writer.asked >= 10 and writer.actions >= writer.answered


def test_a_directory_scan_tolerates_a_file_replaced_by_a_folder(tmp_path, monkeypatch):
    (tmp_path / "stable.err").write_bytes(LINKER)
    (tmp_path / "odd").write_bytes(b"x\n")
    listed = list(logs._files_under(tmp_path))
    (tmp_path / "odd").unlink()
    (tmp_path / "odd").mkdir()
    monkeypatch.setattr(logs, "_files_under", lambda root: iter(listed))
    reading = diagnose_path(str(tmp_path))
    assert ids(reading) == {"F10"} and notes(reading) == {"odd": "cannot be read (Is a directory)"}
    shutil.rmtree(tmp_path / "odd")
