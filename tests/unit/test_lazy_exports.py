"""Packages that export lazily (:mod:`phronomy_fsm._lazy`, PEP 562) export exactly what
they import under ``if TYPE_CHECKING:`` and list in ``__all__``, each name the very
object of the module it is imported from, and nothing more."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

#: Packages whose ``__init__`` imports on first use.
LAZY_PACKAGES = (
    "phronomy_fsm.durable",
    "phronomy_fsm.operator",
    "phronomy_fsm.runtime",
    "phronomy_fsm.store",
)


def type_checking_imports(package: str) -> dict[str, str]:
    """name -> module of the ``from M import N`` lines under ``if TYPE_CHECKING:``."""
    tree = ast.parse(inspect.getsource(importlib.import_module(package)))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.unparse(stmt)
                found.update({alias.name: stmt.module for alias in stmt.names})
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_exports_match_all_and_the_type_checking_imports(package: str) -> None:
    module = importlib.import_module(package)
    imports = type_checking_imports(package)
    assert sorted(imports) == sorted(module.__all__)
    for name, source in imports.items():
        assert getattr(module, name) is getattr(importlib.import_module(source), name), name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'NotExported'"):
        _ = module.NotExported
