"""Measure the conda layer: the snapshot (records, independent sources per record), the offline rattler solve,
conda-lock.yml's size, `conda-lock render` and `verlenv lock --check`.

Offline: reads the committed snapshot and conda-lock.yml only; writes one JSON report.
Usage: python benchmarks/conda_layer.py --out docs/benchmarks/conda-layer.json [--stack verl-0.7]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conda_lock.lockfile import parse_conda_lock_file

from verlenv.catalog import stacks
from verlenv.lock import conda_layer, locks
from verlenv.lock.conda_snapshot import SNAPSHOT_DIR, read_sources


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.monotonic()
        fn()
        times.append(round(time.monotonic() - started, 3))
    return times


def snapshot_stats(root: Path) -> dict:
    provenance = json.loads((root / SNAPSHOT_DIR / "provenance.json").read_text())
    per_subdir = {}
    for subdir in ("linux-64", "linux-aarch64", "noarch"):
        repodata = json.loads((root / SNAPSHOT_DIR / subdir / "repodata.json").read_text())
        per_subdir[subdir] = len(repodata["packages"]) + len(repodata["packages.conda"])
    sources = [len({s["repo"] for s in entry["sources"]}) for entry in provenance.values()]
    return {"records": len(provenance), "records_per_subdir": per_subdir,
            "independent_sources_per_record": {"min": min(sources), "median": statistics.median(sources),
                                               "max": max(sources)},
            "records_with_one_source": sum(1 for n in sources if n == 1),
            "source_files": len(read_sources(root))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--stack", default=None, help="the stack to measure (default: the default stack)")
    args = p.parse_args()
    cat = stacks.load(None)
    root, stack = cat.root, cat.stack(args.stack)
    folder = locks.conda_dirs(cat, stack)[-1]  # the default stack's file is the top-level one
    sources = [root / folder / name for name in locks.env_files(stack)]
    spec = conda_layer.lock_spec(sources)
    solves = {}
    for plat in spec.platforms:
        specs = conda_layer.conda_specs(spec, plat)
        records = conda_layer.solve(root, specs, plat, stack.cuda)
        solves[plat] = {"specs": specs, "records": len(records),
                        "seconds": timed(lambda s=specs, p=plat: conda_layer.solve(root, s, p, stack.cuda),
                                         args.repeat)}
    lockfile = root / folder / locks.CONDA_LOCK_FILE
    with_extras = {(p.platform, c) for p in parse_conda_lock_file(lockfile).package for c in p.categories}
    renders = {}
    with tempfile.TemporaryDirectory() as tmp:
        for plat, extras in [(p, e) for p in spec.platforms for e in ([], ["megatron"])
                             if not e or (p, e[0]) in with_extras]:
            cmd = [sys.executable, "-m", "conda_lock", "render", "--kind", "explicit", "-p", plat,
                   *(a for e in extras for a in ("-e", e)), str(lockfile), "--filename-template", f"{tmp}/{{platform}}"]
            renders["+".join([plat, "main", *extras])] = timed(
                lambda c=cmd: subprocess.run(c, cwd=tmp, check=True, capture_output=True), args.repeat)
    check_cmd = [sys.executable, "-m", "verlenv", "lock", "--check", "--stack", stack.name]
    report = {
        "command": f"python benchmarks/conda_layer.py --out {args.out} --repeat {args.repeat}"
                   + (f" --stack {args.stack}" if args.stack else ""),
        "stack": stack.name,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "snapshot": snapshot_stats(root),
        "rattler_solve": solves,
        "conda_lock_yml": {"bytes": lockfile.stat().st_size,
                           "lines": len(lockfile.read_text().splitlines()),
                           "conda_entries": sum(1 for line in lockfile.read_text().splitlines()
                                                if line == "  manager: conda"),
                           "pip_entries": sum(1 for line in lockfile.read_text().splitlines()
                                              if line == "  manager: pip")},
        "conda_lock_render_seconds": renders,
        "lock_check_seconds": timed(lambda: subprocess.run(check_cmd, cwd=root, check=True, capture_output=True), 3),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
