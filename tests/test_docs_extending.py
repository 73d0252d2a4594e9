"""docs/extending.md's claims hold in the tree: every file it names exists, every test it names is defined."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"


def named() -> tuple[set[str], set[tuple[str, str]]]:
    text = PAGE.read_text()
    paths, tests = set(), set()
    for cell in re.findall(r"`([^`]+)`", text):
        m = re.fullmatch(r"(tests/[\w/]+\.py)::(\w+)", cell)
        if m:
            tests.add((m[1], m[2]))
        elif re.fullmatch(r"[\w./-]+\.(py|toml)", cell) and "<" not in cell and not re.search(r"[A-Z]{3,}", cell):
            paths.add(cell)
    return paths, tests


def test_every_file_the_page_names_exists():
    paths, tests = named()
    assert len(paths) >= 10 and len(tests) >= 10  # the page is the table it claims to be
    assert [p for p in sorted(paths) if not (ROOT / p).exists()] == []


def test_every_test_the_page_names_is_defined():
    _, tests = named()
    missing = []
    for file, name in sorted(tests):
        tree = ast.parse((ROOT / file).read_text())
        if name not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{file}::{name}")
    assert missing == []
