"""Atomic file writes (a reader sees the old file or the complete new one, never half of it), and text reads
that fail in one line."""

import functools
import os
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verlenv.errors import UserError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_TEMP_SUFFIX = ".tmp"


def _temp_prefix(target: str) -> str:
    return f".{target}."


def is_atomic_temp_of(name: str, target: str) -> bool:
    """Whether `name` is the temp file write_atomic(target) makes beside it (left behind only by a kill)."""
    return name.startswith(_temp_prefix(target)) and name.endswith(_TEMP_SUFFIX)


def write_atomic(path: Path, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path.name), suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_text(path: Path, what: str = "") -> str:
    """A text file's content, or one line saying why it cannot be read (missing, a folder, binary, no permission)."""
    path = Path(path)
    shown = f"{what} {path}" if what else str(path)
    try:
        return path.read_bytes().decode()
    except FileNotFoundError:
        raise UserError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{shown}: a directory; give a file") from None
    except PermissionError:
        raise UserError(f"{shown}: not readable (permission denied)") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{shown}: not UTF-8 text (byte {e.start}); give a text file") from None
    except OSError as e:
        raise UserError(f"{shown}: cannot be read ({e.strerror})") from None


def cache_dir() -> Path:
    """verlenv's own cache ($VERLENV_CACHE, else ~/.cache/verlenv): downloads, built wheels, torch's probed facts."""
    return Path(os.environ.get("VERLENV_CACHE", Path.home() / ".cache" / "verlenv"))


def read_toml(path: Path) -> dict:
    """A table file's data (stacks.toml, a recipe, data/*.toml), or one line saying why it cannot be read or parsed."""
    try:
        return tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None


def _as_read(path: Path, data: dict) -> dict:
    return data


def load_table(path: Path, parse: Callable[[Path, dict], Any] = _as_read):
    """A table file's rows as `parse(path, data)` makes them (the data itself without one); one line when the file
    cannot be read, parsed or its rows are wrong."""
    return parse(path, read_toml(path))


@functools.cache
def packaged_table(path: Path, parse: Callable[[Path, dict], Any] = _as_read):
    """load_table of a file verlenv ships (data/*.toml), read once per process: it does not change while verlenv
    runs. Callers treat what it returns as read-only."""
    return load_table(path, parse)
