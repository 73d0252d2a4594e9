"""Run by the env's own python: what distributions' RECORDs say about their files, nothing imported.

--intact NAME...   per distribution: every install of it, and its files missing on disk, changed in size
                   since install, or also listed by another distribution (overwritten by it).
--objects NAME...  per distribution: the shared objects it installed, as [absolute path, RECORD path].
A name installed in several sys.path entries (a venv's over its base's) counts only in the first, which
is what imports; the others are listed under "shadowed". Prints one JSON object. Standard library only,
so it runs inside any env.
"""

import argparse
import csv
import json
import os
import re
import sys
from importlib import metadata

SHOWN = 20  # file names listed per problem; the counts are complete


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def files_of(dist) -> list[tuple[str, int | None, str]]:
    """(absolute path, size in RECORD, RECORD path) of each installed file; RECORD is read directly
    (dist.files stats every file: 20x slower on a big env)."""
    text = dist.read_text("RECORD") or ""
    base = str(dist.locate_file(""))
    out = []
    for row in csv.reader(text.splitlines()):
        if row:
            size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
            out.append((os.path.normpath(os.path.join(base, row[0])), size, row[0]))
    return out


def is_shared_object(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith(".so") or ".so." in name


def intact(name: str, installs: list, everything: list, files: dict) -> dict:
    claimed: dict[str, int] = {}
    missing, changed = [], []
    mine = {path: size for dist in installs for path, size, _ in files[id(dist)]}
    for path, recorded in mine.items():
        try:
            size = os.stat(path).st_size
        except OSError:
            missing.append(path)
            continue
        if recorded is not None and recorded != size:
            changed.append(path)
    for other in everything:
        if canon(other.metadata["Name"]) == name:
            continue
        hits = sum(1 for path, _, _ in files[id(other)] if path in mine)
        if hits:
            claimed[f"{other.metadata['Name']} {other.version}"] = hits
    return {
        "installs": [{"version": d.version, "path": str(getattr(d, "_path", ""))} for d in installs],
        "files": len(mine),
        "missing": sorted(missing)[:SHOWN], "missing_count": len(missing),
        "changed": sorted(changed)[:SHOWN], "changed_count": len(changed),
        "claimed_by": claimed,
    }


def location(dist) -> str:
    return str(dist.locate_file(""))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--intact", nargs="*", default=[])
    p.add_argument("--objects", nargs="*", default=[])
    args = p.parse_args()
    everything = [d for d in metadata.distributions() if d.metadata["Name"]]
    by_name: dict[str, list] = {}
    shadowed: dict[str, list] = {}
    # sys.path order: installs in a later folder than a name's first are never imported.
    for d in everything:
        name = canon(d.metadata["Name"])
        first = by_name.get(name, [d])[0]
        (by_name if location(first) == location(d) else shadowed).setdefault(name, []).append(d)
    files = {id(d): files_of(d) for d in everything} if args.intact else {}
    out = {"python": sys.executable, "intact": {}, "objects": {},
           "shadowed": {name: [{"version": d.version, "location": location(d)} for d in ds]
                        for name, ds in shadowed.items()}}
    for name in map(canon, args.intact):
        if name in by_name:
            out["intact"][name] = intact(name, by_name[name], everything, files)
    for name in map(canon, args.objects):
        if name in by_name:
            out["objects"][name] = sorted({(path, rel) for d in by_name[name]
                                           for path, _, rel in files.get(id(d)) or files_of(d)
                                           if is_shared_object(path) and os.path.exists(path)})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
