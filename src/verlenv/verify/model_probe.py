"""A shrunk --model-config checked in the env before anything runs: its class exists in the env's transformers and
its rollout engine, and the model built from it is tiny. The tool's own venv has no transformers, so the env's python
builds it on the meta device (kernels/_probe_shrunk_models.py): the config code the trainer check runs, so what passes
here builds there. The engine's classes come from its registry (data/backends.toml), a list of names."""

import json
import subprocess
from pathlib import Path

from verlenv.errors import UserError

PROBE = Path(__file__).with_name("kernels") / "_probe_shrunk_models.py"
TIMEOUT_S = 300  # importing torch and transformers on a loaded machine; the build itself is on the meta device


def check(python: str, rows: list[dict], max_params: int, registry: str | None = None) -> dict[str, int]:
    """Each shrunk row's parameter count; one line for the first row whose class is unknown, whose config
    transformers refuses, whose model holds more than max_params parameters, or whose class the rollout engine
    (its registry, data/backends.toml) does not run."""
    if not rows:
        return {}
    try:
        proc = subprocess.run([python, str(PROBE), *([registry] if registry else [])], input=json.dumps(rows),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"--model-config: the env's python ({python}) did not build the shrunk models on the meta "
                        f"device within {TIMEOUT_S} s") from None
    try:
        results = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--model-config: the env's python ({python}) could not probe the shrunk models: {last}") \
            from None
    by_name = {row["name"]: row for row in rows}
    for result in results:
        where = f"--model-config {by_name[result['name']]['source']}"
        if result.get("error"):
            raise UserError(f"{where}: {result['error']}")
        if result["params"] > max_params:
            raise UserError(f"{where}: the shrunk model holds {result['params']:,} parameters, above the check's "
                            f"{max_params:,} (families.toml [shrink] max_params): a size it keeps is too large (most "
                            f"in {result['heaviest']})")
    return {r["name"]: r["params"] for r in results}
