"""Runtime defaults of an env: environment variables that every process started with the env's python sees (verl's
driver, its Ray workers, vLLM's EngineCore), set by a .pth file in the env's site-packages. They are defaults: a
value the user exports wins. The values are data, in stacks.toml under `[stacks."<stack>".runtime_env]`.
"""

import json
import re
import subprocess
import tomllib
from pathlib import Path

from verlenv import catalog
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic

PTH_NAME = "verlenv-runtime-env.pth"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Prints what the env's python sees for each name, and where its .pth would be.
PROBE = ("import json, os, sys, sysconfig; names = json.loads(sys.argv[1]); "
         "print(json.dumps({'site': sysconfig.get_paths()['purelib'], "
         "'seen': {n: os.environ.get(n) for n in names}}))")


def defaults(stacks_toml: Path, stack: str) -> dict[str, str]:
    """The stack's runtime_env table in the catalog file: {NAME: value}; empty when it has none."""
    table = tomllib.loads(Path(stacks_toml).read_text()).get("stacks", {}).get(stack, {}).get("runtime_env", {})
    where = f'{stacks_toml}: stacks."{stack}".runtime_env'
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table of NAME = \"value\"")
    for name, value in table.items():
        if not NAME.match(name):
            raise UserError(f"{where}: {name!r} is not an environment variable name (letters, digits, _)")
        if not isinstance(value, str):
            raise UserError(f"{where}.{name} must be a string, not {value!r}")
    return dict(table)


def pth_text(settings: dict[str, str]) -> str:
    """One line: site runs a .pth line that starts with `import` in every interpreter start (not under -S)."""
    sets = "; ".join(f"os.environ.setdefault({name!r}, {value!r})" for name, value in sorted(settings.items()))
    return f"import os; {sets}\n"


def probe(python: str | Path, names: list[str]) -> dict:
    """What the env's python sees: {'site': its site-packages, 'seen': {name: value or None}}."""
    try:
        proc = subprocess.run([str(python), "-c", PROBE, json.dumps(names)], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError as e:
        raise UserError(f"{python} cannot run ({e.strerror}): give the env's python") from None
    if proc.returncode != 0:
        raise UserError(f"{python} does not run: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(proc.stdout)


def apply(python: str | Path, stacks_toml: Path, variant: catalog.Variant) -> Path | None:
    """Write (or, for a stack with no runtime_env, remove) the env's .pth; returns its path when written."""
    settings = defaults(stacks_toml, variant.stack.name)
    path = Path(probe(python, [])["site"]) / PTH_NAME
    if not settings:
        path.unlink(missing_ok=True)
        return None
    write_atomic(path, pth_text(settings))
    return path
