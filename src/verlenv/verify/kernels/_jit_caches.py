"""Where each JIT compiler caches (data/packages.toml's [jit_caches] rows, as verlenv hands them over): one resolver
for the engine checks, which run in the env without verlenv, and for the cluster fingerprint. Standard library only."""

import os


def folder(row: dict, environ=os.environ) -> str:
    """The row's folder in this environment: its variable, else its default ({xdg_cache}, {user}, ~ expanded)."""
    home = os.path.expanduser("~")
    xdg = environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    user = environ.get("USER") or str(os.getuid())
    base = environ.get(row["var"]) or row["default"].format(xdg_cache=xdg, user=user)
    return os.path.join(os.path.expanduser(base), *filter(None, [row.get("sub", "")]))


def watched(rows: dict, engine: str) -> dict:
    """The rows an engine's check watches (its name in their used_by)."""
    return {name: row for name, row in rows.items() if engine in row.get("used_by", ())}
