"""Read a YAML spec into the spec model, keeping the line and column of every node.

Pipeline: bytes (size-limited) → UTF-8 text → a PyYAML node graph composed by a loader
whose booleans follow YAML 1.2 (only ``true``/``false``; ``on``, ``off``, ``yes``, ``no``
stay strings, so a state called ``on`` stays a state called ``on``) → plain values with
a side table of source locations → frozen attrs values through a strict cattrs
converter (extra keys forbidden, scalars never coerced).

Nothing here raises on bad input: :func:`load_spec` returns the model (or ``None``) and
every issue found, each located (``SPEC_FORMAT`` codes in :mod:`phronomy_fsm.spec.issues`).
Semantic checks (reachability, barriers, names, ...) live in
:mod:`phronomy_fsm.spec.validate`. The runtime never imports this module.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import cattrs
import yaml
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override

from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import (
    BarrierSpec,
    EffectKind,
    EventSpec,
    GuardRef,
    MachineSpec,
    MigrationSpec,
    OffloadSpec,
    SourceLoc,
    StateKind,
    StateSpec,
    TimeoutSpec,
    TransitionSpec,
    UnhandledPolicy,
)
from phronomy_fsm.spec.yaml_reader import (
    NodeReader,
    Path_,
    SpecYamlCLoader,
    SpecYamlLoader,
    YamlProblem,
    render_path,
)

#: Default size limit for a spec file, in bytes. A 1,000-state / 5,000-transition spec
#: is well under 1 MiB; anything near this limit is almost certainly not a spec.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
SUPPORTED_FORMATS = (1,)


# ---------------------------------------------------------------- cattrs converter


class _Located:
    """Locations of a document, used to place cattrs errors."""

    def __init__(self, file: str, locs: Mapping[Path_, tuple[int, int]]) -> None:
        self.file = file
        self.locs = locs

    def at(self, path: Path_) -> SourceLoc:
        """The location of ``path``, or of its nearest located ancestor."""
        probe = path
        while probe:
            if probe in self.locs:
                return SourceLoc(self.file, *self.locs[probe])
            probe = probe[:-1]
        return SourceLoc(self.file, *self.locs.get((), (1, 1)))


def _strict_str(value: Any, _: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_describe(value)}")
    return value


def _strict_int(value: Any, _: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_describe(value)}")
    return value


def _strict_float(value: Any, _: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {_describe(value)}")
    return float(value)


def _strict_bool(value: Any, _: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {_describe(value)}")
    return value


def _names(value: Any, _: Any) -> tuple[str, ...]:
    """A name or a list of names."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list):
        raise TypeError(f"expected a name or a list of names, got {_describe(value)}")
    errors = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            exc = TypeError(f"expected a name, got {_describe(item)}")
            exc.__notes__ = [IterableValidationNote(f"item {index}", index, str)]
            errors.append(exc)
    if errors:
        raise IterableValidationError("invalid names", errors, tuple)
    return tuple(value)


def _guard(value: Any, _: Any) -> GuardRef:
    if not isinstance(value, str):
        raise TypeError(f"expected a guard name (optionally 'not name'), got {_describe(value)}")
    words = value.split()
    if len(words) == 2 and words[0] == "not":
        return GuardRef(words[1], negated=True)
    if len(words) == 1:
        return GuardRef(words[0])
    # keep the raw text so the validator reports it as an invalid name
    return GuardRef(value.strip())


def _renames(value: Any, _: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise TypeError(
            f"expected a mapping of old state name to new state name, got {_describe(value)}"
        )
    for old, new in value.items():
        if not isinstance(old, str) or not isinstance(new, str):
            raise TypeError("rename_states maps state names (strings) to state names (strings)")
    return tuple(value.items())


def _enum_hook(enum_type: type[Any]) -> Callable[[Any, Any], Any]:
    allowed = ", ".join(m.value for m in enum_type)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"expected one of {allowed}, got {_describe(value)}")
        try:
            return enum_type(value)
        except ValueError:
            raise ValueError(f"{value!r} is not one of {allowed}") from None

    return hook


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    return type(value).__name__


#: YAML key for each attribute that is renamed, per class (attribute → key).
_KEYS: dict[type, dict[str, str]] = {
    TransitionSpec: {"sources": "from", "target": "to"},
}
_HIDDEN = {"loc": "__loc__", "name": "__name__", "index": "__index__"}


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(str, _strict_str)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict_float)
    conv.register_structure_hook(bool, _strict_bool)
    conv.register_structure_hook_func(lambda t: t == tuple[str, ...], _names)
    conv.register_structure_hook(GuardRef, _guard)
    conv.register_structure_hook_func(lambda t: t == tuple[tuple[str, str], ...], _renames)
    conv.register_structure_hook(StateKind, _enum_hook(StateKind))
    conv.register_structure_hook(UnhandledPolicy, _enum_hook(UnhandledPolicy))
    conv.register_structure_hook(EffectKind, _enum_hook(EffectKind))
    conv.register_structure_hook(SourceLoc, lambda value, _: value)
    for cls in (
        OffloadSpec,
        BarrierSpec,
        TimeoutSpec,
        EventSpec,
        StateSpec,
        TransitionSpec,
        MigrationSpec,
    ):
        overrides: dict[str, Any] = {}
        for field in attrs.fields(cls):
            if field.name in _hidden_fields(cls):
                overrides[field.name] = override(rename=_HIDDEN[field.name])
            elif field.name in _KEYS.get(cls, {}):
                overrides[field.name] = override(rename=_KEYS[cls][field.name])
        conv.register_structure_hook(
            cls, make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True, **overrides)
        )
    return conv


#: Keys a user may write, per node kind (for "allowed keys" messages and the schema).
ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "machine": (
        "spec_format",
        "machine",
        "version",
        "description",
        "events",
        "states",
        "transitions",
        "migrations",
        "fail_closed",
    ),
}


def _hidden_fields(cls: type) -> set[str]:
    """Attributes filled by the loader, never written in YAML."""
    hidden = {"loc", "index"}
    if cls in (StateSpec, EventSpec):
        hidden.add("name")  # the mapping key is the name
    return hidden


def _visible_keys(cls: type) -> tuple[str, ...]:
    renames = _KEYS.get(cls, {})
    return tuple(
        renames.get(f.name, f.name) for f in attrs.fields(cls) if f.name not in _hidden_fields(cls)
    )


for _cls, _label in (
    (StateSpec, "state"),
    (EventSpec, "event"),
    (TransitionSpec, "transition"),
    (OffloadSpec, "offload"),
    (BarrierSpec, "barrier"),
    (TimeoutSpec, "timeout"),
    (MigrationSpec, "migration"),
):
    ALLOWED_KEYS[_label] = _visible_keys(_cls)


_CONVERTER = _make_converter()


def _flatten_cattrs_error(
    exc: BaseException, cls: type, path: Path_
) -> list[tuple[str, str, Path_]]:
    """Walk a cattrs validation error tree into ``(code, message, path)`` triples."""
    out: list[tuple[str, str, Path_]] = []
    if isinstance(exc, ForbiddenExtraKeysError):
        allowed = ", ".join(_visible_keys(exc.cl)) if attrs.has(exc.cl) else ""
        for key in sorted(exc.extra_fields, key=str):
            out.append(
                (
                    "UNKNOWN_KEY",
                    f"unknown key {key!r}; allowed keys here: {allowed}",
                    path + (key,),
                )
            )
        return out
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        for sub in exc.exceptions:
            sub_path = path
            sub_cls: type = cls
            for note in getattr(sub, "__notes__", []):
                if isinstance(note, AttributeValidationNote):
                    key = _KEYS.get(cls, {}).get(note.name, note.name)
                    sub_path = path + (key,)
                    sub_cls = _attrs_class_of(note.type) or cls
                elif isinstance(note, IterableValidationNote):
                    sub_path = path + (note.index,)
            if isinstance(sub, KeyError) and sub_path != path:
                out.append(("MISSING_KEY", f"required key {sub_path[-1]!r} is missing", sub_path))
            else:
                out.extend(_flatten_cattrs_error(sub, sub_cls, sub_path))
        return out
    message = str(exc) or type(exc).__name__
    code = "BAD_VALUE" if isinstance(exc, ValueError) else "WRONG_TYPE"
    if isinstance(exc, AttributeError):
        code = "WRONG_TYPE"
        message = "expected a mapping here"
    return [(code, message, path)]


def _attrs_class_of(tp: Any) -> type | None:
    if isinstance(tp, type) and attrs.has(tp):
        return tp
    for arg in getattr(tp, "__args__", ()) or ():
        if isinstance(arg, type) and attrs.has(arg):
            return arg
    return None


# ------------------------------------------------------------------- public API


@attrs.frozen
class LoadResult:
    """What :func:`load_spec` found: the model (``None`` when the document could not
    be shaped into one) and every issue met while reading (never only the first)."""

    spec: MachineSpec | None
    issues: tuple[SpecIssue, ...]


def load_spec_text(
    text: str | bytes, *, source_name: str = "<memory>", max_bytes: int = DEFAULT_MAX_BYTES
) -> LoadResult:
    """Parse spec text (``str`` or UTF-8 ``bytes``) into a :class:`MachineSpec`.

    Args:
        text: the YAML document.
        source_name: the name used in locations and in ``MachineSpec.source_name``.
        max_bytes: documents larger than this are refused with ``SPEC_TOO_LARGE``.

    Returns:
        A :class:`LoadResult`; never raises for bad input. Structural problems are in
        ``issues``; semantic checks are the validator's job.
    """
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if len(raw) > max_bytes:
        return LoadResult(None, (_too_large_issue(source_name, len(raw), max_bytes),))
    try:
        decoded = raw.decode("utf-8")
        if "\x00" in decoded:
            nul = raw.index(b"\x00")
            raise UnicodeDecodeError("utf-8", raw, nul, nul + 1, "NUL byte")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1  # in bytes
        return LoadResult(
            None,
            (
                SpecIssue(
                    "NOT_UTF8",
                    f"byte {exc.start} is not UTF-8 text ({exc.reason}); a spec is a YAML text file",
                    "$",
                    SourceLoc(source_name, line, column),
                ),
            ),
        )
    with _gc_paused():
        return _load_decoded(raw, decoded, source_name)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a document is parsed and shaped.

    Composing a large spec allocates tens of thousands of acyclic objects; each
    allocation threshold crossed would otherwise run a collection over them all
    (about a third of the load time of a 5,000-transition spec). The previous state is
    restored; cycles created meanwhile (recursive YAML aliases, exception tracebacks)
    are collected once the collector runs again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load_decoded(raw: bytes, decoded: str, source_name: str) -> LoadResult:
    """Parse and shape a decoded document (see :func:`load_spec_text`)."""
    top = SourceLoc(source_name, 1, 1)
    sha = hashlib.sha256(raw).hexdigest()
    reader = NodeReader(source_name)
    try:
        loader = (SpecYamlCLoader or SpecYamlLoader)(decoded)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = SourceLoc(source_name, mark.line + 1, mark.column + 1) if mark else top
        problem = exc.problem or str(exc)
        context = f" ({exc.context})" if exc.context else ""
        return LoadResult(
            None, (SpecIssue("YAML_SYNTAX", f"invalid YAML: {problem}{context}", "$", loc),)
        )
    except yaml.reader.ReaderError as exc:
        # a character YAML does not allow (control characters): locate it by position
        # (libyaml counts UTF-8 bytes, PyYAML's reader counts characters)
        if SpecYamlCLoader is not None:
            before = raw[: exc.position].decode("utf-8", "replace")
        else:
            before = decoded[: exc.position]
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        return LoadResult(
            None,
            (
                SpecIssue(
                    "YAML_SYNTAX",
                    f"invalid YAML: {exc.reason}",
                    "$",
                    SourceLoc(source_name, line, column),
                ),
            ),
        )
    except (yaml.YAMLError, RecursionError) as exc:
        return LoadResult(None, (SpecIssue("YAML_SYNTAX", f"invalid YAML: {exc}", "$", top),))
    if node is None:
        return LoadResult(
            None,
            (
                SpecIssue(
                    "EMPTY_SPEC",
                    "the file holds no YAML document; see docs/spec-format.md",
                    "$",
                    top,
                ),
            ),
        )
    try:
        data = reader.read(node, ())
    except YamlProblem as problem:
        found = reader.issues + [
            SpecIssue(problem.code, problem.message, render_path(problem.path), problem.loc)
        ]
        return LoadResult(None, tuple(found))
    except RecursionError:
        return LoadResult(
            None, (SpecIssue("YAML_UNSUPPORTED", "the document nests too deeply", "$", top),)
        )
    located = _Located(source_name, reader.locs)
    issues: list[SpecIssue] = list(reader.issues)
    spec = _build_machine(data, located, issues, source_name, sha)
    return LoadResult(spec, tuple(issues))


def load_spec(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    source_name: str | None = None,
) -> LoadResult:
    """Read and parse the spec file at ``path``.

    ``source_name`` defaults to ``path`` as given (relative paths stay relative, so
    diagnostics and generated headers hold no absolute paths). An unreadable file is
    reported as ``FILE_UNREADABLE``; files over ``max_bytes`` are not read in full.
    """
    name = source_name if source_name is not None else os.fspath(path)
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            return LoadResult(None, (_too_large_issue(name, size, max_bytes),))
        raw = p.read_bytes()
    except OSError as exc:
        return LoadResult(
            None,
            (
                SpecIssue(
                    "FILE_UNREADABLE",
                    f"cannot read the spec: {exc.strerror or exc}",
                    "$",
                    SourceLoc(name, 0, 0),
                ),
            ),
        )
    return load_spec_text(raw, source_name=name, max_bytes=max_bytes)


def _too_large_issue(name: str, size: int, max_bytes: int) -> SpecIssue:
    return SpecIssue(
        "SPEC_TOO_LARGE",
        f"the file has {size} bytes, more than the limit of {max_bytes}; "
        "split the machine or raise the limit (--max-bytes)",
        "$",
        SourceLoc(name, 1, 1),
    )


def _structure(
    cls: type,
    value: Any,
    path: Path_,
    located: _Located,
    issues: list[SpecIssue],
    hidden: dict[str, Any],
) -> Any:
    if not isinstance(value, dict):
        issues.append(
            SpecIssue(
                "WRONG_TYPE",
                f"expected a mapping with keys {', '.join(_visible_keys(cls))}, got {_describe(value)}",
                render_path(path),
                located.at(path),
            )
        )
        return None
    payload = dict(value)
    for attr_name, hidden_value in hidden.items():
        payload[_HIDDEN[attr_name]] = hidden_value
    payload[_HIDDEN["loc"]] = located.at(path)
    try:
        return _CONVERTER.structure(payload, cls)
    except Exception as exc:  # noqa: BLE001 - cattrs reports every problem in a group
        for code, message, sub_path in _flatten_cattrs_error(exc, cls, path):
            issues.append(SpecIssue(code, message, render_path(sub_path), located.at(sub_path)))
        return None


def _nested_locs(obj: Any, path: Path_, located: _Located) -> Any:
    """Give nested offload/barrier/timeout/guard values the location of their key."""
    changes: dict[str, Any] = {}
    for attr_name, key in (
        ("offload", "offload"),
        ("barrier", "barrier"),
        ("timeout", "timeout"),
        ("guard", "guard"),
    ):
        if hasattr(obj, attr_name) and getattr(obj, attr_name) is not None:
            changes[attr_name] = attrs.evolve(
                getattr(obj, attr_name), loc=located.at(path + (key,))
            )
    return attrs.evolve(obj, **changes) if changes else obj


def _build_machine(
    data: Any, located: _Located, issues: list[SpecIssue], source_name: str, sha: str
) -> MachineSpec | None:
    if not isinstance(data, dict):
        issues.append(
            SpecIssue(
                "WRONG_TYPE",
                f"the document must be a mapping with keys {', '.join(ALLOWED_KEYS['machine'])}, "
                f"got {_describe(data)}",
                "$",
                located.at(()),
            )
        )
        return None
    for key in data:
        if key not in ALLOWED_KEYS["machine"]:
            issues.append(
                SpecIssue(
                    "UNKNOWN_KEY",
                    f"unknown top-level key {key!r}; allowed keys: {', '.join(ALLOWED_KEYS['machine'])}",
                    render_path((key,)),
                    located.at((key,)),
                )
            )
    ok = True

    def scalar(key: str, kind: Callable[[Any, Any], Any], required: bool, default: Any) -> Any:
        nonlocal ok
        if key not in data:
            if required:
                issues.append(
                    SpecIssue(
                        "MISSING_KEY",
                        f"required top-level key {key!r} is missing",
                        "$",
                        located.at(()),
                    )
                )
                ok = False
            return default
        try:
            return kind(data[key], None)
        except TypeError as exc:
            issues.append(
                SpecIssue("WRONG_TYPE", f"{key}: {exc}", render_path((key,)), located.at((key,)))
            )
            ok = False
            return default

    spec_format = scalar("spec_format", _strict_int, False, 1)
    if spec_format not in SUPPORTED_FORMATS:
        issues.append(
            SpecIssue(
                "UNSUPPORTED_FORMAT",
                f"spec_format {spec_format!r} is not supported; this tool reads "
                f"{', '.join(map(str, SUPPORTED_FORMATS))}",
                "$.spec_format",
                located.at(("spec_format",)),
            )
        )
        return None
    machine = scalar("machine", _strict_str, True, "")
    version = scalar("version", _strict_int, True, 0)
    description = scalar("description", _strict_str, False, "")
    fail_closed = scalar("fail_closed", _strict_str, False, None)

    def section_map(key: str) -> dict[Any, Any]:
        nonlocal ok
        value = data.get(key, {})
        if value is None:
            value = {}
        if not isinstance(value, dict):
            issues.append(
                SpecIssue(
                    "WRONG_TYPE",
                    f"{key}: expected a mapping of name to definition, got {_describe(value)}",
                    render_path((key,)),
                    located.at((key,)),
                )
            )
            ok = False
            return {}
        return value

    def name_key(section: str, name: Any) -> str | None:
        nonlocal ok
        if isinstance(name, str):
            return name
        issues.append(
            SpecIssue(
                "WRONG_TYPE",
                f"{section} names must be strings, got {_describe(name)}; quote it or rename it",
                render_path((section, name)),
                located.at((section, name)),
            )
        )
        ok = False
        return None

    events: list[EventSpec] = []
    if "events" not in data:
        issues.append(
            SpecIssue(
                "MISSING_KEY", "required top-level key 'events' is missing", "$", located.at(())
            )
        )
        ok = False
    for name, body in section_map("events").items():
        key = name_key("events", name)
        if key is None:
            continue
        body = {} if body is None else body
        event = _structure(EventSpec, body, ("events", name), located, issues, {"name": key})
        if event is None:
            ok = False
        else:
            events.append(attrs.evolve(event, loc=located.at(("events", name))))

    states: list[StateSpec] = []
    if "states" not in data:
        issues.append(
            SpecIssue(
                "MISSING_KEY", "required top-level key 'states' is missing", "$", located.at(())
            )
        )
        ok = False
    for name, body in section_map("states").items():
        key = name_key("states", name)
        if key is None:
            continue
        state = _structure(StateSpec, body, ("states", name), located, issues, {"name": key})
        if state is None:
            ok = False
        else:
            state = _nested_locs(
                attrs.evolve(state, loc=located.at(("states", name))), ("states", name), located
            )
            states.append(state)

    transitions: list[TransitionSpec] = []
    raw_transitions = data.get("transitions")
    if "transitions" not in data:
        issues.append(
            SpecIssue(
                "MISSING_KEY",
                "required top-level key 'transitions' is missing",
                "$",
                located.at(()),
            )
        )
        ok = False
    elif not isinstance(raw_transitions, list):
        issues.append(
            SpecIssue(
                "WRONG_TYPE",
                f"transitions: expected an ordered list of transitions, got {_describe(raw_transitions)}",
                "$.transitions",
                located.at(("transitions",)),
            )
        )
        ok = False
    else:
        for index, body in enumerate(raw_transitions):
            path = ("transitions", index)
            if isinstance(body, dict) and "to" not in body:
                body = {**body, "to": None}
            transition = _structure(TransitionSpec, body, path, located, issues, {"index": index})
            if transition is None:
                ok = False
            else:
                transitions.append(_nested_locs(transition, path, located))

    migrations: list[MigrationSpec] = []
    raw_migrations = data.get("migrations", [])
    if raw_migrations is None:
        raw_migrations = []
    if not isinstance(raw_migrations, list):
        issues.append(
            SpecIssue(
                "WRONG_TYPE",
                f"migrations: expected a list, got {_describe(raw_migrations)}",
                "$.migrations",
                located.at(("migrations",)),
            )
        )
        ok = False
    else:
        for index, body in enumerate(raw_migrations):
            migration = _structure(MigrationSpec, body, ("migrations", index), located, issues, {})
            if migration is None:
                ok = False
            else:
                migrations.append(migration)

    if not ok:
        return None
    return MachineSpec(
        machine=machine,
        version=version,
        description=description,
        spec_format=spec_format,
        states=tuple(states),
        events=tuple(events),
        transitions=tuple(transitions),
        migrations=tuple(migrations),
        fail_closed=fail_closed,
        source_name=source_name,
        source_sha256=sha,
        loc=located.at(()),
    )
