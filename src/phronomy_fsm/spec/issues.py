"""Validation issues: one located problem in a spec, and the catalogue of stable codes.

Every issue has a stable ``code`` (listed in :data:`CODES` and in
``docs/spec-format.md``; a test keeps the two in step), a document ``path`` in
JSONPath-like form (``$.states.review.barrier``), a :class:`~phronomy_fsm.spec.model.SourceLoc`
and a message that says how to fix it. Issues render as ``file:line:col: CODE message``.
:func:`sort_issues` puts root causes (reading, shape, names, references) before what
they may cause.
"""

from __future__ import annotations

import enum

import attrs

from phronomy_fsm.spec.model import UNKNOWN_LOC, SourceLoc


class Severity(enum.StrEnum):
    """``error`` makes a spec invalid; ``warning`` is reported but does not fail
    ``validate`` unless ``--strict`` is given."""

    ERROR = "error"
    WARNING = "warning"


#: code → (severity, one-line summary). The summary is what ``docs/spec-format.md``
#: lists; messages add the specifics of each occurrence.
CODES: dict[str, tuple[Severity, str]] = {
    # reading
    "FILE_UNREADABLE": (Severity.ERROR, "the spec file cannot be read"),
    "SPEC_TOO_LARGE": (Severity.ERROR, "the file exceeds the size limit for specs"),
    "NOT_UTF8": (Severity.ERROR, "the file is not UTF-8 text (binary data?)"),
    "YAML_SYNTAX": (Severity.ERROR, "the file is not valid YAML"),
    "YAML_UNSUPPORTED": (
        Severity.ERROR,
        "a YAML feature specs do not allow (tags, merge keys, too deep, too many nodes)",
    ),
    "EMPTY_SPEC": (Severity.ERROR, "the file holds no document"),
    "DUPLICATE_KEY": (
        Severity.ERROR,
        "a mapping repeats a key (YAML would silently keep the last)",
    ),
    # shape
    "WRONG_TYPE": (
        Severity.ERROR,
        "a value has the wrong type (a list where a mapping belongs, a number where a name belongs, ...)",
    ),
    "UNKNOWN_KEY": (
        Severity.ERROR,
        "a key the format does not define (typo?); the message lists the allowed keys",
    ),
    "MISSING_KEY": (Severity.ERROR, "a required key is absent"),
    "BAD_VALUE": (Severity.ERROR, "a value outside its allowed set or range"),
    "UNSUPPORTED_FORMAT": (Severity.ERROR, "spec_format is not a version this tool reads"),
    # names
    "INVALID_NAME": (Severity.ERROR, "a name is not an ASCII identifier ([A-Za-z_][A-Za-z0-9_]*)"),
    "RESERVED_NAME": (
        Severity.ERROR,
        "a name is a Python keyword, starts with an underscore, or clashes with the generated API",
    ),
    "NAME_COLLISION": (
        Severity.ERROR,
        "two names become the same generated identifier (they differ only in case)",
    ),
    "NAME_CLASH": (
        Severity.ERROR,
        "one name is used for two kinds of hook (a guard and an action, ...)",
    ),
    # references
    "UNKNOWN_STATE": (
        Severity.ERROR,
        "a transition, migration or reference names a state that is not declared",
    ),
    "UNKNOWN_EVENT": (
        Severity.ERROR,
        "a transition, timeout, offload or barrier names an event that is not declared",
    ),
    "DUPLICATE_STATE": (
        Severity.ERROR,
        "a state name is declared twice (in two compound states, or inside and outside one)",
    ),
    # compound states
    "COMPOUND_NO_INITIAL": (
        Severity.ERROR,
        "a compound state has no child marked initial (or no child at all)",
    ),
    "COMPOUND_STATE_WORK": (
        Severity.ERROR,
        "a compound state declares a kind, entry actions, an offload, a barrier or a timeout",
    ),
    # machine structure
    "NO_INITIAL_STATE": (Severity.ERROR, "no state is marked initial"),
    "MULTIPLE_INITIAL_STATES": (Severity.ERROR, "more than one state is marked initial"),
    "INITIAL_STATE_KIND": (Severity.ERROR, "the initial state is a wait or final state"),
    "FINAL_STATE_EXIT": (
        Severity.ERROR,
        "a transition leaves a final state, or a final state has entry work",
    ),
    "UNREACHABLE_STATE": (Severity.ERROR, "no path leads from the initial state to this state"),
    "TRAP_STATE": (Severity.ERROR, "no path leads from this state to a final state"),
    "NO_FINAL_STATE": (Severity.ERROR, "the machine declares no final state"),
    "SHADOWED_TRANSITION": (
        Severity.ERROR,
        "an earlier row for the same state and event always wins, so this row can never fire",
    ),
    "AUTO_NOT_EXHAUSTIVE": (
        Severity.ERROR,
        "an auto state's state_completed rows can all fail their guards (add an unguarded last row)",
    ),
    "AUTO_CYCLE": (
        Severity.ERROR,
        "a cycle made only of auto states would run forever without outside input",
    ),
    "STATE_COMPLETED_MISUSE": (
        Severity.ERROR,
        "state_completed is used from a non-auto state, or declared with a payload, or posted by a hook",
    ),
    "WAIT_STATE_NO_EXIT": (Severity.ERROR, "a wait state has no transition out of it"),
    "WORK_CONFLICT": (
        Severity.ERROR,
        "a state or transition declares both an offload and a barrier, or work on a state kind that cannot run it",
    ),
    "OFFLOAD_EVENT_UNHANDLED": (
        Severity.ERROR,
        "the state running an offload hook has no transition for its completed or failed event",
    ),
    "BARRIER_OUTCOME_UNHANDLED": (
        Severity.ERROR,
        "a barrier does not name an event for every outcome, or its state has no transition for one",
    ),
    "TIMEOUT_INVALID": (
        Severity.ERROR,
        "a timeout on a state kind that cannot wait, a non-positive duration, or an unhandled timeout event",
    ),
    "INTERNAL_TRANSITION_WORK": (
        Severity.ERROR,
        "an internal transition (no target) declares an offload or barrier",
    ),
    "DUPLICATE_MIGRATION": (
        Severity.ERROR,
        "two migrations apply to the same spec version and sha256",
    ),
    # limits
    "LIMIT_UNKNOWN_EFFECT": (
        Severity.ERROR,
        "a limit names no effect, or an effect no state or transition offloads",
    ),
    "LIMIT_PURE_EFFECT": (
        Severity.ERROR,
        "a limit names a pure effect, which starts without the engine's gate",
    ),
    "LIMIT_BAD_KEY": (
        Severity.ERROR,
        "a limit's key is neither label.<name> nor context.<field>",
    ),
    "LIMIT_BAD_NUMBER": (
        Severity.ERROR,
        (
            "a limit sets neither concurrency nor rate, one below 1, or a rate not "
            "'<N> per second|minute|hour'"
        ),
    ),
    # durability
    "EFFECT_WITHOUT_BARRIER": (
        Severity.WARNING,
        (
            "a non-pure effect can start on a path with no committed barrier since the initial "
            "state or the last non-pure effect"
        ),
    ),
    "WAIT_STATE_NO_SIGNAL": (
        Severity.ERROR,
        "a wait state can only be left on engine-internal events and has no timeout",
    ),
    "STATE_NO_RECOVERY": (
        Severity.ERROR,
        (
            "an external state waits only for engine-internal events but starts no offload, "
            "barrier or timer"
        ),
    ),
    "FAIL_CLOSED_STATE": (
        Severity.ERROR,
        "fail_closed names an unknown state or a final state",
    ),
    "OUTCOME_NOT_EXHAUSTIVE": (
        Severity.ERROR,
        "the rows taking an offload or barrier outcome can all fail their guards",
    ),
    "EVENT_IN_BARRIER_STATE": (
        Severity.ERROR,
        "an outside event is handled in a state whose barrier's every outcome leaves it",
    ),
    "UNUSED_EVENT": (Severity.WARNING, "an event is declared but no transition uses it"),
    "MISSING_DESCRIPTION": (Severity.WARNING, "a state or transition has no description"),
}


@attrs.frozen
class SpecIssue:
    """One problem found in a spec.

    ``code`` is a key of :data:`CODES`; ``path`` locates the node in the document
    (``$`` is the root); ``loc`` is where it was written.
    """

    code: str
    message: str
    path: str = "$"
    loc: SourceLoc = UNKNOWN_LOC
    severity: Severity = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown spec issue code {self.code!r}")
        if self.severity is None:
            object.__setattr__(self, "severity", CODES[self.code][0])

    @property
    def is_error(self) -> bool:
        """True when this issue makes the spec invalid."""
        return self.severity is Severity.ERROR

    def render(self) -> str:
        """Return ``file:line:col: CODE message (at path)``."""
        return f"{self.loc.render()}: {self.code} {self.message} (at {self.path})"

    def to_json(self) -> dict[str, object]:
        """Return a JSON-ready dict (``validate --format json``)."""
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "path": self.path,
            "file": self.loc.file,
            "line": self.loc.line,
            "column": self.loc.column,
        }


#: Codes of root causes: problems of reading, shape, names and references, which other
#: issues may follow from. They are listed first.
ROOT_CAUSE_CODES = frozenset(
    {
        "FILE_UNREADABLE",
        "SPEC_TOO_LARGE",
        "NOT_UTF8",
        "YAML_SYNTAX",
        "YAML_UNSUPPORTED",
        "EMPTY_SPEC",
        "DUPLICATE_KEY",
        "WRONG_TYPE",
        "UNKNOWN_KEY",
        "MISSING_KEY",
        "BAD_VALUE",
        "UNSUPPORTED_FORMAT",
        "INVALID_NAME",
        "RESERVED_NAME",
        "NAME_COLLISION",
        "NAME_CLASH",
        "UNKNOWN_STATE",
        "UNKNOWN_EVENT",
        "DUPLICATE_STATE",
        "FAIL_CLOSED_STATE",
    }
)


def sort_issues(issues: list[SpecIssue]) -> list[SpecIssue]:
    """Order issues root causes first (:data:`ROOT_CAUSE_CODES`), then other errors,
    then warnings; each group by file, line, column, code and path (deterministic)."""

    def key(i: SpecIssue) -> tuple[int, str, int, int, str, str]:
        rank = 0 if i.code in ROOT_CAUSE_CODES else 1 if i.is_error else 2
        return (rank, i.loc.file, i.loc.line, i.loc.column, i.code, i.path)

    return sorted(issues, key=key)
