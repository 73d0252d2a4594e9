"""Run `verlenv install --bundle` on a node that has only Python, this source tree and the bundle
(standard library only):

    PYTHONPATH=src python3 -m verlenv.bundle.bootstrap BUNDLE [install options...]

The bundle's tool wheels (uv and verlenv's runtime deps) are checked against the manifest, unpacked into
BUNDLE/.tool, and `verlenv install --bundle BUNDLE ...` runs with them on this process's path only.
"""

import hashlib
import json
import os
import sys
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
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(tool / "site")]
    # The target env's interpreters run with a clean path: the tool wheels must not look installed there.
    os.environ.pop("PYTHONPATH", None)
    os.environ["PATH"] = os.pathsep.join(filter(None, [str(tool / "bin"), os.environ.get("PATH")]))
    from verlenv.cli import main as verlenv_main

    return verlenv_main(["install", "--bundle", str(bundle), *argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
