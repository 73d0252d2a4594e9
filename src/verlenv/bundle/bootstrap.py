"""Run `verlenv install --bundle` on a node that has only Python, this source tree and the bundle
(standard library only):

    PYTHONPATH=src python3 -m verlenv.bundle.bootstrap BUNDLE [install options...]

The bundle's tool wheels (uv, verlenv's runtime deps and nox) are checked against the manifest, unpacked into
BUNDLE/.tool, and `verlenv install --bundle BUNDLE ...` runs with them on this process's path only. It also
writes BUNDLE/.tool/bin/verlenv and BUNDLE/.tool/bin/nox, so that afterwards, from this source tree,

    BUNDLE/.tool/bin/nox -s verify-h100

runs the project's nox sessions offline (they see VERLENV_BUNDLE and make no venv). A CUDA_HOME the bundle carries
(`verlenv bundle --toolkit`) is unpacked by the install into BUNDLE/.toolkit, where `nox -s build...` finds it.
"""

import hashlib
import json
import os
import shlex
import sys
import tempfile
import zipfile
from pathlib import Path

from verlenv.bundle import parts

TOOL_DIR = ".tool"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def unpack_tools(bundle: Path) -> Path:
    """BUNDLE/.tool with the checked tool wheels unpacked (site folder + bin/ with uv); made once."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    tools = [e for e in manifest["files"] if e["origin"] == "tool"]
    if not tools:
        raise SystemExit(f"bootstrap: {bundle} has no tool wheels; make it with `verlenv bundle` (not --no-tools)")
    stamp = hashlib.sha256("".join(sorted(e["sha256"] for e in tools)).encode()).hexdigest()
    target = bundle / TOOL_DIR
    if (target / ".stamp").is_file() and (target / ".stamp").read_text() == stamp:
        return target
    with parts.published(target) as tmp:
        (tmp / "bin").mkdir()
        for e in tools:
            wheel = bundle / e["file"]
            if not wheel.is_file() or _sha256(wheel) != e["sha256"]:
                raise SystemExit(f"bootstrap: {wheel} is missing or fails its manifest sha256")
            with zipfile.ZipFile(wheel) as z:
                for info in z.infolist():
                    parts_ = Path(info.filename).parts
                    # <dist>.data/scripts/* are executables (uv itself); everything else is importable.
                    if len(parts_) >= 3 and parts_[0].endswith(".data") and parts_[1] == "scripts":
                        dest = tmp / "bin" / parts_[-1]
                        dest.write_bytes(z.read(info))
                        dest.chmod(0o755)
                    elif parts_ and parts_[0].endswith(".data"):
                        continue
                    else:
                        z.extract(info, tmp / "site")
        (tmp / ".stamp").write_text(stamp)
    return target


def write_launchers(tool: Path, bundle: Path) -> None:
    """bin/verlenv and bin/nox: this interpreter with the tool wheels (and this source tree, for verlenv), the bundle
    named in VERLENV_BUNDLE; written at every bootstrap, as they name where the bundle and the tree are now."""
    src = Path(__file__).resolve().parents[2]
    q = lambda path: shlex.quote(str(Path(path).absolute()))  # noqa: E731
    paths = {"verlenv": f"{q(src)}:{q(tool / 'site')}", "nox": q(tool / "site")}
    for name, pythonpath in paths.items():
        text = (f"#!/bin/sh\n# {name} from the bundle's tools: no index is needed.\n"
                f"VERLENV_BUNDLE={q(bundle)} PATH={q(tool / 'bin')}:\"$PATH\" PYTHONPATH={pythonpath} "
                f"exec {q(sys.executable)} -m {name} \"$@\"\n")
        # A temp name of this process's own: bootstraps of several variants from one bundle run at once (one rename
        # took the other's temp file from under it on a GPU host), and each writes the same text.
        fd, tmp = tempfile.mkstemp(dir=tool / "bin", prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, tool / "bin" / name)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    if parts.is_parts(folder):
        try:
            bundle = parts.assemble(folder)
        except parts.PartsError as e:
            print(f"bootstrap: {e}", file=sys.stderr)
            return 1
    else:
        bundle = folder
    if not (bundle / "manifest.json").is_file():
        print(f"bootstrap: {folder} is not a bundle (no manifest.json, no {parts.SUMS})", file=sys.stderr)
        return 2
    tool = unpack_tools(bundle)
    write_launchers(tool, bundle)
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(tool / "site")]
    # The target env's interpreters run with a clean path: the tool wheels must not look installed there.
    os.environ.pop("PYTHONPATH", None)
    os.environ["PATH"] = os.pathsep.join(filter(None, [str(tool / "bin"), os.environ.get("PATH")]))
    from verlenv.cli import main as verlenv_main

    return verlenv_main(["install", "--bundle", str(bundle), *argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
