"""The installed-files check (installed_files.py) in one `nox -s verify`: install hashes every locked file against
its RECORD and records what it found intact; verify then hashes only the distributions that changed since, so a
10 GB env is not hashed twice, and still catches any change (a file rewritten with its size and mtime restored, a
replaced file, an edited RECORD). Real installs of tiny real wheels (tests/tiny_project.py), no network."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tiny_project
from verlenv.env import installed_files
from verlenv.verify import static

NAMES = tiny_project.PACKAGES


@pytest.fixture
def env(tmp_path) -> Path:
    """A tiny project's env as `verlenv install` leaves it: its python."""
    project = tiny_project.make(tmp_path / "project", data_mib=1)
    prefix = tmp_path / "env"
    proc = subprocess.run(tiny_project.verlenv_cmd("install", "--prefix", str(prefix), "--python", sys.executable),
                          env=tiny_project.env(project), cwd=project, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return prefix / "bin" / "python"


def site_packages(python: Path) -> Path:
    return next(python.parent.parent.glob("lib/python*/site-packages"))


def test_install_records_what_it_found_intact_and_verify_hashes_none_of_it_again(env):
    checked = json.loads((env.parent.parent / installed_files.CHECKED).read_text())
    assert sorted(checked) == NAMES and all(e["version"] == "1.0" for e in checked.values())
    scan = installed_files.check(str(env), NAMES, reuse=True)
    assert scan["reused"] == NAMES and all(e["hashed"] == 0 for e in scan["dists"].values())
    result = static.check_locked_files(str(env), NAMES)
    assert result.status == "pass" and result.numbers["reused"] == len(NAMES)
    assert result.reason.endswith(f"({len(NAMES)} distributions unchanged since install hashed them: same RECORD, "
                                  "every file of the same size, mtime and ctime)")
    # Without reuse (verify's own proof from nothing: no record, or asked for none), every file is hashed.
    full = installed_files.check(str(env), NAMES)
    assert full["reused"] == [] and all(e["hashed"] == e["files"] > 0 for e in full["dists"].values())


def test_a_file_rewritten_with_its_size_and_mtime_restored_is_still_caught(env):
    data = site_packages(env) / "tiny2" / "data.bin"
    before = data.stat()
    with open(data, "r+b") as f:  # in place: the same inode (a hard link into this test's own uv cache)
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 1]))
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = data.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    scan = installed_files.check(str(env), NAMES, reuse=True)
    assert scan["reused"] == [n for n in NAMES if n != "tiny2"]
    assert scan["dists"]["tiny2"]["changed"] == [str(data)] and scan["dists"]["tiny2"]["hashed"] > 0
    result = static.check_locked_files(str(env), NAMES)
    assert result.status == "fail" and "tiny2: 1 changed" in result.reason


def test_an_edited_record_is_hashed_again(env):
    record = next(site_packages(env).glob("tiny4-1.0.dist-info/RECORD"))
    text = record.read_text()
    record.unlink()
    record.write_text(text.replace("tiny4/data.bin,sha256=", "tiny4/data.bin,sha256=AAAA"))
    scan = installed_files.check(str(env), NAMES, reuse=True)
    assert "tiny4" not in scan["reused"] and scan["dists"]["tiny4"]["changed_count"] == 1


def test_a_damaged_env_records_nothing_for_the_damaged_distribution_until_repaired(env, tmp_path):
    (site_packages(env) / "tiny1" / "data.bin").unlink()
    scan = installed_files.check(str(env), NAMES, record=True)
    assert scan["dists"]["tiny1"]["missing_count"] == 1
    checked = json.loads((env.parent.parent / installed_files.CHECKED).read_text())
    assert "tiny1" not in checked and sorted(checked) == [n for n in NAMES if n != "tiny1"]
    again = installed_files.check(str(env), NAMES, reuse=True)
    assert "tiny1" not in again["reused"] and again["dists"]["tiny1"]["missing_count"] == 1
