"""Which GPU profiles a built wheel runs on, read from its objects: for each wheel (a path, or the `wheel` of each
result in a `verlenv build --json` file), its size, every CUDA object's code (sm_90, sm_100f, compute_100...) and,
per row of data/gpus.toml, whether every CUDA object holds a cubin that runs there (the arch-family rules of
data/gpu_code.toml: an sm_100 cubin runs on a B300's 10.3, never on 12.0). No GPU needed.

    python scripts/wheel_archs.py WHEEL_OR_BUILD_JSON... [--json OUT]
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from verlenv import cubins
from verlenv.catalog import gpus


def wheels_of(path: Path) -> list[Path]:
    if path.suffix == ".whl":
        return [path]
    results = json.loads(path.read_text())
    return [Path(r["wheel"]) for r in (results if isinstance(results, list) else [results])]


def read(wheel: Path) -> dict:
    """The wheel's size, each CUDA object's code names and the profiles every CUDA object runs on."""
    with tempfile.TemporaryDirectory() as tmp:
        objects = cubins.wheel_shared_objects(wheel, Path(tmp))
        code = {o.name: sorted({e.name for e in cubins.shared_object_archs(o)}) for o in objects}
        # One pass for every profile: the archs some CUDA object has no cubin for.
        rows = gpus.profiles()
        lacking = set().union(*cubins.missing_archs(objects, [p.arch for p in rows.values()]).values())
        profiles = {key: cubins.sm_of(p.arch) not in lacking for key, p in rows.items()}
    return {"wheel": wheel.name, "bytes": wheel.stat().st_size,
            "cuda_objects": {name: names for name, names in code.items() if names}, "runs_on": profiles}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="also write the findings here")
    args = parser.parse_args(argv)
    if missing := [str(p) for p in args.inputs if not p.is_file()]:
        print(f"wheel_archs: no such file: {', '.join(missing)} (give wheels or `verlenv build --json` files)",
              file=sys.stderr)
        return 2
    found = [read(w) for p in args.inputs for w in wheels_of(p)]
    for f in found:
        code = sorted({n for names in f["cuda_objects"].values() for n in names})
        runs = [k for k, ok in f["runs_on"].items() if ok]
        print(f"{f['wheel']}: {f['bytes'] / 2**20:.1f} MiB, {len(f['cuda_objects'])} CUDA objects, code "
              f"{' '.join(code) or 'none'}; runs on {', '.join(runs) or 'no profile'}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
