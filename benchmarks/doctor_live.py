"""`verlenv doctor DIR` on a live log directory and on a directory of wheels: does it finish, and how fast.

live: a Ray-session-like folder of real logs (tests/data/logs' healthy build logs, 4 MB per file) and one stable
file ending in a failure; while `verlenv doctor DIR --json` runs (its own process), a writer thread in this one
rewrites, truncates, appends to, rotates into gzip (written in pieces), deletes and recreates the other files, and
turns some into wheels, without pause. Each run must exit 1 (not 2: an abort) with the stable file's finding.
wheels: a folder of --wheels-gb GB of real wheels found on this disk (hard links, so nothing is copied), read
once (cat) so every run finds them in the page cache.
--baseline-src DIR runs the same with another checkout's src/ (e.g. `git archive main src | tar -x -C DIR`).
Usage: python benchmarks/doctor_live.py --runs 50 --wheels-gb 4 --out docs/benchmarks/doctor-live.json
"""

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "data" / "logs"
FAILING = b"/usr/bin/ld: cannot find -lcuda: No such file or directory\n"  # F10
STABLE = "stable/worker-stable.err"
CHURNED = 12
FILE_BYTES = 4 * 10**6
WHEEL_DIRS = ("/opt", os.path.expanduser("~/.cache"))


def healthy(size: int) -> bytes:
    text = b"".join(p.read_bytes() for p in sorted(LOGS.glob("healthy-*-build.log")))
    return (text * (size // len(text) + 1))[:size]


class Writer(threading.Thread):
    """What a running job does to its log folder, as fast as it can."""

    def __init__(self, root: Path, text: bytes, seed: int):
        super().__init__(daemon=True)
        self.root, self.text, self.rng = root, text, random.Random(seed)
        self.stop = threading.Event()
        self.actions: dict[str, int] = {}

    def run(self):
        while not self.stop.is_set():
            path = self.root / f"worker-{self.rng.randrange(CHURNED)}.out"
            action = self.rng.choice(["rewrite", "truncate", "append", "rotate", "delete", "wheel"])
            try:
                self.act(action, path)
            except FileNotFoundError:  # raced its own earlier action
                continue
            self.actions[action] = self.actions.get(action, 0) + 1

    def act(self, action: str, path: Path) -> None:
        if action == "rewrite":
            path.write_bytes(self.text[: self.rng.randrange(1, len(self.text))])
        elif action == "truncate":
            os.truncate(path, self.rng.randrange(0, 1 << 16))
        elif action == "append":
            with open(path, "ab") as f:
                f.write(self.text[: 1 << 20])
        elif action == "rotate":
            data = gzip.compress(path.read_bytes(), compresslevel=1)
            path.unlink()
            with open(path.with_name(path.name + ".1.gz"), "wb") as f:
                for i in range(0, len(data), 1 << 16):
                    f.write(data[i:i + (1 << 16)])
                    f.flush()
        elif action == "delete":
            path.unlink()
            path.with_name(path.name + ".1.gz").unlink(missing_ok=True)
        elif action == "wheel":
            with zipfile.ZipFile(path, "w") as z:
                z.writestr("pkg/__init__.py", self.text[:1 << 16])


def doctor(src: Path, target: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "verlenv", "doctor", str(target), "--json"], capture_output=True,
                          text=True, env=env, timeout=600)
    seconds = time.perf_counter() - start
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    files = {e["file"] for d in data.get("diagnoses", []) for e in d["evidence"] if d["id"] == "F10"}
    return {"exit": proc.returncode, "seconds": round(seconds, 3), "stable_found": STABLE in files,
            "notes": len(data.get("notes", [])), "error": proc.stderr.strip().splitlines()[-1][:300]
            if proc.returncode == 2 and proc.stderr.strip() else None}


def live(src: Path, runs: int, work: Path) -> dict:
    folder = work / "live"
    (folder / "stable").mkdir(parents=True)
    text = healthy(FILE_BYTES)
    (folder / STABLE).write_bytes(text + FAILING)
    for i in range(CHURNED):
        (folder / f"worker-{i}.out").write_bytes(text)
    writer = Writer(folder, text, seed=27)
    writer.start()
    try:
        results = [doctor(src, folder) for _ in range(runs)]
    finally:
        writer.stop.set()
        writer.join()
    aborted = [r for r in results if r["exit"] == 2]
    return {"runs": runs, "aborted": len(aborted),
            "exit_1_with_stable_finding": sum(r["exit"] == 1 and r["stable_found"] for r in results),
            "abort_messages": sorted({r["error"] for r in aborted if r["error"]})[:5],
            "seconds_median": round(statistics.median(r["seconds"] for r in results), 3),
            "seconds_max": max(r["seconds"] for r in results),
            "notes_per_run_median": statistics.median(r["notes"] for r in results),
            "writer_actions": writer.actions, "folder": f"{CHURNED} files of {FILE_BYTES // 10**6} MB rewritten "
            "during the scan, one stable file of real build logs ending in a failure"}


def wheels(src: Path, gb: float, work: Path, runs: int) -> dict:
    folder = work / "wheels"
    folder.mkdir()
    found = sorted({p.resolve() for d in WHEEL_DIRS for p in Path(d).rglob("*.whl") if p.is_file()},
                   key=lambda p: -p.stat().st_size)
    total, linked = 0, 0
    for i, wheel in enumerate(found):
        if total >= gb * 10**9:
            break
        target = folder / f"{i:03d}-{wheel.name}"
        try:
            os.link(wheel, target)
        except OSError:  # another filesystem: copy
            shutil.copyfile(wheel, target)
        total += target.stat().st_size
        linked += 1
    if total < gb * 10**9:
        raise SystemExit(f"only {total / 1e9:.2f} GB of wheels found under {', '.join(WHEEL_DIRS)}")
    (folder / "worker-0.err").write_bytes(healthy(10**6) + FAILING)
    subprocess.run(f"cat {folder}/* > /dev/null", shell=True, check=True)  # every run reads from the page cache
    runs = [doctor(src, folder) for _ in range(runs)]
    return {"wheels": linked, "bytes": total, "largest": found[0].name, "runs": runs,
            "seconds_median": statistics.median(r["seconds"] for r in runs),
            "found_the_log_failure": all(r["exit"] == 1 for r in runs)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=50)
    p.add_argument("--wheels-gb", type=float, default=4.0)
    p.add_argument("--baseline-src", type=Path, help="also run these parts with this src/ (the code before)")
    p.add_argument("--baseline-runs", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    report = {"command": ["python", *sys.argv], "date": time.strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_average_at_start": os.getloadavg()[0],
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=ROOT).stdout.strip()}
    for name, src, runs in [("this", ROOT / "src", args.runs),
                            *([("baseline", args.baseline_src, args.baseline_runs)] if args.baseline_src else [])]:
        work = Path(tempfile.mkdtemp(prefix="verlenv-doctor-live-"))
        try:
            report[name] = {"src": str(src), "live": live(src, runs, work)}
            print(name, "live", json.dumps(report[name]["live"]), flush=True)
            report[name]["wheels"] = wheels(src, args.wheels_gb, work, 3 if name == "this" else 1)
            print(name, "wheels", json.dumps(report[name]["wheels"]), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    report["load_average_at_end"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    ok = report["this"]["live"]["aborted"] == 0 and report["this"]["live"]["exit_1_with_stable_finding"] == args.runs
    return 0 if ok and report["this"]["wheels"]["found_the_log_failure"] else 1


if __name__ == "__main__":
    sys.exit(main())
