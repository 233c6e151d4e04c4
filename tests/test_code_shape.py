"""Shape rules ruff has no switch for: no function in dslaunch/ is longer than 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 60
PACKAGE = Path(__file__).parents[1] / "dslaunch"


def _long_functions(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_LINES:
                found.append(f"{name}:{node.lineno} {node.name}() is {length} lines")
    return found


def test_no_function_in_the_package_is_over_60_lines() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, "split these functions:\n" + "\n".join(found)


def test_the_rule_sees_a_long_function_and_a_long_method() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    source = f"def long():\n{body}\n\nclass C:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    assert [line.split()[1] for line in _long_functions(source, "m.py")] == ["long()", "method()"]
    assert _long_functions("def short():\n    return 1\n", "m.py") == []
