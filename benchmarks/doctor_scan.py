"""Time `verlenv doctor` on a big log against `grep` on the same file, in one run; peak memory of each.

The log is the healthy logs of tests/data/logs (a real apex build on an H100, a local nvcc build, public
fragments) repeated to --mb megabytes, with one failing line at its very end, so the whole file must be read.
grep searches the same file for every keyword of failures.toml (`grep -c -i -F -f keywords`), the work the
doctor's first pass does; then the doctor reads the file, a gzipped copy of it, and an empty log (its start-up:
Python, verlenv's imports, the knowledge base). --repeat runs the whole sequence again (machines are shared).
Usage: python benchmarks/doctor_scan.py --mb 200 --repeat 3 --out docs/benchmarks/doctor-scan.json
"""

import argparse
import gzip
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
LOGS = ROOT / "tests" / "data" / "logs"
FAILING = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"


def make_log(path: Path, size: int) -> None:
    healthy = b"".join(p.read_bytes() for p in sorted(LOGS.glob("healthy-*.log")))
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(healthy)
            written += len(healthy)
        f.write(FAILING)


def timed(cmd: list[str]) -> dict:
    """Wall time, peak resident memory and exit code of one command (its own rusage, not the children's)."""
    started = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"command": " ".join(cmd), "seconds": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
            "exit": p.returncode, "output_head": out.decode(errors="replace").splitlines()[:4]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=200, help="size of the log in MB (10^6 bytes)")
    p.add_argument("--repeat", type=int, default=1, help="run the sequence this many times")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from verlenv.doctor import knowledge

    work = Path(tempfile.mkdtemp(prefix="verlenv-doctor-bench-"))
    try:
        log = work / "big.log"
        make_log(log, args.mb * 10**6)
        with open(log, "rb") as src, gzip.open(work / "big.log.gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        keywords = work / "keywords.txt"
        keywords.write_text("\n".join(sorted({k for f in knowledge.load() for k in f.keywords})) + "\n")
        size = log.stat().st_size
        (work / "empty.log").write_bytes(b"")
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # same page cache for all
        doctor = [sys.executable, "-m", "verlenv", "doctor"]
        repetitions = []
        for _ in range(args.repeat):
            runs = {
                "grep": timed(["grep", "-c", "-i", "-F", "-f", str(keywords), str(log)]),
                "doctor": timed([*doctor, str(log)]),
                "doctor_gzip": timed([*doctor, str(work / "big.log.gz")]),
                "doctor_startup": timed([*doctor, str(work / "empty.log")]),
            }
            for r in runs.values():
                r["mb_per_s"] = round(size / 1e6 / r["seconds"], 1)
            runs["doctor_over_grep"] = round(runs["doctor"]["seconds"] / runs["grep"]["seconds"], 2)
            repetitions.append(runs)
            for name, r in runs.items():
                if isinstance(r, dict):
                    print(f"{name:15s} {r['seconds']:7.2f} s  {r['mb_per_s']:7.1f} MB/s  peak {r['peak_rss_mib']:7.1f} MiB")
            print(f"doctor / grep   {runs['doctor_over_grep']}")
        found = all(r["doctor"]["exit"] == 1 and any("[F10]" in line for line in r["doctor"]["output_head"])
                    for r in repetitions)
        report = {
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_average": os.getloadavg(), "python": platform.python_version(), "log_bytes": size,
            "log_lines": sum(1 for _ in open(log, "rb")), "failing_line_found": found, "repetitions": repetitions,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if found else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
