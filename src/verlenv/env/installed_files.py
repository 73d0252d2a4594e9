"""Installed distributions' files against their RECORD: every file present, with the size and sha256 it was
installed with.

Run by the env's own python (`python installed_files.py [--record|--reuse] NAME...`, standard library only,
nothing imported from the env), it prints one JSON object; `check(python, names)` runs it from verlenv.

Hashing 10 GB twice in one `nox -s verify` (install's check, then verify's) proves nothing the first did not: the
install records what it found intact (--record: per distribution, a digest of its RECORD and of every file's size,
mtime, ctime and inode, taken before hashing) in the env's CHECKED file; verify (--reuse) skips hashing only the
distributions whose digest is the same now. Any write to a file, a touch that restores its mtime, a replaced file
or an edited RECORD changes it (ctime cannot be set back from user space), and those are hashed again.
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
CHECKED = "verlenv-files-checked.json"  # in the env's prefix: what install found intact, and the files as they were


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


def fingerprint(record_text: str, paths: list[str]) -> str:
    """sha256 of a distribution's RECORD and of each of its files' size, mtime, ctime and inode."""
    h = hashlib.sha256(record_text.encode())
    for path in sorted(paths):
        try:
            st = os.stat(path)
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n".encode())
        except OSError:
            h.update(f"{path}\0missing\n".encode())
    return h.hexdigest()


def _checked_file() -> str:
    return os.path.join(sys.prefix, CHECKED)


def _read_checked() -> dict:
    try:
        with open(_checked_file()) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_checked(data: dict) -> None:
    path = _checked_file()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def scan(names: list[str], record: bool = False, reuse: bool = False) -> dict:
    """{canonical name: entry} of each named distribution installed here. record: note the intact ones' fingerprints
    in CHECKED; reuse: hash no file of a distribution whose fingerprint is the one CHECKED holds (entry "reused")."""
    from importlib import metadata

    wanted = {_canon(n) for n in names}
    dists = [d for d in metadata.distributions() if d.metadata["Name"] and _canon(d.metadata["Name"]) in wanted]
    out: dict = {}
    owners: dict[str, list[tuple[str, str, str]]] = {}
    prints: dict[str, str] = {}
    checked = _read_checked() if reuse or record else {}
    for dist in dists:
        name = _canon(dist.metadata["Name"])
        entry = out.setdefault(name, {"version": dist.version, "files": 0, "bytes": 0, "shared": 0, "missing": [],
                                      "changed": [], "no_record": False, "reused": False, "hashed": 0})
        rows = _record_rows(dist)
        if rows is None:
            entry["no_record"] = True
            continue
        # RECORD lists itself without a hash.
        listed = [row for row in rows if not (row[0].endswith(os.sep + "RECORD") and not row[1])]
        prints[name] = fingerprint(dist.read_text("RECORD") or "", [row[0] for row in listed])
        mine = checked.get(name) or {}
        entry["reused"] = reuse and mine.get("version") == dist.version and mine.get("fingerprint") == prints[name]
        for path, digest, size in listed:
            entry["files"] += 1
            entry["bytes"] += int(size) if size.isdigit() else 0
            owners.setdefault(path, []).append((name, digest, size))
    for rows in owners.values():
        names_here = {name for name, _, _ in rows}
        for name in names_here:
            out[name]["shared"] += len(names_here) > 1
    # A file is hashed when a distribution that is not reused lists it; each file once.
    paths = sorted(p for p, rows in owners.items() if any(not out[n]["reused"] for n, _, _ in rows))
    # hashlib releases the GIL on large buffers: threads read and hash files side by side.
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for path, problem in zip(paths, pool.map(lambda p: _file_problem(p, owners[p]), paths, chunksize=64)):
            for name in {name for name, _, _ in owners[path]}:
                out[name]["hashed"] += 1
                if problem and not out[name]["reused"]:
                    out[name][problem].append(path)
    for entry in out.values():
        for kind in ("missing", "changed"):
            entry[f"{kind}_count"] = len(entry[kind])
            entry[kind] = sorted(entry[kind])[:SHOWN]
    if record:
        for name, entry in out.items():
            checked.pop(name, None)
            if name in prints and not damaged(entry):
                checked[name] = {"version": entry["version"], "fingerprint": prints[name]}
        try:
            _write_checked(checked)
        except OSError:
            pass  # a read-only env: the next check hashes everything, as it would without the record
    return out


def damaged(entry: dict) -> str | None:
    """Why a distribution's files are not as installed, or None."""
    if entry["no_record"]:
        return "its RECORD is gone"
    parts = [f"{entry[f'{kind}_count']} {kind}, e.g. {entry[kind][0]}" for kind in ("missing", "changed")
             if entry[f"{kind}_count"]]
    return "; ".join(parts) or None


def check(python: str, names: list[str], timeout: float = 1800, record: bool = False, reuse: bool = False) -> dict:
    """Run the scan in the env of `python`: {canonical name: entry}, plus 'seconds', 'bytes' and 'files' overall and
    'reused' (distributions not hashed again: unchanged since install recorded them intact)."""
    started = time.monotonic()
    flags = ["--record"] * record + ["--reuse"] * reuse
    proc = subprocess.run([python, os.path.abspath(__file__), *flags, *names], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        from verlenv.errors import UserError

        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{python}: could not check its installed files ({tail})", exit_code=1)
    entries = json.loads(proc.stdout)
    return {"dists": entries, "seconds": round(time.monotonic() - started, 2),
            "files": sum(e["files"] for e in entries.values()), "bytes": sum(e["bytes"] for e in entries.values()),
            "reused": sorted(n for n, e in entries.items() if e.get("reused"))}


if __name__ == "__main__":
    args = sys.argv[1:]
    json.dump(scan([a for a in args if not a.startswith("--")], record="--record" in args, reuse="--reuse" in args),
              sys.stdout)
