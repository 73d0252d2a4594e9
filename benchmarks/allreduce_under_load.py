"""The cross-node gloo all-reduce of `verify --ray` on a three-node Ray cluster on this machine (tests/ray_nodes.py,
as the suite's gpu_cluster), beside busy loops at nice 0 (the rest of a test run), with Ray's workers at Ray's
default nice 15 and at nice 0 (RAY_worker_niceness): how long each all-reduce takes and how many time out.

Run with the env's python (the all-reduce needs its Ray and torch); writes one JSON report with the command, the
machine and every run.
Usage: .venv-verl-0.9-fsdp/bin/python benchmarks/allreduce_under_load.py --out docs/benchmarks/allreduce-under-load.json
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
import ray  # noqa: E402

import ray_nodes  # noqa: E402
import verlenv  # noqa: E402
from verlenv.cluster import allreduce  # noqa: E402

RAY_DEFAULT_NICENESS = "15"  # Ray's worker_niceness (ray/_raylet's RayConfig)


def series(python: str, niceness: str, runs: int, timeout_s: float) -> list[dict]:
    nice = {"RAY_worker_niceness": niceness}
    one_gpu = ("--num-gpus", "1")
    cluster = ray_nodes.start(python, [(python, {**ray_nodes.placed("1", 0), **nice}, one_gpu),
                                       (python, {**ray_nodes.placed("0", 1), **nice}, one_gpu)], head_env=nice)
    try:
        ray.init(address=cluster.address, runtime_env={"py_modules": [os.path.dirname(verlenv.__file__)]},
                 logging_level="WARNING", log_to_driver=False)
        nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        out = []
        for _ in range(runs):
            result = allreduce.run([(n, 1) for n in nodes], "gloo", timeout_s=timeout_s)
            out.append({"ok": result["ok"], "seconds": result["seconds"], "error": result.get("error")})
            print(niceness, out[-1], file=sys.stderr, flush=True)
        return out
    finally:
        ray.shutdown()
        cluster.stop()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=12, help="all-reduces per setting")
    p.add_argument("--hogs", type=int, default=2, help="busy loops at nice 0 beside the cluster")
    p.add_argument("--timeout", type=float, default=75, help="allreduce.run's bound per step (verify's: 300 s)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    python = sys.executable
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.hogs)]
    try:
        results = {f"worker nice {n}": series(python, n, args.runs, args.timeout) for n in (RAY_DEFAULT_NICENESS, "0")}
    finally:
        for hog in hogs:
            hog.kill()
    summary = {name: {"ok": sum(r["ok"] for r in rows), "runs": len(rows),
                      "seconds_min": min(r["seconds"] for r in rows), "seconds_max": max(r["seconds"] for r in rows),
                      "seconds_median": sorted(r["seconds"] for r in rows)[len(rows) // 2]}
               for name, rows in results.items()}
    report = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "machine": cpu_model(),
              "cpus": os.cpu_count(), "hogs": args.hogs, "timeout_s": args.timeout, "date": time.strftime("%Y-%m-%d"),
              "summary": summary, "runs": results}
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
