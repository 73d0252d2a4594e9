"""verl's actors and rollouts as `data/backends.toml` rows: the verl config each needs in the trainer check, what its
tensor-parallel size must divide, how its log splits the rollout server's start. The catalog names one of each per
variant; the check script gets the rows whole, so a new backend is a row."""

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from verlenv.catalog import hydra
from verlenv.errors import UserError
from verlenv.fsutil import load_table, packaged_table

DATA = Path(__file__).parents[1] / "data" / "backends.toml"
# The fields a row's overrides may name, filled by the check.
FIELDS = ("actor_tp", "rollout_tp", "kv_cache_bytes")


@dataclass(frozen=True)
class Report:
    """A duration the rollout engine reports itself: the regex's first group, in seconds."""

    name: str
    pattern: str
    source: str


@dataclass(frozen=True)
class When:
    """The verl setting that makes a need hold: `key`'s value after the trainer's and the family's overrides (`default`
    where none sets it) equals `value`."""

    key: str
    value: str
    default: str


@dataclass(frozen=True)
class Need:
    """A compiled module the actor imports under verl's default config, the package that ships it, and why; with
    `when`, only for the families whose setting selects it."""

    module: str
    package: str
    why: str
    when: When | None = None

    def setting(self, overrides) -> str | None:
        """The value of `when`'s key after these Hydra overrides (hydra.value_after: `default` where none sets it or
        the last deletes it); None for a need without `when`."""
        if self.when is None:
            return None
        return hydra.value_after(overrides, self.when.key, self.when.default)

    def holds(self, overrides) -> bool:
        """Whether a trainer given these Hydra overrides imports it."""
        return self.when is None or self.setting(overrides) == self.when.value

    def for_trainer(self, overrides) -> dict:
        """The row verl's trainer check imports for one family (it parses no overrides): with `selected_by`, the
        setting that made a conditional need hold."""
        row = {"module": self.module, "package": self.package, "why": self.why}
        if self.when is not None:
            row["selected_by"] = f"{self.when.key} is {self.setting(overrides)} for this family"
        return row


@dataclass(frozen=True)
class Actor:
    name: str
    description: str
    config_name: str
    tp_overrides: tuple[str, ...] = ()
    tp_divides: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    fast_overrides: tuple[str, ...] = ()
    needs: tuple[Need, ...] = ()

    def needed_packages(self, overrides=None) -> set[str]:
        """The packages of its needs; given a trainer's Hydra overrides, of those that hold for it."""
        return {n.package for n in self.needs if overrides is None or n.holds(overrides)}

    def trainer_needs(self, overrides) -> list[dict]:
        """The needs a trainer given these Hydra overrides imports, as the check's rows."""
        return [n.for_trainer(overrides) for n in self.needs if n.holds(overrides)]

    @property
    def tensor_parallel(self) -> bool:
        return bool(self.tp_overrides)

    def row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Rollout:
    name: str
    description: str
    package: str
    tp_divides: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    fast_overrides: tuple[str, ...] = ()
    log_env: dict[str, str] = field(default_factory=dict)
    server_args: str | None = None
    reports: tuple[Report, ...] = ()
    parts: tuple[str, ...] = ()
    registry: str | None = None

    def row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Table:
    path: Path
    actors: dict[str, Actor]
    rollouts: dict[str, Rollout]

    def actor(self, name: str) -> Actor:
        if name not in self.actors:
            raise UserError(f"unknown actor {name!r}; valid: {', '.join(self.actors)} ({self.path.name})")
        return self.actors[name]

    def rollout(self, name: str) -> Rollout:
        if name not in self.rollouts:
            raise UserError(f"unknown rollout {name!r}; valid: {', '.join(self.rollouts)} ({self.path.name})")
        return self.rollouts[name]

    def override_order(self, actor: str, rollout: str, env, family, thorough: bool, user=()) -> list[str]:
        """Every Hydra override verl's trainer check gives one family's trainer, in its order (the actor's, the
        rollout's, the env's, the family's, the fast proof's, the user's last), fields unfilled: what decides which
        of the actor's needs hold (their keys are literal; the last to set a key wins)."""
        a, r = self.actor(actor), self.rollout(rollout)
        out = [*a.tp_overrides, *a.overrides, *r.overrides, *env, *family]
        return [*out, *([] if thorough else [*r.fast_overrides, *a.fast_overrides]), *user]


def _strings(row: dict, key: str, where: str, path: Path) -> tuple[str, ...]:
    value = row.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise UserError(f"{path}: {where}.{key} must be a list of non-empty strings")
    return tuple(value)


def _overrides(row: dict, key: str, where: str, path: Path) -> tuple[str, ...]:
    out = _strings(row, key, where, path)
    for text in out:
        for name in re.findall(r"\{(\w+)\}", text):
            if name not in FIELDS:
                raise UserError(f"{path}: {where}.{key}: {{{name}}} in {text!r}; fields: {', '.join(FIELDS)}")
    return out


def _string(row: dict, key: str, where: str, path: Path, default: str | None = None) -> str:
    value = row.get(key, default)
    if not isinstance(value, str) or not value:
        raise UserError(f"{path}: {where}.{key} must be a non-empty string")
    return value


def _known(row: dict, keys: set[str], where: str, path: Path) -> None:
    if unknown := sorted(set(row) - keys):
        raise UserError(f"{path}: {where}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(keys))}")


def _needs(row: dict, where: str, path: Path) -> tuple[Need, ...]:
    value = row.get("needs", [])
    if not isinstance(value, list):
        raise UserError(f"{path}: {where}.needs must be a list of tables of module, package, why")
    out = []
    for i, need in enumerate(value):
        w = f"{where}.needs[{i}]"
        if not isinstance(need, dict):
            raise UserError(f"{path}: {w} must be a table of module, package, why")
        _known(need, {"module", "package", "why", "when"}, w, path)
        module = _string(need, "module", w, path)
        if not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", module):
            raise UserError(f"{path}: {w}.module: {module!r} is not an importable module name")
        out.append(Need(module, _string(need, "package", w, path), _string(need, "why", w, path),
                        _when(need["when"], f"{w}.when", path) if "when" in need else None))
    return tuple(out)


def _when(row, where: str, path: Path) -> When:
    if not isinstance(row, dict):
        raise UserError(f"{path}: {where} must be a table of key, value, default")
    _known(row, {"key", "value", "default"}, where, path)
    return When(*(_string(row, name, where, path) for name in ("key", "value", "default")))


def parse(path: Path, data: dict) -> Table:
    actors, rollouts = {}, {}
    for name, row in (data.get("actors") or {}).items():
        where = f"actors.{name}"
        if not isinstance(row, dict):
            raise UserError(f"{path}: {where} must be a table")
        _known(row, {"description", "config_name", "tp_overrides", "tp_divides", "overrides", "fast_overrides",
                     "needs"}, where, path)
        actors[name] = Actor(name, _string(row, "description", where, path), _string(row, "config_name", where, path),
                             _overrides(row, "tp_overrides", where, path), _strings(row, "tp_divides", where, path),
                             _overrides(row, "overrides", where, path), _overrides(row, "fast_overrides", where, path),
                             _needs(row, where, path))
    for name, row in (data.get("rollouts") or {}).items():
        where = f"rollouts.{name}"
        if not isinstance(row, dict):
            raise UserError(f"{path}: {where} must be a table")
        _known(row, {"description", "package", "name", "tp_divides", "overrides", "fast_overrides", "log_env",
                     "server_args", "reports", "parts", "registry"}, where, path)
        registry = row.get("registry")
        if registry is not None and not re.fullmatch(r"[\w.]+:\w+", _string(row, "registry", where, path)):
            raise UserError(f"{path}: {where}.registry: {registry!r}; give module:object (its get_supported_archs())")
        if _string(row, "name", where, path, name) != name:
            raise UserError(f"{path}: {where}.name must be {name!r}: verl's actor_rollout_ref.rollout.name")
        log_env = row.get("log_env", {})
        if not isinstance(log_env, dict) or not all(isinstance(v, str) for v in log_env.values()):
            raise UserError(f"{path}: {where}.log_env must be a table of strings")
        reports = []
        for i, rep in enumerate(row.get("reports", [])):
            w = f"{where}.reports[{i}]"
            if not isinstance(rep, dict):
                raise UserError(f"{path}: {w} must be a table of name, pattern, source")
            _known(rep, {"name", "pattern", "source"}, w, path)
            pattern = _string(rep, "pattern", w, path)
            try:
                if re.compile(pattern).groups < 1:
                    raise UserError(f"{path}: {w}.pattern must capture the seconds in a group")
            except re.error as e:
                raise UserError(f"{path}: {w}.pattern: not a regular expression ({e})") from None
            reports.append(Report(_string(rep, "name", w, path), pattern, _string(rep, "source", w, path)))
        server_args = row.get("server_args")
        if server_args is not None:
            server_args = _string(row, "server_args", where, path)
            try:
                re.compile(server_args)
            except re.error as e:
                raise UserError(f"{path}: {where}.server_args: not a regular expression ({e})") from None
        rollouts[name] = Rollout(name, _string(row, "description", where, path), _string(row, "package", where, path),
                                 _strings(row, "tp_divides", where, path), _overrides(row, "overrides", where, path),
                                 _overrides(row, "fast_overrides", where, path), dict(log_env), server_args,
                                 tuple(reports), _strings(row, "parts", where, path), registry)
    if not actors or not rollouts:
        raise UserError(f"{path}: needs at least one [actors.<name>] and one [rollouts.<name>] row")
    return Table(path, actors, rollouts)


def load(path: Path | None = None) -> Table:
    return load_table(Path(path) if path else DATA, parse)


def table() -> Table:
    """The packaged table (data/backends.toml), read once per process."""
    return packaged_table(DATA, parse)
