"""Lazy package exports (PEP 562): a package lists what it exports and where each name
lives, and imports that module on first access to the name, not when the package is
imported.

This is what keeps ``import phronomy_fsm.durable.records`` (the store, the operator
and the CLI need the records) from importing the engine, the dispatcher and the agent
layer through the packages' ``__init__`` modules, so ``phronomy-fsm --help`` and
``phronomy-fsm executions list`` start fast (``docs/performance.md``, "CLI start-up").
A package keeps its imports under ``if TYPE_CHECKING:`` for type checkers and for
``lint-imports``; ``tests/unit/test_lazy_exports.py`` checks that both lists agree
with ``__all__``.

Must not import anything of phronomy_fsm: every package may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package (PEP 562) whose exported names
    are each imported from its module on first access and then kept in the package's
    ``namespace`` (later accesses cost a dict lookup). A package binds them under
    ``if not TYPE_CHECKING:``, so type checkers see only its imports under
    ``if TYPE_CHECKING:`` and still refuse a misspelt name.

    Args:
        namespace: the package's ``globals()``.
        exports: module name (absolute, e.g. ``"phronomy_fsm.durable.records"``) ->
            the names the package exports from it.

    Returns:
        ``(__getattr__, __dir__)``.

    Raises:
        ValueError: a name is listed under two modules.

    A name that is not exported raises ``AttributeError`` as for any module, so
    ``from package import submodule`` still falls back to importing the submodule.
    **Concurrency:** the first access to a name may come from any thread; the import
    system's module locks make the import itself safe, and writing the same value
    twice into the namespace is harmless.
    """
    where: dict[str, str] = {}
    for module, names in exports.items():
        for name in names:
            if name in where:
                raise ValueError(f"{name} is exported from {where[name]} and {module}")
            where[name] = module
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
