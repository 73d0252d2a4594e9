"""Time `verlenv verify --ray` on simulated Ray clusters of 1, 2 and 4 nodes on this machine, and plain
`verlenv verify` of the same env, to see what the Ray path costs.

Each cluster is started (tests/ray_nodes.py: `ray start` per node, one CPU each, every node from the same env),
verified once, and stopped; cluster start-up is not in the times. Writes one JSON report with the command, the
machine and every wall time.
Usage: python benchmarks/cluster_verify_time.py --python .venv-verl-0.9-fsdp/bin/python \
           --out docs/benchmarks/cluster-verify-verl-0.9-fsdp.json
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import ray_nodes  # noqa: E402


def timed(cmd: list[str]) -> tuple[float, int, dict | None]:
    """(wall seconds, exit code, the JSON report) of one verify run."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        started = time.monotonic()
        proc = subprocess.run([*cmd, "--report", str(report)], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=1800)
        seconds = round(time.monotonic() - started, 1)
        return seconds, proc.returncode, json.loads(report.read_text()) if report.exists() else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", required=True, help="the env's interpreter (every node runs from it)")
    p.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    verlenv = str(Path(sys.executable).with_name("verlenv"))
    python = str(Path(args.python).absolute())

    load_start = round(os.getloadavg()[0], 2)  # the machine is shared: how busy it was says what the times mean
    plain_s, plain_code, _ = timed([verlenv, "verify", "--python", python])
    runs = []
    for count in args.nodes:
        started = time.monotonic()
        cluster = ray_nodes.start(python, [(python, {})] * (count - 1))
        start_s = round(time.monotonic() - started, 1)
        try:
            seconds, code, report = timed([verlenv, "verify", "--python", python, "--ray", cluster.address,
                                           "--allreduce", "off"])
        finally:
            cluster.stop()
        nodes = (report or {}).get("nodes", [])
        runs.append({"nodes": count, "cluster_start_seconds": start_s, "verify_ray_seconds": seconds,
                     "exit_code": code, "answered": sum(n["state"] == "checked" for n in nodes),
                     "driver_seconds": (report or {}).get("seconds"),
                     # per node: the whole task, verify's checks in it, the fingerprint beside them
                     "node_task_seconds": sorted(n.get("seconds", 0) for n in nodes),
                     "node_verify_seconds": sorted(n.get("verify_seconds", 0) for n in nodes),
                     "node_fingerprint_seconds": sorted(n.get("fingerprint_seconds", 0) for n in nodes)})
        print(json.dumps(runs[-1]), file=sys.stderr)
    data = {"command": ["python", *sys.argv], "date": time.strftime("%Y-%m-%d"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "load_average_1min_at_start_and_end": [load_start, round(os.getloadavg()[0], 2)]},
            "plain_verify_seconds": plain_s, "plain_verify_exit_code": plain_code, "runs": runs,
            "ray_overhead_one_node_seconds": next((round(r["verify_ray_seconds"] - plain_s, 1)
                                                   for r in runs if r["nodes"] == 1), None)}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
