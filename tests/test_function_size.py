"""No function of the package runs over 60 lines (def line to last line): a longer one is an orchestrator to split
into a plan and named steps (issue 51). Read from the source with ast, so it fails the day one grows past it."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "verlenv"
MAX_LINES = 60


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function, nested ones and methods included, longer than `limit`."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_in_src_is_over_60_lines():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the walk found the package
    long = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
            for path in files for name, line, length in long_functions(path.read_text())]
    assert not long, "split into named steps: " + "; ".join(long)


def test_the_count_runs_from_the_def_line_to_the_last_line_nested_functions_included():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    assert long_functions(f"def fits():\n{body}") == []
    assert long_functions(f"def over():\n{body}    return 0\n") == [("over", 1, MAX_LINES + 1)]
    nested = "class C:\n    def m(self):\n" + body.replace("    ", "        ") + "        return 0\n"
    assert long_functions(nested) == [("m", 2, MAX_LINES + 1)]
