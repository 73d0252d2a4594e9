"""Every config.json under a folder through what `verlenv verify --model-config` does before the GPU, and one step of
training on CPU: a held-out sweep of published configs (the rules of families.toml [shrink] were never fitted to them).

For each config: the shrink (a refusal is its one line), the env probe (the class exists in the env's transformers and
the rollout registry, the parameter count within max_params: verify/model_probe.py), then the tiny model built as the
trainer check builds it and trained one forward and backward step on CPU in the env
(tests/data/trainer/shrunk_models_in_env.py): its loss, how stochastic its sampling is, which parameters got no
gradient.

Run from the repo root, with the default env installed (nox -s env); a few minutes for a dozen configs:
    PYTHONPATH=src python benchmarks/model_config_sweep.py DIR --out result.json
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
from verlenv.catalog import families  # noqa: E402
from verlenv.errors import UserError  # noqa: E402
from verlenv.verify import model_probe  # noqa: E402

KERNELS = ROOT / "src" / "verlenv" / "verify" / "kernels"
PROGRAM = ROOT / "tests" / "data" / "trainer" / "shrunk_models_in_env.py"


def shrink_all(configs: list[Path]) -> tuple[dict, dict]:
    """Each config shrunk, or its refusal: (results by folder name, shrunk families by folder name)."""
    results, shrunk = {}, {}
    for path in configs:
        name = path.parent.name
        try:
            f = families.shrink(path)
        except UserError as e:
            results[name] = {"verdict": "refused", "line": str(e)}
            continue
        shrunk[name] = f
        results[name] = {"family": f.name, "model_class": f.model_class, "shrunk": f.shrunk}
    return results, shrunk


def probe(env_python: str, results: dict, rows: dict, max_params: int) -> None:
    """Each row's parameter count, or the probe's refusal: one env process for all of them; one per row only when
    the probe refuses one, to say which."""
    try:
        counts = model_probe.check(env_python, list(rows.values()), max_params)
    except UserError:
        counts = None
    for name, row in rows.items():
        try:
            results[name]["params"] = (counts or model_probe.check(env_python, [row], max_params))[row["name"]]
        except UserError as e:
            results[name].update(verdict="refused by the probe", line=str(e))


def probe_and_train(env_python: str, results: dict, shrunk: dict) -> None:
    table = families.table()
    rows = dict(zip(shrunk, table.rows(list(shrunk.values()))))
    probe(env_python, results, rows, table.shrink["max_params"])
    trainable = {n: r for n, r in rows.items() if "verdict" not in results[n]}
    if not trainable:
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "rows.json").write_text(json.dumps(list(trainable.values())))
        proc = subprocess.run([env_python, str(PROGRAM), str(KERNELS), f"{tmp}/rows.json", f"{tmp}/out.json"],
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            raise SystemExit(f"the CPU training step failed: {proc.stderr.strip().splitlines()[-1:]}")
        trained = json.loads(Path(tmp, "out.json").read_text())["models"]
    for name, row in trainable.items():
        r = trained[row["name"]]
        if "error" in r:
            results[name].update(verdict="failed to train", line=r["error"])
            continue
        results[name].update(verdict="trained", loss=round(r["loss"], 4),
                             entropy_mean=round(r["sampling"]["entropy_mean"], 3),
                             window_matters=r["window_matters"],
                             no_grad=sorted(k for k, g in r["grads"].items() if not g))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a folder holding <name>/config.json for each model")
    p.add_argument("--python", default=str(ROOT / ".venv-verl-0.9-fsdp" / "bin" / "python"), help="the env's python")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    configs = sorted(args.folder.glob("*/config.json"))
    if not configs:
        print(f"{args.folder}: no <name>/config.json below it; give the folder that holds one per model",
              file=sys.stderr)
        return 2
    if not Path(args.python).exists():
        print(f"--python {args.python}: no such interpreter; install the default env (nox -s env) or name one",
              file=sys.stderr)
        return 2
    results, shrunk = shrink_all(configs)
    probe_and_train(args.python, results, shrunk)
    for name, r in results.items():
        detail = r.get("line") or f"{r['params']:,} params, loss {r['loss']}, {len(r['no_grad'])} without gradient"
        print(f"{name:34} {r['verdict']:16} {detail}")
    if args.out:
        args.out.write_text(json.dumps({"what": __doc__.split("\n\n")[0], "command": " ".join(sys.argv),
                                        "results": results}, indent=1) + "\n")
    return 0 if all(r["verdict"] == "trained" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
