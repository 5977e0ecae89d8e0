"""
No function or method of ``ai_contrib`` is over 80 lines, docstring included
(``docs/development.md``, house rules): read from the source with ``ast``.
"""

import ast

from tests.support.paths import ROOT

PACKAGE = ROOT / "ai_contrib"
MAX_LINES = 80


def long_functions(source, name="<source>"):
    """``["name:line function (N lines)"]`` for each function of ``source`` over the limit."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_of_the_package_is_over_80_lines():
    paths = sorted(PACKAGE.rglob("*.py"))
    counted = sum(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for path in paths for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    assert counted > 500  # the walk reads the whole package
    long = [hit for path in paths
            for hit in long_functions(path.read_text(encoding="utf-8"),
                                      str(path.relative_to(ROOT)))]
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_the_check_flags_a_long_function_and_passes_a_short_one():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    assert long_functions(f"def long():\n{body}\n") == ["<source>:1 long (81 lines)"]
    short = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    assert long_functions(f"def short():\n{short}\n") == []
