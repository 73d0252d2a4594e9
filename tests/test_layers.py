"""The package's layers, read from its own imports: each file imports only from its layer or the ones below, no
files import each other in a loop, and only the command layer reads the command line (README, Layout, says the same)."""

import ast
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "verlenv"

# Bottom to top; a path ending in / is a folder (the longest path that holds a file places it). README's Layout
# shows the same table, and a test below holds the two equal.
LAYERS = (
    ("ground", ("__init__.py", "errors.py", "fsutil.py", "validate.py", "cubins.py")),
    ("catalog", ("catalog/",)),
    ("doctor", ("doctor/",)),
    ("lock", ("lock/",)),
    ("native", ("native/",)),
    ("env", ("env/",)),
    ("bundle", ("bundle/",)),
    ("verify", ("verify/",)),
    ("cluster", ("cluster/",)),
    ("commands", ("commands/",)),
    ("entry", ("cli.py", "__main__.py", "bundle/bootstrap.py")),
)
# Run as scripts by the env's own interpreter (never imported by the tool): they may parse their own arguments.
SCRIPTS = ("verify/kernels/", "verify/envprobe.py")
ARGPARSE_LAYERS = ("commands", "entry")


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _module(rel: str) -> str:
    parts = ["verlenv", *rel.removesuffix(".py").split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(rel: str) -> int:
    placed = [(len(entry), i) for i, (_, entries) in enumerate(LAYERS) for entry in entries
              if rel == entry or (entry.endswith("/") and rel.startswith(entry))]
    assert placed, f"{rel} is on no layer: place it in LAYERS (tests/test_layers.py) and in README's layout"
    return max(placed)[1]


def _target(name: str, modules: dict[str, str]) -> str | None:
    """The file that importing `name` runs last: its module, else the package it names (`from verlenv import x`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return modules.get(name)


def imports(source: str, rel: str, modules: dict[str, str]) -> list[tuple[str, int]]:
    """(file of this package, line) for every import in `source`, at the top or inside a function."""
    module = _module(rel)
    package = module if rel.endswith("__init__.py") else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] if base else []
        else:
            continue
        for name in names:
            if name == "verlenv" or name.startswith("verlenv."):
                target = _target(name, modules)
                if target and target != rel:
                    out.append((target, node.lineno))
    return out


def graph(files: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """file -> the package's files it imports, from sources keyed by their path under src/verlenv."""
    modules = {_module(rel): rel for rel in files}
    return {rel: imports(text, rel, modules) for rel, text in files.items()}


def upward(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    names = [name for name, _ in LAYERS]
    return [f"{rel}:{line} imports {target}: {names[layer_of(rel)]} -> {names[layer_of(target)]}"
            for rel, out in sorted(edges.items()) for target, line in out if layer_of(target) > layer_of(rel)]


def cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The loops of files that import each other (Tarjan's strongly connected components of two or more)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def command_line_code(files: dict[str, str]) -> list[str]:
    """Outside the command layer: an import of argparse, a `register(sub)` of a subcommand, a function taking `args`."""
    allowed = {i for i, (name, _) in enumerate(LAYERS) if name in ARGPARSE_LAYERS}
    out = []
    for rel, text in sorted(files.items()):
        if rel.startswith(SCRIPTS) or layer_of(rel) in allowed:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                out += [f"{rel}:{node.lineno} imports argparse" for n in names if n.split(".")[0] == "argparse"]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name == "register":
                    out.append(f"{rel}:{node.lineno} registers a subcommand")
                if any(a.arg == "args" for a in node.args.args + node.args.kwonlyargs):
                    out.append(f"{rel}:{node.lineno} {node.name} takes the parsed args")
    return out


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return {_rel(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_file_is_on_a_layer(sources):
    for rel in sources:
        layer_of(rel)


def test_no_import_runs_from_a_lower_layer_to_a_higher_one(sources):
    assert upward(graph(sources)) == []


def test_no_files_import_each_other_in_a_loop(sources):
    assert cycles(graph(sources)) == []


def test_only_the_command_layer_reads_the_command_line(sources):
    assert command_line_code(sources) == []


def readme_layers(text: str) -> list[tuple[str, tuple[str, ...]]]:
    """The layer table of README's Layout section, bottom to top like LAYERS."""
    head = text.index("| layer (top to bottom) |")
    out = []
    for row in itertools.takewhile(lambda line: line.startswith("|"), text[head:].splitlines()[2:]):
        name, files = (cell.strip() for cell in row.strip("|").split("|")[:2])
        out.append((name, tuple(re.findall(r"`([^`]+)`", files))))
    return out[::-1]


def test_readme_shows_the_same_layers():
    assert readme_layers((ROOT / "README.md").read_text()) == list(LAYERS)


def test_the_checks_see_an_upward_import_a_loop_and_the_command_line():
    """The same checks on a made-up tree: an import inside a function counts as much as one at the top."""
    fake = {
        "catalog/stacks.py": "from verlenv.env import install\n",
        "env/install.py": "def f():\n    from verlenv.commands.install import main\n",
        "commands/install.py": "import argparse\nfrom verlenv.env import install\n",
        "verify/runner.py": "import argparse\ndef register(sub):\n    pass\ndef handle(args):\n    pass\n",
        "verify/kernels/check_x.py": "import argparse\n",
    }
    edges = graph(fake)
    assert upward(edges) == ["catalog/stacks.py:1 imports env/install.py: catalog -> env",
                             "env/install.py:2 imports commands/install.py: env -> commands"]
    assert cycles(edges) == [["commands/install.py", "env/install.py"]]
    assert command_line_code(fake) == ["verify/runner.py:1 imports argparse",
                                       "verify/runner.py:2 registers a subcommand",
                                       "verify/runner.py:4 handle takes the parsed args"]
