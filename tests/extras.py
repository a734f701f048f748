"""What an install of phronomy-fsm with some extras provides, for the tests that check
that an example or a doc's snippet needs nothing more than the install it names.

The extras are read from ``pyproject.toml`` (the source, not the possibly stale metadata
of the editable install); their requirements' own requirements are followed through the
distributions installed here (so the environment must hold the extras being checked,
as ``tools/run.sh`` installs them).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "phronomy-fsm"


def _project() -> dict[str, list[str]]:
    """The base requirements (key ``""``) and those of each extra, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    return {"": project["dependencies"], **project["optional-dependencies"]}


def distributions(extras: Iterable[str] = ()) -> set[str]:
    """Canonical names of the distributions ``pip install 'phronomy-fsm[extras]'``
    installs: the project, its base requirements and those of ``extras``, and every
    requirement of those (as installed here; markers evaluated for this interpreter).

    Raises:
        KeyError: an extra the project does not declare.
    """
    declared = _project()
    wanted = [*declared[""], *(r for extra in extras for r in declared[extra])]
    found = {canonicalize_name(PROJECT)}
    while wanted:
        requirement = Requirement(wanted.pop())
        name = canonicalize_name(requirement.name)
        if name == canonicalize_name(PROJECT):  # an extra naming others: phronomy-fsm[otel]
            wanted += [r for extra in requirement.extras for r in declared[extra]]
            continue
        if name in found:
            continue
        found.add(name)
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own requirements are unknown
        for text in requires:
            marker = Requirement(text).marker  # a base requirement, or one of an extra asked for
            if marker is None or any(
                marker.evaluate({"extra": e}) for e in ("", *requirement.extras)
            ):
                wanted.append(text)
    return found


def providers(module: str) -> set[str]:
    """Canonical names of the installed distributions that hold ``module`` (a dotted
    name; a namespace package such as ``opentelemetry`` is spread over several, so the
    files of each are looked at). Empty when no installed distribution has it."""
    top = module.split(".")[0]
    candidates = metadata.packages_distributions().get(top, [])
    path = module.replace(".", "/")
    found = set()
    for name in candidates:
        files = metadata.files(name) or []
        if any(str(f).startswith((path + "/", path + ".")) for f in files):
            found.add(canonicalize_name(name))
    if top == "phronomy_fsm":  # the editable install lists no source files
        found.add(canonicalize_name(PROJECT))
    return found


def modules_outside(extras: Iterable[str] = ()) -> list[str]:
    """The top-level modules installed here that ``pip install 'phronomy-fsm[extras]'``
    would not install (every distribution holding them is outside :func:`distributions`)."""
    inside = distributions(extras)
    return sorted(
        top
        for top, names in metadata.packages_distributions().items()
        if not any(canonicalize_name(n) in inside for n in names)
    )
