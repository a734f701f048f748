"""Benchmarks run by ``tools/bench.py``; one module per benchmark name."""

from __future__ import annotations

import os
import tempfile

#: Names the folder benchmarks put their databases in (default: the current directory).
BENCH_DIR_VARIABLE = "PHRONOMY_BENCH_DIR"


def bench_folder(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for a benchmark's databases, removed when the ``with`` block
    ends: a hidden folder (``prefix`` starts with ``.``) of ``$PHRONOMY_BENCH_DIR`` or,
    without it, of the current directory, so the disk measured is the one you run from
    (``docs/performance.md``)."""
    return tempfile.TemporaryDirectory(
        dir=os.environ.get(BENCH_DIR_VARIABLE) or os.getcwd(), prefix=prefix
    )
