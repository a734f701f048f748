"""Shape a plain YAML document into the spec model, driven by :data:`~phronomy_fsm.spec.shape.SHAPES`.

:func:`shape_document` reads the plain values of a document (dicts, lists, scalars, with
a side table of their locations) node by node. Every problem is collected with its
document path and location (``WRONG_TYPE``, ``UNKNOWN_KEY`` with the nearest allowed
key, ``MISSING_KEY``, ``BAD_VALUE``, ``UNSUPPORTED_FORMAT``); nothing stops at the
first. What could be read is kept: the result always holds a *partial* model built
from the well-formed parts, plus the paths of what it lacks, so that the validator can
check the rest of the document without reporting cascades of the shape errors
(``docs/spec-format.md`` "Validation codes").

Compound states are flattened into ``MachineSpec.states`` in document order (a parent
before its children, each child naming its ``parent``). The format's keys are not
listed here: they come from the shape table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import (
    EventSpec,
    LimitSpec,
    MachineSpec,
    MigrationSpec,
    OutcomeTargetSpec,
    SourceLoc,
    StateKind,
    StateSpec,
    TransitionSpec,
)
from phronomy_fsm.spec.shape import SHAPES, NodeShape, ShapeError, describe
from phronomy_fsm.spec.suggest import did_you_mean
from phronomy_fsm.spec.yaml_reader import Path_, render_path

#: The spec_format versions this tool reads.
SUPPORTED_FORMATS = (1,)

#: Allowed YAML keys per node label, derived from the shape table.
ALLOWED_KEYS: dict[str, tuple[str, ...]] = {label: s.allowed for label, s in SHAPES.items()}


class Located:
    """Locations of a document's paths (``path → (line, column)``, 1-based)."""

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


@attrs.frozen
class Shaped:
    """What :func:`shape_document` produced: ``spec`` when the document had no shape
    error, ``partial`` always (``None`` only when not even the top level could be read:
    not a mapping, or an unsupported ``spec_format``), the ``issues`` met, and
    ``damaged``: document paths of values the partial model lacks."""

    spec: MachineSpec | None
    partial: MachineSpec | None
    issues: tuple[SpecIssue, ...]
    damaged: frozenset[str]


class _Reported(Exception):
    """A nested node could not be read; its problems are already reported."""


class _Shaper:
    def __init__(self, located: Located) -> None:
        self.located = located
        self.issues: list[SpecIssue] = []
        self.damaged: set[str] = set()

    def problem(self, code: str, message: str, path: Path_, *, damage: bool = True) -> None:
        rendered = render_path(path)
        self.issues.append(SpecIssue(code, message, rendered, self.located.at(path)))
        if damage:
            self.damaged.add(rendered)

    # nodes -------------------------------------------------------------------

    def node(self, label: str, value: Any, path: Path_, **hidden: Any) -> Any:
        """Read one node; ``None`` when a required attribute could not be read."""
        shape = SHAPES[label]
        if not isinstance(value, dict):
            self.problem(
                "WRONG_TYPE",
                f"expected a mapping with keys {', '.join(shape.allowed)}, got {describe(value)}",
                path,
            )
            return None
        kwargs: dict[str, Any] = {}
        complete = True
        for raw_key in value:
            if not isinstance(raw_key, str) or shape.key(raw_key) is None:
                self.unknown_key(shape, raw_key, path)
        for key in shape.keys:
            if key.key not in value:
                if key.required:
                    self.problem(
                        "MISSING_KEY", f"required key {key.key!r} is missing", path + (key.key,)
                    )
                    complete = False
                continue
            if key.attr is None:
                continue
            sub_path = path + (key.key,)
            raw = value[key.key]
            if raw is None and key.value.nullable:
                kwargs[key.attr] = None
                continue
            try:
                kwargs[key.attr] = self.value(key.value.node, key.value.read, raw, sub_path)
            except ShapeError as exc:
                self.problem(exc.code, exc.message, sub_path)
                complete = complete and not key.required
            except _Reported:
                self.damaged.add(render_path(sub_path))
                complete = complete and not key.required
        if not complete:
            return None
        guard = kwargs.get("guard")
        if guard is not None:
            kwargs["guard"] = attrs.evolve(guard, loc=self.located.at(path + ("guard",)))
        return shape.cls(**kwargs, **hidden, loc=self.located.at(path))

    def unknown_key(self, shape: NodeShape, key: Any, path: Path_) -> None:
        hint = did_you_mean(key, shape.allowed) if isinstance(key, str) else ""
        if isinstance(key, str) and " " in key.strip():
            hint += (
                " (a comma inside an unquoted value of a {...} mapping starts a new key: "
                "quote the value)"
            )
        where = "top-level key" if shape.label == "machine" else "key"
        self.problem(
            "UNKNOWN_KEY",
            f"unknown {where} {key!r}{hint}; allowed keys here: {', '.join(shape.allowed)}",
            path + (key,),
            damage=False,
        )

    def value(self, node: str | None, read: Any, raw: Any, path: Path_) -> Any:
        """Convert one value: a nested node, barrier targets, or a plain value."""
        if node == "target":
            return self.targets(raw, path)
        if node is not None:
            built = self.node(node, raw, path)
            if built is None:
                raise _Reported
            return built
        return read(raw)

    def targets(self, raw: Any, path: Path_) -> tuple[OutcomeTargetSpec, ...]:
        items = raw if isinstance(raw, list) else [raw]
        if isinstance(raw, list) and not raw:
            raise ShapeError("WRONG_TYPE", "expected at least one target state")
        out: list[OutcomeTargetSpec] = []
        for index, item in enumerate(items):
            item_path = path + (index,) if isinstance(raw, list) else path
            if isinstance(item, str):
                out.append(OutcomeTargetSpec(item, loc=self.located.at(item_path)))
            elif isinstance(item, dict):
                target = self.node("target", item, item_path)
                if target is None:
                    raise _Reported
                out.append(target)
            else:
                raise ShapeError(
                    "WRONG_TYPE",
                    "expected a state name, a mapping {to, guard, actions, description} or a "
                    f"list of those, got {describe(item)}",
                )
        return tuple(out)

    # sections ----------------------------------------------------------------

    def section_map(self, data: dict[str, Any], key: str, path: Path_) -> dict[Any, Any]:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(
                "WRONG_TYPE",
                f"{key}: expected a mapping of name to definition, got {describe(value)}",
                path + (key,),
            )
            return {}
        return value

    def name_key(self, section_path: Path_, name: Any) -> str | None:
        if isinstance(name, str):
            return name
        self.problem(
            "WRONG_TYPE",
            f"{section_path[-1]} names must be strings, got {describe(name)}; quote it or rename it",
            section_path + (name,),
        )
        return None

    def with_effect(self, state: StateSpec, body: dict[str, Any]) -> StateSpec:
        """A state with an effect shorthand: its kind is ``external`` unless written, and
        its offload the effect's (``docs/spec-format.md``, "Effect shorthand"). Beside an
        offload or a barrier it keeps them: the validator reports ``WORK_CONFLICT``."""
        assert state.effect is not None
        kind = state.kind if "kind" in body else StateKind.EXTERNAL
        if state.offload is not None or state.barrier is not None:
            return attrs.evolve(state, kind=kind)
        return attrs.evolve(state, kind=kind, offload=state.effect.as_offload())

    def states(self, mapping: dict[Any, Any], path: Path_, parent: str | None) -> list[StateSpec]:
        out: list[StateSpec] = []
        for name, body in mapping.items():
            key = self.name_key(path, name)
            if key is None:
                continue
            state_path = path + (name,)
            compound = isinstance(body, dict) and "states" in body
            state = self.node("state", body, state_path, name=key, parent=parent, compound=compound)
            if state is None:
                # keep the name so references to it resolve; the rest is damaged
                state = StateSpec(
                    key, parent=parent, compound=compound, loc=self.located.at(state_path)
                )
                self.damaged.add(render_path(state_path) + ".kind")
            elif state.effect is not None:
                state = self.with_effect(state, body)
            elif not compound and isinstance(body, dict) and "kind" not in body:
                self.problem(
                    "MISSING_KEY",
                    "required key 'kind' is missing (only a compound state, one with "
                    "'states', has no kind)",
                    state_path + ("kind",),
                )
            out.append(state)
            if compound:
                out.extend(
                    self.states(
                        self.section_map(body, "states", state_path), state_path + ("states",), key
                    )
                )
        return out


def payload_class_name(event: str) -> str:
    """The name of the class generated for ``event``'s payload schema:
    ``approve`` → ``ApprovePayload``, ``order_placed`` → ``OrderPlacedPayload``."""
    return "".join(part[:1].upper() + part[1:] for part in event.split("_") if part) + "Payload"


def shape_document(data: Any, located: Located, source_name: str, sha: str) -> Shaped:
    """Shape the plain document ``data`` into a :class:`~phronomy_fsm.spec.model.MachineSpec`.

    Args:
        data: the document as plain values.
        located: where each path of ``data`` was written.
        source_name: the file name recorded in the model.
        sha: the sha256 (hex) of the file's bytes.

    Returns:
        A :class:`Shaped`; never raises for bad input.
    """
    shaper = _Shaper(located)
    machine_shape = SHAPES["machine"]
    if not isinstance(data, dict):
        shaper.problem(
            "WRONG_TYPE",
            f"the document must be a mapping with keys {', '.join(machine_shape.allowed)}, "
            f"got {describe(data)}",
            (),
        )
        return Shaped(None, None, tuple(shaper.issues), frozenset(shaper.damaged))
    for key in data:
        if not isinstance(key, str) or machine_shape.key(key) is None:
            shaper.unknown_key(machine_shape, key, ())

    def scalar(name: str, default: Any) -> Any:
        key = machine_shape.key(name)
        assert key is not None and key.value.read is not None
        if name not in data:
            if key.required:
                shaper.problem(
                    "MISSING_KEY", f"required top-level key {name!r} is missing", (name,)
                )
            return default
        try:
            return key.value.read(data[name])
        except ShapeError as exc:
            shaper.problem(exc.code, f"{name}: {exc.message}", (name,))
            return default

    spec_format = scalar("spec_format", 1)
    if spec_format not in SUPPORTED_FORMATS:
        shaper.problem(
            "UNSUPPORTED_FORMAT",
            f"spec_format {spec_format!r} is not supported; this tool reads "
            f"{', '.join(map(str, SUPPORTED_FORMATS))}",
            ("spec_format",),
        )
        return Shaped(None, None, tuple(shaper.issues), frozenset(shaper.damaged))
    machine = scalar("machine", "")
    version = scalar("version", 1)
    description = scalar("description", "")
    fail_closed = None if data.get("fail_closed") is None else scalar("fail_closed", None)
    final_commit = None if data.get("final_commit") is None else scalar("final_commit", None)

    for required in ("events", "states", "transitions"):
        if required not in data:
            shaper.problem(
                "MISSING_KEY", f"required top-level key {required!r} is missing", (required,)
            )

    events = []
    for name, body in shaper.section_map(data, "events", ()).items():
        key = shaper.name_key(("events",), name)
        if key is None:
            continue
        event = shaper.node("event", {} if body is None else body, ("events", name), name=key)
        if event is not None and isinstance(event.payload, tuple):  # a payload schema
            event = attrs.evolve(event, payload=payload_class_name(key), fields=event.payload)
        events.append(
            event if event is not None else EventSpec(key, loc=located.at(("events", name)))
        )

    states = shaper.states(shaper.section_map(data, "states", ()), ("states",), None)

    transitions: list[TransitionSpec] = []
    raw_rows = data.get("transitions")
    if "transitions" in data and not isinstance(raw_rows, list):
        shaper.problem(
            "WRONG_TYPE",
            f"transitions: expected an ordered list of transitions, got {describe(raw_rows)}",
            ("transitions",),
        )
    for index, body in enumerate(raw_rows if isinstance(raw_rows, list) else []):
        row = shaper.node("transition", body, ("transitions", index), index=index)
        if row is None:
            shaper.damaged.add(render_path(("transitions", index)))
        else:
            transitions.append(row)

    migrations: list[MigrationSpec] = []
    raw_migrations = data.get("migrations")
    if raw_migrations is not None and not isinstance(raw_migrations, list):
        shaper.problem(
            "WRONG_TYPE",
            f"migrations: expected a list, got {describe(raw_migrations)}",
            ("migrations",),
        )
    for index, body in enumerate(raw_migrations if isinstance(raw_migrations, list) else []):
        migration = shaper.node("migration", body, ("migrations", index))
        if migration is not None:
            migrations.append(migration)

    limits: list[LimitSpec] = []
    for name, body in shaper.section_map(data, "limits", ()).items():
        key = shaper.name_key(("limits",), name)
        if key is None:
            continue
        limit = shaper.node("limit", {} if body is None else body, ("limits", name), name=key)
        if limit is not None:
            limits.append(limit)

    spec = MachineSpec(
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
        fail_closed_loc=located.at(("fail_closed",)) if "fail_closed" in data else located.at(()),
        limits=tuple(limits),
        final_commit=final_commit,
        final_commit_loc=(
            located.at(("final_commit",)) if "final_commit" in data else located.at(())
        ),
    )
    failed = any(i.is_error for i in shaper.issues)
    return Shaped(None if failed else spec, spec, tuple(shaper.issues), frozenset(shaper.damaged))
