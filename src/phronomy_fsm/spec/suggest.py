""" "Did you mean ...?": the nearest declared name for a mistyped one.

Used by the loader (unknown keys, values outside an allowed set) and the validator
(unknown states, events, the fail-closed state) so that a diagnostic leads to its
cause (``docs/spec-format.md`` "Validation codes"). Pure functions over strings.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How similar a name must be to be suggested (difflib's ratio, 0..1).
CUTOFF = 0.6


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate most similar to ``word`` (``difflib.get_close_matches``, ratio at
    least :data:`CUTOFF`), or ``None``; ties go to the first in sorted order, so the
    answer does not depend on the order of ``candidates``. A case-insensitive exact
    match always wins."""
    pool = sorted(set(candidates))
    folded = [c for c in pool if c.lower() == word.lower() and c != word]
    if folded:
        return folded[0]
    matches = difflib.get_close_matches(word, pool, n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the nearest candidate, or ``""``."""
    best = nearest(word, candidates)
    return f"; did you mean {best!r}?" if best is not None else ""
