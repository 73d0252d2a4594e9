"""The packages `verlenv verify` checks, as `data/packages.toml` rows: distributions, compiled objects, which part of
a variant needs each, its kernel check scripts and their limits. Every module that needs to know a package reads
it here; a new package is a row."""

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from verlenv.errors import UserError
from verlenv.fsutil import load_table, packaged_table

DATA = Path(__file__).parents[1] / "data" / "packages.toml"
# What a row's required_by may name: every variant, or the variants of one actor or rollout (stacks.toml).
PARTS = ("actor", "rollout")
# The tools a run-time JIT may call, as its builds find them: nvcc (under CUDA_HOME), gcc (nvcc's host compiler),
# c++ (the C++ compiler of the host code, $CXX), ninja.
JIT_TOOLS = ("nvcc", "gcc", "c++", "ninja")


@dataclass(frozen=True)
class Jit:
    """A package that compiles kernels at run time: the tools its builds call, and the oldest gcc (nvcc's host
    compiler) known to compile them, with why."""

    tools: tuple[str, ...]
    min_gcc: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Package:
    """A package as checks name it: its distributions (any one = installed) and its compiled objects."""

    name: str
    dists: tuple[str, ...]
    # (distribution, modules) of the compiled objects that must load and carry the GPU's code.
    objects: tuple[tuple[str, tuple[str, ...]], ...] = ()
    required_by: tuple[str, ...] = ()
    intact: tuple[str, ...] = ()
    recorded: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    # Shared libraries its objects need from the system (not from a wheel): soname -> how to install it.
    system_libraries: tuple[tuple[str, str], ...] = ()
    jit: Jit | None = None
    # Requirements its metadata declares that the env leaves unmet on purpose (installed --no-deps): name -> why.
    unmet: dict[str, str] = field(default_factory=dict)

    def required_for(self, actor: str, rollout: str) -> bool:
        return any(r == "all" or r == f"actor:{actor}" or r == f"rollout:{rollout}" for r in self.required_by)


@dataclass(frozen=True)
class Script:
    """A kernel check script's limits: verify/kernels/check_<key>.py."""

    key: str
    package: str
    timeout_s: float = 0.0
    lane: int | None = None


@dataclass(frozen=True)
class Table:
    path: Path
    packages: dict[str, Package]
    scripts: dict[str, Script]
    report_also: tuple[str, ...] = ()
    report_patterns: tuple[str, ...] = ()
    order: tuple[str, ...] = field(default=())
    # [jit_caches.<name>]: where each JIT compiler caches (var, default, sub, nvcc, used_by), as the kernel checks and
    # the cluster fingerprint read it.
    jit_caches: dict = field(default_factory=dict)

    def required(self, actor: str, rollout: str) -> frozenset[str]:
        """The packages a variant of this actor and rollout cannot work without: a failure of theirs fails the run."""
        return frozenset(p.name for p in self.packages.values() if p.required_for(actor, rollout))

    def intact(self) -> dict[str, str]:
        """Distribution -> the package its integrity check belongs to."""
        return {d: p.name for p in self.packages.values() for d in p.intact}

    def recorded(self) -> frozenset[str]:
        return frozenset(d for p in self.packages.values() for d in p.recorded)

    def unmet(self) -> dict[tuple[str, str], str]:
        """(distribution, requirement) -> why the env leaves that declared requirement unmet (pip check expects it)."""
        return {(d, r): why for p in self.packages.values() for d in p.dists for r, why in p.unmet.items()}

    def lanes(self) -> tuple[str, ...]:
        """The scripts the fast proof starts first, in their lane order."""
        laned = sorted((s for s in self.scripts.values() if s.lane is not None), key=lambda s: s.lane)
        return tuple(s.key for s in laned)

    def script(self, key: str) -> Script:
        """A script's row; a script no package names (a user's --kernels-dir) belongs to the package its name says."""
        return self.scripts.get(key) or Script(key, canonicalize_name(key))

    def report_names(self, installed: dict[str, str]) -> dict[str, str | None]:
        """The installed versions a report names: every package's distributions, then `also`, then what the
        patterns match (only where installed)."""
        wanted = [d for p in self.packages.values() for d in p.dists] + list(self.report_also)
        out: dict[str, str | None] = {}
        for name in wanted:
            if not any(fnmatch.fnmatchcase(name, pat) for pat in self.report_patterns) or name in installed:
                out[name] = installed.get(name)
        out.update({n: v for n, v in sorted(installed.items())
                    if any(fnmatch.fnmatchcase(n, pat) for pat in self.report_patterns)})
        return out


def _strings(value, where: str, path: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"{path}: {where} must be a list of non-empty strings")
    return tuple(value)


def _libraries(value, where: str, path: Path) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and ".so" in k and isinstance(v, str) and v
                                              for k, v in value.items()):
        raise UserError(f"{path}: {where} must be a table of soname = \"how to install it\"")
    return tuple(value.items())


def _jit(value, where: str, path: Path) -> Jit:
    if not isinstance(value, dict) or set(value) - {"tools", "min_gcc", "why"}:
        raise UserError(f"{path}: {where} must be a table of tools, min_gcc and why")
    min_gcc, why = value.get("min_gcc"), value.get("why", "")
    if min_gcc is not None and (isinstance(min_gcc, bool) or not isinstance(min_gcc, int) or min_gcc < 1):
        raise UserError(f"{path}: {where}.min_gcc must be a gcc major version (a positive integer)")
    if min_gcc is not None and not (isinstance(why, str) and why.strip()):
        raise UserError(f"{path}: {where}.why must say why gcc >= {min_gcc} is needed")
    tools = _strings(value.get("tools"), f"{where}.tools", path)
    if unknown := [t for t in tools if t not in JIT_TOOLS]:
        raise UserError(f"{path}: {where}.tools: {unknown[0]!r}; valid: {', '.join(JIT_TOOLS)}")
    return Jit(tools, min_gcc, why)


def parse(path: Path, data: dict) -> Table:
    """The rows of a decoded packages.toml, or one line saying what in it is wrong."""
    rows = data.get("packages")
    if not isinstance(rows, dict) or not rows:
        raise UserError(f"{path}: no [packages.<name>] rows")
    packages: dict[str, Package] = {}
    scripts: dict[str, Script] = {}
    for name, row in rows.items():
        packages[name] = _package(path, name, row)
        for key in packages[name].checks:
            if key in scripts:
                raise UserError(f"{path}: packages.{name}.checks: {key!r} is also a check of {scripts[key].package}")
            scripts[key] = Script(key, name)
    scripts = _script_limits(path, data.get("scripts", {}), scripts)
    report = data.get("report", {})
    return Table(path=path, packages=packages, scripts=scripts,
                 report_also=_strings(report.get("also", []), "report.also", path),
                 report_patterns=_strings(report.get("patterns", []), "report.patterns", path),
                 order=tuple(packages), jit_caches=_jit_caches(path, data.get("jit_caches", {})))


JIT_CACHE_KEYS = {"var": str, "default": str, "sub": str, "nvcc": bool, "used_by": list, "job_gib": float}


def _jit_caches(path: Path, rows) -> dict:
    """The [jit_caches.<name>] rows, each checked: var and default strings, the rest of JIT_CACHE_KEYS optional."""
    if not isinstance(rows, dict):
        raise UserError(f"{path}: jit_caches must be a table of [jit_caches.<name>] rows")
    for name, row in rows.items():
        where = f"jit_caches.{name}"
        if not isinstance(row, dict) or not {"var", "default"} <= set(row):
            raise UserError(f"{path}: {where} needs var and default")
        for key, value in row.items():
            if key not in JIT_CACHE_KEYS or not isinstance(value, JIT_CACHE_KEYS[key]):
                raise UserError(f"{path}: {where}.{key}: valid keys: " + ", ".join(
                    f"{k} ({t.__name__})" for k, t in JIT_CACHE_KEYS.items()))
        if row.get("job_gib", 1.0) <= 0:
            raise UserError(f"{path}: {where}.job_gib must be a positive number of GiB")
    return {name: dict(row) for name, row in rows.items()}


def _package(path: Path, name: str, row) -> Package:
    """One [packages.<name>] row, or one line saying what in it is wrong."""
    where = f"packages.{name}"
    if not isinstance(row, dict):
        raise UserError(f"{path}: {where} must be a table")
    if canonicalize_name(name) != name:
        raise UserError(f"{path}: {where}: name it {canonicalize_name(name)!r} (the canonical form)")
    keys = {"dists", "required_by", "objects", "intact", "recorded", "checks", "system_libraries", "jit", "unmet"}
    if unknown := sorted(set(row) - keys):
        raise UserError(f"{path}: {where}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(keys))}")
    required_by = _strings(row.get("required_by", []), f"{where}.required_by", path)
    for r in required_by:
        part, _, value = r.partition(":")
        if r != "all" and (part not in PARTS or not value):
            raise UserError(f"{path}: {where}.required_by: {r!r}; valid: all, actor:<name>, rollout:<name>")
    objects = row.get("objects", {})
    if not isinstance(objects, dict):
        raise UserError(f"{path}: {where}.objects must be a table of distribution = [modules]")
    checks = _strings(row.get("checks", []), f"{where}.checks", path)
    unmet = row.get("unmet", {})
    if not isinstance(unmet, dict) or not all(isinstance(v, str) and v.strip() for v in unmet.values()):
        raise UserError(f"{path}: {where}.unmet must be a table of requirement = reason")
    return Package(
        name=name,
        dists=_strings(row.get("dists"), f"{where}.dists", path) if "dists" in row else (name,),
        objects=tuple((canonicalize_name(d), _strings(m, f"{where}.objects.{d}", path)) for d, m in objects.items()),
        required_by=required_by,
        intact=_strings(row.get("intact", []), f"{where}.intact", path),
        recorded=_strings(row.get("recorded", []), f"{where}.recorded", path),
        checks=checks,
        system_libraries=_libraries(row.get("system_libraries", {}), f"{where}.system_libraries", path),
        jit=_jit(row["jit"], f"{where}.jit", path) if "jit" in row else None,
        unmet={canonicalize_name(r): why for r, why in unmet.items()},
    )


def _script_limits(path: Path, limits, scripts: dict[str, Script]) -> dict[str, Script]:
    """The checks' scripts with the time limit and lane of their [scripts.<key>] rows; one lane holds one script."""
    if not isinstance(limits, dict):
        raise UserError(f"{path}: scripts must be a table of [scripts.<key>] rows")
    for key, row in limits.items():
        where = f"scripts.{key}"
        if key not in scripts:
            raise UserError(f"{path}: {where}: no package's checks name {key!r}")
        if not isinstance(row, dict) or set(row) - {"timeout_s", "lane"}:
            raise UserError(f"{path}: {where} must be a table of timeout_s and lane")
        timeout, lane = row.get("timeout_s", 0), row.get("lane")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise UserError(f"{path}: {where}.timeout_s must be a number of seconds >= 0")
        if lane is not None and (isinstance(lane, bool) or not isinstance(lane, int) or lane < 1):
            raise UserError(f"{path}: {where}.lane must be a positive integer")
        scripts[key] = Script(key, scripts[key].package, float(timeout), lane)
    lanes = [s.lane for s in scripts.values() if s.lane is not None]
    if len(lanes) != len(set(lanes)):
        raise UserError(f"{path}: two scripts share a lane; each lane holds one script")
    return scripts


def load(path: Path | None = None) -> Table:
    return load_table(Path(path) if path else DATA, parse)


def table() -> Table:
    """The packaged table (data/packages.toml), read once per process."""
    return packaged_table(DATA, parse)
