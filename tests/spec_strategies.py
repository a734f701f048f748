"""Hypothesis strategies for specs: valid-by-construction machines, arbitrary (mostly
invalid) documents, and mutations of the shipped specs.

- :func:`valid_specs` builds spec *data* that passes validation: a chain through every
  state guarantees reachability and termination, auto states only move forward (no
  auto cycle) and end with an unguarded ``state_completed`` row, guards within one
  ``(state, event)`` group are distinct so nothing is shadowed, final states have no
  rows, barrier and offload states handle their outcome events.
- :func:`spec_documents` builds arbitrary YAML-shaped data around the spec keys.
- :func:`mutated_real_specs` applies one to three random edits (replace a value,
  delete a key, add a key) to one of the shipped specs.
"""

from __future__ import annotations

import copy
import keyword
import math
from typing import Any

import yaml
from hypothesis import strategies as st

from phronomy_fsm.spec.yaml_reader import SpecYamlLoader as _SpecYamlLoader
from tests.spec_samples import FIXTURE_SPECS, REAL_SPECS

IDENT = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s) and not keyword.issoftkeyword(s)
)
#: Text with the characters that break naive renderers: quotes, backslashes, newlines,
#: unicode line separators, braces, angle brackets, '#', '%', ';', ':', emoji.
NASTY_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(
            list("\"'\\\n\r\t{}<>[]#%;:|`$&*!@^~=+-/?,.\u2028\u2029\u0085\u00e9\U0001f600\u202e")
        ),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=40,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    # integral floats excluded: JSON Schema cannot tell 1.0 from 1 (docs/spec-format.md)
    st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda f: not math.isfinite(f) or f != int(f)
    ),
    NASTY_TEXT,
    IDENT,
    st.sampled_from(
        [
            "on",
            "off",
            "yes",
            "no",
            "auto",
            "external",
            "wait",
            "final",
            "ignore",
            "not x",
            "state_completed",
        ]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(IDENT, NASTY_TEXT, st.integers(0, 9), st.booleans()), inner, max_size=4
        ),
    ),
    max_leaves=12,
)
SPEC_KEYS = st.sampled_from(
    [
        "spec_format", "machine", "version", "description", "events", "states", "transitions", "migrations",
        "kind", "initial", "entry", "offload", "barrier", "timeout", "payload", "unhandled", "from", "event",
        "to", "guard", "actions", "hook", "completed", "failed", "name", "committed", "not_committed",
        "conflict", "outcome_unknown", "seconds", "from_version", "from_sha256", "rename_states",
        "effect", "durable", "fail_closed", "states", "event_prefix", "on_committed", "on_conflict",
    ]
)  # fmt: skip


def load_plain(text: str) -> Any:
    """Parse YAML the way the spec loader does (YAML 1.2 booleans)."""
    return yaml.load(text, Loader=_SpecYamlLoader)


class _Yaml12SafeDumper(yaml.SafeDumper):
    """PyYAML writes YAML 1.1: it leaves ``0E0`` or ``1e3`` unquoted because they are
    not 1.1 floats, but the spec reader follows YAML 1.2, where they are. Quote every
    string the reader would not read back as a string."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _SpecYamlLoader.resolve(_SpecYamlLoader, yaml.ScalarNode, value, (True, False)) != (
        "tag:yaml.org,2002:str"
    ):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return dumper.represent_str(value)


_Yaml12SafeDumper.add_representer(str, _represent_str)


def dump(data: Any) -> str:
    """Serialise spec data as YAML (block style, key order kept) that the YAML 1.2
    spec reader reads back to the same data."""
    return yaml.dump(data, Dumper=_Yaml12SafeDumper, sort_keys=False, allow_unicode=True, width=120)


REAL_DATA = [load_plain(p.read_text("utf-8")) for p in REAL_SPECS + FIXTURE_SPECS]


@st.composite
def valid_specs(draw: st.DrawFn, *, max_states: int = 9, with_work: bool = True) -> dict[str, Any]:
    """Spec data that validates with no error (see the module docstring)."""
    n = draw(st.integers(min_value=2, max_value=max_states))
    names = draw(st.lists(IDENT, min_size=n, max_size=n, unique_by=str.upper))
    finals = draw(st.integers(min_value=1, max_value=max(1, min(3, n - 1))))
    kinds: list[str] = []
    for i in range(n):
        if i >= n - finals:
            kinds.append("final")
        elif i == 0:
            kinds.append(draw(st.sampled_from(["auto", "external"])))
        else:
            kinds.append(draw(st.sampled_from(["auto", "external", "external", "wait"])))
    event_names = draw(
        st.lists(IDENT.map(lambda s: "e_" + s), min_size=1, max_size=6, unique_by=str.upper)
    )
    events: dict[str, Any] = {}
    for name in event_names:
        body: dict[str, Any] = {"description": draw(NASTY_TEXT)}
        if draw(st.booleans()):
            body["unhandled"] = "ignore"
        events[name] = body
    guards = [f"g{k}" for k in range(4)]
    actions = [f"do_{k}" for k in range(3)]
    states: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    last_non_final = n - finals - 1
    for i, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        body = {"kind": kind, "description": draw(NASTY_TEXT)}
        if i == 0:
            body["initial"] = True
        if kind != "final" and draw(st.integers(0, 3)) == 0:
            body["entry"] = draw(st.lists(st.sampled_from(actions), min_size=1, max_size=2))
        states[name] = body
        if kind == "final":
            continue
        forward = names[i + 1 :]
        nxt = names[i + 1] if i < last_non_final else names[draw(st.integers(n - finals, n - 1))]
        if kind == "auto":
            # guarded rows first (distinct guards, forward targets), then an unguarded row
            for guard in draw(st.lists(st.sampled_from(guards), unique=True, max_size=2)):
                negated = draw(st.booleans())
                rows.append(
                    {
                        "from": name,
                        "event": "state_completed",
                        "guard": f"not {guard}" if negated else guard,
                        "to": draw(st.sampled_from(forward)),
                        "description": "auto guarded",
                    }
                )
            rows.append(
                {"from": name, "event": "state_completed", "to": nxt, "description": "auto next"}
            )
            continue
        work = (
            draw(st.sampled_from(["none", "none", "barrier", "offload"]))
            if with_work and kind == "external"
            else "none"
        )
        if work == "barrier":
            prefix = f"b{i}_"
            outcomes = {
                o: prefix + o for o in ("committed", "not_committed", "conflict", "outcome_unknown")
            }
            for event in outcomes.values():
                events[event] = {"description": "barrier outcome"}
            body["barrier"] = {"name": f"commit_{i}", **outcomes}
            rows.append(
                {
                    "from": name,
                    "event": outcomes["committed"],
                    "to": nxt,
                    "description": "committed",
                }
            )
            for outcome in ("not_committed", "conflict", "outcome_unknown"):
                rows.append(
                    {
                        "from": name,
                        "event": outcomes[outcome],
                        "to": draw(st.sampled_from(names)),
                        "description": outcome,
                    }
                )
        elif work == "offload":
            done, failed = f"o{i}_done", f"o{i}_failed"
            events[done] = {"description": "offload completed"}
            events[failed] = {"description": "offload failed"}
            # pure: an effect that is not needs a committed barrier before it
            # (EFFECT_WITHOUT_BARRIER), which this chain does not guarantee
            body["offload"] = {
                "hook": f"work_{i}",
                "completed": done,
                "failed": failed,
                "effect": "pure",
            }
            rows.append({"from": name, "event": done, "to": nxt, "description": "done"})
            rows.append(
                {
                    "from": name,
                    "event": failed,
                    "to": draw(st.sampled_from(names)),
                    "description": "failed",
                }
            )
        else:
            chain_event = draw(st.sampled_from(event_names))
            rows.append({"from": name, "event": chain_event, "to": nxt, "description": "chain"})
            if draw(st.integers(0, 3)) == 0:
                body["timeout"] = {"seconds": draw(st.floats(0.001, 1e6)), "event": chain_event}
        if work == "barrier":
            # no outside event: every outcome leaves the state, which takes no signal
            # while its commit is in flight (EVENT_IN_BARRIER_STATE)
            continue
        # extra rows on outside events: a group per event, distinct guards, optional
        # unguarded last row, sometimes internal (no target)
        for event in draw(st.lists(st.sampled_from(event_names), unique=True, max_size=3)):
            if any(r["from"] == name and r["event"] == event and "guard" not in r for r in rows):
                continue  # already has an unguarded row for this event
            used = {
                r.get("guard", "").split()[-1]
                for r in rows
                if r["from"] == name and r["event"] == event
            }
            for guard in draw(
                st.lists(
                    st.sampled_from([g for g in guards if g not in used]), unique=True, max_size=2
                )
            ):
                row: dict[str, Any] = {
                    "from": name,
                    "event": event,
                    "guard": guard,
                    "description": "extra guarded",
                }
                if draw(st.booleans()):
                    row["guard"] = f"not {guard}"
                if draw(st.integers(0, 3)) > 0:
                    row["to"] = draw(st.sampled_from(names))
                if draw(st.booleans()):
                    row["actions"] = draw(
                        st.lists(st.sampled_from(actions), min_size=1, max_size=2)
                    )
                rows.append(row)
            if draw(st.booleans()):
                row = {"from": name, "event": event, "description": "extra unguarded"}
                if draw(st.integers(0, 3)) > 0:
                    row["to"] = draw(st.sampled_from(names))
                rows.append(row)
    # every final state needs a way in: a row on a fresh event from an external or wait
    # state, or (when there is none) the unreferenced final state is dropped
    barrier_states = {nm for nm, body in states.items() if "barrier" in body}
    waiting = [
        nm
        for nm, k in zip(names, kinds, strict=True)
        if k in ("external", "wait") and nm not in barrier_states
    ]
    for j, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        if kind != "final" or any(r.get("to") == name for r in rows):
            continue
        if waiting:
            event = f"x_end{j}"
            events[event] = {"description": "ends the session"}
            rows.append(
                {
                    "from": draw(st.sampled_from(waiting)),
                    "event": event,
                    "to": name,
                    "description": "end",
                }
            )
        else:
            del states[name]
    # multi-source rows: one event from several states at once (no row yet for it)
    spare = [e for e in event_names if not any(r["event"] == e for r in rows)]
    candidates = [
        nm
        for nm, k in zip(names, kinds, strict=True)
        if k in ("external", "wait") and nm not in barrier_states
    ]
    if spare and len(candidates) >= 2 and draw(st.booleans()):
        sources = draw(st.lists(st.sampled_from(candidates), min_size=2, max_size=3, unique=True))
        rows.append(
            {"from": sources, "event": spare[0], "to": names[-1], "description": "multi-source"}
        )
    # shuffle rows of different (state, event) groups without reordering within a group
    order = draw(st.permutations(range(len(rows))))
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (str(row["from"]), row["event"])
        groups.setdefault(key, []).append(row)
    keys = list(groups)
    shuffled = [keys[i] for i in order if i < len(keys)]
    flat = [row for key in shuffled for row in groups[key]]
    return {
        "spec_format": 1,
        "machine": "m_" + names[0],
        "version": draw(st.integers(1, 5)),
        "description": draw(NASTY_TEXT),
        "events": events,
        "states": states,
        "transitions": flat,
    }


@st.composite
def spec_documents(draw: st.DrawFn) -> Any:
    """Arbitrary data shaped around the spec keys (mostly invalid)."""
    return draw(
        st.one_of(
            VALUES,
            st.dictionaries(SPEC_KEYS, VALUES, max_size=8),
            st.fixed_dictionaries(
                {
                    "spec_format": st.one_of(st.just(1), SCALARS),
                    "machine": st.one_of(IDENT, SCALARS),
                    "version": st.one_of(st.integers(0, 3), SCALARS),
                    "events": st.dictionaries(
                        st.one_of(IDENT, NASTY_TEXT),
                        st.one_of(st.none(), st.dictionaries(SPEC_KEYS, VALUES, max_size=3)),
                        max_size=4,
                    ),
                    "states": st.dictionaries(
                        st.one_of(IDENT, NASTY_TEXT),
                        st.dictionaries(SPEC_KEYS, VALUES, max_size=4),
                        max_size=4,
                    ),
                    "transitions": st.lists(
                        st.dictionaries(SPEC_KEYS, st.one_of(IDENT, VALUES), max_size=5), max_size=5
                    ),
                }
            ),
        )
    )


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out.extend(_paths(value, prefix + (key,)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out.extend(_paths(value, prefix + (index,)))
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@st.composite
def mutations_of(draw: st.DrawFn, base: Any) -> Any:
    """One to three random edits of a copy of ``base``."""
    data = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "rename"]))
        if not path:
            if action == "replace":
                data = draw(VALUES)
            continue
        parent = _get(data, path[:-1])
        key = path[-1]
        if action == "replace":
            parent[key] = draw(
                st.one_of(VALUES, IDENT, st.sampled_from(["on", "no", "final", "auto", "not x"]))
            )
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.one_of(SPEC_KEYS, IDENT, NASTY_TEXT))] = draw(VALUES)
        elif action == "add" and isinstance(parent, list):
            parent.insert(draw(st.integers(0, len(parent))), draw(VALUES))
        elif action == "rename" and isinstance(parent, dict):
            value = parent.pop(key)
            parent[draw(st.one_of(IDENT, NASTY_TEXT, SPEC_KEYS))] = value
    return data


def mutated_real_specs() -> st.SearchStrategy[Any]:
    """Mutations of the shipped specs."""
    return st.sampled_from(REAL_DATA).flatmap(mutations_of)


#: The kinds of segment :func:`durable_specs` chains.
SEGMENTS = ("effect", "wait", "wait_effect", "timer")


@st.composite
def durable_specs(draw: st.DrawFn, *, max_segments: int = 4) -> dict[str, Any]:
    """Small durable spec data, valid by construction, for the interleaving checker
    (``tests/checking/test_generated_specs.py``, ``tools/check_generated.py``).

    An auto initial state, then one to ``max_segments`` segments, each entered by the
    one before (through a compound state around it, sometimes) and leaving for the
    next (the last for ``done``):

    - ``effect``: a barrier state (barrier shorthand) whose committed outcome enters an
      effect state (``idempotent``, ``at_most_once`` or ``pure``) (a barrier state takes
      no outside event: ``EVENT_IN_BARRIER_STATE``);
    - ``wait``: a wait state left by a signal, perhaps also taking another by an
      internal transition, perhaps with a timer;
    - ``wait_effect``: a barrier, a wait, then an effect right after the wait (which
      the engine announces by a commit of its own);
    - ``timer``: an external state left by a signal or by its (short) timer.

    Every row on a signal runs the action ``keep`` (the generic application keeps the
    payload), except timer events, ``quit`` (the first segment's way to ``failed``) and
    ``abandon``. Failures go to ``failed``; with a barrier, ``recovery_required`` is the
    fail-closed wait state, left by ``abandon``. A compound state around a segment adds
    a row on ``stop`` to ``failed``.
    """
    kinds = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=max_segments))
    signals = ["s0", "s1", "s2"]
    events: dict[str, Any] = {
        name: {"payload": "dict", "description": "a signal"} for name in signals
    }
    events["quit"] = {"description": "a person gives up at once"}
    states: dict[str, Any] = {
        "begin": {"kind": "auto", "initial": True, "description": "the start"}
    }
    rows: list[dict[str, Any]] = []
    firsts = [f"g{i}" for i in range(len(kinds))]
    compound = draw(st.sampled_from([None, *range(len(kinds))]))
    if compound is not None:
        events["stop"] = {"payload": "dict", "description": "stops a compound state's work"}

    def target(i: int) -> str:
        if i >= len(kinds):
            return "done"
        return f"c{i}" if i == compound else firsts[i]

    def signal_row(source: str, to: str | None) -> dict[str, Any]:
        row: dict[str, Any] = {"from": source, "event": draw(st.sampled_from(signals))}
        if to is not None:
            row["to"] = to
        row["actions"] = ["keep"]
        row["description"] = "a signal"
        return row

    rows.append({"from": "begin", "event": "state_completed", "to": target(0)})
    quit_from = target(0)
    if quit_from == "g0" and kinds[0] in ("effect", "wait_effect"):
        # a barrier state takes no outside event (EVENT_IN_BARRIER_STATE): the next one
        quit_from = "g0_wait" if kinds[0] == "wait_effect" else "g0_work"
    rows.append({"from": quit_from, "event": "quit", "to": "failed"})
    for i, kind in enumerate(kinds):
        nxt = target(i + 1)
        seg: dict[str, Any] = {}
        if kind in ("effect", "wait_effect"):
            after_barrier = f"g{i}_wait" if kind == "wait_effect" else f"g{i}_work"
            seg[f"g{i}"] = {
                "kind": "external",
                "description": "a barrier",
                "barrier": {
                    "name": f"commit{i}",
                    "on_committed": after_barrier,
                    "on_not_committed": "failed",
                },
            }
            if kind == "wait_effect":
                seg[f"g{i}_wait"] = {"kind": "wait", "description": "a wait before the effect"}
                rows.append(signal_row(f"g{i}_wait", f"g{i}_work"))
            effect = draw(st.sampled_from(["idempotent", "at_most_once", "pure"]))
            done, failed = f"g{i}_done", f"g{i}_failed"
            events[done] = {"payload": "dict", "description": "the effect returned"}
            events[failed] = {"payload": "Exception", "description": "the effect failed"}
            seg[f"g{i}_work"] = {
                "kind": "external",
                "description": "an effect",
                "offload": {
                    "hook": f"work{i}",
                    "completed": done,
                    "failed": failed,
                    "effect": effect,
                },
            }
            rows.append({"from": f"g{i}_work", "event": done, "to": nxt})
            rows.append({"from": f"g{i}_work", "event": failed, "to": "failed"})
        elif kind == "wait":
            seg[f"g{i}"] = {"kind": "wait", "description": "a wait"}
            leave = signal_row(f"g{i}", nxt)
            rows.append(leave)
            if draw(st.booleans()):
                other = [s for s in signals if s != leave["event"]]
                note = signal_row(f"g{i}", None)
                note["event"] = draw(st.sampled_from(other))
                rows.append(note)
            if draw(st.booleans()):
                events[f"t{i}"] = {"description": "a wait's timer"}
                seg[f"g{i}"]["timeout"] = {"seconds": 3600, "event": f"t{i}"}
                rows.append(
                    {
                        "from": f"g{i}",
                        "event": f"t{i}",
                        "to": draw(st.sampled_from([nxt, "failed"])),
                    }
                )
        else:  # timer
            events[f"t{i}"] = {"description": "an external state's timer"}
            seg[f"g{i}"] = {
                "kind": "external",
                "description": "left by a signal or a short timer",
                "timeout": {"seconds": draw(st.sampled_from([0.2, 0.5])), "event": f"t{i}"},
            }
            rows.append(signal_row(f"g{i}", nxt))
            rows.append({"from": f"g{i}", "event": f"t{i}", "to": nxt})
        if i == compound:
            first = next(iter(seg))
            seg[first]["initial"] = True
            states[f"c{i}"] = {"description": "a compound state", "states": seg}
            rows.append({"from": f"c{i}", "event": "stop", "to": "failed", "actions": ["keep"]})
        else:
            states.update(seg)
    states["done"] = {"kind": "final", "description": "finished"}
    states["failed"] = {"kind": "final", "description": "failed"}
    for row in rows:
        row.setdefault("description", "a row")
    spec: dict[str, Any] = {
        "spec_format": 1,
        "machine": "gen_machine",
        "version": 1,
        "description": "a generated durable machine",
        "events": events,
        "states": states,
        "transitions": rows,
    }
    if any(kind in ("effect", "wait_effect") for kind in kinds):  # barriers fail closed
        events["abandon"] = {"description": "an operator gives up"}
        states["recovery_required"] = {"kind": "wait", "description": "the fail-closed state"}
        rows.append(
            {
                "from": "recovery_required",
                "event": "abandon",
                "to": "failed",
                "description": "a row",
            }
        )
        spec = {**spec, "fail_closed": "recovery_required"}
    return spec
