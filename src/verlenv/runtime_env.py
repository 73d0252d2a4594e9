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


def check(python: str | Path, stacks_toml: Path, variant: catalog.Variant):
    """env/runtime-defaults: every default of the stack is in effect in the env (or the user set their own)."""
    from verlenv.verify.results import CheckResult  # here: verlenv.verify imports install, which imports us

    settings = defaults(stacks_toml, variant.stack.name)
    name = "env/runtime-defaults"
    if not settings:
        return CheckResult(name, "env", "static", "pass", f"stack {variant.stack.name} sets no runtime defaults")
    seen = probe(python, sorted(settings))["seen"]
    missing = [n for n, v in seen.items() if v is None]
    theirs = {n: v for n, v in seen.items() if v is not None and v != settings[n]}
    numbers = {"defaults": settings, "seen": seen}
    if missing:
        return CheckResult(name, "env", "static", "warn", f"not set in this env: {', '.join(missing)} "
                           f"(no {PTH_NAME}: run `verlenv install` again)", numbers=numbers)
    said = "; ".join(f"{n}={v} set by the user (default {settings[n]})" for n, v in theirs.items())
    return CheckResult(name, "env", "static", "pass",
                       ", ".join(f"{n}={v}" for n, v in sorted(seen.items())) + (f"; {said}" if said else ""),
                       numbers=numbers)


def main(argv: list[str] | None = None) -> int:
    """`python -m verlenv.runtime_env --python PY`: write the defaults into an env installed without `verlenv
    install` (an offline carry, a conda env made by hand)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m verlenv.runtime_env", description=main.__doc__)
    parser.add_argument("--python", required=True, help="the env's interpreter")
    parser.add_argument("--stack", help="stack (default: the catalog's default)")
    parser.add_argument("--variant", default="fsdp", help="fsdp or megatron")
    args = parser.parse_args(argv)
    try:
        cat = catalog.load()
        path = apply(args.python, cat.path, cat.variant(args.stack, args.variant))
    except UserError as e:
        print(f"verlenv: {e}", file=sys.stderr)
        return e.exit_code
    print(f"wrote {path}" if path else "this stack sets no runtime defaults")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
