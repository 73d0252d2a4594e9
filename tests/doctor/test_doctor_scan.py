"""`verlenv doctor` at disk speed: the block scanner finds what reading every line finds, reads directories
(recursively, plain or gzipped) and names the file and line of each finding."""

import gzip
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from test_doctor_match import FAILURE_LOGS, LOGS, crlf, excerpt, hard_wrapped, timestamped, with_ansi
from verlenv.cli import main
from verlenv.doctor import diagnose_path, diagnose_text, logs, scan
from verlenv.doctor.matcher import Matcher, diagnose_lines
from verlenv.errors import UserError

LINKER = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"
HEALTHY = b"".join(p.read_bytes() for p in sorted(LOGS.glob("healthy-*.log")))


def summary(diagnoses) -> list:
    return [(d.id, d.count, [(e.first, e.last, e.text) for e in d.evidence], d.details) for d in diagnoses]


def reference(text: str) -> list:
    """Every line through the matcher, none skipped: what the scanner must reproduce."""
    return summary(diagnose_lines(text.splitlines()))


@pytest.mark.parametrize("variant", [str, with_ansi, hard_wrapped, crlf, timestamped], ids=lambda f: f.__name__)
@pytest.mark.parametrize("path", FAILURE_LOGS, ids=lambda p: p.name)
def test_scanner_finds_what_reading_every_line_finds(path, variant):
    text = variant(excerpt(path))
    assert summary(diagnose_text(text)) == reference(text)


@pytest.mark.parametrize("block", [7, 64, 333])
def test_hits_cut_by_block_boundaries_are_still_found(monkeypatch, block):
    # Small blocks cut keywords, wrapped messages and lines at every possible place.
    monkeypatch.setattr(scan, "BLOCK", block)
    text = "".join(excerpt(p) for p in FAILURE_LOGS[::7])
    for variant in (str, hard_wrapped):
        assert summary(diagnose_text(variant(text))) == reference(variant(text))


def test_only_the_lines_around_keywords_reach_the_matcher():
    fed = []

    class Counting(Matcher):
        def feed(self, raw, lineno=None):
            fed.append(lineno)
            super().feed(raw, lineno)

    log = HEALTHY * 40 + LINKER  # about 6 MB of real build logs, one failure at the end
    matcher = scan.scan(io.BytesIO(log), Counting())
    total = log.count(b"\n")
    assert [d.id for d in matcher.result()] == ["F10"]
    assert matcher.result()[0].evidence[0].first == total
    assert total - 2 in fed and total in fed
    assert len(fed) < total / 100, f"{len(fed)} of {total} lines were matched one by one"


def test_contexts_anywhere_in_the_log_count(tmp_path):
    # The context (`Collecting vllm`) is 100k lines before the evidence, far outside any fed neighbourhood.
    upgrade = (b"  Attempting uninstall: torch\n    Uninstalling torch-2.5.1:\n"
               b"      Successfully uninstalled torch-2.5.1\n")
    log = b"Collecting vllm==0.15.1\n" + b"compiling\n" * 100_000 + upgrade
    assert [d.id for d in logs.diagnose_stream(io.BytesIO(log))] == ["F7"]
    assert logs.diagnose_stream(io.BytesIO(log[len(b"Collecting vllm==0.15.1\n"):])) == []


def test_a_line_without_end_and_binary_junk(tmp_path):
    rng = random.Random(3)
    junk = bytes(rng.randrange(256) for _ in range(300_000)).replace(b"\n", b"")
    log = HEALTHY + junk + b"\n" + LINKER.rstrip(b"\n")  # the last line has no newline
    (d,) = logs.diagnose_stream(io.BytesIO(log))
    assert d.id == "F10" and d.evidence[0].first == log.count(b"\n") + 1


def make_ray_logs(root):
    """A Ray session's log folder: plain and rotated gzipped files, nested, with two failures in two files."""
    (root / "logs" / "old").mkdir(parents=True)
    (root / "logs" / "raylet.out").write_bytes(HEALTHY)
    (root / "logs" / "worker-1.err").write_bytes(HEALTHY + LINKER)
    with gzip.open(root / "logs" / "old" / "worker-2.err.gz", "wb") as f:
        f.write(HEALTHY * 3 + excerpt(LOGS / "F27-MU-GOT-2.log").encode())
    (root / "logs" / "empty.log").write_bytes(b"")
    return root / "logs"


def test_a_directory_is_read_recursively_with_gzip_and_each_finding_names_its_file(tmp_path):
    folder = make_ray_logs(tmp_path)
    source, diagnoses, notes = diagnose_path(str(folder))
    assert source == f"{folder} (4 files)" and notes == []
    by_id = {d.id: d for d in diagnoses}
    assert set(by_id) == {"F10", "F27"}
    (f10,) = by_id["F10"].evidence
    assert (f10.file, f10.first) == ("worker-1.err", HEALTHY.count(b"\n") + 1)
    (f27,) = by_id["F27"].evidence
    assert (f27.file, f27.first) == ("old/worker-2.err.gz", 3 * HEALTHY.count(b"\n") + 1)
    assert f27.where == f"old/worker-2.err.gz:L{f27.first}"


def test_cli_on_a_directory(tmp_path, capsys):
    folder = make_ray_logs(tmp_path)
    assert main(["doctor", str(folder), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    files = {e["file"] for d in report["diagnoses"] for e in d["evidence"]}
    assert files == {"worker-1.err", "old/worker-2.err.gz"}
    assert main(["doctor", str(folder)]) == 1
    assert "worker-1.err:L" in capsys.readouterr().out


def test_a_gzipped_file_is_read_as_its_text(tmp_path):
    plain, packed = tmp_path / "build.log", tmp_path / "build.log.gz"
    plain.write_bytes(HEALTHY + LINKER)
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert summary(diagnose_path(str(packed))[1]) == summary(diagnose_path(str(plain))[1])


@pytest.mark.parametrize("make, message", [
    (lambda p: p.mkdir(), "a directory with no files"),
    (lambda p: p.write_bytes(gzip.compress(HEALTHY)[:500]), "a damaged gzip file"),
    (lambda p: None, "no such file or directory"),
])
def test_bad_log_paths_are_one_line(tmp_path, capsys, make, message):
    target = tmp_path / "logs"
    make(target)
    with pytest.raises(UserError, match=message):
        diagnose_path(str(target))
    assert main(["doctor", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_without_re2_small_texts_are_read_line_by_line_with_the_same_result():
    # verify runs on GPU hosts whose env has only torch, packaging, rich, pyyaml and pyelftools.
    paths = [str(p) for p in FAILURE_LOGS[::5]]
    code = ("import json, sys\n"
            "sys.modules['re2'] = None\n"
            "from verlenv.doctor import diagnose_text\n"
            "import verlenv.verify.static\n"
            "texts = [open(p).read().partition('\\n')[2] for p in sys.argv[1:]]\n"
            "print(json.dumps([[d.id for d in diagnose_text(t)] for t in texts]))\n")
    out = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[d.id for d in diagnose_text(excerpt(Path(p)))] for p in paths]
    assert all(json.loads(out.stdout))
