"""The test suite's time per module, from pytest's JUnit XML, for runs side by side (e.g. before and after a change, or
one process and two xdist workers): each module's summed test time, its tests, and each run's total and its slowest
tests. A test's time is its setup, call and teardown, as pytest's --junitxml writes it.

    python benchmarks/suite_modules.py before=run1.xml after=run2.xml --out docs/benchmarks/suite-modules.json
"""

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

SLOWEST = 20


def read(path: Path) -> dict:
    """{"modules": {module: {"tests": n, "seconds": s}}, "total_seconds", "tests", "slowest": [[test, s], ...]}"""
    modules: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
    tests = []
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").split(".")[-1] or "?"
        seconds = float(case.get("time") or 0)
        modules[module]["tests"] += 1
        modules[module]["seconds"] += seconds
        tests.append((f"{module}::{case.get('name')}", seconds))
    tests.sort(key=lambda t: -t[1])
    return {"tests": len(tests), "total_seconds": round(sum(s for _, s in tests), 1),
            "modules": {m: {"tests": v["tests"], "seconds": round(v["seconds"], 1)}
                        for m, v in sorted(modules.items(), key=lambda kv: -kv[1]["seconds"])},
            "slowest": [[name, round(s, 1)] for name, s in tests[:SLOWEST]]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=JUNIT.xml")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label or not Path(path).is_file():
            print(f"suite_modules: {item!r}: expected LABEL=JUNIT.xml naming an existing file", file=sys.stderr)
            return 2
        try:
            runs[label] = read(Path(path))
        except ET.ParseError as e:
            print(f"suite_modules: {path}: not JUnit XML ({e})", file=sys.stderr)
            return 2
    args.out.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    for label, run in runs.items():
        print(f"{label}: {run['tests']} tests, {run['total_seconds']} s of test time")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
