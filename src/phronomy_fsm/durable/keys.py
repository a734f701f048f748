"""Ids and keys of the durable engine: execution ids, signal ids, idempotency keys.

Owns the two derivations recovery relies on (``docs/semantics.md`` "Idempotency
keys" and "Starting"):

- an effect's **idempotency key** is derived from the execution id, the revision of
  the barrier commit that announced the effect, and the effect's name — so it is the
  same when recovery runs the effect again after a crash (stable), and different for
  every later run of it after another barrier (unique per attempt of the logical
  effect). An operator's ``retry`` keeps the key: an idempotent service then still
  recognises the effect.
- an **execution id** chosen by the application is a store key and appears in
  operator commands, so it is 1-128 printable characters with no whitespace, no
  control characters and no bidirectional-text controls.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata

from phronomy_fsm.errors import InvalidIdError

#: Longest id accepted, in characters.
MAX_ID_LENGTH = 128

_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Cs", "Co", "Cn"})
_WHITESPACE = re.compile(r"\s")


def check_id(value: object, what: str = "execution_id") -> str:
    """Return ``value`` if it is an acceptable id, else raise.

    Accepted: a string of 1 to :data:`MAX_ID_LENGTH` characters with no whitespace, no
    control or format characters (which covers NUL, ESC, CR/LF and the bidirectional
    overrides such as U+202E), no unassigned or private-use code points.

    Raises:
        InvalidIdError: ``what`` names the field; the message says what is allowed.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"{what} must be a string of 1-{MAX_ID_LENGTH} printable characters without "
            f"whitespace, got {value!r:.80}",
            field=what,
        )
    if _WHITESPACE.search(value) or any(
        unicodedata.category(ch) in _FORBIDDEN_CATEGORIES for ch in value
    ):
        raise InvalidIdError(
            f"{what} {value!r:.80} contains whitespace or a control/format character; use "
            "printable characters only (letters, digits, punctuation)",
            field=what,
        )
    return value


def new_execution_id() -> str:
    """A fresh random execution id: 32 lowercase hex digits (128 random bits)."""
    return os.urandom(16).hex()


def new_signal_id() -> str:
    """A fresh random signal id (``sig-`` and 32 hex digits)."""
    return "sig-" + os.urandom(16).hex()


def idempotency_key(execution_id: str, revision: int, effect: str) -> str:
    """The idempotency key of ``effect`` announced by the commit at ``revision``.

    ``<effect>-`` followed by the first 32 hex digits of
    sha256(execution_id NUL revision NUL effect): stable across restarts, distinct for
    every execution, barrier revision and effect."""
    raw = f"{execution_id}\x00{revision}\x00{effect}".encode()
    return f"{effect}-{hashlib.sha256(raw).hexdigest()[:32]}"


def child_execution_id(parent_execution_id: str, revision: int, index: int) -> str:
    """The id of the ``index``-th child started by the parent's commit at
    ``revision`` when the application names none: deterministic, so a replayed
    barrier creates the same children."""
    raw = f"{parent_execution_id}\x00{revision}\x00{index}".encode()
    return "child-" + hashlib.sha256(raw).hexdigest()[:32]


__all__ = [
    "MAX_ID_LENGTH",
    "check_id",
    "child_execution_id",
    "idempotency_key",
    "new_execution_id",
    "new_signal_id",
]
