"""Reading YAML for specs: a PyYAML loader with YAML 1.2 booleans, and a reader that
turns the composed node graph into plain values plus a table of source locations.

Owns: which YAML features specs may use (no tags, no merge keys, bounded depth and node
count — so "billion laughs" documents are refused), duplicate-key detection, and the
``$.states.name`` path notation of diagnostics. It knows nothing of the spec model;
:mod:`phronomy_fsm.spec.loader` shapes the values into it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from phronomy_fsm.spec.issues import SpecIssue
from phronomy_fsm.spec.model import SourceLoc

#: Deepest nesting of YAML collections accepted (specs need 5).
MAX_DEPTH = 32
#: Most YAML nodes visited (aliases count each time they are expanded), which bounds
#: "billion laughs" documents.
MAX_NODES = 2_000_000


Path_ = tuple[str | int, ...]


# --------------------------------------------------------------------------- YAML


class SpecYamlLoader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema for booleans and numbers: only
    true/false are booleans (``on``, ``off``, ``yes``, ``no`` stay strings); integers are
    decimal, ``0o`` octal or ``0x`` hex (``010`` is ten, ``1_000`` is a string); floats
    are ``1.5``, ``1e3``, ``.5``, ``.inf``, ``.nan``."""


#: The same loader on libyaml's C parser when PyYAML was built with it (10-20 times
#: faster on large specs; libyaml refuses nesting deeper than 1000 levels, so the
#: Cython composer cannot overflow the C stack). Both share the resolver table below.
SpecYamlCLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):  # pragma: no branch

    class SpecYamlCLoader(yaml.CSafeLoader):  # type: ignore[no-redef]
        """CSafeLoader with YAML 1.2 booleans (see :class:`SpecYamlLoader`)."""


_YAML11_ONLY = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
SpecYamlLoader.yaml_implicit_resolvers = {  # type: ignore[attr-defined]
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_BOOL_RX = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_INT_RX = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_RX = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
for _tag, _rx, _firsts in (  # inserted at the front in turn: int is tried before float
    ("tag:yaml.org,2002:bool", _BOOL_RX, "tTfF"),
    ("tag:yaml.org,2002:float", _FLOAT_RX, "-+.0123456789"),
    ("tag:yaml.org,2002:int", _INT_RX, "-+0123456789"),
):
    for _first in _firsts:
        SpecYamlLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, (_tag, _rx))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node))
    if text.startswith(("0o", "0x")):
        return int(text, 0)
    return int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text == ".nan":
        return float("nan")
    return float(text)


SpecYamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
SpecYamlLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
if SpecYamlCLoader is not None:
    SpecYamlCLoader.yaml_implicit_resolvers = SpecYamlLoader.yaml_implicit_resolvers  # type: ignore[attr-defined]

_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


class YamlProblem(Exception):
    """A document the reader refuses outright (a tag, a merge key, too deep, too many
    nodes, a non-scalar key, a bad scalar): ``code``, ``message``, ``path``, ``loc``."""

    def __init__(self, code: str, message: str, path: Path_, loc: SourceLoc) -> None:
        super().__init__(message)
        self.code, self.message, self.path, self.loc = code, message, path, loc


class NodeReader:
    """Turn a composed node graph into plain values plus a path → location table."""

    def __init__(self, file: str) -> None:
        self.file = file
        #: path → (1-based line, 1-based column); plain tuples because a spec of
        #: thousands of transitions has tens of thousands of nodes
        self.locs: dict[Path_, tuple[int, int]] = {}
        self.issues: list[SpecIssue] = []
        self.visited = 0
        self._constructor = SpecYamlLoader("")

    def loc(self, node: yaml.Node) -> SourceLoc:
        """The 1-based location of ``node`` in the file."""
        mark = node.start_mark
        return SourceLoc(self.file, mark.line + 1, mark.column + 1)

    def read(self, node: yaml.Node, path: Path_, depth: int = 0) -> Any:
        """Plain values for ``node`` (dicts, lists, scalars), recording the location of
        every path; duplicate keys become ``DUPLICATE_KEY`` issues (the first is kept).

        Raises YamlProblem for what specs may not contain."""
        self.visited += 1
        if self.visited > MAX_NODES:
            raise YamlProblem(
                "YAML_UNSUPPORTED",
                f"the document expands to more than {MAX_NODES} nodes (aliases?); "
                "write the spec out without anchors",
                path,
                self.loc(node),
            )
        if depth > MAX_DEPTH:
            raise YamlProblem(
                "YAML_UNSUPPORTED",
                f"collections nest deeper than {MAX_DEPTH} levels; specs need at most 5",
                path,
                self.loc(node),
            )
        if path not in self.locs:
            mark = node.start_mark
            self.locs[path] = (mark.line + 1, mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            if node.tag != "tag:yaml.org,2002:map":
                raise YamlProblem(
                    "YAML_UNSUPPORTED",
                    f"tag {node.tag!r} is not allowed in specs",
                    path,
                    self.loc(node),
                )
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlProblem(
                        "YAML_UNSUPPORTED",
                        "merge keys (<<) are not allowed in specs; write the keys out",
                        path,
                        self.loc(key_node),
                    )
                if not isinstance(key_node, yaml.ScalarNode):
                    raise YamlProblem(
                        "WRONG_TYPE",
                        "a mapping key must be a plain name, not a list or mapping",
                        path,
                        self.loc(key_node),
                    )
                hashable_key = self.scalar(key_node, path)
                key = hashable_key
                if hashable_key in result:
                    first = SourceLoc(self.file, *self.locs.get(path + (hashable_key,), (0, 0)))
                    self.issues.append(
                        SpecIssue(
                            "DUPLICATE_KEY",
                            f"key {key!r} appears twice in this mapping (first at line "
                            f"{first.line}); YAML would silently keep only the last one — "
                            "merge or rename them",
                            render_path(path + (hashable_key,)),
                            self.loc(key_node),
                        )
                    )
                    continue
                mark = key_node.start_mark
                self.locs[path + (hashable_key,)] = (mark.line + 1, mark.column + 1)
                result[hashable_key] = self.read(value_node, path + (hashable_key,), depth + 1)
            return result
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise YamlProblem(
                    "YAML_UNSUPPORTED",
                    f"tag {node.tag!r} is not allowed in specs",
                    path,
                    self.loc(node),
                )
            items = []
            for index, item in enumerate(node.value):
                items.append(self.read(item, path + (index,), depth + 1))
            return items
        return self.scalar(node, path)

    def scalar(self, node: yaml.Node, path: Path_) -> Any:
        """The value of a scalar node (string, number, bool, null only).

        Raises YamlProblem for other tags or a malformed scalar."""
        if node.tag not in _SCALAR_TAGS:
            raise YamlProblem(
                "YAML_UNSUPPORTED",
                f"tag {node.tag!r} is not allowed in specs (only plain strings, numbers, "
                "true/false and null)",
                path,
                self.loc(node),
            )
        if node.tag == "tag:yaml.org,2002:str":
            return (
                node.value
            )  # what SafeConstructor.construct_yaml_str returns, without its overhead
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise YamlProblem("YAML_SYNTAX", f"bad scalar: {exc}", path, self.loc(node)) from None


def render_path(path: Path_) -> str:
    """A document path in diagnostics' notation: ``$.states.review`` or
    ``$['states']['open door']`` for names that are not identifiers, ``[2]`` for items."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out
