"""The size limits of the code base: no module over 450 lines and no function
body over 60 lines in ``wavygraph/``, and a README of at most 300 lines.

A function's body is counted from its first statement after the docstring to
its last line (blank lines and comments inside count; the signature, the
decorators and the docstring do not). Nested functions and methods are
checked too.
"""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wavygraph"
MAX_MODULE_LINES = 450
MAX_BODY_LINES = 60
MAX_README_LINES = 300
#: ``"path/in/wavygraph.py"`` or ``"path.py:function"`` known to be over a
#: limit while being split: reported as xfail. Keep it empty.
KNOWN_OFFENDERS: set[str] = set()

MODULES = sorted(PACKAGE.rglob("*.py"))


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = fn.body[1:] if _is_docstring(fn.body[0]) else fn.body
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def long_functions(source: str) -> list[tuple[str, int]]:
    """``(name, body lines)`` of every function over the limit."""
    return [(node.name, body_lines(node)) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > MAX_BODY_LINES]


def _xfail_known(key: str) -> None:
    if key in KNOWN_OFFENDERS:
        pytest.xfail(f"{key} is listed in KNOWN_OFFENDERS")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_and_function_sizes(path):
    rel = str(path.relative_to(PACKAGE))
    source = path.read_text()
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        _xfail_known(rel)
    assert lines <= MAX_MODULE_LINES, f"wavygraph/{rel} has {lines} lines (limit {MAX_MODULE_LINES})"
    for name, count in long_functions(source):
        _xfail_known(f"{rel}:{name}")
        raise AssertionError(f"wavygraph/{rel}: {name} has a {count}-line body (limit {MAX_BODY_LINES})")


def test_the_counting_itself():
    short = "def f(x):\n    '''doc\n\n    more'''\n" + "    x += 1\n" * MAX_BODY_LINES
    assert long_functions(short) == []
    long = "class A:\n    def g(self):\n" + "        pass\n" * (MAX_BODY_LINES + 1)
    assert long_functions(long) == [("g", MAX_BODY_LINES + 1)]
    nested = "def outer():\n    def inner():\n" + "        pass\n" * (MAX_BODY_LINES + 1) + "    return inner\n"
    assert [name for name, _ in long_functions(nested)] == ["outer", "inner"]


def test_readme_length():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (limit {MAX_README_LINES}); move details to docs/"
