"""`verlenv conda-snapshot`: rebuild locks/conda-forge from clones of the public lock files it names."""

import sys
from pathlib import Path

from verlenv.errors import UserError
from verlenv.lock import conda_snapshot


def register(sub) -> None:
    p = sub.add_parser("conda-snapshot", help="rebuild locks/conda-forge from the public lock files it names")
    p.add_argument("--clone", action="append", default=[], metavar="OWNER/NAME=GITDIR",
                   help="a clone (or bare git dir) of one repository named in locks/conda-forge/sources.toml")
    p.add_argument("--root", type=Path, default=Path("."), help="the project root (default: .)")
    p.set_defaults(func=_main)


def _main(args) -> int:
    clones = {}
    for item in args.clone:
        repo, sep, path = item.partition("=")
        if not sep:
            raise UserError(f"--clone {item}: expected OWNER/NAME=GITDIR")
        git_dir = Path(path) / ".git" if (Path(path) / ".git").is_dir() else Path(path)
        clones[repo] = git_dir
    records, provenance, refused = conda_snapshot.build(args.root, clones)
    for line in refused:
        if "disagree" in line:  # records seen in too few files are only counted
            print(f"refused {line}", file=sys.stderr)
    for path in conda_snapshot.write(args.root, records, provenance):
        print(f"wrote {path}", file=sys.stderr)
    print(f"{len(records)} records, {len(refused)} refused", file=sys.stderr)
    return 0
