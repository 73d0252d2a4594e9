"""`verlenv doctor DIR` on a big tree: logs first, source code skipped by name, a bound on files and bytes with a
note of what was left, progress on stderr, and notes formatted in one pass."""

import json
from pathlib import Path

import pytest

from verlenv.cli import main
from verlenv.doctor import logs, tree
from verlenv.doctor.logs import Note, diagnose_path

LOGS = Path(__file__).parents[1] / "data" / "logs"
LINKER = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"  # F10
HEALTHY = (LOGS / "healthy-local-nvcc-build.log").read_bytes()
ELF_HEAD = b"\x7fELF\x02\x01\x01" + b"\0" * 57


def vllm_source_line() -> bytes:
    """A line of vLLM's own source, as an installed env holds it: it quotes an error message."""
    return b'        logger.error("EngineCore failed to start.")\n'


@pytest.mark.parametrize("name, kind", [
    ("worker-1a2b-ffff-1234.err", "log"), ("raylet.out", "log"), ("raylet.1.out.2", "log"),
    ("worker-3.err.1.gz", "log"), ("stdout", "log"), ("build.log.gz", "log"), ("LICENSE.txt", "log"),
    ("core.py", "source"), ("README.md", "source"), ("kernel.cu", "source"), ("index.rst", "source"),
    ("libnccl.so.2", "other"), ("torch-2.11.0.dist-info", "other"), ("RECORD", "other"), ("flash_attn.whl", "other"),
])
def test_a_files_kind_from_its_name(name, kind):
    assert tree.kind_by_name(name) == kind


def make_tree(root: Path) -> Path:
    """An env's files beside a job's logs: source that quotes errors, docs, a library, and one failing log."""
    sp = root / "venv" / "lib" / "python3.12" / "site-packages"
    (sp / "vllm" / "v1" / "engine").mkdir(parents=True)
    (sp / "vllm" / "v1" / "engine" / "core.py").write_bytes(vllm_source_line())
    (sp / "vllm" / "README.md").write_bytes(b"If you see `undefined symbol: _ZN3c104cuda9SetDeviceEi`, rebuild.\n")
    (sp / "vllm" / "_C.abi3.so").write_bytes(ELF_HEAD)
    (root / "ray" / "session_latest" / "logs").mkdir(parents=True)
    (root / "ray" / "session_latest" / "logs" / "worker-1.err").write_bytes(HEALTHY + LINKER)
    (root / "ray" / "session_latest" / "logs" / "raylet.out").write_bytes(HEALTHY)
    return root


def test_logs_are_read_and_source_code_is_not(tmp_path):
    reading = diagnose_path(str(make_tree(tmp_path)))
    # vLLM's source holds F23's words and the README F1's: a scan of source would name both, falsely.
    assert [d.id for d in reading.diagnoses] == ["F10"]
    notes = {n.file: n for n in reading.notes}
    assert notes["*.py"].kind == "skipped" and notes["*.py"].text.startswith("1 file(s) skipped by name")
    assert notes["*.md"].kind == "skipped"
    assert notes["venv/lib/python3.12/site-packages/vllm/_C.abi3.so"].text.endswith(logs.BINARY_NOTE)
    assert reading.source.endswith("(5 files)")


def test_the_bound_reads_logs_first_and_says_what_was_left(tmp_path):
    for i in range(3):
        (tmp_path / f"blob-{i}").write_bytes(HEALTHY)  # no telling name: read after the logs
    (tmp_path / "worker-9.err").write_bytes(LINKER)
    (tmp_path / "zz.log").write_bytes(HEALTHY)
    reading = diagnose_path(str(tmp_path), max_files=2)
    assert [d.id for d in reading.diagnoses] == ["F10"]
    (left,) = [n for n in reading.notes if n.kind == "left"]
    assert not left.read and left.file == "blob-0"
    assert left.text.startswith("3 file(s) left unread (0 with a log's name) after the bound --max-files 2")
    assert diagnose_path(str(tmp_path), max_files=0).notes == []  # 0: no bound


def test_the_byte_bound_stops_after_the_file_that_crossed_it(tmp_path):
    (tmp_path / "a.log").write_bytes(HEALTHY)
    (tmp_path / "b.log").write_bytes(HEALTHY + LINKER)
    reading = diagnose_path(str(tmp_path), max_bytes=len(HEALTHY))
    assert reading.diagnoses == []
    (left,) = reading.notes
    assert (left.file == "b.log" and "1 file(s) left unread (1 with a log's name)" in left.text
            and "--max-gb" in left.text)


def test_progress_is_reported_after_each_file_in_reading_order(tmp_path):
    make_tree(tmp_path)
    seen = []
    diagnose_path(str(tmp_path), progress=seen.append)
    assert [p.done for p in seen] == [1, 2, 3]  # the two logs, then the library; source code is not opened
    assert {(p.planned, p.found) for p in seen} == {(3, 5)}
    assert seen[0].findings == 0 and seen[-1].findings == 1  # raylet.out is read before worker-1.err (name order)
    assert seen[-1].read_bytes == 2 * len(HEALTHY) + len(LINKER)


def test_the_cli_says_where_a_long_scan_is_on_stderr(tmp_path, capsys, monkeypatch):
    from verlenv.commands import doctor

    monkeypatch.setattr(doctor, "PROGRESS_FILES", 2)  # the count at which a scan is long, small for the test
    make_tree(tmp_path)
    assert main(["doctor", str(tmp_path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["diagnoses"][0]["id"] == "F10"
    lines = [line for line in captured.err.splitlines() if line.startswith("verlenv doctor:")]
    assert lines[0] == f"verlenv doctor: 5 files under {tmp_path}: reading 3 (logs first)"
    assert lines[-1].startswith("verlenv doctor: 3 of 3 files read")


def test_a_short_scan_says_nothing_on_stderr(tmp_path, capsys):
    (tmp_path / "worker.err").write_bytes(LINKER)
    assert main(["doctor", str(tmp_path)]) == 1
    assert capsys.readouterr().err == ""


def test_many_binary_notes_are_counted_in_one_line():
    notes = [Note(f"lib/{i}.so", "skipped", f"an ELF binary (program, library or core dump), {logs.BINARY_NOTE}")
             for i in range(50_000)]
    notes += [Note("w.err", "shrank", "shrank while read"), Note("*.py", "skipped", "9 file(s) skipped by name")]
    lines = logs.format_notes(notes)
    assert lines == ["", "note: w.err: shrank while read", "note: *.py: 9 file(s) skipped by name",
                     "note: 50000 binary file(s) skipped unread (archives, libraries), e.g. lib/0.so"]


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_byte_bound_that_is_not_a_finite_number_is_one_line(tmp_path, capsys, value):
    """nan passed `< 0` and then failed inside int(); inf overflowed there: each was a traceback."""
    assert main(["doctor", str(tmp_path), f"--max-gb={value}"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"verlenv doctor: --max-gb {float(value):g}: must be 0 (no bound) or a positive, finite number"]


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_a_node_time_limit_that_is_not_a_positive_finite_number_is_one_line(capsys, value):
    assert main(["doctor", "--ray", "127.0.0.1:6379", f"--node-timeout={value}"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("verlenv doctor: --node-timeout ") and "positive, finite number of seconds" in line
