"""What a base env held besides the lock, as the bundle installed into it found it.

A bundle made with `--base FREEZE` leaves to the target env what it has at the locked version, and its install
adds to that env without removing anything (a container's PyTorch env, say). The env then holds the lock and the
container's own other packages. The bundle's manifest lists those others as the freeze gave them; its install writes
them into the env's prefix (RECORD_FILE), and the drift check and verify's lock/match count a distribution not in
the lock as the base's when it is listed there at the version installed now. One that is not listed, or has another
version since, is still a difference from the lock.
"""

import json
from pathlib import Path

from verlenv.fsutil import write_atomic

RECORD_FILE = "verlenv-base.json"  # in the env's prefix, beside install's verlenv-files-checked.json


def others_of(freeze: dict[str, str], pinned: set[str]) -> dict[str, str]:
    """{canonical name: version} of the freeze's distributions that no bundled lock pins."""
    return {name: version for name, version in sorted(freeze.items()) if name not in pinned}


def write(prefix: Path, manifest: dict) -> Path | None:
    """The manifest's base others into the env at `prefix`; None (nothing written) for a bundle without a base."""
    base = manifest.get("base") or {}
    if not base.get("freeze_sha256"):
        return None
    path = Path(prefix) / RECORD_FILE
    record = {"freeze_sha256": base["freeze_sha256"], "bundle_made": (manifest.get("made") or {}).get("at"),
              "others": base.get("others", {})}
    write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def read(prefix: str | Path) -> dict[str, str]:
    """The base others recorded in the env at `prefix` ({} when none was: a plain env, or not installed from a
    bundle with a base). A record that cannot be read is an error, not an empty base: it would hide differences."""
    path = Path(prefix) / RECORD_FILE
    if not path.is_file():
        return {}
    try:
        others = json.loads(path.read_text())["others"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a base record ({e}); install the bundle again") from None
    if not isinstance(others, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in others.items()):
        raise ValueError(f"{path}: 'others' must map names to versions; install the bundle again")
    return others
