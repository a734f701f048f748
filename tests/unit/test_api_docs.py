"""The API reference (docs/api-reference.md) is generated from the supported API only and
is fresh; every API package, class, function and public method has a docstring whose
first paragraph holds a whole first sentence, which is the summary the reference shows
(issue 14 item 3; issue 5 item 10)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_api_docs


def _documented() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for module in gen_api_docs.api_packages():
        out.append((module.__name__, module))
        for name, obj in gen_api_docs.api_members(module):
            if gen_api_docs._kind(obj) == "constant":
                continue
            out.append((f"{module.__name__}.{name}", obj))
            if inspect.isclass(obj):
                out += [
                    (f"{module.__name__}.{name}.{method_name}", method)
                    for method_name, method in gen_api_docs.methods(obj)
                ]
    return out


def test_every_api_object_has_a_whole_first_sentence() -> None:
    missing = [
        name
        for name, obj in _documented()
        if gen_api_docs.first_sentence(gen_api_docs.own_doc(obj)) is None
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("doc", "sentence"),
    [
        ("Do a thing.\n\nMore.", "Do a thing."),
        (
            "Wait for ``x.y`` to end, e.g. a\ncall. Then more.",
            "Wait for ``x.y`` to end, e.g. a call.",
        ),
        ("A summary cut\n\nby a blank line.", None),
        ("Args:\n    x: a value.", "Args: x: a value."),
        ("", None),
    ],
)
def test_first_sentence_is_whole(doc: str, sentence: str | None) -> None:
    assert gen_api_docs.first_sentence(doc) == sentence


def test_only_the_api_is_documented() -> None:
    text = gen_api_docs.render()
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == [f"`{name}`" for name in gen_api_docs.API_PACKAGES]
    entries = [line.split("`")[1] for line in text.splitlines() if line.startswith("### ")]
    # every entry is a name of an API package (re-exported names under the package's
    # name, never the private module that defines them)
    strays = [
        e for e in entries if e.split("(")[0].rsplit(".", 1)[0] not in gen_api_docs.API_PACKAGES
    ]
    assert strays == []
    assert any(e.startswith("phronomy_fsm.store.SqliteBarrierStore(") for e in entries)


def test_api_reference_is_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_api_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
