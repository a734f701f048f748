"""Spec texts shared by the spec-layer tests (validation codes, CLI, codegen, diagrams).

``DOOR`` is a minimal valid spec; :func:`door` returns it with lines replaced or
appended so each test states only what it breaks. ``REAL_SPECS`` are the shipped specs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO / "fsm_specs"
REAL_SPECS = sorted(SPEC_DIR.glob("*.yaml"))
REAL_MACHINES = [p.stem for p in REAL_SPECS]
#: Specs kept as test material: the agent's first specs (compound states, every
#: barrier form), rewritten by the spec language's issue and since replaced.
FIXTURE_SPECS = sorted((REPO / "tests" / "fixtures" / "specs").glob("*.yaml"))

#: A minimal valid spec. Line numbers matter to the location tests:
#: line 6 starts the events, 10 the states, 14 the transitions.
DOOR = textwrap.dedent(
    """\
    spec_format: 1
    machine: door
    version: 1
    description: A door that can be locked for good.
    events:
      open: {description: Open it.}
      close: {description: Close it.}
      lock: {description: Lock it.}
    states:
      closed: {kind: external, initial: true, description: Closed.}
      opened: {kind: external, description: Open.}
      locked: {kind: final, description: Locked for good.}
    transitions:
      - {from: closed, event: open, to: opened, description: Open the door.}
      - {from: opened, event: close, to: closed, description: Close the door.}
      - {from: closed, event: lock, to: locked, description: Lock the door.}
    """
)


def door(
    replace: dict[int, str] | None = None, append: str = "", insert: dict[int, str] | None = None
) -> str:
    """Return :data:`DOOR` with line ``n`` (1-based) replaced by ``replace[n]``, text
    inserted before line ``n`` (``insert``), and ``append`` added at the end."""
    lines = DOOR.splitlines()
    for number, text in (replace or {}).items():
        lines[number - 1] = text
    for number in sorted(insert or {}, reverse=True):
        lines[number - 1 : number - 1] = (insert or {})[number].splitlines()
    return "\n".join(lines) + "\n" + append


def write(folder: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    """Write ``text`` to ``folder/name`` and return the path."""
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return path


def yaml_quoted(text: str) -> str:
    """``text`` as a double-quoted YAML scalar on one line (YAML's own escapes)."""
    import yaml

    dumped = yaml.safe_dump(text, default_style='"', width=float("inf"), allow_unicode=False)
    return dumped.removesuffix("\n...\n").strip()
