"""Time `verlenv bundle` (cold and warm download cache, split into parts) and `verlenv install` from the
split bundle (offline) against `verlenv install` from PyPI, on one machine in one run.

Every phase gets fresh caches of its own (verlenv's file cache for the cold bundle, uv's cache for each
install), so the install from PyPI downloads everything and the install from the bundle reads only the parts.
Usage: python benchmarks/bundle_times.py --stack verl-0.9 --variant fsdp --out docs/benchmarks/bundle-verl-0.9-fsdp.json
(--bundle-only: only the bundle's size and its cold and warm times, e.g. for the megatron variant)
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


def timed(cmd: list[str], root: Path, env: dict) -> float:
    started = time.monotonic()
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    return round(time.monotonic() - started, 1)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", default="verl-0.9")
    p.add_argument("--variant", default="fsdp")
    p.add_argument("--split", default="56MiB")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--bundle-only", action="store_true", help="time only the bundle (cold, warm), no installs")
    p.add_argument("--workdir", type=Path,
                   help="where caches, bundles and venvs go (default: a temp dir, removed after)")
    args = p.parse_args()
    root = Path(__file__).resolve().parent.parent
    work = Path(tempfile.mkdtemp(prefix="verlenv-bundle-bench-", dir=args.workdir))
    verlenv = [sys.executable, "-m", "verlenv"]
    base_env = {**os.environ, "VERLENV_CACHE": str(work / "cache")}
    bundle = work / "bundle"
    make = [*verlenv, "bundle", "--stack", args.stack, "--variant", args.variant, "--no-built", "--out", str(bundle),
            "--split", args.split]
    results: dict = {}
    try:
        results["bundle_cold_s"] = timed(make, root, base_env)
        results["bundle_warm_s"] = timed(make, root, base_env)
        manifest = json.loads((bundle / "manifest.json").read_text())
        parts = work / "bundle.parts"
        results["bundle_files"] = sum(1 for e in manifest["files"] if e["file"])
        results["bundle_bytes"] = folder_bytes(bundle)
        results["parts"] = len(list(parts.glob("bundle.tar.part*")))
        results["parts_bytes"] = folder_bytes(parts)
        # The source-built wheels: "left out (--no-built)".
        results["built"] = manifest["variants"][args.variant]["built"]
        if args.bundle_only:
            return write_report(args, results)
        # The parts folder is what reaches a node: install joins, checks and installs it with no index.
        offline_env = {**base_env, "UV_CACHE_DIR": str(work / "uv-bundle"), "UV_INDEX_URL": "http://index.invalid/simple",
                       "https_proxy": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
        results["install_from_split_bundle_s"] = timed(
            [*verlenv, "install", "--bundle", str(parts), "--prefix", str(work / "venv-bundle")], root, offline_env)
        shutil.rmtree(work / "venv-bundle")
        shutil.rmtree(work / "uv-bundle")
        shutil.rmtree(parts / "bundle")
        # Joined parts already there: install from the bundle folder itself.
        results["install_from_bundle_s"] = timed(
            [*verlenv, "install", "--bundle", str(bundle), "--prefix", str(work / "venv-bundle")], root, offline_env)
        shutil.rmtree(work / "venv-bundle")
        shutil.rmtree(work / "uv-bundle")
        pypi_env = {**base_env, "UV_CACHE_DIR": str(work / "uv-pypi")}
        results["install_from_pypi_s"] = timed(
            [*verlenv, "install", "--stack", args.stack, "--variant", args.variant, "--prefix",
             str(work / "venv-pypi")], root, pypi_env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return write_report(args, results)


def write_report(args: argparse.Namespace, results: dict) -> int:
    report = {
        "command": " ".join(["python", "benchmarks/bundle_times.py", *sys.argv[1:]]),
        "stack": args.stack, "variant": args.variant, "split": args.split,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "note": "bundle without source-built wheels (--no-built)"
                + ("; no installs (--bundle-only)" if args.bundle_only
                   else "; each install into a fresh venv with an empty uv cache"),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
