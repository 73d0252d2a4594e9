"""Read a pip lock (`uv pip compile --generate-hashes` output) into exact pins."""

import platform as _platform
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from verlenv.errors import UserError
from verlenv.fsutil import read_text

LOCK_DIR = "locks"
# The platform every variant is locked for, in conda's spelling; others are listed in stacks.toml.
LOCK_PLATFORM = "linux-64"
# The platforms locks are made for (conda's names) -> their machine, as wheel tags and uv's --python-platform name it.
MACHINES = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# platform.machine() -> conda's platform name.
MACHINE_PLATFORMS = {"x86_64": "linux-64", "amd64": "linux-64", "aarch64": "linux-aarch64", "arm64": "linux-aarch64"}

_HASH = re.compile(r"--hash=(?P<algo>[a-z0-9]+):(?P<digest>[0-9a-f]+)")


@dataclass(frozen=True)
class LockedPin:
    name: str  # canonical (PEP 503)
    version: str
    hashes: tuple[str, ...]  # "sha256:<hex>", as in the lock
    extras: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def lock_path(root: Path, variant, platform: str = LOCK_PLATFORM) -> Path:
    """Where a variant's pip lock for a platform lives: locks/<stack>-<variant>.<platform>.txt."""
    return Path(root) / LOCK_DIR / f"{variant.key}.{platform}.txt"


def machine_platform() -> str:
    """This machine's platform in conda's spelling (linux-64, linux-aarch64), or its raw machine name."""
    machine = _platform.machine()
    return MACHINE_PLATFORMS.get(machine.lower(), machine)


def read_lock(path: Path) -> dict[str, LockedPin]:
    """{canonical name: LockedPin} for every package the lock installs."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such lock; run `verlenv lock`")
    text = read_text(path, "lock")
    return parse_lock(text, str(path))


def parse_lock(text: str, source: str = "<lock>") -> dict[str, LockedPin]:
    pins: dict[str, LockedPin] = {}
    for lineno, line in _logical_lines(text):
        req_text, _, options = line.partition(" --")
        options = "--" + options if options else ""
        try:
            req = Requirement(req_text.strip())
        except InvalidRequirement as e:
            raise UserError(f"{source}:{lineno}: not a requirement: {req_text.strip()!r} "
                            f"({str(e).splitlines()[0]})") from None
        specs = list(req.specifier)
        if req.url or len(specs) != 1 or specs[0].operator not in ("==", "==="):
            raise UserError(f"{source}:{lineno}: {req_text.strip()!r} is not an exact '==' pin")
        hashes = tuple(f"{m['algo']}:{m['digest']}" for m in _HASH.finditer(options))
        leftover = _HASH.sub("", options).strip()
        if leftover:
            raise UserError(f"{source}:{lineno}: unexpected option {leftover.split()[0]!r}; only --hash=... may "
                            "follow a pin")
        name = canonicalize_name(req.name)
        if name in pins:
            raise UserError(f"{source}:{lineno}: {name} is pinned twice")
        pins[name] = LockedPin(name=name, version=specs[0].version, hashes=hashes, extras=tuple(sorted(req.extras)))
    return pins


def _logical_lines(text: str):
    """(first line number, text) of each requirement, backslash continuations joined, comments dropped."""
    parts: list[str] = []
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not parts:
            start = lineno
        if line.endswith("\\"):
            parts.append(line[:-1].strip())
            continue
        parts.append(line)
        joined = " ".join(p for p in parts if p)
        parts = []
        if joined:
            yield start, joined
    if parts and (joined := " ".join(p for p in parts if p)):
        yield start, joined
