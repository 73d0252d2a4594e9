"""The catalog: `stacks.toml`, the only place versions live."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from verlenv.catalog import backends, hydra
from verlenv.errors import UserError
from verlenv.fsutil import read_toml

CATALOG_NAME = "stacks.toml"
DEFAULT_VARIANT = "fsdp"
DEFAULT_ACTOR, DEFAULT_ROLLOUT = "fsdp", "vllm"
# The help of the options every command that works on one env shares (commands.add_env_options, VerifyOptions).
STACK_HELP = "stack (default: the catalog's default)"
VARIANT_HELP = f"variant of the stack (default: {DEFAULT_VARIANT}; stacks.toml names them, e.g. megatron)"
TOOLKIT_SOURCES = ("pypi", "conda")
# Conda's platform names; linux-64 comes first: the env files' pip lists are rendered from its locks.
PLATFORMS = ("linux-64", "linux-aarch64")
# The glibc a variant's pip locks are resolved for (manylinux_2_28: RHEL 8) unless the variant names a newer one.
DEFAULT_GLIBC = "2.28"


@dataclass(frozen=True)
class SourceBuild:
    """A package compiled locally against the env's torch (never taken as a prebuilt binary)."""

    name: str
    requirement: Requirement

    @property
    def version(self) -> str | None:
        specs = list(self.requirement.specifier)
        return specs[0].version if len(specs) == 1 and specs[0].operator == "==" else None

    @property
    def url(self) -> str | None:
        return self.requirement.url

    @property
    def indexed(self) -> bool:
        """Its version is one an index can serve, so the resolver takes its dependencies from the published metadata.
        Not a git URL (uv would clone and build it) nor a version with a local label (`0.6.12+verlenv`: this project's
        own build, which no public index may carry)."""
        return self.url is None and Version(self.version).local is None


@dataclass(frozen=True)
class Variant:
    stack: "Stack"
    name: str
    requirements: tuple[str, ...]
    source_builds: tuple[SourceBuild, ...]
    extends: str | None = None
    # The platforms a pip lock exists for (locks/<key>.<platform>.txt).
    platforms: tuple[str, ...] = (PLATFORMS[0],)
    # uv --overrides lines: replace what a package's published metadata says about a dependency.
    overrides: tuple[str, ...] = ()
    # Requirements of the pinned packages' extras left out on purpose: canonical name -> why.
    not_taken: dict[str, str] = field(default_factory=dict)
    # megatron-core names verl and its bridge (Megatron-Bridge or mbridge) use but megatron-core lacks, reviewed as
    # optional paths: "<file in the package>: <megatron.core name>" -> why it is not on verl's default path
    # (src/verlenv/verify/mcore_refs.py).
    megatron_api_gaps: dict[str, str] = field(default_factory=dict)
    # verl's actor and rollout in this env (rows of data/backends.toml): what its checks and trainer run.
    actor: str = "fsdp"
    rollout: str = "vllm"
    # Hydra overrides the trainer check adds for this env, each with why (an env fact: a flash-attn its TE refuses).
    trainer_overrides: dict[str, str] = field(default_factory=dict)
    # The oldest glibc its wheels run on ("2.34"): the manylinux tag its locks are resolved for.
    glibc: str = DEFAULT_GLIBC

    @property
    def key(self) -> str:
        return f"{self.stack.name}-{self.name}"

    def source_build(self, name: str) -> SourceBuild | None:
        want = canonicalize_name(name)
        return next((b for b in self.source_builds if b.name == want), None)

    def extras(self, name: str) -> tuple[str, ...]:
        """The extras the variant's requirements ask of a package (all its requirement lines together)."""
        want = canonicalize_name(name)
        return tuple(sorted({e for r in self.requirements for e in Requirement(r).extras
                             if canonicalize_name(Requirement(r).name) == want}))


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    python: str
    cuda: str
    min_driver: str
    exclude_newer: str
    gpu_archs: tuple[str, ...]
    cxx11_abi: bool
    toolkit: str
    host_compiler: str
    # The variants' platforms unless a variant names its own.
    platforms: tuple[str, ...]
    toolkit_conda: tuple[str, ...]
    variants: dict[str, Variant]
    # Per-package date caps for pins newer than exclude_newer (package name -> RFC 3339 date).
    exclude_newer_package: dict[str, str] = field(default_factory=dict)

    @property
    def all_platforms(self) -> list[str]:
        """Every platform any of its variants is locked for, in PLATFORMS order."""
        return [p for p in PLATFORMS if any(p in v.platforms for v in self.variants.values())]

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise UserError(f"unknown variant {name!r} of stack {self.name}; valid: {', '.join(self.variants)}")
        return self.variants[name]


@dataclass(frozen=True)
class Catalog:
    path: Path
    default: str
    stacks: dict[str, Stack]

    @property
    def root(self) -> Path:
        return self.path.parent

    def stack(self, name: str | None = None) -> Stack:
        name = name or self.default
        if name not in self.stacks:
            raise UserError(f"unknown stack {name!r}; valid: {', '.join(self.stacks)}")
        return self.stacks[name]

    def variant(self, stack: str | None, variant: str | None) -> Variant:
        return self.stack(stack).variant(variant or DEFAULT_VARIANT)

    def all_variants(self) -> list[Variant]:
        return [v for s in self.stacks.values() for v in s.variants.values()]


def find_root(start: Path | None = None) -> Path:
    """The project root: $VERLENV_ROOT, else the nearest folder upwards holding stacks.toml."""
    if env := os.environ.get("VERLENV_ROOT"):
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CATALOG_NAME).is_file():
            return folder
    raise UserError(f"no {CATALOG_NAME} in {here} or above; run inside a verlenv checkout or set VERLENV_ROOT")


def load(path: Path | None = None) -> Catalog:
    path = Path(path) if path else find_root() / CATALOG_NAME
    data = read_toml(path)
    return parse(path, data)


def parse(path: Path, data: dict) -> Catalog:
    """The catalog a decoded stacks.toml describes, or one line saying what in it is wrong."""
    try:
        return _parse(path, data)
    except (TypeError, ValueError, AttributeError) as e:
        # A value of a type no check above foresaw: still one line naming the file.
        raise UserError(f"{path}: malformed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                        f"compare it with the project's stacks.toml") from None


def _get(table: dict, key: str, kind: type, where: str, path: Path, default=None):
    if key not in table:
        if default is not None:
            return default
        raise UserError(f"{path}: missing key {where}.{key}")
    value = table[key]
    if not isinstance(value, kind):
        raise UserError(f"{path}: {where}.{key} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _strings(table: dict, key: str, where: str, path: Path, default=None) -> tuple[str, ...]:
    items = _get(table, key, list, where, path, default)
    if not all(isinstance(i, str) for i in items):
        raise UserError(f"{path}: {where}.{key} must be a list of strings")
    return tuple(items)


def _dates(table: dict, key: str, where: str, path: Path) -> dict[str, str]:
    dates = _get(table, key, dict, where, path, default={})
    for name, date in dates.items():
        if not isinstance(date, str):
            raise UserError(f"{path}: {where}.{key}.{name} must be a date string, got {type(date).__name__}")
    return {canonicalize_name(name): date for name, date in dates.items()}


def _platforms(table: dict, where: str, path: Path, default: tuple[str, ...]) -> tuple[str, ...]:
    if "platforms" not in table:
        return default
    platforms = _strings(table, "platforms", where, path)
    for p in platforms:
        if p not in PLATFORMS:
            raise UserError(f"{path}: {where}.platforms: unknown platform {p!r}; valid: {', '.join(PLATFORMS)}")
    if PLATFORMS[0] not in platforms:
        raise UserError(f"{path}: {where}.platforms must include {PLATFORMS[0]} (the env files are rendered from its "
                        "locks)")
    return tuple(p for p in PLATFORMS if p in platforms)


def _glibc(table: dict, where: str, path: Path) -> str | None:
    if "glibc" not in table:
        return None
    value = table["glibc"]
    major, _, minor = value.partition(".") if isinstance(value, str) else ("", "", "")
    if major != "2" or not minor.isdigit() or int(minor) < 17:
        raise UserError(f"{path}: {where}.glibc is {value!r}; give a glibc version such as \"2.28\" or \"2.34\" "
                        f"(a manylinux_2_<minor> tag, minor >= 17)")
    return value


def _reasons(table: dict, where: str, path: Path) -> dict[str, str]:
    reasons = _get(table, "not_taken", dict, where, path, default={})
    for name, reason in reasons.items():
        if not isinstance(reason, str) or not reason.strip():
            raise UserError(f"{path}: {where}.not_taken.{name} must be a reason (a non-empty string)")
    return {canonicalize_name(name): reason for name, reason in reasons.items()}


def _api_gaps(table: dict, where: str, path: Path) -> dict[str, str]:
    gaps = _get(table, "megatron_api_gaps", dict, where, path, default={})
    for ref, reason in gaps.items():
        if ": megatron.core" not in ref:
            raise UserError(f"{path}: {where}.megatron_api_gaps: {ref!r} must be '<file>: megatron.core.<name>'")
        if not isinstance(reason, str) or not reason.strip():
            raise UserError(f"{path}: {where}.megatron_api_gaps.{ref!r} must be a reason (a non-empty string)")
    return dict(gaps)


def _trainer_overrides(table: dict, where: str, path: Path) -> dict[str, str]:
    overrides = _get(table, "trainer_overrides", dict, where, path, default={})
    for text, reason in overrides.items():
        if not hydra.OVERRIDE.fullmatch(text):
            raise UserError(f"{path}: {where}.trainer_overrides: {text!r} is not a Hydra override; give {hydra.FORMS}")
        if not isinstance(reason, str) or not reason.strip():
            raise UserError(f"{path}: {where}.trainer_overrides.{text!r} must be a reason (a non-empty string)")
    return dict(overrides)


def _requirement(text: str, where: str, path: Path) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as e:
        raise UserError(f"{path}: {where}: invalid requirement {text!r}: {str(e).splitlines()[0]}") from None


def _parse(path: Path, data: dict) -> Catalog:
    stacks_table = _get(data, "stacks", dict, "", path)
    default = _get(data, "default", str, "", path)
    stacks: dict[str, Stack] = {}
    for name, table in stacks_table.items():
        where = f"stacks.{name}"
        if not isinstance(table, dict):
            raise UserError(f"{path}: {where} must be a table")
        toolkit = _get(table, "toolkit", str, where, path)
        if toolkit not in TOOLKIT_SOURCES:
            raise UserError(f"{path}: {where}.toolkit is {toolkit!r}; valid: {', '.join(TOOLKIT_SOURCES)}")
        conda_tk = _get(table, "toolkit_conda", dict, where, path, default={})
        raw_variants = _get(table, "variants", dict, where, path)
        stack = Stack(
            name=name,
            description=_get(table, "description", str, where, path),
            python=_get(table, "python", str, where, path),
            cuda=_get(table, "cuda", str, where, path),
            min_driver=_get(table, "min_driver", str, where, path),
            exclude_newer=_get(table, "exclude_newer", str, where, path),
            gpu_archs=_strings(table, "gpu_archs", where, path),
            cxx11_abi=_get(table, "cxx11_abi", bool, where, path),
            toolkit=toolkit,
            host_compiler=_get(table, "host_compiler", str, where, path),
            platforms=_platforms(table, where, path, default=(PLATFORMS[0],)),
            toolkit_conda=_strings(conda_tk, "packages", f"{where}.toolkit_conda", path, default=[]),
            variants={},
            exclude_newer_package=_dates(table, "exclude_newer_package", where, path),
        )
        if toolkit == "conda" and not stack.toolkit_conda:
            raise UserError(f"{path}: {where}.toolkit is 'conda' but {where}.toolkit_conda.packages is empty")
        for vname in raw_variants:
            stack.variants[vname] = _variant(stack, vname, raw_variants, path, seen=())
        stacks[name] = stack
    if default not in stacks:
        raise UserError(f"{path}: default = {default!r} names no stack; valid: {', '.join(stacks)}")
    return Catalog(path=path, default=default, stacks=stacks)


def _variant(stack: Stack, name: str, raw: dict, path: Path, seen: tuple[str, ...]) -> Variant:
    where = f"stacks.{stack.name}.variants.{name}"
    if name in seen:
        raise UserError(f"{path}: {where}.extends forms a cycle: {' -> '.join((*seen, name))}")
    if name not in raw:
        raise UserError(f"{path}: {where}: no such variant (named by extends)")
    table = raw[name]
    if not isinstance(table, dict):
        raise UserError(f"{path}: {where} must be a table")
    if not isinstance(table.get("extends", ""), str):
        raise UserError(f"{path}: {where}.extends must be a variant's name (a string)")
    requirements = list(_strings(table, "requirements", where, path))
    builds = list(_strings(table, "source_builds", where, path, default=[]))
    overrides = list(_strings(table, "overrides", where, path, default=[]))
    not_taken = _reasons(table, where, path)
    api_gaps = _api_gaps(table, where, path)
    platforms = _platforms(table, where, path, default=stack.platforms)
    actor, rollout = table.get("actor"), table.get("rollout")
    trainer_overrides = _trainer_overrides(table, where, path)
    glibc = _glibc(table, where, path)
    if parent := table.get("extends"):
        base = _variant(stack, parent, raw, path, (*seen, name))
        # Its locks are resolved against the base's lock of the same platform.
        if missing := [p for p in platforms if p not in base.platforms]:
            raise UserError(f"{path}: {where}.platforms: {', '.join(missing)} is not a platform of its base "
                            f"variant {parent} ({', '.join(base.platforms)})")
        requirements = list(base.requirements) + requirements
        builds = [b.requirement.__str__() for b in base.source_builds] + builds
        overrides = list(base.overrides) + overrides
        not_taken = base.not_taken | not_taken
        api_gaps = base.megatron_api_gaps | api_gaps
        actor, rollout = actor or base.actor, rollout or base.rollout
        trainer_overrides = base.trainer_overrides | trainer_overrides
        # Resolved against the base's pins: never for an older glibc than the base's wheels need.
        glibc = glibc or base.glibc
    # verl's own defaults where a variant names neither (its FSDP actor and vLLM rollout).
    actor, rollout = actor or DEFAULT_ACTOR, rollout or DEFAULT_ROLLOUT
    _check_parts(actor, rollout, where, path)
    pinned = {canonicalize_name(_requirement(r, f"{where}.requirements", path).name) for r in requirements}
    # The resolver drops what is not taken, so a top-level pin of it would silently vanish.
    if clash := sorted(n for n in not_taken if n in pinned):
        raise UserError(f"{path}: {where}.not_taken: {', '.join(clash)} is also in its requirements; "
                        f"take it (remove it from not_taken) or do not pin it")
    for r in overrides:
        _requirement(r, f"{where}.overrides", path)
    return Variant(stack=stack, name=name, requirements=tuple(requirements),
                   source_builds=_source_builds(builds, where, path), extends=table.get("extends"),
                   platforms=platforms, overrides=tuple(overrides), not_taken=not_taken, megatron_api_gaps=api_gaps,
                   actor=actor, rollout=rollout, trainer_overrides=trainer_overrides, glibc=glibc or DEFAULT_GLIBC)


def _check_parts(actor, rollout, where: str, path: Path) -> None:
    """The actor and the rollout are rows of data/backends.toml."""
    table_rows = backends.table()
    for part, value in (("actor", actor), ("rollout", rollout)):
        known = table_rows.actors if part == "actor" else table_rows.rollouts
        if not isinstance(value, str) or value not in known:
            raise UserError(f"{path}: {where}.{part} is {value!r}; valid: {', '.join(known)} "
                            f"(rows of {table_rows.path.name})")


def _source_builds(builds: list[str], where: str, path: Path) -> tuple[SourceBuild, ...]:
    """Each source build pins '==' a version or names a URL."""
    out = []
    for text in builds:
        req = _requirement(text, f"{where}.source_builds", path)
        build = SourceBuild(name=canonicalize_name(req.name), requirement=req)
        if build.version is None and build.url is None:
            raise UserError(f"{path}: {where}.source_builds: {text!r} must pin '==' a version or name a URL")
        out.append(build)
    return tuple(out)
