"""Run by the env's own python before `verify --model-config` runs anything: each shrunk config (a family row, read as
JSON from stdin) built as the trainer check builds it (_models.build_config: AutoConfig.for_model of its model_type),
its model class looked up in the env's transformers, and the model made on the meta device (no memory, no weights) to
count its parameters. Prints one JSON list: per row, its name and either its parameter count (and where most of them
are) or the error, one line.
"""

import importlib
import importlib.metadata
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _models  # noqa: E402


def classes_of(transformers, model_type: str) -> list[str]:
    """The model classes transformers ships for a model_type that a config.json's architectures may name."""
    try:
        module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    except ImportError:
        return []
    return sorted(n for n in getattr(module, "__all__", []) if n.endswith(("ForCausalLM", "ForConditionalGeneration")))


def said(e: Exception) -> str:
    """The exception in one line: its type and first two lines (a validation error names the field on the first and
    what is wrong with it on the second)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {' '.join(lines[:2])}"[:400]


def counted(model) -> dict:
    """The model's parameter count, and where most of them are (what a too-large shrunk size grew), in one pass: the
    parameters grouped by name with the layer numbers made `*`, the heaviest group with one member's shape."""
    groups: dict[str, tuple[int, list[int]]] = {}
    for name, p in model.named_parameters():
        key = re.sub(r"\.\d+(?=\.)", ".*", name)
        total, _ = groups.get(key, (0, []))
        groups[key] = (total + p.numel(), list(p.shape))
    key, (total, shape) = max(groups.items(), key=lambda kv: kv[1][0])
    return {"params": sum(t for t, _ in groups.values()), "heaviest": f"{key} {shape}: {total:,}"}


def probe(row: dict, torch, transformers) -> dict:
    name, version = row["model_class"], transformers.__version__
    out = {"name": row["name"]}
    cls = getattr(transformers, name, None)
    if not isinstance(cls, type):
        valid = ", ".join(classes_of(transformers, row["model_type"])) or "none"
        return {**out, "error": f"architectures names {name}, which transformers {version} of the env does not have "
                                f"(its {row['model_type']} classes: {valid})"}
    try:
        config = _models.build_config(row)
    except Exception as e:  # transformers' own validation of the shrunk config, in its words
        return {**out, "error": f"transformers {version} refuses the shrunk config: {said(e)}"}
    if cls.config_class is not None and not isinstance(config, cls.config_class):
        return {**out, "error": f"architectures names {name}, a model of {cls.config_class.__name__}, not of "
                                f"model_type {row['model_type']} ({type(config).__name__})"}
    try:
        with torch.device("meta"):
            model = cls(config)
    except Exception as e:
        return {**out, "error": f"transformers {version} cannot build {name} from the shrunk config: {said(e)}"}
    return {**out, **counted(model)}


def engine_archs(spec: str | None) -> tuple[str, set[str]] | None:
    """The rollout engine's name and version, and the model classes it runs (spec: module:object with
    get_supported_archs()); None when there is no spec or the engine does not import here."""
    if not spec:
        return None
    module, _, obj = spec.partition(":")
    try:
        archs = set(getattr(importlib.import_module(module), obj).get_supported_archs())
    except Exception:  # an env without the engine, or one that fails to import: the trainer check says why
        return None
    top = module.split(".")[0]
    try:
        return f"{top} {importlib.metadata.version(top)}", archs
    except importlib.metadata.PackageNotFoundError:
        return top, archs


def engine_refuses(row: dict, engine: tuple[str, set[str]] | None) -> str | None:
    """Why the rollout engine cannot run the row's class, with its classes of the same name before "For"."""
    if engine is None or row["model_class"] in engine[1]:
        return None
    name, archs = engine
    stem = row["model_class"].split("For")[0]
    near = sorted(a for a in archs if a.split("For")[0] == stem) or ["none"]
    return (f"architectures names {row['model_class']}, which {name} of the env (the rollout) does not run (its "
            f"{stem} classes: {', '.join(near)})")


def main() -> None:
    rows = json.load(sys.stdin)
    import torch
    import transformers

    engine = engine_archs(sys.argv[1] if len(sys.argv) > 1 else None)
    results = []
    for row in rows:
        result = probe(row, torch, transformers)
        if "error" not in result and (why := engine_refuses(row, engine)):
            result = {"name": row["name"], "error": why}
        results.append(result)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
