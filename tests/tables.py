"""Tests' handle on the packaged tables (data/packages.toml): a test that needs a row changed patches the table the
code reads, never the code."""

import dataclasses

from verlenv.catalog import packages


def patch_scripts(monkeypatch, **rows) -> None:
    """Replace script rows of the packages table for one test: key -> dict of timeout_s / lane (None removes the
    lane, {} the row's limits)."""
    real = packages.table()
    scripts = dict(real.scripts)
    for key, changes in rows.items():
        base = scripts.get(key) or packages.Script(key, key)
        scripts[key] = packages.Script(key, base.package, changes.get("timeout_s", 0.0), changes.get("lane"))
    changed = dataclasses.replace(real, scripts=scripts)
    monkeypatch.setattr(packages, "table", lambda: changed)
