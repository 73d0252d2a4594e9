"""A wheel cache keyed by the build's ABI fingerprint; entries appear only when complete.

An entry is a folder `<wheelhouse>/<package>/<fingerprint>/` with the wheel and `entry.json`
(the fingerprint inputs, the wheel's sha256, the build record). It is built in a temp folder and
renamed into place, so a killed build leaves nothing that looks complete; a wheel whose hash no
longer matches is reported as corrupt and rebuilt.
"""

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from verlenv.native.sources import sha256_file

ENTRY_FILE = "entry.json"


def fingerprint(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Entry:
    path: Path
    wheel: Path
    record: dict


class Corrupt(Exception):
    pass


def lookup(wheelhouse: Path, package: str, fp: str) -> Entry | None:
    folder = wheelhouse / package / fp
    meta = folder / ENTRY_FILE
    if not meta.is_file():
        return None
    record = json.loads(meta.read_text())
    wheel = folder / record["wheel"]
    if not wheel.is_file() or sha256_file(wheel) != record["wheel_sha256"]:
        raise Corrupt(f"cache entry {folder} is corrupt (wheel missing or its sha256 changed)")
    return Entry(folder, wheel, record)


def remove(wheelhouse: Path, package: str, fp: str) -> None:
    shutil.rmtree(wheelhouse / package / fp, ignore_errors=True)


def store(wheelhouse: Path, package: str, fp: str, wheel: Path, record: dict,
          files: dict[str, Path] | None = None) -> Entry:
    """Copy the wheel (and `files`, by their names inside the entry) in and publish the entry with one rename."""
    parent = wheelhouse / package
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".tmp-{fp}-"))
    try:
        shutil.copy2(wheel, tmp / wheel.name)
        for name, path in (files or {}).items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, tmp / name)
        record = {**record, "wheel": wheel.name, "wheel_sha256": sha256_file(tmp / wheel.name), "fingerprint": fp}
        (tmp / ENTRY_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        final = parent / fp
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / ENTRY_FILE).is_file():
                raise
            shutil.rmtree(tmp)  # an identical build finished first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return lookup(wheelhouse, package, fp)
