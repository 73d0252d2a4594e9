"""An offline project: tiny real wheels in a local wheelhouse, a real uv lock of them, and the lock's inputs
record as `verlenv lock` writes it. Installs from it need no network and take about a second."""

import base64
import hashlib
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

from verlenv.catalog import stacks
from verlenv.lock import locks

PY = ".".join(map(str, sys.version_info[:2]))
PACKAGES = [f"tiny{i}" for i in range(6)]
CATALOG = """
default = "tiny"
[stacks.tiny]
description = "test catalog: tiny local wheels"
python = "{python}"
cuda = "13.0"
min_driver = "580.65.06"
exclude_newer = "2026-10-15T00:00:00Z"
gpu_archs = ["9.0"]
cxx11_abi = true
toolkit = "pypi"
host_compiler = "gxx=13"
[stacks.tiny.variants.fsdp]
requirements = [{requirements}]
source_builds = []
"""


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(dest: Path, name: str, version: str = "1.0", data_mib: int = 2, seed: int = 0,
                extra: dict[str, bytes] | None = None) -> Path:
    """A real wheel: a module, a data file of random bytes (so installs take long enough to be cut), a console
    script, and a RECORD with each file's hash."""
    rng = random.Random(f"{name}-{seed}")
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\ndef main():\n    print({name!r})\n".encode(),
        f"{name}/data.bin": rng.randbytes(data_mib << 20),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tiny_project\nRoot-Is-Purelib: true\n"
                                             b"Tag: py3-none-any\n",
        f"{name}-{version}.dist-info/entry_points.txt": f"[console_scripts]\n{name}-cli = {name}:main\n".encode(),
    }
    files |= extra or {}
    record = f"{name}-{version}.dist-info/RECORD"
    lines = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()] + [f"{record},,"]
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(record, "\n".join(lines) + "\n")
    return wheel


def make(root: Path, data_mib: int = 2, packages: dict[str, dict[str, bytes]] | None = None) -> Path:
    """A project root holding stacks.toml, wheelhouse/ and a fresh lock with its inputs record; `packages`:
    other wheels than PACKAGES, each with extra files."""
    root.mkdir(parents=True, exist_ok=True)
    wheelhouse = root / "wheelhouse"
    wheelhouse.mkdir()
    packages = packages if packages is not None else {name: {} for name in PACKAGES}
    for name, extra in packages.items():
        build_wheel(wheelhouse, name, data_mib=data_mib, extra=extra)
    reqs = [f"{name}==1.0" for name in packages]
    (root / "stacks.toml").write_text(CATALOG.format(python=PY, requirements=", ".join(f'"{r}"' for r in reqs)))
    (root / "in.txt").write_text("\n".join(reqs) + "\n")
    out = root / "resolved.txt"
    subprocess.run(["uv", "pip", "compile", "--no-config", "--no-index", "--find-links", str(wheelhouse),
                    "--generate-hashes", "--quiet", str(root / "in.txt"), "-o", str(out)], check=True, env=env(root))
    variant = stacks.load(root / "stacks.toml").variant(None, "fsdp")
    locks.write_lock(root, variant, "linux-64", out.read_text(), None, "uv (test)")
    return root


def env(root: Path) -> dict[str, str]:
    """The environment a command runs in: this project, the local wheelhouse only, a cache of its own."""
    return {**os.environ, "VERLENV_ROOT": str(root), "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(root / "wheelhouse"),
            "UV_CACHE_DIR": str(root / "uv-cache")}


def verlenv_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "verlenv", *args]


def differences(root: Path, prefix: Path) -> list[str]:
    """How the env at prefix differs from the lock, found without verlenv's own checks: the installed
    distributions must be exactly the locked ones, and every file of every wheel must be installed byte for byte."""
    python = prefix / "bin" / "python"
    if not python.exists():
        return [f"{python}: missing"]
    listed = subprocess.run([str(python), "-c", "from importlib import metadata\n"
                             "print('\\n'.join(sorted(f\"{d.metadata['Name']}=={d.version}\" "
                             "for d in metadata.distributions())))"],
                            capture_output=True, text=True, check=True).stdout.split()
    problems = [] if listed == sorted(f"{n}==1.0" for n in PACKAGES) else [f"installed {listed}"]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    for wheel in sorted((root / "wheelhouse").glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if ".dist-info/" in info.filename:
                    continue
                path = Path(purelib) / info.filename
                if not path.is_file() or path.read_bytes() != z.read(info):
                    problems.append(f"{path}: {'missing' if not path.is_file() else 'differs from ' + wheel.name}")
    for name in PACKAGES:
        script = prefix / "bin" / f"{name}-cli"
        try:
            ran = subprocess.run([str(script)], capture_output=True, text=True).stdout.strip()
        except OSError as e:
            ran = e.strerror
        if ran != name:
            problems.append(f"bin/{name}-cli does not run {name} ({ran})")
    return problems
