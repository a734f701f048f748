"""The trace and span ids of an execution's spans, derived from the execution.

Every id is a sha256 of the execution's identity, never random, so a recovered
execution continues its trace in another process and a span emitted twice would carry
the same id twice (``docs/tracing.md``, "Ids, and the no-duplicate rule"). Pure
functions; applications use them to link their own spans.

Must not: import OpenTelemetry.
"""

from __future__ import annotations

import hashlib


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(("phronomy-fsm", *parts)).encode("utf-8")).digest()


def trace_id_for(root_execution_id: str) -> int:
    """The 128-bit trace id of every span of ``root_execution_id`` and its
    descendants: the first 16 bytes of sha256("phronomy-fsm", "trace", id), never 0."""
    return int.from_bytes(_digest("trace", root_execution_id)[:16], "big") or 1


def _span_id(*parts: str) -> int:
    return int.from_bytes(_digest("span", *parts)[:8], "big") or 1


def execution_span_id(execution_id: str) -> int:
    """The 64-bit span id of the execution span of ``execution_id``."""
    return _span_id(execution_id, "execution")


def commit_span_id(execution_id: str, revision: int) -> int:
    """The 64-bit span id of the commit of ``revision`` of ``execution_id``."""
    return _span_id(execution_id, "commit", str(revision))


def effect_span_id(execution_id: str, key: str, attempt: int) -> int:
    """The 64-bit span id of one attempt of the effect with idempotency ``key``."""
    return _span_id(execution_id, "effect", key, str(attempt))


__all__ = ["commit_span_id", "effect_span_id", "execution_span_id", "trace_id_for"]
