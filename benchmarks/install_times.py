"""Time `verlenv install` of one lock: uv vs plain pip, each from a cold and from a warm cache.

Runs in the order uv-cold, pip-cold, uv-warm, pip-warm into fresh venvs, each installer with its own
fresh cache folder, and writes one JSON report with the command, the machine and every wall time.
Usage: python benchmarks/install_times.py --stack verl-0.9 --variant fsdp --out docs/benchmarks/install.json
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


def run_install(root: Path, stack: str, variant: str, installer: str, cache: Path, prefix: Path) -> float:
    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv"), "PIP_CACHE_DIR": str(cache / "pip")}
    cmd = [sys.executable, "-m", "verlenv", "install", "--stack", stack, "--variant", variant,
           "--installer", installer, "--prefix", str(prefix)]
    started = time.monotonic()
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    return round(time.monotonic() - started, 1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", default="verl-0.9")
    p.add_argument("--variant", default="fsdp")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workdir", type=Path, help="where venvs and caches go (default: a temp dir, removed after)")
    args = p.parse_args()
    root = Path(__file__).resolve().parent.parent
    work = Path(tempfile.mkdtemp(prefix="verlenv-bench-", dir=args.workdir))
    results = {}
    try:
        for phase in ("cold", "warm"):
            for installer in ("uv", "pip"):
                prefix = work / f"venv-{installer}-{phase}"
                seconds = run_install(root, args.stack, args.variant, installer, work / f"cache-{installer}", prefix)
                results[f"{installer}_{phase}_s"] = seconds
                print(f"{installer} {phase}: {seconds} s", file=sys.stderr)
                shutil.rmtree(prefix)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lock = next((root / "locks").glob(f"{args.stack}-{args.variant}.linux-*.txt"))
    report = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "lock": lock.relative_to(root).as_posix(),
        "packages": sum(1 for line in lock.read_text().splitlines() if "==" in line and not line.startswith("#")),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_at_end": os.getloadavg()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
        "ratios": {"pip_over_uv_cold": round(results["pip_cold_s"] / results["uv_cold_s"], 2),
                   "pip_over_uv_warm": round(results["pip_warm_s"] / results["uv_warm_s"], 2)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["results"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
