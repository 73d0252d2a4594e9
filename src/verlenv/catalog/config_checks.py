"""What a published config.json must say of itself before `verify --model-config` shrinks it: relations between its
sizes ([shrink.consistent] of data/families.toml). The shrink replaces the sizes, so without these a broken config
(7 KV heads for 96 query heads, top-300 routing over 160 experts, a layer_types list for 2 of 24 layers) would be
shrunk into a tiny model that works and the check would pass for a model that cannot be built. Pure; one line each."""

import json
import math
from pathlib import Path

from verlenv.errors import UserError


def _finite(value, where: str, path: Path) -> None:
    """No NaN or Infinity anywhere (Python's json reads them; they are not JSON, and a NaN epsilon trains NaNs)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"--model-config {path}: {where.rstrip('.')} is {value}; a config's numbers are finite")
    if isinstance(value, dict):
        for key, item in value.items():
            _finite(item, f"{where}{key}.", path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _finite(item, f"{where.rstrip('.')}[{i}].", path)


def require_size(value, label: str, path: Path, low: int = 1) -> None:
    """A size: a whole number of at least `low` (0 for a count that may be none); one line otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UserError(f"--model-config {path}: {label} is {json.dumps(value)}; a size is a whole number "
                        f"{'of 0 or more' if low == 0 else 'above 0'}")


def _whole(config: dict, key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _relations(config: dict, rules: dict, where: str, path: Path) -> None:
    for small, big in rules.get("divides", []):
        a, b = _whole(config, small), _whole(config, big)
        if a and b and b % a:
            raise UserError(f"--model-config {path}: {where}{big}={b} is not a multiple of {where}{small}={a}; "
                            f"each of the {a} groups must hold the same number")
    for small, big in rules.get("not_above", []):
        a, b = _whole(config, small), _whole(config, big)
        if a is not None and b is not None and a > b:
            raise UserError(f"--model-config {path}: {where}{small}={a} is above {where}{big}={b}; it can be at most "
                            f"{b}")
    for key in rules.get("size_tables", []):
        for kind, value in (config.get(key) or {}).items() if isinstance(config.get(key), dict) else ():
            require_size(value, f"{where}{key}.{kind}", path)
    for key in rules.get("sizes", []):
        if key in config:
            require_size(config[key], f"{where}{key}", path)


def _per_layer(config: dict, rules: dict, where: str, path: Path) -> None:
    layers = _whole(config, "num_hidden_layers")
    if not layers:
        return
    for key in rules.get("per_layer", []):
        value = config.get(key)
        if value is not None and not (isinstance(value, list) and (all(isinstance(v, str) for v in value) or all(
                v in (0, 1) and not isinstance(v, (bool, float)) for v in value))):  # kinds, or flags (SmolLM3's rope)
            raise UserError(f"--model-config {path}: {where}{key} is {json.dumps(value)[:80]}; it lists one kind (a "
                            "string, or a 0/1 flag) per layer")
        if isinstance(value, list) and len(value) != layers:
            raise UserError(f"--model-config {path}: {where}{key} has {len(value)} entries for "
                            f"{where}num_hidden_layers={layers}; it lists one per layer")
    for key in rules.get("layer_indexes", []):
        value = config.get(key)
        if isinstance(value, list) and (bad := [i for i in value if not isinstance(i, int) or not 0 <= i < layers]):
            raise UserError(f"--model-config {path}: {where}{key} names layer {bad[0]!r}; the layers are 0 to "
                            f"{layers - 1}")


def check(config: dict, text: dict | None, rules: dict, path: Path) -> None:
    """The published config (and its text_config) against the [shrink.consistent] relations and per-layer lists."""
    _finite(config, "", path)
    consistent = rules.get("consistent", {})
    for part, where in ((config, ""), (text, "text_config.")):
        if part is None:
            continue
        _relations(part, consistent, where, path)
        _per_layer(part, rules, where, path)
