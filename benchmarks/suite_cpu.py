"""Where the test suite's time goes: each test's wall time and the CPU seconds the whole machine spent meanwhile (every
process, from /proc/stat: Ray's daemons, compilers and the env's interpreters included), so a test that waits (the
network, Ray's health checks) is told apart from one that computes, and what two workers could share is seen.

As a pytest plugin (this folder on PYTHONPATH), one JSON line per test into $SUITE_CPU_OUT:
    PYTHONPATH=benchmarks SUITE_CPU_OUT=/tmp/suite.jsonl nox -s tests -- -p suite_cpu
Then the summary (per module and the slowest tests, with the machine's mean use of its cores):
    python benchmarks/suite_cpu.py /tmp/suite.jsonl --out docs/benchmarks/suite-cpu.json
Run it on an otherwise idle machine: another process's CPU is counted against the test it overlaps.
"""

import argparse
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds the machine has spent outside idle and iowait since boot."""
    with open("/proc/stat") as f:
        values = list(map(int, f.readline().split()[1:]))
    return (sum(values) - values[3] - values[4]) / HZ


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu, wall = busy_seconds(), time.monotonic()
        yield
        line = {"id": item.nodeid, "wall": round(time.monotonic() - wall, 2), "cpu": round(busy_seconds() - cpu, 2)}
        with open(os.environ.get("SUITE_CPU_OUT", "suite-cpu.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
except ImportError:  # the summary needs no pytest
    pass


def summary(rows: list[dict], top: int) -> dict:
    wall, cpu = sum(r["wall"] for r in rows), sum(r["cpu"] for r in rows)
    modules = defaultdict(lambda: {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0})
    for r in rows:
        m = modules[r["id"].split("::", 1)[0]]
        m["tests"] += 1
        m["wall_s"] += r["wall"]
        m["cpu_s"] += r["cpu"]

    def shaped(d: dict) -> dict:
        return {**{k: round(v, 1) if isinstance(v, float) else v for k, v in d.items()},
                "cores": round(d["cpu_s"] / d["wall_s"], 2) if d["wall_s"] else 0.0}

    by_module = sorted(modules.items(), key=lambda kv: -kv[1]["wall_s"])
    return {"tests": len(rows), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "cores": round(cpu / wall, 2) if wall else 0.0, "cpus": os.cpu_count(), "machine": platform.node(),
            "modules": [{"module": name, **shaped(m)} for name, m in by_module],
            "slowest": [{"test": r["id"], **shaped({"wall_s": r["wall"], "cpu_s": r["cpu"]})}
                        for r in sorted(rows, key=lambda r: -r["wall"])[:top]]}


def main() -> int:
    p = argparse.ArgumentParser(description="summarise a suite_cpu.jsonl")
    p.add_argument("lines", type=Path)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", type=Path)
    p.add_argument("--command", help="the command that made the lines, recorded in the summary")
    a = p.parse_args()
    rows = [json.loads(line) for line in a.lines.read_text().splitlines() if line.strip()]
    data = {"command": a.command, **summary(rows, a.top)}
    text = json.dumps(data, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(f"{data['tests']} tests: {data['wall_s']:.0f} s wall, {data['cpu_s']:.0f} CPU s, "
          f"{data['cores']} of {data['cpus']} cores on average", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
