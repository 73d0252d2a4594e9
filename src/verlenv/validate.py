"""Every knob and path a user gives, checked before any work starts: one line naming the input, what is
wrong and what is valid (UserError, exit 2)."""

import math
import os
import re
import subprocess
import tempfile
from pathlib import Path

from verlenv.errors import UserError

# A CUDA compute capability as the recipes take it: major.minor, an optional arch-specific 'a', '+PTX'.
ARCH = re.compile(r"^\d{1,2}\.\d[af]?(\+PTX)?$")


def positive(text: str) -> int | None:
    """The positive whole number `text` spells, else None."""
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 1 else None


def seconds(value: float, option: str) -> float:
    """A time limit: a finite number of seconds above 0 (nan would turn the limit off, inf never ends)."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{option} {value:g}: must be a positive, finite number of seconds, e.g. {option} 600")
    return value


def env_count(name: str | None) -> int | None:
    """A count from the environment (MAX_JOBS, NVCC_THREADS…): None when unset, else a positive whole number."""
    value = os.environ.get(name or "")
    if value is None or value == "":
        return None
    count = positive(value)
    if count is None:
        raise UserError(f"{name}={value!r} (from the environment): not a positive whole number; set one such as "
                        f"{name}=4, or unset it")
    return count


def archs(text: str) -> list[str]:
    """'8.0;9.0' -> ['8.0', '9.0']; an empty part or a non-arch stops here, not inside setup.py."""
    parts = [a.strip() for a in text.split(";")]
    bad = [a for a in parts if not ARCH.match(a)]
    if bad or not parts:
        shown = ", ".join(repr(b) for b in bad) or "nothing"
        raise UserError(f"--archs {text!r}: {shown} is not a CUDA arch; valid: major.minor separated by ';', "
                        f"e.g. '8.0;9.0' (optionally '9.0a', '9.0+PTX')")
    return sorted(set(parts), key=parts.index)


def existing_file(path: Path, option: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{option} {path}: no such file")
    if not path.is_file():
        raise UserError(f"{option} {path}: not a regular file (a {_kind(path)})")
    if not os.access(path, os.R_OK):
        raise UserError(f"{option} {path}: not readable (permission denied)")
    return path


def existing_dir(path: Path, option: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise UserError(f"{option} {path}: no such directory")
    if not path.is_dir():
        raise UserError(f"{option} {path}: not a directory (a {_kind(path)})")
    return path


def interpreter(path: str, option: str = "--python") -> str:
    """An executable file (whether it is the right Python is the caller's check)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{option} {path}: no such file; give the path of a Python interpreter")
    if p.is_dir() or not os.access(p, os.X_OK):
        raise UserError(f"{option} {path}: not an executable interpreter; give the path of a Python interpreter")
    return str(p.absolute())


def python(path: str, version: str, option: str = "--python") -> str:
    """An interpreter of the given major.minor Python (a venv made from another could not take the lock's wheels)."""
    path = interpreter(path, option)
    try:
        out = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if not re.fullmatch(r"\d+\.\d+", out):
        raise UserError(f"{option} {path}: not a Python interpreter (it does not run `python -c`); give Python "
                        f"{version}")
    if out != version:
        raise UserError(f"{option} {path}: Python {out}; the stack needs Python {version}")
    return path


def python3(path: str, option: str = "--python") -> str:
    """An interpreter of any Python 3 (an env to check or probe, whatever its version)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{option} {path}: no such file")
    if p.is_dir() or not os.access(p, os.X_OK):
        raise UserError(f"{option} {path}: not an executable interpreter")
    try:
        out = subprocess.run([str(p), "-c", "import sys; print(sys.version_info[0])"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if out != "3":
        raise UserError(f"{option} {path}: not a Python 3 interpreter")
    return str(p.absolute())


def writable_file(path: Path, option: str) -> Path:
    """A file path we can create or replace: not a directory, in a folder that exists or can be made and
    takes new files (probed by making one there, as the real write will)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: a directory; give a file path")
    if path.exists() and not path.is_file():
        raise UserError(f"{option} {path}: not a regular file (a {_kind(path)}); give a file path")
    folder = _first_existing(path.parent)
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is not a directory; give a file path in a writable folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise UserError(f"{option} {path}: cannot write there ({e.strerror}); give a path in a writable "
                        "folder") from None
    return path


def new_or_dir(path: Path, option: str) -> Path:
    """A folder to create or reuse (an env prefix): never a file, and its first existing parent is a folder."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path}: exists and is not a directory (a {_kind(path)}); give a new or "
                        "existing folder")
    folder = _first_existing(path)
    if not folder.is_dir():
        raise UserError(f"{option} {path}: {folder} is not a directory; give a new or existing folder")
    try:
        tempfile.TemporaryDirectory(dir=folder, prefix=".verlenv-probe-").cleanup()
    except OSError as e:
        raise UserError(f"{option} {path}: cannot create anything in {folder} ({e.strerror}); give a writable "
                        "place") from None
    return path


def _first_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _kind(path: Path) -> str:
    if path.is_dir():
        return "directory"
    if path.is_file():
        return "file"
    if path.is_symlink():
        return "broken symlink"
    return "special file"
