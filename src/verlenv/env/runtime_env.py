"""Runtime defaults of an env: environment variables that every process started with the env's python sees (verl's
driver, its Ray workers, vLLM's EngineCore, SGLang's scheduler), set by a .pth file in the env's site-packages. The
values are data, in stacks.toml under `[stacks."<stack>".runtime_env]` (every variant) and
`[stacks."<stack>".variants.<variant>.runtime_env]` (that variant and those extending it):

    NAME = "value"        a default: a value the user exports wins
    NAME = ["dir", ...]   directories put in front of a search path (PATH), each unless it is there already

A value may name fields filled at install: {prefix} (the env's prefix) and {cuda_home} (a CUDA_HOME assembled inside
the env from its PyPI CUDA wheels, toolchain.runtime_cuda_home).
"""

import json
import re
import string
import subprocess
import tomllib
from pathlib import Path

from verlenv.catalog import stacks
from verlenv.errors import UserError
from verlenv.fsutil import write_atomic
from verlenv.native import toolchain

PTH_NAME = "verlenv-runtime-env.pth"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FIELDS = ("prefix", "cuda_home")
# Prints what the env's python sees for each name, and where its .pth would be.
PROBE = ("import json, os, sys, sysconfig; names = json.loads(sys.argv[1]); "
         "print(json.dumps({'site': sysconfig.get_paths()['purelib'], 'prefix': sys.prefix, "
         "'seen': {n: os.environ.get(n) for n in names}}))")

Value = str | list[str]


def _table(data: dict, keys: tuple[str, ...], where: str) -> dict[str, Value]:
    table = data
    for key in keys:
        table = table.get(key, {}) if isinstance(table, dict) else {}
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table of NAME = \"value\" or NAME = [\"dir\", ...]")
    for name, value in table.items():
        if not NAME.match(name):
            raise UserError(f"{where}: {name!r} is not an environment variable name (letters, digits, _)")
        texts = value if isinstance(value, list) else [value]
        if not texts or not all(isinstance(v, str) and v for v in texts):
            raise UserError(f"{where}.{name} must be a string or a list of directories, not {value!r}")
        for text in texts:
            try:
                fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
            except ValueError as e:
                raise UserError(f"{where}.{name}: {text!r} is not a template ({e}); write a literal brace as "
                                "{{") from None
            if unknown := [f for f in fields if f not in FIELDS]:
                raise UserError(f"{where}.{name}: {{{unknown[0]}}} in {text!r}; fields: "
                                + ", ".join(f"{{{f}}}" for f in FIELDS))
    return dict(table)


def defaults(stacks_toml: Path, stack: str, variant: str | None = None) -> dict[str, Value]:
    """The runtime_env tables in the catalog file, the stack's under its variant's (and those of the variants it
    extends): {NAME: value}; empty when there are none."""
    data = tomllib.loads(Path(stacks_toml).read_text())
    out = _table(data, ("stacks", stack, "runtime_env"), f'{stacks_toml}: stacks."{stack}".runtime_env')
    chain, seen = [], set()
    while variant and variant not in seen:
        seen.add(variant)
        chain.append(variant)
        parent = data.get("stacks", {}).get(stack, {}).get("variants", {}).get(variant, {})
        variant = parent.get("extends") if isinstance(parent, dict) else None
    for name in reversed(chain):
        out |= _table(data, ("stacks", stack, "variants", name, "runtime_env"),
                      f'{stacks_toml}: stacks."{stack}".variants.{name}.runtime_env')
    return out


def fields_used(settings: dict[str, Value]) -> set[str]:
    texts = [t for v in settings.values() for t in (v if isinstance(v, list) else [v])]
    return {f for t in texts for _, f, _, _ in string.Formatter().parse(t) if f}


def filled(settings: dict[str, Value], values: dict[str, str]) -> dict[str, Value]:
    """The settings with their {fields} filled."""
    return {name: [d.format(**values) for d in v] if isinstance(v, list) else v.format(**values)
            for name, v in settings.items()}


def pth_text(settings: dict[str, Value]) -> str:
    """One line: site runs a .pth line that starts with `import` in every interpreter start (not under -S)."""
    sets = [f"os.environ.setdefault({name!r}, {value!r})" for name, value in sorted(settings.items())
            if isinstance(value, str)]
    # The first directory listed ends up first: each is put in front, in reverse order.
    paths = [(name, d) for name, value in sorted(settings.items()) if isinstance(value, list) for d in reversed(value)]
    if paths:
        sets.append(f"[os.environ.__setitem__(n, os.pathsep.join([d, *filter(None, [os.environ.get(n)])])) "
                    f"for n, d in {paths!r} if d not in os.environ.get(n, '').split(os.pathsep)]")
    return f"import os; {'; '.join(sets)}\n"


def probe(python: str | Path, names: list[str]) -> dict:
    """What the env's python sees: {'site': its site-packages, 'prefix': its prefix, 'seen': {name: value or None}}."""
    try:
        proc = subprocess.run([str(python), "-c", PROBE, json.dumps(names)], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError as e:
        raise UserError(f"{python} cannot run ({e.strerror}): give the env's python") from None
    if proc.returncode != 0:
        raise UserError(f"{python} does not run: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(proc.stdout)


def field_values(settings: dict[str, Value], site: str, prefix: str, make: bool) -> dict[str, str]:
    """The fields' values for an env; make: assemble the CUDA_HOME a value names (install), else only say where."""
    values = {"prefix": prefix}
    if "cuda_home" in fields_used(settings):
        home = toolchain.runtime_cuda_home(site, Path(prefix), make=make)
        if home is None:
            raise UserError(f"the runtime defaults name {{cuda_home}}, but the env at {prefix} has no PyPI nvcc "
                            f"(nvidia/cu13/bin/nvcc under {site}); install the variant's lock")
        values["cuda_home"] = str(home)
    return values


def apply(python: str | Path, stacks_toml: Path, variant: stacks.Variant) -> Path | None:
    """Write (or, for a variant with no runtime_env, remove) the env's .pth; returns its path when written."""
    settings = defaults(stacks_toml, variant.stack.name, variant.name)
    env = probe(python, [])
    path = Path(env["site"]) / PTH_NAME
    if not settings:
        path.unlink(missing_ok=True)
        return None
    values = field_values(settings, env["site"], env["prefix"], make=True)
    write_atomic(path, pth_text(filled(settings, values)))
    return path
