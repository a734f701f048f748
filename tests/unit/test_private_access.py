"""No module reaches into another module's private attributes: ``obj._name`` is only
used where ``_name`` is defined in the same module (a class's own helpers, objects of a
class of that module), so a module's internals can change without breaking another one
(the layering that import-linter checks between packages, inside them)."""

from __future__ import annotations

import ast
from pathlib import Path

import phronomy_fsm

PACKAGE = Path(phronomy_fsm.__file__).parent
#: the public API of NamedTuples is spelt with an underscore
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make"}


def _defined(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, methods, classes, attributes
    assigned anywhere (``self._x = ...``, ``_x = ...``) and ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ and attrs field names
    return {n for n in names if n.startswith("_")}


def reach_ins(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of each access to another module's private attribute."""
    tree = ast.parse(source)
    own = _defined(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name in NAMEDTUPLE_API:
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "super":
            continue
        if name not in own:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reaches_into_another_modules_private_attributes() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, expression in reach_ins(path.read_text("utf-8")):
            offenders.append(f"{path.relative_to(PACKAGE)}:{line}: {expression}")
    assert offenders == [], "\n".join(offenders)


def test_the_check_sees_a_reach_in() -> None:
    source = "class A:\n    def __init__(self):\n        self._mine = 1\n\ndef f(a, b):\n    return a._mine, b._theirs\n"
    assert reach_ins(source) == [(6, "b._theirs")]
