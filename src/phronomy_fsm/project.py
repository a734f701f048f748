"""The ``[tool.phronomy_fsm]`` table of a project's ``pyproject.toml``.

``phronomy-fsm generate`` and ``phronomy-fsm diagram --all`` without paths read their
inputs from the nearest ``pyproject.toml`` found walking up from the working directory,
so the same command works in this repository and in a user's project::

    [tool.phronomy_fsm]
    specs = ["fsm_specs/*.yaml"]          # globs, relative to the pyproject's folder
    out = "src/phronomy_fsm/generated"    # generated modules
    diagrams = "docs/diagrams"            # committed .dot/.svg/.mmd (optional)

It also says where a project's development PostgreSQL lives
(:func:`dev_postgres_folder`, for ``phronomy-fsm dev postgres``). This module only reads
configuration (``tomllib``); it never writes. The runtime does not import it.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import attrs

from phronomy_fsm.errors import ProjectConfigError

PYPROJECT = "pyproject.toml"
TABLE = "tool.phronomy_fsm"
#: Keys the table may hold; any other key is reported (a typo would otherwise be silent).
ALLOWED_KEYS = ("specs", "out", "diagrams")


@attrs.frozen
class ProjectConfig:
    """The table as read: ``root`` is the folder holding ``pyproject`` (both absolute);
    ``specs`` are the glob patterns as written; ``out`` and ``diagrams`` are absolute
    folders, or ``None`` when the key is absent."""

    pyproject: Path
    root: Path
    specs: tuple[str, ...]
    out: Path | None
    diagrams: Path | None

    def spec_paths(self) -> list[Path]:
        """Every spec file the globs match, sorted and without duplicates, as paths
        relative to the working directory when they lie under it (so diagnostics stay
        short) and absolute otherwise.

        Raises:
            ProjectConfigError: ``specs`` is empty, a pattern is absolute, or a pattern
                matches no file.
        """
        if not self.specs:
            raise ProjectConfigError(
                f"{self.pyproject}: [{TABLE}] specs is empty", path=str(self.pyproject), key="specs"
            )
        found: dict[Path, None] = {}
        for pattern in self.specs:
            if Path(pattern).is_absolute():
                raise ProjectConfigError(
                    f"{self.pyproject}: [{TABLE}] specs pattern {pattern!r} must be relative to the "
                    "pyproject's folder",
                    path=str(self.pyproject),
                    key="specs",
                )
            try:
                matches = sorted(p for p in self.root.glob(pattern) if p.is_file())
            except (ValueError, NotImplementedError, OSError) as exc:
                raise ProjectConfigError(
                    f"{self.pyproject}: [{TABLE}] specs pattern {pattern!r} is not a usable glob: {exc}",
                    path=str(self.pyproject),
                    key="specs",
                ) from None
            if not matches:
                raise ProjectConfigError(
                    f"{self.pyproject}: [{TABLE}] specs pattern {pattern!r} matches no file under {self.root}",
                    path=str(self.pyproject),
                    key="specs",
                )
            for match in matches:
                found.setdefault(match, None)
        return [_short(p) for p in sorted(found)]

    def require(self, key: str) -> Path:
        """Return the folder configured under ``key`` (``out`` or ``diagrams``).

        Raises:
            ProjectConfigError: the key is absent (``missing`` is then true).
        """
        value = getattr(self, key)
        if value is None:
            raise ProjectConfigError(
                f'{self.pyproject}: [{TABLE}] has no {key!r} key; add {key} = "<folder>"',
                path=str(self.pyproject),
                key=key,
                missing=True,
            )
        return value  # type: ignore[no-any-return]


def _short(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def find_pyproject(start: str | os.PathLike[str] | None = None) -> Path | None:
    """Return the nearest ``pyproject.toml`` in ``start`` (default: the working
    directory) or one of its parents, as an absolute path; ``None`` when there is none."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PYPROJECT
        if candidate.is_file():
            return candidate
    return None


def dev_postgres_folder(
    start: str | os.PathLike[str] | None = None, *, data_home: str | None = None
) -> Path:
    """The folder of the development PostgreSQL for the project around ``start``
    (default the working directory): ``<project>/.phronomy/postgres`` when a
    ``pyproject.toml`` is found walking up, else ``<data_home>/phronomy-fsm/postgres``
    (``data_home``: the caller's ``$XDG_DATA_HOME``, default ``~/.local/share``).
    Nothing is created."""
    pyproject = find_pyproject(start)
    if pyproject is not None:
        return pyproject.parent / ".phronomy" / "postgres"
    home = data_home or str(Path.home() / ".local" / "share")
    return Path(home) / "phronomy-fsm" / "postgres"


def load_project_config(start: str | os.PathLike[str] | None = None) -> ProjectConfig:
    """Read ``[tool.phronomy_fsm]`` from the nearest ``pyproject.toml`` (see
    :func:`find_pyproject`).

    Raises:
        ProjectConfigError: no ``pyproject.toml`` is found or it has no
            ``[tool.phronomy_fsm]`` table (``missing`` is then true), it cannot be read
            or parsed, the table has an unknown key, or a value has the wrong type
            (``specs`` a list of strings, ``out`` and ``diagrams`` strings).
    """
    pyproject = find_pyproject(start)
    if pyproject is None:
        where = Path(start if start is not None else Path.cwd()).resolve()
        raise ProjectConfigError(
            f"no {PYPROJECT} found in {where} or its parents; add a [{TABLE}] table (specs, out, "
            f"diagrams) to your project's {PYPROJECT}, or name the files on the command line "
            "(generate SPEC... --out DIR; diagram SPEC -o PATH)",
            path=None,
            key=None,
            missing=True,
        )
    try:
        data = tomllib.loads(pyproject.read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ProjectConfigError(
            f"{pyproject}: cannot read: {exc}", path=str(pyproject), key=None
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ProjectConfigError(
            f"{pyproject}: invalid TOML: {exc}", path=str(pyproject), key=None
        ) from None
    table: Any = (
        data.get("tool", {}).get("phronomy_fsm") if isinstance(data.get("tool"), dict) else None
    )
    if not isinstance(table, dict):
        raise ProjectConfigError(
            f'{pyproject}: no [{TABLE}] table; add one with specs = ["<glob>"] and out = "<folder>"',
            path=str(pyproject),
            key=None,
            missing=True,
        )
    for key in table:
        if key not in ALLOWED_KEYS:
            raise ProjectConfigError(
                f"{pyproject}: [{TABLE}] has unknown key {key!r}; allowed keys: {', '.join(ALLOWED_KEYS)}",
                path=str(pyproject),
                key=key,
            )
    specs = table.get("specs", [])
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise ProjectConfigError(
            f"{pyproject}: [{TABLE}] specs must be a list of glob strings",
            path=str(pyproject),
            key="specs",
        )
    root = pyproject.parent
    folders: dict[str, Path | None] = {}
    for key in ("out", "diagrams"):
        value = table.get(key)
        if value is not None and not isinstance(value, str):
            raise ProjectConfigError(
                f"{pyproject}: [{TABLE}] {key} must be a folder path string",
                path=str(pyproject),
                key=key,
            )
        folders[key] = (root / value) if value else None
    return ProjectConfig(pyproject, root, tuple(specs), folders["out"], folders["diagrams"])
