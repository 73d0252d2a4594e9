"""`verlenv doctor DIR` on a tree of many files it skips: the time of the text report and of --json, before and now.

Each tree holds N hard links of one real shared library (a file the doctor skips by its first bytes, as it skips the
libraries of an env under /tmp) and one log ending in a failure (F10). Both reports must name the failure.
"before" runs another checkout's src/ (--baseline-src; e.g. `git archive d1a65f2 src | tar -x -C DIR`), whose text
report split its notes in a loop over a list (quadratic in the skipped files); "now" runs this checkout's with no
bound (--max-files 0, the same work) and with its default bound (--max-files 20000, logs first).
Usage: python benchmarks/doctor_tree.py --counts 16000 32000 64000 --baseline-src /tmp/verlenv-baseline-36/src \
           --out docs/benchmarks/doctor-tree.json
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAILING = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"  # F10
TIMEOUT_S = 1800


def a_shared_library() -> Path:
    """A real shared library of this machine's Python, to link N times."""
    libdir = Path(sys.base_prefix) / "lib"
    for candidate in sorted(libdir.glob(f"python3.{sys.version_info.minor}/lib-dynload/*.so")):
        return candidate
    raise SystemExit(f"no shared library under {libdir}")


def make_tree(root: Path, count: int, library: Path) -> None:
    libs = root / "venv" / "lib"
    libs.mkdir(parents=True)
    for i in range(count):
        os.link(library, libs / f"lib{i:06d}.so")
    (root / "logs").mkdir()
    (root / "logs" / "worker-1.err").write_bytes(b"step 1\n" * 1000 + FAILING)


def timed(cmd: list[str], env: dict) -> dict:
    started = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, env=env, timeout=TIMEOUT_S, check=False)
    wall = time.perf_counter() - started
    named = b"[F10]" in p.stdout or b'"id": "F10"' in p.stdout
    return {"seconds": round(wall, 2), "exit": p.returncode, "names_the_failure": named,
            "load_average": round(os.getloadavg()[0], 2), "stdout_bytes": len(p.stdout)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--counts", type=int, nargs="+", default=[16000, 32000, 64000])
    p.add_argument("--baseline-src", type=Path, help="src/ of the checkout to compare with (before)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    library = a_shared_library()
    runs = {"now (no bound)": (ROOT / "src", ["--max-files", "0"]), "now (default bound)": (ROOT / "src", [])}
    if args.baseline_src:
        runs = {"before": (args.baseline_src, []), **runs}
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "python": platform.python_version(), "library": str(library), "trees": []}
    for count in args.counts:
        work = Path(tempfile.mkdtemp(prefix="verlenv-doctor-tree-"))
        try:
            make_tree(work, count, library)
            row = {"skipped_files": count}
            for name, (src, extra) in runs.items():
                env = {**os.environ, "PYTHONPATH": str(src)}
                base = [sys.executable, "-m", "verlenv", "doctor", str(work), *extra]
                row[name] = {"text": timed(base, env), "json": timed([*base, "--json"], env)}
                print(count, name, {k: (v["seconds"], v["exit"], v["names_the_failure"], v["load_average"])
                                    for k, v in row[name].items()}, flush=True)
            report["trees"].append(row)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
