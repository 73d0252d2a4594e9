"""Which names of megatron-core the code of other packages uses that the locked megatron-core does not define.

verl's Megatron actor reaches megatron-core directly and through its bridge (Megatron-Bridge by default, mbridge with
vanilla_mbridge=True); a megatron-core that dropped a name one of them still uses fails only when the actor is built
on a GPU (mbridge 0.15.1 reads `ModelType.encoder_and_decoder`, which megatron-core 0.17 removed: `AttributeError` at
model build). Read from the source (ast), so it runs on a machine without a GPU, before anything is carried anywhere.

Checked: `from megatron.core.X import Y` (X must be a module of the package, Y defined in it) and `Name.attr` where
Name was imported so and is an Enum class of megatron-core (attr must be a member or defined in its body). An import
inside `try:` that catches ImportError (or Exception) is an optional feature and is not checked.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import PurePosixPath

PACKAGE = "megatron.core"


@dataclass(frozen=True)
class Missing:
    file: str  # path inside the package that refers to the name
    line: int
    ref: str  # megatron.core.X.Y or megatron.core.X.Class.attr
    why: str

    @property
    def key(self) -> str:
        """How a reviewed gap names it (stacks.toml megatron_api_gaps): file and name, no line."""
        return f"{self.file}: {self.ref}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.ref} ({self.why})"


def module_name(path: str) -> str | None:
    """megatron/core/transformer/enums.py -> megatron.core.transformer.enums; __init__.py names its package."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return None
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


class Index:
    """The top-level names each module of megatron-core defines, and the members of its Enum classes."""

    def __init__(self, sources: dict[str, str]):
        self.names: dict[str, set[str]] = {}
        self.enums: dict[tuple[str, str], set[str]] = {}
        self.star: dict[str, list[str]] = {}
        # (module, name) -> (module, name) it was imported from: `ModelType` of megatron.core.models.gpt.gpt_model
        # is megatron.core.enums' class.
        self.reexports: dict[tuple[str, str], tuple[str, str]] = {}
        for path, text in sources.items():
            mod = module_name(path)
            if mod is None or not (mod == PACKAGE or mod.startswith(PACKAGE + ".")):
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            self.names[mod] = self._top_level(mod, tree, path.endswith("__init__.py"))

    def _top_level(self, mod: str, tree: ast.Module, is_package: bool) -> set[str]:
        names: set[str] = set()
        for node in _top_statements(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.ClassDef):
                names.add(node.name)
                if any(_base_name(b).endswith("Enum") for b in node.bases):
                    self.enums[(mod, node.name)] = _class_body_names(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.Import):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name == "*":
                        base = _resolve(mod, node, is_package)
                        self.star.setdefault(mod, []).append(base)
                    else:
                        names.add(a.asname or a.name)
                        self.reexports[(mod, a.asname or a.name)] = (_resolve(mod, node, is_package), a.name)
        return names

    def defines(self, mod: str, name: str, seen: frozenset = frozenset()) -> bool:
        if f"{mod}.{name}" in self.names:  # a submodule
            return True
        if name in self.names.get(mod, ()):
            return True
        return any(self.defines(base, name, seen | {mod}) for base in self.star.get(mod, []) if base not in seen)

    def enum_members(self, mod: str, name: str) -> set[str] | None:
        """Members of the Enum class `name` as seen from `mod` (followed through plain re-exports)."""
        seen = set()
        while (mod, name) not in self.enums and (mod, name) in self.reexports and (mod, name) not in seen:
            seen.add((mod, name))
            mod, name = self.reexports[(mod, name)]
        return self.enums.get((mod, name))


def _top_statements(tree: ast.Module):
    """Module-level statements, including those under `if`/`try` at module level."""
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, ast.If):
            stack[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack[:0] = node.body + [s for h in node.handlers for s in h.body] + node.orelse + node.finalbody
        else:
            yield node


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _class_body_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
    # What every Enum class has.
    return names | {"name", "value", "__members__", "__class__", "__name__", "_member_map_", "_value2member_map_"}


def _resolve(mod: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module of a (possibly relative) `from ... import`."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_package else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _optional_imports(tree: ast.AST) -> set[int]:
    """ids of ImportFrom nodes inside a try whose handlers catch ImportError/ModuleNotFoundError/Exception."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = set()
        for h in node.handlers:
            types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type] if h.type else []
            caught |= {_base_name(t) for t in types} if types else {"Exception"}
        if caught & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "AttributeError"}:
            for stmt in node.body:
                out |= {id(n) for n in ast.walk(stmt) if isinstance(n, ast.ImportFrom)}
    return out


def check_source(path: str, text: str, index: Index) -> list[Missing]:
    """Every megatron-core name `text` (the file at `path`) uses that the index does not define."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    optional = _optional_imports(tree)
    missing: list[Missing] = []
    enums: dict[str, tuple[str, str, set[str]]] = {}  # local name -> (module, class, members)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if not (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
            continue
        guarded = id(node) in optional
        if node.module not in index.names:
            if not guarded:
                missing.append(Missing(path, node.lineno, node.module, "no such module"))
            continue
        for alias in node.names:
            if alias.name == "*":
                continue
            if not index.defines(node.module, alias.name):
                if not guarded:
                    missing.append(Missing(path, node.lineno, f"{node.module}.{alias.name}", "not defined there"))
                continue
            members = index.enum_members(node.module, alias.name)
            if members is not None:
                enums[alias.asname or alias.name] = (node.module, alias.name, members)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in enums:
            mod, cls, members = enums[node.value.id]
            if node.attr not in members:
                missing.append(Missing(path, node.lineno, f"{mod}.{cls}.{node.attr}",
                                       f"{cls} has no member {node.attr}"))
    return missing


def check_package(sources: dict[str, str], index: Index) -> list[Missing]:
    out: list[Missing] = []
    for path, text in sorted(sources.items()):
        if path.endswith(".py"):
            out += check_source(path, text, index)
    return out
