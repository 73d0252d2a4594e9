"""A bundle folder as numbered parts of at most SIZE bytes plus SHA256SUMS, and back (standard library only).

The parts are one uncompressed tar (wheels are already compressed) cut into pieces while it is written, so
the bundle is never on disk twice. Reassembly checks every part before it extracts anything.
"""

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

SUMS = "SHA256SUMS"
INDEX = "parts.json"
PART = "bundle.tar.part{:04d}"
ASSEMBLED = "bundle"
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


class PartsError(Exception):
    """A missing, reordered or corrupted part; the message names it."""


def parse_size(text: str) -> int:
    """'56MiB', '58M' (MiB, as split(1) reads it), '60000000' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = m and m.group(2).lower()
    if unit in ("m", "k", "g"):
        unit += "ib"  # split -b 58M means mebibytes
    if not m or unit not in _UNITS or int(m.group(1)) <= 0:
        raise ValueError(f"not a size: {text!r}; use e.g. 56MiB, 58M, 100MB or a byte count")
    return int(m.group(1)) * _UNITS[unit]


class _PartWriter:
    """A write-only file that starts a new part every `size` bytes and hashes each one."""

    def __init__(self, folder: Path, size: int):
        self.folder, self.size = folder, size
        self.parts: list[tuple[str, str, int]] = []
        self.whole = hashlib.sha256()
        self._file = None
        self._hash = None
        self._left = 0

    def _next(self):
        self._close_part()
        name = PART.format(len(self.parts) + 1)
        self._file, self._hash, self._left = open(self.folder / name, "wb"), hashlib.sha256(), self.size
        self._name = name

    def _close_part(self):
        if self._file:
            self._file.close()
            self.parts.append((self._name, self._hash.hexdigest(), self.size - self._left))
            self._file = None

    def write(self, data) -> int:
        data = memoryview(data)
        n = len(data)
        self.whole.update(data)
        while len(data):
            if not self._file or self._left == 0:
                self._next()
            chunk = data[: self._left]
            self._file.write(chunk)
            self._hash.update(chunk)
            self._left -= len(chunk)
            data = data[len(chunk):]
        return n

    def close(self):
        self._close_part()


@contextmanager
def published(target: Path):
    """A temp folder beside `target` that replaces it whole, by one rename, when the block ends; removed if the
    block fails, so `target` is never seen half-made."""
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def split(bundle: Path, out: Path, size: int) -> list[tuple[str, str, int]]:
    """Write `bundle` as parts into `out` (made afresh, published by one rename); [(name, sha256, bytes)]."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with published(out) as tmp:
        writer = _PartWriter(tmp, size)
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(bundle.rglob("*")):
                rel = path.relative_to(bundle)
                if path.is_file() and not any(p.startswith(".") for p in rel.parts):
                    tar.add(path, arcname=str(rel), recursive=False)
        writer.close()
        (tmp / SUMS).write_text("".join(f"{digest}  {name}\n" for name, digest, _ in writer.parts))
        index = {"parts": len(writer.parts), "part_size": size, "tar_sha256": writer.whole.hexdigest(),
                 "tar_bytes": sum(n for _, _, n in writer.parts)}
        (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return writer.parts


def is_parts(folder: Path) -> bool:
    return (folder / SUMS).is_file() and (folder / INDEX).is_file()


def _read_sums(folder: Path) -> list[tuple[str, str]]:
    out = []
    for lineno, line in enumerate((folder / SUMS).read_text().splitlines(), 1):
        m = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)", line.strip())
        if not m:
            raise PartsError(f"{folder / SUMS}:{lineno}: not a '<sha256>  <part>' line")
        out.append((m.group(2), m.group(1)))
    return out


def check(folder: Path) -> list[Path]:
    """The parts in order, each checked against SHA256SUMS; PartsError names the first bad one."""
    index = json.loads((folder / INDEX).read_text())
    sums = _read_sums(folder)
    expected = [PART.format(i) for i in range(1, index["parts"] + 1)]
    if [name for name, _ in sums] != expected:
        raise PartsError(f"{folder / SUMS} does not list parts 1..{index['parts']} in order; the parts were renamed "
                         "or reordered")
    whole = hashlib.sha256()
    paths = []
    for name, digest in sums:
        path = folder / name
        if not path.is_file():
            raise PartsError(f"part {name} is missing from {folder}")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                whole.update(chunk)
        if h.hexdigest() != digest:
            raise PartsError(f"part {name} fails its sha256 (corrupted, truncated or out of order): "
                             f"{h.hexdigest()} != {digest} in {SUMS}")
        paths.append(path)
    if whole.hexdigest() != index["tar_sha256"]:
        raise PartsError(f"the parts in {folder} do not join into the bundle {INDEX} names (sha256 differs)")
    return paths


class _Joined:
    """The parts read back to back as one stream."""

    def __init__(self, paths: list[Path]):
        self._paths, self._file = list(paths), None

    def read(self, n: int = -1) -> bytes:
        while True:
            if self._file is None:
                if not self._paths:
                    return b""
                self._file = open(self._paths.pop(0), "rb")
            data = self._file.read(n)
            if data or n == 0:
                return data
            self._file.close()
            self._file = None


def assemble(folder: Path) -> Path:
    """The bundle the parts in `folder` hold, extracted once into folder/bundle (checked parts first)."""
    target = folder / ASSEMBLED
    index = json.loads((folder / INDEX).read_text())
    done = target / ".assembled-from"
    if done.is_file() and done.read_text().strip() == index["tar_sha256"]:
        return target
    paths = check(folder)
    with published(target) as tmp:
        with tarfile.open(fileobj=_Joined(paths), mode="r|") as tar:
            tar.extractall(tmp, filter="data")
        (tmp / ".assembled-from").write_text(index["tar_sha256"] + "\n")
    return target
