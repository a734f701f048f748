"""The encoder of the commit hot path: :func:`records.to_json` itself.

:func:`encode` used to be a separate fast path promising output identical to
``to_json``; ``to_json`` is now fast on its own (generated unstructuring plus orjson),
so the promise holds by identity. Kept as a name for the store's modules and tests.
"""

from __future__ import annotations

from phronomy_fsm.store.records import to_json as encode

__all__ = ["encode"]
