"""What one more GPU arch costs a source build: one real CUDA unit of a recipe, compiled with the exact command torch's
cpp_extension wrote into its build.ninja, once per arch set (interleaved, `--repeat` times), under `nice -n 10` with
one job; the wall and CPU seconds of each compile and the code read back from the object's .nv_fatbin.

The build.ninja comes from the real builder stopped as soon as torch has written it (tests/test_build_env.build_until):
`--source TAR` runs that first (apex: a `git archive` of the recipe's commit), else `--ninja FILE` names one.
Usage (apex's fused layer norm, Megatron's, sm_90 vs sm_90+sm_100):
  python benchmarks/arch_unit_cost.py --package apex --variant megatron --source apex-6424da3b.tar \
      --unit csrc/layer_norm_cuda_kernel.cu --sets "9.0" "9.0;10.0" --repeat 2 --out docs/builds/X.json
"""

import argparse
import json
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
from test_build_env import build_until, torch_python  # noqa: E402
from verlenv import cubins  # noqa: E402


def ninja_file(package: str, variant: str, source: str, unit: str, archs: list[str], work: Path) -> Path:
    def written(w: Path) -> bool:
        return any(unit in f.read_text() and "rule cuda_compile" in f.read_text()
                   for f in w.glob("build-*/src/**/build.ninja"))

    build_until(ROOT, ("verl-0.9", variant), package, archs, work, work / "wheelhouse", source, written, guard_s=1800)
    return next(f for f in work.glob("build-*/src/**/build.ninja") if unit in f.read_text())


def compile_command(ninja: Path, unit: str, archs: list[str], out: Path) -> list[str]:
    """The unit's cuda_compile line with its -gencode flags replaced by `archs` (code=sm_XX, as torch writes them)."""
    text = ninja.read_text()
    var = {m[1]: m[2] for m in re.finditer(r"^(\w+) = (.*)$", text, re.M)}
    src = next(m[1] for m in re.finditer(r"^build \S+: cuda_compile (\S+)$", text, re.M) if m[1].endswith(unit))
    post, skip = [], False
    for arg in shlex.split(var["cuda_post_cflags"]):
        # torch writes `-gencode=arch=...`, flash-attn's setup.py `-gencode arch=...`; its `--threads N` would compile
        # the archs side by side: one thread, as one job of MAX_JOBS=1 would at NVCC_THREADS=1.
        if skip or arg.startswith("-gencode="):
            skip = False
            continue
        if arg in ("-gencode", "--threads"):
            skip = True
            continue
        post.append(arg)
    gencodes = [f"-gencode=arch=compute_{a.replace('.', '')},code=sm_{a.replace('.', '')}" for a in archs]
    return [var["nvcc"], *shlex.split(var["cuda_cflags"]), "-c", src, "-o", str(out), *post, *gencodes,
            "--threads", "1"]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default="apex")
    p.add_argument("--variant", default="megatron")
    p.add_argument("--source", help="the recipe's source (a tar of the commit for apex; flash-attn's sdist is fetched "
                                    "and hash-checked when none is given): run the builder for its ninja")
    p.add_argument("--ninja", type=Path, help="a build.ninja torch already wrote")
    p.add_argument("--unit", required=True, help="the .cu file, e.g. csrc/layer_norm_cuda_kernel.cu")
    p.add_argument("--sets", nargs="+", required=True, help='arch sets, e.g. "9.0" "9.0;10.0"')
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sets = [s.split(";") for s in args.sets]
    work = Path(tempfile.mkdtemp(prefix="arch-unit-cost-"))
    ninja = args.ninja or ninja_file(args.package, args.variant, args.source, args.unit, sets[-1], work)
    print(f"ninja file: {ninja}", file=sys.stderr)
    runs = []
    for i in range(args.repeat):
        for archs in sets:
            out = work / f"unit-{'-'.join(archs)}-{i}.o"
            cmd = compile_command(ninja, args.unit, archs, out)
            cpu, started = children_cpu(), time.monotonic()
            subprocess.run(["nice", "-n", "10", *cmd], check=True)
            wall, cpu = time.monotonic() - started, children_cpu() - cpu
            code = sorted({e.name for e in cubins.shared_object_archs(out)})
            runs.append({"archs": archs, "repeat": i, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "code": code,
                         "load_avg_after": os.getloadavg()[0]})
            print(json.dumps(runs[-1]), file=sys.stderr)
    by_set = {";".join(a): [r for r in runs if r["archs"] == a] for a in sets}
    median = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in by_set.items()}
    base = ";".join(sets[0])
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "package": args.package, "unit": args.unit,
        "nvcc_command_of": "torch's build.ninja (-gencode replaced per set)",
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "niceness": 10, "jobs": 1,
                    "note": "shared by other builds and test runs: CPU seconds are the steadier figure"},
        "python": None if args.ninja else torch_python(),
        "runs": runs, "median": median,
        "ratio_to_first_set": {k: {m: round(v[m] / median[base][m], 2) for m in v} for k, v in median.items()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
