"""Installed distributions' files against their RECORD: every file present, with the size and sha256 it was
installed with.

Run by the env's own python (`python installed_files.py NAME...`, standard library only, nothing imported
from the env), it prints one JSON object; `check(python, names)` runs it from verlenv.
"""

import base64
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SHOWN = 5  # file names listed per distribution; the counts are complete
CHUNK = 1 << 20


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_rows(dist) -> list[tuple[str, str, str]] | None:
    """(absolute path, 'sha256=…' or '', size or '') per RECORD row; None when the RECORD is gone."""
    text = dist.read_text("RECORD")
    if text is None:
        return None
    base = str(dist.locate_file(""))
    rows = []
    for row in csv.reader(text.splitlines()):
        if row:
            rows.append((os.path.normpath(os.path.join(base, row[0])), *(list(row[1:3]) + ["", ""])[:2]))
    return rows


def _file_problem(path: str, rows: list[tuple[str, str, str]]) -> str | None:
    """'missing' / 'changed' / None for one installed file; `rows` are (name, digest, size) of each distribution
    whose RECORD lists it: two locked distributions may ship the same file, and either's content is right."""
    digests = {digest for _, digest, _ in rows if digest}
    sizes = {int(size) for _, _, size in rows if size.isdigit()}
    try:
        if sizes and len(sizes) == len(rows) and os.stat(path).st_size not in sizes:
            return "changed"  # a size that differs needs no hashing
        if not digests:
            os.stat(path)
            return None
        algo = next(iter(digests)).partition("=")[0]
        h = hashlib.new(algo)
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError):
        return "changed"  # unreadable, or a RECORD row that is not a hash
    have = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
    return None if f"{algo}={have}" in digests else "changed"


def scan(names: list[str]) -> dict:
    from importlib import metadata

    wanted = {_canon(n) for n in names}
    dists = [d for d in metadata.distributions() if d.metadata["Name"] and _canon(d.metadata["Name"]) in wanted]
    out: dict = {}
    owners: dict[str, list[tuple[str, str, str]]] = {}
    for dist in dists:
        name = _canon(dist.metadata["Name"])
        entry = out.setdefault(name, {"version": dist.version, "files": 0, "bytes": 0, "shared": 0, "missing": [],
                                      "changed": [], "no_record": False})
        rows = _record_rows(dist)
        if rows is None:
            entry["no_record"] = True
            continue
        for path, digest, size in rows:
            if path.endswith(os.sep + "RECORD") and not digest:
                continue  # RECORD lists itself without a hash
            entry["files"] += 1
            entry["bytes"] += int(size) if size.isdigit() else 0
            owners.setdefault(path, []).append((name, digest, size))
    paths = sorted(owners)
    # hashlib releases the GIL on large buffers: threads read and hash files side by side; each file once.
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for path, problem in zip(paths, pool.map(lambda p: _file_problem(p, owners[p]), paths, chunksize=64)):
            names_here = {name for name, _, _ in owners[path]}
            for name in names_here:
                out[name]["shared"] += len(names_here) > 1
                if problem:
                    out[name][problem].append(path)
    for entry in out.values():
        for kind in ("missing", "changed"):
            entry[f"{kind}_count"] = len(entry[kind])
            entry[kind] = sorted(entry[kind])[:SHOWN]
    return out


def damaged(entry: dict) -> str | None:
    """Why a distribution's files are not as installed, or None."""
    if entry["no_record"]:
        return "its RECORD is gone"
    parts = [f"{entry[f'{kind}_count']} {kind}, e.g. {entry[kind][0]}" for kind in ("missing", "changed") if entry[f"{kind}_count"]]
    return "; ".join(parts) or None


def check(python: str, names: list[str], timeout: float = 1800) -> dict:
    """Run the scan in the env of `python`: {canonical name: entry}, plus 'seconds' and 'bytes' overall."""
    started = time.monotonic()
    proc = subprocess.run([python, os.path.abspath(__file__), *names], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        from verlenv.errors import UserError

        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{python}: could not check its installed files ({tail})", exit_code=1)
    entries = json.loads(proc.stdout)
    return {"dists": entries, "seconds": round(time.monotonic() - started, 2),
            "files": sum(e["files"] for e in entries.values()), "bytes": sum(e["bytes"] for e in entries.values())}


if __name__ == "__main__":
    json.dump(scan(sys.argv[1:]), sys.stdout)
