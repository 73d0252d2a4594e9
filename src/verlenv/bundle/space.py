"""A full disk while a bundle (or its parts) is written: one line naming the target that is full, what the write
needed and what is free there. shutil.copyfile's ENOSPC names the source first (the cache file it read), which read
as if the cache were at fault."""

import contextlib
import errno
import shutil
from pathlib import Path

from verlenv.errors import UserError


def _mib(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB"


def _free(path: Path) -> int | None:
    for folder in (path, *path.parents):  # the target may not exist yet: its nearest folder that does
        with contextlib.suppress(OSError):
            return shutil.disk_usage(folder).free
    return None


def full_disk(e: OSError, target: Path, option: str, needed: int | None = None) -> UserError:
    """The one line for ENOSPC `e` raised while writing `target`: the path written (copyfile names it second), its
    size where the source is known (else `needed`), the space free on the target's disk."""
    written = Path(e.filename2 if e.filename2 is not None else e.filename or target)
    label, fix = f"{option} {target}", "nothing was left half-written: free space there or give another folder"
    if written != target and target.parent not in written.parents:
        # not a write into the target (e.g. the download cache): blame what was written
        target, label, fix = written, str(written), f"the {option} folder was not written: free space there"
    with contextlib.suppress(OSError, TypeError):
        if e.filename2 is not None:
            needed = Path(e.filename).stat().st_size  # the file being copied in
    free = _free(target)
    name = written.name[1:-4] if written.name.startswith(".") and written.name.endswith(".tmp") else written.name
    what = ("writing it" if written == target else f"writing {name}") + (
        f" ({_mib(needed)} needed)" if needed is not None else "")
    return UserError(f"{label}: no space left on its disk: {what}, {_mib(free) if free is not None else '?'} free "
                     f"there; {fix}", exit_code=1)


@contextlib.contextmanager
def reported(target: Path, option: str, needed: int | None = None):
    """ENOSPC inside the block as full_disk's line; other errors pass unchanged."""
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise full_disk(e, Path(target).absolute(), option, needed) from None
