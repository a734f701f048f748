"""Hooks as plain functions: effect functions, their context snapshot and effect context.

Owns what lets an application write its hooks as plain functions
(``docs/spec-format.md``, "Hooks and the generated Protocol"):

- :func:`as_hooks` turns a mapping of name → function into an object the binding reads
  by attribute (a module, a ``types.SimpleNamespace`` or a class instance already is one);
- an effect declared with the spec's ``effect:`` shorthand (``OffloadRow.direct``) is a
  plain function ``effect(snapshot, ectx) -> result``: :func:`effect_work` adapts it to
  the offload hook the dispatcher calls. On the loop thread it takes a
  :class:`ContextSnapshot` (a frozen deep copy of the context); on the worker it calls
  the function with the snapshot and an :class:`EffectContext` (idempotency key,
  attempt, cancellation, deadline). The return value is the ``completed`` payload, an
  exception the ``failed`` payload.

It must not know the durable engine: the effect's key, attempt and deadline come in
through the worker's ``OffloadContext`` (``octx.effect``), set by whatever drives the
session.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs

from phronomy_fsm.runtime.cancellation import CancellationToken


class ContextSnapshot:
    """A frozen copy of a session's context, handed to an effect function.

    Taken on the loop thread when the effect starts (a deep copy), so the effect reads
    the context as it was then, whatever actions do to the live one meanwhile. Fields
    read as attributes (``snapshot.amount_cents``) and, for a dict context, as items
    (``snapshot["amount_cents"]``); setting or deleting one raises ``AttributeError``.
    Nested values are copies: changing them changes nothing the machine sees.
    """

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        object.__setattr__(self, "_value", copy.deepcopy(value))

    def __getattr__(self, name: str) -> Any:
        value = object.__getattribute__(self, "_value")
        if isinstance(value, dict):
            try:
                return value[name]
            except KeyError:
                raise AttributeError(name) from None
        return getattr(value, name)

    def __getitem__(self, key: Any) -> Any:
        return object.__getattribute__(self, "_value")[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a context snapshot is read-only (setting {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a context snapshot is read-only (deleting {name!r})")

    def __repr__(self) -> str:
        return f"ContextSnapshot({object.__getattribute__(self, '_value')!r})"


@attrs.frozen
class EffectContext:
    """What an effect function receives beside the snapshot (its second argument).

    Attributes:
        idempotency_key: the effect's key, stable across restarts (``None`` outside a
            durable execution; ``docs/semantics.md``, "Idempotency keys").
        attempt: 1 for the first run; an operator's ``retry`` raises it.
        kind: ``pure``, ``idempotent`` or ``at_most_once`` (``None`` outside a durable
            execution, or for a pure effect there).
        cancellation: cancelled when the session leaves the state or ends (a cancel,
            a deadline, a lost lease): check ``cancellation.is_cancelled()`` or register
            ``on_cancel`` to abort a blocking call; ``None`` when nothing can cancel
            it. The work is never interrupted by force.
        deadline: the execution's own deadline (``start(..., timeout_seconds=)``), an
            aware UTC datetime, or ``None``.
    """

    idempotency_key: str | None = None
    attempt: int = 1
    kind: str | None = None
    cancellation: CancellationToken | None = None
    deadline: datetime | None = None

    @classmethod
    def from_offload_context(cls, octx: Any) -> EffectContext:
        """Build one from the worker's ``OffloadContext`` (``octx.effect`` is set for an
        effect of a durable execution)."""
        effect = getattr(octx, "effect", None)
        token = getattr(octx, "cancellation", None)
        if effect is None:
            return cls(cancellation=token)
        return cls(
            effect.key, effect.attempt, effect.kind, token, getattr(effect, "deadline", None)
        )


def effect_work(function: Callable[[Any, EffectContext], Any]) -> Callable[[Any, Any], Any]:
    """Adapt the effect function ``function(snapshot, ectx) -> result`` to an offload hook
    ``hook(ctx, payload) -> work``: the returned hook snapshots ``ctx`` on the loop thread
    and returns the work ``work(octx)``, which calls ``function`` on the worker."""

    def prepare(ctx: Any, payload: Any) -> Callable[[Any], Any]:
        snapshot = ContextSnapshot(ctx)

        def work(octx: Any) -> Any:
            return function(snapshot, EffectContext.from_offload_context(octx))

        return work

    prepare.__name__ = getattr(function, "__name__", "effect")
    prepare.__wrapped__ = function  # type: ignore[attr-defined]
    return prepare


def as_hooks(hooks: Any) -> Any:
    """The hooks object a binding reads by attribute.

    Args:
        hooks: an object with one callable attribute per hook (a module, a
            ``types.SimpleNamespace``, an instance of a class implementing the generated
            ``Hooks`` Protocol), or a mapping of hook name → function.

    Returns:
        ``hooks`` itself, or for a mapping a ``types.SimpleNamespace`` of its items.

    Raises:
        TypeError: a mapping key is not a string.
    """
    if isinstance(hooks, Mapping):
        bad = [key for key in hooks if not isinstance(key, str)]
        if bad:
            raise TypeError(f"hook names must be strings, got {bad[0]!r}")
        return types.SimpleNamespace(**hooks)
    return hooks


def describe_hooks(hooks: Any) -> str:
    """How an error names a hooks object: ``module 'payout'``, ``namespace`` or its class."""
    if isinstance(hooks, types.ModuleType):
        return f"module {hooks.__name__!r}"
    if isinstance(hooks, types.SimpleNamespace):
        return "the hooks given"
    return type(hooks).__name__


__all__ = ["ContextSnapshot", "EffectContext", "as_hooks", "describe_hooks", "effect_work"]
