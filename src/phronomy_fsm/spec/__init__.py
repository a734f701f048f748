"""The spec layer: read a machine spec from YAML, check it, and describe it as data.

- :func:`load_spec` / :func:`load_spec_text` read a spec file or text into a
  :class:`MachineSpec` (or the issues that stop it), with file:line:col on every node
  (:mod:`.loader`, :mod:`.yaml_reader`: YAML 1.2 scalars, duplicate keys refused);
- :func:`validate_spec` and :func:`check_spec_file` collect **every** issue
  (:class:`SpecIssue`: a stable code, a path, file:line:col; :mod:`.validate`,
  :mod:`.issues`);
- :func:`load_spec_schema` is the published JSON Schema of the format, built from the
  same shape table as the loader (:mod:`.schema`, :mod:`.shape`).

The language is specified in ``docs/spec-format.md``. Must not: import the runtime, the
code generator or anything that executes a machine.
"""

from phronomy_fsm.spec.issues import Severity, SpecIssue, sort_issues
from phronomy_fsm.spec.loader import LoadResult, load_spec, load_spec_text
from phronomy_fsm.spec.model import (
    BarrierSpec,
    EffectKind,
    EventSpec,
    GuardRef,
    MachineSpec,
    MigrationSpec,
    OffloadSpec,
    OutcomeTargetSpec,
    SourceLoc,
    StateKind,
    StateSpec,
    TimeoutSpec,
    TransitionSpec,
    UnhandledPolicy,
)
from phronomy_fsm.spec.schema import build_spec_schema, load_spec_schema
from phronomy_fsm.spec.validate import CheckResult, check_spec_file, validate_spec

__all__ = [
    "BarrierSpec",
    "CheckResult",
    "EffectKind",
    "EventSpec",
    "GuardRef",
    "LoadResult",
    "MachineSpec",
    "MigrationSpec",
    "OffloadSpec",
    "OutcomeTargetSpec",
    "Severity",
    "SourceLoc",
    "SpecIssue",
    "StateKind",
    "StateSpec",
    "TimeoutSpec",
    "TransitionSpec",
    "UnhandledPolicy",
    "build_spec_schema",
    "check_spec_file",
    "load_spec",
    "load_spec_schema",
    "load_spec_text",
    "sort_issues",
    "validate_spec",
]
