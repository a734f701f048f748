"""The Python snippets of ``docs/`` import only what the install their page names provides
(issue 21: ``docs/tracing.md`` told readers to ``pip install 'phronomy-fsm[otel]'`` and
then imported the OTLP exporter, which that extra does not install).

A page names its install in a shell line such as ``pip install 'phronomy-fsm[otel]'`` (or
``pip install -e ".[bench]"``); a page that names none is read as the base install. Each
top-level ``import`` of its ```` ```python ```` blocks must come from a distribution that
install brings (``tests/extras.py``: the extras as ``pyproject.toml`` declares them and
their requirements as installed here) — so the environment must hold the extras, as
``tools/run.sh`` installs them.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from ..extras import distributions, providers

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "api-reference.md")

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INSTALL = re.compile(r"pip install [^\n]*?(?:phronomy-fsm|\.)\[([\w,-]+)\]")
#: The reader's own modules in the snippets: generated tables (``docs/getting-started.md``
#: generates ``machines.payout`` and ``my_app.generated.order``; ``docs/tutorial.md``
#: generates ``refund`` and writes ``refunds_app``), not anything installed.
OWN_MODULES = {"machines", "my_app", "refund", "refunds_app"}


def named_extras(text: str) -> set[str]:
    """The extras a page's install lines name."""
    return {extra for m in _INSTALL.finditer(text) for extra in m.group(1).split(",")}


def imported_modules(text: str) -> list[tuple[int, str]]:
    """``(line, module)`` for each top-level import of the page's Python blocks, standard
    library and the reader's own modules left out."""
    found = []
    for block in _FENCE.finditer(text):
        if block.group(1) != "python":
            continue
        first_line = text.count("\n", 0, block.start(2)) + 1
        for node in ast.parse(block.group(2)).body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN_MODULES:
                    found.append((first_line + node.lineno - 1, name))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_snippet_imports_only_what_the_page_installs(doc: Path) -> None:
    text = doc.read_text("utf-8")
    extras = named_extras(text)
    installed = distributions(extras)
    install = f"phronomy-fsm[{','.join(sorted(extras))}]" if extras else "phronomy-fsm"
    wrong = []
    for line, module in imported_modules(text):
        where = f"docs/{doc.name}:{line}: import {module}"
        holders = providers(module)
        if not holders:
            wrong.append(f"{where}: no installed distribution has it ({install} does not)")
        elif not holders & installed:
            wrong.append(f"{where}: from {', '.join(sorted(holders))}, not in {install}")
    assert not wrong, "\n".join(wrong)


def test_the_checker_reads_installs_and_imports() -> None:
    text = (
        "```bash\npip install 'phronomy-fsm[otel,console]'   # tracing\n```\n\n"
        "```python\nimport json\nfrom opentelemetry.sdk.trace import TracerProvider\n"
        "from machines import payout\n\ndef f():\n    import yaml\n```\n"
    )
    assert named_extras(text) == {"otel", "console"}
    assert imported_modules(text) == [(7, "opentelemetry.sdk.trace")]
    assert "opentelemetry-sdk" in distributions({"otel"}) - distributions()
    assert providers("opentelemetry.sdk.trace") == {"opentelemetry-sdk"}
