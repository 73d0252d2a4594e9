"""Time `verlenv doctor` on a big log against `grep` on the same file, in one run; peak memory of each.

Two logs of --mb megabytes, each with one failing line at its very end, so the whole file must be read:
"builds", the real healthy build logs of tests/data/logs (an apex build on an H100, a local nvcc build)
repeated; "near-misses", the same plus the public fragments that hold failure words without a failure (a
near-miss every 164 KB, so the line matcher works too).
grep searches the same file for every keyword of failures.toml (`grep -c -i -F -f keywords`), the work the
doctor's first pass does; then the doctor reads the file, a gzipped copy of it, and an empty log (its start-up:
Python, verlenv's imports, the knowledge base). --repeat runs the whole sequence again (machines are shared).
Each command's CPU time (user + system, from wait4) is kept beside its wall time: MB per CPU-second holds on a
loaded machine where the wall time does not.
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


LOG_KINDS = {"builds": "healthy-*-build.log", "near-misses": "healthy-*.log"}


def make_log(path: Path, size: int, pattern: str) -> None:
    healthy = b"".join(p.read_bytes() for p in sorted(LOGS.glob(pattern)))
    with open(path, "wb") as f:
        written = 0
        while written < size:
            f.write(healthy)
            written += len(healthy)
        f.write(FAILING)


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Wall time, peak resident memory and exit code of one command (its own rusage, not the children's)."""
    started = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    p.returncode = os.waitstatus_to_exitcode(status)
    # CPU time as well: on a shared machine the wall time says as much about the neighbours as about the command.
    return {"command": " ".join(cmd), "seconds": round(wall, 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
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
        keywords = work / "keywords.txt"
        keywords.write_text("\n".join(sorted({k for f in knowledge.load() for k in f.keywords})) + "\n")
        (work / "empty.log").write_bytes(b"")
        doctor = [sys.executable, "-m", "verlenv", "doctor"]
        report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "python": platform.python_version(), "logs": {}}
        found = True
        for kind, pattern in LOG_KINDS.items():
            log = work / f"{kind}.log"
            make_log(log, args.mb * 10**6, pattern)
            with open(log, "rb") as src, gzip.open(work / f"{kind}.log.gz", "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            size = log.stat().st_size
            subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # same page cache for all
            repetitions = []
            for _ in range(args.repeat):
                runs = {
                    "grep": timed(["grep", "-c", "-i", "-F", "-f", str(keywords), str(log)]),
                    "doctor": timed([*doctor, str(log)]),
                    "doctor_gzip": timed([*doctor, str(work / f"{kind}.log.gz")]),
                    "doctor_startup": timed([*doctor, str(work / "empty.log")]),
                }
                for r in runs.values():
                    r["mb_per_s"] = round(size / 1e6 / r["seconds"], 1)
                    r["mb_per_cpu_s"] = round(size / 1e6 / max(r["cpu_seconds"], 0.01), 1)
                runs["doctor_over_grep"] = round(runs["doctor"]["seconds"] / runs["grep"]["seconds"], 2)
                runs["load_average"] = os.getloadavg()[0]
                repetitions.append(runs)
                found &= runs["doctor"]["exit"] == 1 and any("[F10]" in line for line in runs["doctor"]["output_head"])
                print(kind, " ".join(f"{name} {r['seconds']:.2f} s ({r['mb_per_s']} MB/s, "
                                     f"{r['mb_per_cpu_s']} MB/cpu-s, {r['peak_rss_mib']} MiB)"
                                     for name, r in runs.items() if isinstance(r, dict)),
                      f"doctor/grep {runs['doctor_over_grep']} load {runs['load_average']:.1f}")
            report["logs"][kind] = {"bytes": size, "lines": sum(1 for _ in open(log, "rb")), "repetitions": repetitions}
            log.unlink()
        report["failing_line_found"] = found
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if found else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
