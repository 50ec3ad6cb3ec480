"""No test file imports a test module, conftest, or a `tests.` package.

Such imports only resolve when the right folder happens to be on sys.path (plain `pytest`
from another folder fails with "No module named 'tests'"), and they import one test module's
tests into another. Shared code lives in helper modules in tests/ whose names do not start
with `test_` (e.g. hardening_helpers.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def is_forbidden(module: str) -> bool:
    top = module.split(".")[0]
    return top in ("conftest", "tests") or top.startswith("test_")


def imported_names(node: ast.AST) -> list[str]:
    """The modules one node imports: an import statement at any depth (inside functions
    too), or importlib.import_module / __import__ with a literal name. `from x import y`
    names both x and x.y, since y may be a module (`from . import test_x`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        return ([base] if base else []) + [
            f"{base}.{alias.name}" if base else alias.name for alias in node.names
        ]
    if (
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
        )
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def forbidden_imports(source: str, name: str) -> list[str]:
    """One line per offending import, `file:line: imports module`, in line order."""
    problems = []
    for node in ast.walk(ast.parse(source, filename=name)):
        bad = [module for module in imported_names(node) if is_forbidden(module)]
        if bad:
            problems.append((node.lineno, f"{name}:{node.lineno}: imports {bad[0]}"))
    return [problem for _, problem in sorted(problems)]


def test_guard_flags_forbidden_imports() -> None:
    source = (
        "import os\n"
        "from conftest import require_in_ci\n"
        "def f():\n"
        "    from tests.test_quality import budget_engine\n"
        "import test_engine\n"
        "from . import test_kernels\n"
        "from hardening_helpers import invoke\n"
        "importlib.import_module('test_calibration')\n"
        "__import__('json')\n"
    )
    assert forbidden_imports(source, "x.py") == [
        "x.py:2: imports conftest",
        "x.py:4: imports tests.test_quality",
        "x.py:5: imports test_engine",
        "x.py:6: imports test_kernels",
        "x.py:8: imports test_calibration",
    ]


def test_no_test_file_imports_a_test_module_or_conftest() -> None:
    files = sorted(TESTS.glob("*.py"))
    assert any(p.name == "conftest.py" for p in files), f"no test files found in {TESTS}"
    problems = [
        problem
        for path in files
        for problem in forbidden_imports(path.read_text(encoding="utf-8"), path.name)
    ]
    assert not problems, (
        "move shared code into a helper module in tests/ (a name not starting with test_):\n"
        + "\n".join(problems)
    )
