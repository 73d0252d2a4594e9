"""A prebuilt kernel cache (Triton's, FlashInfer's JIT folder) carried in a bundle: packed as one tar at
bundle time, unpacked on the node into the folder the runtime reads, after the bundle has been checked."""

import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from verlenv.errors import UserError

ORIGIN = "kernel-cache"
FILE = "kernel-cache/kernel-cache.tar"


def _reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The same folder gives the same tar (and sha256), whoever packs it and when.
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def files(folder: Path) -> list[Path]:
    """The regular files of a cache folder, sorted; one line if it is no folder or holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"--kernel-cache {folder}: no such folder; give the cache folder (e.g. ~/.triton/cache)")
    # A link may point outside the folder: only real files travel.
    found = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    if not found:
        raise UserError(f"--kernel-cache {folder}: holds no files; run the workload once to fill it, or drop the "
                        "option")
    return found


def pack(folder: Path, dest: Path) -> int:
    """Write `folder`'s regular files into the tar `dest`; the number of files packed."""
    found = files(folder)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for p in found:
            tar.add(p, arcname=str(p.relative_to(folder)), recursive=False, filter=_reset)
    return len(found)


def unpack(tar_path: Path, into: Path) -> int:
    """Extract the cache into `into` (made if missing; files already there with the same name are replaced).
    Extracted beside it first, so a failure leaves `into` as it was. The number of files placed."""
    if not hasattr(tarfile, "data_filter"):
        raise UserError("--kernel-cache-into needs Python >= 3.11.4 (tarfile's safe extraction); run it with the "
                        "stack's Python")
    into = Path(into).absolute()
    if into.exists() and not into.is_dir():
        raise UserError(f"--kernel-cache-into {into}: exists and is not a folder")
    into.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=into.parent, prefix=f".{into.name}.tmp-"))
    try:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")  # no absolute paths, no `..`, no links out of the folder
        into.mkdir(exist_ok=True)
        placed = 0
        for src in sorted(tmp.rglob("*")):
            dest = into / src.relative_to(tmp)
            if src.is_dir():
                dest.mkdir(exist_ok=True)
            else:
                os.replace(src, dest)
                placed += 1
        return placed
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
