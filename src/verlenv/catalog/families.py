"""The model families verl's trainer check trains, as `data/families.toml` rows, and a user's own config.json shrunk
to the check's size (`verify --model-config`). Pure data: the check script builds the models with transformers.

A family reaches the check script as one dict (`Family.row()`): the config class (or a model_type for a shrunk
config), the model class, the config's arguments, the inputs kind and what verl's config needs for it."""

import copy
import datetime
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from verlenv.catalog import config_checks
from verlenv.errors import UserError
from verlenv.fsutil import load_table, packaged_table

DATA = Path(__file__).parents[1] / "data" / "families.toml"
INPUTS = ("text", "images")
ALL = "all"


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    exercises: str
    model_class: str
    inputs: str
    config: dict
    config_class: str | None = None
    # A shrunk config.json names its model_type instead of a config class (transformers' AutoConfig.for_model).
    model_type: str | None = None
    token_ids: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, str] = field(default_factory=dict)
    # Where it came from: the table, or the user's config.json; for a shrunk one, what was changed.
    source: str = "families.toml"
    shrunk: dict = field(default_factory=dict)
    # Upstream failures verl has with this family: url, fix, summary, signature (a regex of its output), and the
    # variants they happen in (none named: every variant).
    known_issues: tuple[dict, ...] = ()
    # The fast kernel packages (rows of packages.toml) it trains on, each with what runs slowly without it
    # ("its gated-DeltaNet short convolution on torch's path"); verify says so when one is missing.
    needs: dict[str, str] = field(default_factory=dict)
    # The kind of attention vLLM runs it with (a kind of data/kernel_paths.toml: "mla", "sinks"): the trainer check
    # expects the backend vLLM picks for it on the GPU.
    attention: str | None = None
    # When the row last changed its model (ISO 8601, UTC offset): GPU reports from before ran another model, which the
    # compatibility matrix says (benchmarks/compat_matrix.py).
    model_since: str | None = None

    def known_failure(self, texts, variant: str) -> dict | None:
        """The known issue of this family in `variant` whose signature one of `texts` shows, or None. The trainer
        check judges its run so (kernels/check_verl_trainer.py, standalone in the env, has its own copy)."""
        for issue in self.known_issues:
            if (not issue.get("variants") or variant in issue["variants"]) and \
                    any(re.search(issue["signature"], t) for t in texts):
                return issue
        return None

    def row(self, defaults: dict) -> dict:
        """What the check script gets: the row and the table's defaults it needs."""
        token_ids = dict(defaults.get("vision_token_ids", {})) if self.inputs == "images" else {}
        token_ids.update(self.token_ids)
        return {"name": self.name, "description": self.description, "exercises": self.exercises,
                "config_class": self.config_class, "model_type": self.model_type, "model_class": self.model_class,
                "inputs": self.inputs, "config": self.config, "token_ids": token_ids,
                "overrides": list(self.overrides), "logit_std": defaults["logit_std"],
                "embedding_scale": defaults["embedding_scale"], "routed_influence": defaults["routed_influence"],
                "source": self.source,
                "shrunk": self.shrunk, "known_issues": [dict(i) for i in self.known_issues],
                "needs": dict(self.needs), "attention": self.attention,
                "saved_as_loaded": list(defaults.get("saved_as_loaded", []))}


@dataclass(frozen=True)
class Table:
    path: Path
    families: dict[str, Family]
    defaults: dict
    shrink: dict

    def names(self) -> list[str]:
        return list(self.families)

    def select(self, names: list[str], thorough: bool) -> list[Family]:
        """The families a run trains: the names given (`all`: every row), else the fast proof's defaults, or every
        row with thorough. An unknown name is one line naming the valid ones."""
        if not names:
            names = self.names() if thorough else list(self.defaults["fast"])
        for name in names:  # every name checked, `all` beside them too: an unknown one is never dropped
            if name != ALL and name not in self.families:
                raise UserError(f"--family {name}: unknown family; valid: {', '.join(self.names())}, {ALL} "
                                f"(rows of {self.path.name}), or --model-config for your own config.json")
        if ALL in names:
            return list(self.families.values())
        out = []
        for name in names:
            if self.families[name] not in out:
                out.append(self.families[name])
        return out

    def rows(self, families: list[Family]) -> list[dict]:
        return [f.row(self.defaults) for f in families]


def _text(row: dict, key: str, where: str, path: Path, default: str | None = None) -> str:
    value = row.get(key, default)
    if not isinstance(value, str) or not value:
        raise UserError(f"{path}: {where}.{key} must be a non-empty string")
    return value


def _reasons(row: dict, key: str, where: str, path: Path, shape: str = "override = reason") -> dict[str, str]:
    value = row.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) and v.strip() for v in value.values()):
        raise UserError(f"{path}: {where}.{key} must be a table of {shape}")
    return dict(value)


ISSUE_TEXTS = ("url", "fix", "summary", "signature")


def _known_issues(row: dict, where: str, path: Path) -> tuple[dict, ...]:
    """A row's known_issue: one table or an array of them, each with ISSUE_TEXTS and, optionally, the variants it
    happens in."""
    issues = row.get("known_issue", [])
    issues = [issues] if isinstance(issues, dict) else issues
    if not isinstance(issues, list):
        raise UserError(f"{path}: {where}.known_issue must be a table or an array of tables")
    for issue in issues:
        if not isinstance(issue, dict) or any(not isinstance(issue.get(k), str) or not issue.get(k)
                                              for k in ISSUE_TEXTS):
            raise UserError(f"{path}: {where}.known_issue needs url, fix, summary and signature (strings)")
        variants = issue.get("variants", [])
        if not isinstance(variants, list) or not all(isinstance(v, str) and v for v in variants):
            raise UserError(f"{path}: {where}.known_issue.variants must be a list of variant names")
        if unknown := sorted(set(issue) - {*ISSUE_TEXTS, "variants"}):
            raise UserError(f"{path}: {where}.known_issue: unknown key {unknown[0]!r}; "
                            f"valid: {', '.join(sorted({*ISSUE_TEXTS, 'variants'}))}")
        try:
            re.compile(issue["signature"])
        except re.error as e:
            raise UserError(f"{path}: {where}.known_issue.signature: not a regular expression ({e})") from None
    return tuple(dict(i) for i in issues)


def _moment(row: dict, key: str, where: str, path: Path) -> str | None:
    """A TOML date-time with its UTC offset (2026-12-07T23:00:00Z), as ISO 8601 text; None where the row has none."""
    if key not in row:
        return None
    value = row[key]
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        raise UserError(f"{path}: {where}.{key} is {value!r}; give a TOML date-time with its offset, "
                        "e.g. 2026-12-07T23:00:00Z")
    return value.isoformat()


def parse(path: Path, data: dict) -> Table:
    defaults = data.get("defaults")
    if not isinstance(defaults, dict):
        raise UserError(f"{path}: missing table [defaults]")
    for key in ("logit_std", "embedding_scale", "routed_influence"):
        value = defaults.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UserError(f"{path}: defaults.{key} must be a positive number")
    as_loaded = defaults.get("saved_as_loaded", [])
    if not isinstance(as_loaded, list) or not all(isinstance(t, str) and t for t in as_loaded):
        raise UserError(f"{path}: defaults.saved_as_loaded must be a list of model types")
    families: dict[str, Family] = {}
    for name, row in (data.get("families") or {}).items():
        where = f"families.{name}"
        if not isinstance(row, dict):
            raise UserError(f"{path}: {where} must be a table")
        if not re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", name) or name == ALL:
            raise UserError(f"{path}: {where}: a family's name is lowercase letters, digits, '.' and '-', not {ALL!r}")
        known = {"description", "exercises", "config_class", "model_class", "inputs", "config", "token_ids",
                 "overrides", "known_issue", "needs", "attention", "model_since"}
        if unknown := sorted(set(row) - known):
            raise UserError(f"{path}: {where}: unknown key {unknown[0]!r}; valid: {', '.join(sorted(known))}")
        inputs = _text(row, "inputs", where, path, "text")
        if inputs not in INPUTS:
            raise UserError(f"{path}: {where}.inputs is {inputs!r}; valid: {', '.join(INPUTS)}")
        config = row.get("config", {})
        token_ids = row.get("token_ids", {})
        if not isinstance(config, dict) or not isinstance(token_ids, dict):
            raise UserError(f"{path}: {where}.config and .token_ids must be tables")
        families[name] = Family(name=name, description=_text(row, "description", where, path),
                                exercises=_text(row, "exercises", where, path),
                                model_class=_text(row, "model_class", where, path), inputs=inputs, config=config,
                                config_class=_text(row, "config_class", where, path), token_ids=dict(token_ids),
                                overrides=_reasons(row, "overrides", where, path),
                                known_issues=_known_issues(row, where, path),
                                needs=_reasons(row, "needs", where, path, "package = what runs slowly without it"),
                                attention=_text(row, "attention", where, path) if "attention" in row else None,
                                model_since=_moment(row, "model_since", where, path))
    if not families:
        raise UserError(f"{path}: no [families.<name>] rows")
    fast = defaults.get("fast", [])
    if not isinstance(fast, list) or not fast or any(f not in families for f in fast):
        raise UserError(f"{path}: defaults.fast must name families of the table ({', '.join(families)})")
    shrink = data.get("shrink")
    if not isinstance(shrink, dict) or not isinstance(shrink.get("text"), dict):
        raise UserError(f"{path}: missing table [shrink] with its text sizes")
    return Table(path, families, defaults, shrink)


def load(path: Path | None = None) -> Table:
    return load_table(Path(path) if path else DATA, parse)


def table() -> Table:
    """The packaged table (data/families.toml), read once per process."""
    return packaged_table(DATA, parse)


# ---- a user's config.json, shrunk -------------------------------------------------------------------------------

def label(path: Path, depth: int = 1) -> str:
    """The family's name in the report: the model's folder for a config.json (with `depth` folders, the ones above
    it too: two checkpoints' `.../actor/huggingface`), else the file's stem."""
    path = Path(path).absolute()
    folders = path.parent.parts[1:] if path.name == "config.json" else (*path.parent.parts[1:], path.stem)
    raw = "-".join(folders[-depth:]) if folders else path.stem
    return "config-" + (re.sub(r"[^a-z0-9.\-]+", "-", raw.lower()).strip("-.") or "model")


HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")  # "namespace/name", as the Hub names a repo


def config_file(path: Path) -> Path:
    """A config.json, or a model's folder that holds one (what verl's model.path names)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model-config {path}: a folder without config.json; give a model's config.json or "
                            "its folder")
        return path / "config.json"
    if not path.exists() and HUB_ID.fullmatch(str(path)) and path.suffix != ".json":
        # verl's model.path takes a Hub id too; the check builds its tiny model offline, from the config alone.
        raise UserError(f"--model-config {path}: no such file here, and it looks like a Hugging Face Hub id; give its "
                        f"config.json, e.g. from `hf download {path} config.json --local-dir <folder>`")
    return path


def read_config(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UserError(f"--model-config {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise UserError(f"--model-config {path}: not JSON ({e}); give a model's config.json") from None
    if not isinstance(data, dict):
        raise UserError(f"--model-config {path}: must be a JSON object (a model's config.json)")
    return data


def _rules(shrink_rules: dict, model_type: str) -> dict:
    """The [shrink] rules with those of [shrink.model.<model_type>] over them (a table of rules key by key, a list
    of names added to the general one)."""
    rules = dict(shrink_rules)
    for key, value in shrink_rules.get("model", {}).get(model_type, {}).items():
        if isinstance(value, dict) and isinstance(rules.get(key), dict):
            rules[key] = {**rules[key], **value}
        elif isinstance(value, list) and isinstance(rules.get(key), list):
            rules[key] = [*rules[key], *value]
        else:
            rules[key] = value
    return rules


def _size_keys(rules: dict) -> set[str]:
    return set(rules["text"]) | set(rules.get("keep", {})) | set(rules.get("at_most", {})) | set(rules.get("ratio", {}))


def _check_sizes(config: dict, keys, rules: dict, where: str, path: Path) -> None:
    """Each size key the config has is a whole number above zero (at_most and absent_at_zero keys: zero too), a kept
    one within its bound; null is a key the model does without (a sliding_window of None, DeepSeek-V2-Lite's
    q_lora_rank)."""
    at_most, keep = rules.get("at_most", {}), rules.get("keep", {})
    zero_ok = set(at_most) | set(rules.get("absent_at_zero", []))
    for key in sorted(keys):
        value = config.get(key)
        if value is None:
            continue
        config_checks.require_size(value, f"{where}{key}", path, 0 if key in zero_ok else 1)
        if key in keep and value > keep[key]:
            raise UserError(f"--model-config {path}: {where}{key}={value} is above {keep[key]}, the largest the shrink "
                            f"keeps as published ({DATA.name} [shrink] keep): the model would not be tiny")


def _layer_picks(config: dict, rules: dict, old_layers: int, layers: int) -> list[int]:
    """Which of the original layers the shrunk model's layers are: the first ones, or for a model whose layers are
    of several kinds (each_kind lists), the first layer of each kind and then the first others, in their order."""
    picks: set[int] = set()
    for key in rules.get("each_kind", []):  # the first layer of each kind of every list (attention and MLP kinds)
        kinds = config.get(key)
        if isinstance(kinds, list) and len(kinds) == old_layers:
            picks |= {kinds.index(kind) for kind in set(kinds)}
    if not picks:
        return list(range(min(layers, old_layers)))
    picks |= set([i for i in range(old_layers) if i not in picks][:max(0, layers - len(picks))])
    return sorted(picks)


def _interval_list(spec: dict) -> str:
    """The per-layer list an interval rule says (families.toml [shrink] interval `list`)."""
    return spec.get("list", "layer_types")


def _interval_kinds(config: dict, rules: dict, old_layers: int) -> None:
    """Layer kinds said by an interval key alone written out as their per-layer list (layer_types unless the rule
    names another), as transformers derives them."""
    for key, spec in rules.get("interval", {}).items():
        interval, listed = config.get(key), _interval_list(spec)
        if isinstance(interval, int) and interval > 0 and not isinstance(config.get(listed), list):
            config[listed] = [spec["kind"] if (i + 1) % interval == 0 else spec["other"] for i in range(old_layers)]


def _counted_kinds(config: dict, original: dict, rules: dict, old_layers: int) -> None:
    """Per-layer kinds said by a count alone (GLM-5's first_k_dense_replace = 3 and no mlp_layer_types) written out
    as the config class derives them for the published layers, so that the cut keeps a layer of each kind."""
    for key, spec in rules.get("counted", {}).items():
        if not isinstance(config.get(key), list):
            n = original.get(spec["count"])
            n = n if isinstance(n, int) and not isinstance(n, bool) else spec["default"]
            config[key] = [spec["first"]] * min(n, old_layers) + [spec["rest"]] * max(0, old_layers - n)


def _agree_intervals(config: dict, rules: dict, changed: dict, where: str) -> None:
    """Each interval key set to the interval the shrunk per-layer list follows (Qwen3.5's 4 -> 2 for [linear,
    full])."""
    for key, spec in rules.get("interval", {}).items():
        kinds = config.get(_interval_list(spec))
        if key not in config or not isinstance(kinds, list):
            continue
        fits = [n for n in range(1, len(kinds) + 2)
                if kinds == [spec["kind"] if (i + 1) % n == 0 else spec["other"] for i in range(len(kinds))]]
        value = fits[0] if fits else None  # no interval says these kinds: layer_types does alone
        if value != config[key]:
            changed[f"{where}{key}"] = [config[key], value]
            config[key] = value


def _set_sizes(config: dict, original: dict, rules: dict, changed: dict, where: str) -> None:
    """The text rules' sizes, the kept length of a scaled rope, the bounds and the ratios."""
    old_heads = original.get("num_attention_heads")
    absent = set(rules.get("absent_at_zero", []))
    for key, value in rules["text"].items():
        if key in absent and config.get(key) == 0:
            continue  # the part is absent from the user's model: the tiny one goes without it too
        if key in config and config[key] is not None and config[key] != value:
            if key == "num_key_value_heads" and old_heads and config[key] == old_heads:
                value = rules["text"]["num_attention_heads"]  # no GQA in the original: none in the shrunk one
            elif key == "num_key_value_heads" and config[key] == 1:
                continue  # multi-query attention (one KV head) stays so
            changed[f"{where}{key}"] = [config[key], value]
            config[key] = value
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    # Phi-3's longrope names the published length beside the rope scaling, not in it.
    if isinstance(rope, dict) and (rope.get("original_max_position_embeddings")
                                   or original.get("original_max_position_embeddings")):
        for key in rules.get("kept_for_scaled_rope", []):
            if f"{where}{key}" in changed:  # YaRN's factor is written for the published length
                config[key] = changed.pop(f"{where}{key}")[0]
    for key, bound in rules.get("at_most", {}).items():
        if isinstance(config.get(key), int) and config[key] > bound:
            changed[f"{where}{key}"] = [config[key], bound]
            config[key] = bound
    for key, bound in rules.get("at_most_each", {}).items():  # a table of sizes by kind (DeepSeek-V4's rates)
        if isinstance(config.get(key), dict) and any(isinstance(v, int) and v > bound for v in config[key].values()):
            value = {k: min(v, bound) if isinstance(v, int) else v for k, v in config[key].items()}
            changed[f"{where}{key}"] = [config[key], value]
            config[key] = value
    for key, base in rules.get("ratio", {}).items():
        if config.get(key) and original.get(base) and config.get(base):
            ratio = max(1, original[key] // original[base])
            if config[key] != config[base] * ratio:
                changed[f"{where}{key}"] = [config[key], config[base] * ratio]
                config[key] = config[base] * ratio
    for key in ("num_experts", "n_routed_experts", "num_local_experts"):
        if "num_experts_per_tok" in config and isinstance(config.get(key), int):
            config["num_experts_per_tok"] = min(config["num_experts_per_tok"], config[key])


def _cut_layers(config: dict, original: dict, rules: dict, changed: dict, where: str, old_layers: int) -> None:
    """The layers kept (one of each kind), and every per-layer list and layer index cut to them."""
    layers = config["num_hidden_layers"]
    _interval_kinds(config, rules, old_layers)
    _counted_kinds(config, original, rules, old_layers)
    picks = _layer_picks(config, rules, old_layers, layers)
    if len(picks) != layers:  # more kinds than layers kept: a layer of each
        changed[f"{where}num_hidden_layers"] = [old_layers, len(picks)]
        config["num_hidden_layers"] = layers = len(picks)
    for key in rules.get("per_layer", []):
        if isinstance(config.get(key), list):
            kept = [config[key][i] for i in picks]  # one entry per layer: config_checks refused any other length
            said_by = [k for k, spec in rules.get("interval", {}).items()
                       if k in config and _interval_list(spec) == key] + [
                f"{spec['count']} ({original[spec['count']]})" if spec["count"] in original else
                f"the class default ({spec['default']} {spec['first']})"
                for k, spec in rules.get("counted", {}).items() if k == key]
            changed[f"{where}{key}"] = [len(config[key]) if key in original else "from " + ", ".join(said_by), kept]
            config[key] = kept
    for key in rules.get("layer_indexes", []):
        if isinstance(config.get(key), list):
            config[key] = [picks.index(i) for i in config[key] if i in picks]
    for key in rules.get("all_layers", []):  # a count that covered every layer still does (a dense model)
        if isinstance(original.get(key), int) and original[key] >= old_layers and config.get(key) != layers:
            changed[f"{where}{key}"] = [original[key], layers]
            config[key] = layers
    _agree_intervals(config, rules, changed, where)


def _shrink_text(config: dict, rules: dict, changed: dict, where: str) -> None:
    original = dict(config)
    old_layers = config.get("num_hidden_layers")
    old_hidden, old_heads = config.get("hidden_size"), config.get("num_attention_heads")
    old_head_dim = config.get("head_dim") or (old_hidden // old_heads if old_hidden and old_heads else None)
    _set_sizes(config, original, rules, changed, where)
    if not config.get("head_dim") and old_head_dim and rules.get("keep_head_dim"):
        # No head_dim key: the head is hidden/heads, so the hidden size follows the heads kept at the original head.
        hidden = config["num_attention_heads"] * old_head_dim
        if hidden != config["hidden_size"]:
            changed[f"{where}hidden_size"] = [old_hidden, hidden]
            config["hidden_size"] = hidden
    if isinstance(old_layers, int) and config.get("num_hidden_layers"):
        _cut_layers(config, original, rules, changed, where, old_layers)


def _known_keys(rules: dict) -> set[str]:
    """Every key the rules set, scale, keep, follow or name as not a size."""
    known = _size_keys(rules) | {"head_dim"} | set(rules.get("not_sizes", [])) | set(rules.get("interval", {}))
    for vision in rules.get("vision", {}).values():
        known |= set(vision.get("set", {})) | set(vision.get("follow", {}))
    return known


def _too_big(config: dict, rules: dict, where: str = "") -> list[str]:
    """Keys still holding a whole number above max_size that the rules do not know: what the shrink cannot vouch
    for."""
    skip = _known_keys(rules)
    out = []
    for key, value in config.items():
        if isinstance(value, dict):
            if key not in ("vision_config", "text_config"):  # sub-configs were shrunk themselves
                out += _too_big(value, rules, f"{where}{key}.")
        elif isinstance(value, int) and not isinstance(value, bool) and value > rules["max_size"] and key not in skip:
            out.append(f"{where}{key}={value}")
    return out


def shrink(path: Path, table_: Table | None = None) -> Family:
    """A user's config.json as a family of the check's size: its architecture and features kept, its sizes set
    by the table's [shrink] rules; one line naming what it does not know when it cannot."""
    table_ = table_ or table()
    path = config_file(path)
    original = read_config(path)
    config = copy.deepcopy(original)
    model_type, archs = _identity(config, path, table_)
    changed: dict = {}
    if config["model_type"] != model_type:  # remote code of a known architecture under a name of its own
        changed["model_type"] = [config["model_type"], model_type]
        config["model_type"] = model_type
    rules = _rules(table_.shrink, model_type)
    # What a tiny random bf16 model does without: quantized weights' format, remote code, the hub's bookkeeping.
    for key in ("auto_map", "quantization_config", "_name_or_path", "transformers_version", "torch_dtype", "dtype"):
        config.pop(key, None)
    vision_rules = rules.get("vision", {}).get(model_type)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    config_checks.check(config, text, rules, path)
    _check_all_sizes(config, text, rules, vision_rules, path)
    if vision_rules is not None and text is None:
        # Older VL configs keep the language model's keys at the top level.
        _shrink_text(config, rules, changed, "")
        text = config
    else:
        _shrink_text(text if text is not None else config, rules, changed, "text_config." if text is not None else "")
        text = text if text is not None else config
    if vision_rules is not None:
        _shrink_vision(config, text, vision_rules, rules, changed, path, f"{table_.path.name} "
                       f"[shrink.vision.{model_type}]")
    elif isinstance(config.get("vision_config"), dict):
        raise UserError(f"--model-config {path}: model_type {model_type} has a vision_config but no "
                        f"[shrink.vision.{model_type}] rules in {table_.path.name}")
    if problems := _too_big(config, rules) + (_too_big(text, rules, "text_config.") if text is not config else []):
        raise UserError(f"--model-config {path}: does not know how to shrink {', '.join(problems[:3])} "
                        f"(not a size key of {table_.path.name} [shrink])")
    if "quantization_config" in original:
        changed["quantization_config"] = ["removed", "the check trains bf16 weights"]
    if "auto_map" in original:  # every model_type the shrink knows is one transformers ships
        changed["auto_map"] = ["removed", f"transformers ships model_type {model_type}: the check builds its own "
                                          f"{archs[0]}"]
    # verl's known failure with an architecture is the user's too: their config of it is reported with the same link;
    # and what verl's config needs for it (gpt-oss's sinks: eager attention in the actor) and the packages of its fast
    # path (a DeltaNet model's causal-conv1d) it needs for theirs.
    rows = [f for f in table_.families.values() if f.model_class == archs[0]]
    known = next((f.known_issues for f in rows if f.known_issues), ())
    overrides = next((dict(f.overrides) for f in rows if f.overrides), {})
    needs = next((f.needs for f in rows if f.needs), ())
    return Family(name=label(Path(path)), description=f"{archs[0]} from {path}", exercises="the user's architecture",
                  model_class=archs[0], inputs="images" if vision_rules is not None else "text", config=config,
                  model_type=model_type, source=str(path), shrunk=changed, known_issues=known, overrides=overrides,
                  needs=needs)


def _identity(config: dict, path: Path, table_: Table) -> tuple[str, list]:
    """(model_type, architectures) of a config the shrink knows; one line when it names none or an unknown one."""
    model_type = config.get("model_type")
    archs = config.get("architectures")
    if not isinstance(model_type, str) or not model_type:
        raise UserError(f"--model-config {path}: no model_type; a Hugging Face config.json names one")
    if alias := table_.shrink.get("same_as", {}).get(model_type):
        if not isinstance(archs, list) or not archs or archs[0] not in alias["architectures"]:
            raise UserError(f"--model-config {path}: model_type {model_type} is shrunk as {alias['model_type']} "
                            f"only for architectures {', '.join(alias['architectures'])}; it names {archs!r}")
        model_type = alias["model_type"]
    if model_type not in table_.shrink["model_types"]:
        raise UserError(f"--model-config {path}: cannot shrink model_type {model_type!r}; known: "
                        f"{', '.join(table_.shrink['model_types'])} ({table_.path.name} [shrink])")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise UserError(f"--model-config {path}: no architectures list; it names the model class to build")
    return model_type, archs


def _check_all_sizes(config: dict, text: dict | None, rules: dict, vision_rules: dict | None, path: Path) -> None:
    """The size keys of the top level, the text config and the vision config hold sizes (whole numbers)."""
    _check_sizes(config, _size_keys(rules), rules, "", path)
    if text is not None:
        _check_sizes(text, _size_keys(rules), rules, "text_config.", path)
    if vision_rules is not None and isinstance(config.get("vision_config"), dict):
        sized = {k for k, v in vision_rules.get("set", {}).items() if isinstance(v, int)} | set(vision_rules.get(
            "follow", {})) | set(rules.get("keep", {}))
        _check_sizes(config["vision_config"], sized, rules, "vision_config.", path)


def _shrink_vision(config: dict, text: dict, vision_rules: dict, rules: dict, changed: dict, path: Path,
                   where_rules: str) -> None:
    """Set the vision config's sizes and make the ones that follow the text config agree with it."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        raise UserError(f"--model-config {path}: model_type {config['model_type']} has no vision_config to shrink")
    for key, value in vision_rules.get("set", {}).items():
        if key in vision and vision[key] != value:
            changed[f"vision_config.{key}"] = [vision[key], value]
            vision[key] = value
    for key, text_key in vision_rules.get("follow", {}).items():
        if key in vision and text.get(text_key) is None:
            raise UserError(f"--model-config {path}: vision_config.{key} is the language model's {text_key}, which the "
                            f"config does not give (model_type {config['model_type']} keeps it in text_config)")
        if key in vision:
            changed[f"vision_config.{key}"] = [vision[key], text[text_key]]
            vision[key] = text[text_key]
    if problems := _too_big(vision, rules, "vision_config."):
        raise UserError(f"--model-config {path}: does not know how to shrink {', '.join(problems[:3])} "
                        f"({where_rules})")
