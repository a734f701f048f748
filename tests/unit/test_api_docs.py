"""Every public module, class, function and method has a docstring, and the generated
API reference (docs/api-reference.md) is fresh (issue 5 item 10)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gen_api_docs


def test_every_public_object_has_a_docstring() -> None:
    missing = []
    for module in gen_api_docs.public_modules():
        if not (module.__doc__ or "").strip():
            missing.append(module.__name__)
        for name, obj in gen_api_docs.members(module):
            if not (obj.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                for method_name, method in gen_api_docs.methods(obj):
                    if not (method.__doc__ or "").strip():
                        missing.append(f"{module.__name__}.{name}.{method_name}")
    assert missing == []


def test_api_reference_is_fresh() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_api_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
