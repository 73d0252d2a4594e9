"""Slow paths a family would train on, said in words: the fast kernels each family row needs (families.toml
`needs`) against what the env has, before anything runs (the static check family-kernels/<family>); and the table
of fallback lines and vLLM attention backends (data/kernel_paths.toml) that verl's trainer check reads its run's
output with (verify/kernels/_kernel_paths.py)."""

import re
from pathlib import Path

from verlenv.catalog import families as families_mod, packages
from verlenv.errors import UserError
from verlenv.fsutil import load_table, packaged_table
from verlenv.verify.results import CheckResult

DATA = Path(__file__).parents[1] / "data" / "kernel_paths.toml"
FALLBACK_KEYS = ("component", "signature", "says", "source")
BACKEND_KEYS = ("backend", "archs", "head_sizes", "why")
WARM_KEYS = {"needs": str, "rollout": str, "archs": list, "module": str, "spec": str, "jit_cache": str,
             "timeout_s": int, "why": str}
# Keys a row may leave out: the source build that carries its module compiled ahead of time.
WARM_OPTIONAL = {"prebuilt_by": str}


def parse(path: Path, data: dict) -> dict:
    """The table as the trainer check gets it: fallbacks, attention kinds (rows in vLLM's order), attention_archs."""
    fallbacks = data.get("fallbacks", {})
    attention = data.get("attention", {})
    archs = data.get("attention_archs", [])
    if not isinstance(fallbacks, dict) or not isinstance(attention, dict):
        raise UserError(f"{path}: [fallbacks.<id>] and [[attention.<kind>]] must be tables")
    if not isinstance(archs, list) or not all(isinstance(a, str) and re.fullmatch(r"\d+\.\d+", a) for a in archs):
        raise UserError(f"{path}: attention_archs must be a list of compute capabilities like \"9.0\"")
    for key, row in fallbacks.items():
        if not isinstance(row, dict) or any(not isinstance(row.get(k), str) or not row[k] for k in FALLBACK_KEYS):
            raise UserError(f"{path}: fallbacks.{key} needs {', '.join(FALLBACK_KEYS)} (non-empty strings)")
        try:
            re.compile(row["signature"])
        except re.error as e:
            raise UserError(f"{path}: fallbacks.{key}.signature: not a regular expression ({e})") from None
    for kind, rows in attention.items():
        if not isinstance(rows, list) or not rows:
            raise UserError(f"{path}: attention.{kind} must be an array of tables ([[attention.{kind}]])")
        for row in rows:
            ok = (isinstance(row, dict) and isinstance(row.get("backend"), str) and isinstance(row.get("why"), str)
                  and isinstance(row.get("archs"), list) and isinstance(row.get("head_sizes"), list)
                  and all(isinstance(a, str) for a in row["archs"])
                  and all(isinstance(h, int) and not isinstance(h, bool) for h in row["head_sizes"]))
            if not ok:
                raise UserError(f"{path}: attention.{kind}: each row needs {', '.join(BACKEND_KEYS)} (backend and why "
                                "strings, archs a list of strings, head_sizes a list of integers)")
        if rows[-1]["archs"] or rows[-1]["head_sizes"]:
            raise UserError(f"{path}: attention.{kind}: the last row must take any arch and head size (vLLM's last "
                            f"resort), not {rows[-1]['backend']} alone")
    return {"fallbacks": fallbacks, "attention": attention, "attention_archs": archs,
            "jit_warm": _jit_warm(path, data.get("jit_warm", {}))}


def _jit_warm(path: Path, rows) -> dict:
    """[jit_warm.<id>] rows: every key of WARM_KEYS, of its type; archs compute capabilities; a positive timeout."""
    if not isinstance(rows, dict):
        raise UserError(f"{path}: jit_warm must be a table of [jit_warm.<id>] rows")
    for key, row in rows.items():
        ok = isinstance(row, dict) and set(row) - set(WARM_OPTIONAL) == set(WARM_KEYS) and all(
            isinstance(row[k], t) and not isinstance(row[k], bool)
            for k, t in (WARM_KEYS | WARM_OPTIONAL).items() if k in row)
        if not ok or not all(isinstance(a, str) and re.fullmatch(r"\d+\.\d+", a) for a in row["archs"]) \
                or row["timeout_s"] <= 0:
            raise UserError(f"{path}: jit_warm.{key} needs exactly " + ", ".join(
                f"{k} ({t.__name__})" for k, t in WARM_KEYS.items()) + ", and may name prebuilt_by (str); archs like "
                "\"9.0\", timeout_s > 0")
    return {key: dict(row) for key, row in rows.items()}


def warm_rows(rows: list[dict], rollout: str, families_table: families_mod.Table, paths: dict | None = None) -> dict:
    """The jit_warm rows a run's families need with this rollout engine (the trainer check picks those of its GPU)."""
    paths = paths or table()
    needed = {p for row in rows for p in needs_of(row, families_table)}
    return {key: row for key, row in paths["jit_warm"].items() if row["rollout"] == rollout and row["needs"] in needed}


def load(path: Path | None = None) -> dict:
    return load_table(Path(path) if path else DATA, parse)


def table() -> dict:
    """The packaged table, read once per process: what the trainer check gets as its profile's `kernel_paths`."""
    return packaged_table(DATA, parse)


def check_rows(families_table: families_mod.Table, paths: dict | None = None) -> None:
    """Every family row's `needs` names a package of packages.toml and its `attention` a kind of the table: one line
    for the first that does not (a row the lead adds is checked when verify starts, and by the tests)."""
    paths = paths or table()
    known = packages.table().packages
    for family in families_table.families.values():
        for package in family.needs:
            if package not in known:
                raise UserError(f"{families_table.path}: families.{family.name}.needs: {package!r} is no package of "
                                f"packages.toml; valid: {', '.join(known)}")
        if family.attention and family.attention not in paths["attention"]:
            raise UserError(f"{families_table.path}: families.{family.name}.attention is {family.attention!r}; "
                            f"valid: {', '.join(paths['attention'])}")
    caches = packages.table().jit_caches
    for key, row in paths["jit_warm"].items():
        if row["needs"] not in known or row["jit_cache"] not in caches:
            raise UserError(f"{DATA.name}: jit_warm.{key}: needs {row['needs']!r} must be a package of packages.toml "
                            f"and jit_cache {row['jit_cache']!r} one of its [jit_caches] ({', '.join(caches)})")


def needs_of(row: dict, families_table: families_mod.Table) -> dict[str, str]:
    """A family row's needs; for a shrunk config.json (no needs of its own), those of the table's family of the same
    model class."""
    if row.get("needs"):
        return dict(row["needs"])
    same = [f for f in families_table.families.values() if f.model_class == row.get("model_class")]
    return dict(same[0].needs) if same else {}


def check_family_kernels(rows: list[dict], installed: dict[str, list[str]], provided: frozenset[str],
                         unbuilt_ok: frozenset[str], families_table: families_mod.Table) -> list[CheckResult]:
    """family-kernels/<family>: each fast kernel package the family needs is installed, else what it would run slowly.

    provided: the packages the variant installs (its lock's pins and source builds): one missing there is the env's
    fault (fail, required), unless it is a source build not yet built on a machine without a GPU (warn); one the
    variant does not provide (an older stack) is a warning, in the same words."""
    table_ = packages.table().packages
    out = []
    for row in rows:
        needs = needs_of(row, families_table)
        if not needs:
            continue
        missing = {p: what for p, what in needs.items()
                   if not any(d in installed for d in (table_[p].dists if p in table_ else (p,)))}
        name = f"family-kernels/{row['name']}"
        if not missing:
            out.append(CheckResult(name, "env", "static", "pass",
                                   f"family {row['name']}: {', '.join(needs)} installed (its fast path)",
                                   numbers={"needs": sorted(needs)}))
            continue
        sentences = [f"family {row['name']} would run {what}: {p} is not importable" for p, what in missing.items()]
        env_fault = [p for p in missing if p in provided and p not in unbuilt_ok]
        if env_fault:
            status, fix = "fail", (f"the env should have {', '.join(env_fault)}: `verlenv install`, then "
                                   f"`verlenv build {' '.join(env_fault)}`")
        elif any(p in provided for p in missing):
            status, fix = "warn", "not built yet: it is compiled for a GPU target (`nox -s build -- --gpu h100`)"
        else:
            status, fix = "warn", "this variant does not install it (a stack without this family's fast path)"
        out.append(CheckResult(name, "env", "static", status, "; ".join(sentences) + f" ({fix})",
                               required=status == "fail", numbers={"missing": sorted(missing)}))
    return out
