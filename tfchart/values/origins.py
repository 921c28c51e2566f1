"""Where a value was set: the --set argument that set it (asked of helm, one argument at a time) or the
line of its key in a values file (PyYAML's composer: nodes with their marks, nothing typed), else the
chart default. Later inputs win, as in helm: the --set family in helm's order, then files last to first.

Key paths are dotted as helm prints them (`worker.resources.limits.nvidia.com/gpu`): a key may hold
dots, so paths are matched key by key against the keys that exist, never split blindly.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from tfchart.errors import TfchartError
from tfchart.helm.chart import Chart, Inputs, merged_values
from tfchart.helm.runner import Helm

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
TAG = "tag:yaml.org,2002:"


class TolerantLoader(yaml.SafeLoader):
    """PyYAML's composer, reading anchors as helm's go-yaml does: a redefined anchor replaces the first."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if not isinstance(event, yaml.AliasEvent) and event.anchor is not None:
            self.anchors.pop(event.anchor, None)
        return super().compose_node(parent, index)


@dataclass(frozen=True)
class Origin:
    """A values file and line (`line` None: the file as a whole), or a --set argument (`source` only)."""

    source: str
    line: int | None = None
    text: str | None = None  # the value as written there
    value: Any = None  # as helm reads it (a scalar)
    node: yaml.Node | None = field(default=None, compare=False)  # in a file: the value's node, with its marks


def compose(data: bytes | None) -> list[yaml.Node]:
    """The documents of a YAML text as nodes (no value is typed), up to the first one PyYAML cannot read."""
    for loader in (Loader, TolerantLoader):
        documents: list[yaml.Node] = []
        try:
            documents += (node for node in yaml.compose_all(data or b"", Loader=loader) if node is not None)
            return documents
        except (yaml.YAMLError, RecursionError, ValueError, UnicodeError):
            continue  # libyaml refuses a redefined anchor: compose again as go-yaml reads it
    return documents


def as_node(value: Any) -> yaml.Node:
    """helm's JSON answer as the nodes a values file composes to (without marks: a --set has no line)."""
    if isinstance(value, dict):
        return yaml.MappingNode(f"{TAG}map", [(yaml.ScalarNode(f"{TAG}str", key), as_node(item))
                                               for key, item in value.items()])  # fmt: skip
    if isinstance(value, list):
        return yaml.SequenceNode(f"{TAG}seq", [as_node(item) for item in value])
    tag = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "null")
    return yaml.ScalarNode(TAG + tag, value if isinstance(value, str) else json.dumps(value))


def walk(root: yaml.Node, path: str) -> tuple[yaml.Node, yaml.Node | None, str, list[str]]:
    """The deepest node along `path`: (that node, its key node, what is left of `path`, the keys taken)."""
    node, key_node, rest, keys = root, None, path, []
    while rest and (step := _step(node, rest)) is not None:
        key_node, node, key = step
        keys.append(key)
        rest = rest[len(key) + 1 :]
    return node, key_node, rest, keys


def _step(node: yaml.Node, rest: str) -> tuple[yaml.Node, yaml.Node, str] | None:
    """(key node, value node, key) of the entry `rest` starts with (for a list item: the item twice, its index)."""
    if isinstance(node, yaml.MappingNode):
        best: tuple[yaml.Node, yaml.Node, str] | None = None
        for key, value in node.value:  # the last of duplicate keys wins (as in helm), the longest dotted one
            text = str(key.value) if isinstance(key, yaml.ScalarNode) else None
            if text is not None and (rest == text or rest.startswith(text + ".")) and (
                best is None or len(text) >= len(best[2])
            ):
                best = (key, value, text)
        return best
    if isinstance(node, yaml.SequenceNode):
        index = rest.split(".", 1)[0]
        if index.isdigit() and int(index) < len(node.value):
            return node.value[int(index)], node.value[int(index)], index
    return None


class Origins:
    """Where each key path of one set of inputs was set."""

    def __init__(self, helm: Helm, chart: Chart, inputs: Inputs) -> None:
        self.helm, self.chart, self.inputs = helm, chart, inputs
        self.handed_out: set[str] = set()

    @cached_property
    def files(self) -> list[tuple[str, list[yaml.Node]]]:
        """Each -f file's documents, last file first (it wins); none for a URL (helm fetched it itself, not tfchart)."""
        return [(file.name, compose(path.read_bytes() if (path := Path(file.path)).is_file() else None))
                for file in reversed(self.inputs.files)]

    @cached_property
    def sets(self) -> list[tuple[str, list[yaml.Node]]]:
        """Each --set argument (last applied first) with what it sets as helm parses it, composed from helm's JSON as
        a values file's nodes (one walk reads every input); none where helm cannot parse it alone."""

        def composed(argument: tuple[str, str]) -> tuple[str, list[yaml.Node]]:
            try:
                value = merged_values(self.helm, None, Inputs([], [argument]))
                return " ".join(argument), [as_node(value)] if value else []
            except (TfchartError, RecursionError):  # helm cannot parse it alone; nested past Python's recursion limit
                return " ".join(argument), []

        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(composed, reversed(self.inputs.applied())))

    @cached_property
    def defaults(self) -> list[yaml.Node]:
        return compose(self.chart.file("values.yaml"))

    def of(self, path: str) -> Origin | None:
        """The last input that set `path`, a map above it or a key below it (or, a --set, a scalar or an empty map or
        list above it, which helm writes in place of the map); None: the chart default."""
        for name, documents in [*self.sets, *self.files]:
            in_file = (name, documents) in self.files
            for root in reversed(documents):
                node, key, rest, _ = walk(root, path)
                if key is not None and not rest:
                    text = str(node.value) if isinstance(node, yaml.ScalarNode) else None
                    line = key.start_mark.line + 1 if in_file else None
                    return Origin(name if in_file else shown(name), line, text, _typed(node), node)
                if key is not None and not in_file and not (isinstance(node.value, list) and node.value):
                    return Origin(shown(name), None, "null")
        return None

    def leaves(self, source: str) -> int:
        """How many values the --set argument `source` sets (a scalar, an empty map or list each)."""
        return sum(not isinstance(value.value, list) or not value.value for root in dict(self.sets).get(source, [])
                   for _, _, value, _ in _entries(root, {}))  # fmt: skip

    def nearest(self, path: str) -> Origin | None:
        """Like `of`, or the line of the deepest map above `path` that a file writes (a missing key)."""
        written = [(len(keys), Origin(name, key.start_mark.line + 1)) for name, documents in self.files
                   for _, key, _, keys in (walk(root, path) for root in documents) if key is not None]  # fmt: skip
        return self.of(path) or max(written, key=lambda found: found[0], default=(0, None))[1]

    def key_named(self, name: str) -> str | None:
        """The next key called `name` in the files not handed out yet (one per problem helm 4 reports: it names
        a bad map key without its path), in document order."""
        found = (path for _, documents in self.files for root in documents for path, key, value, _ in _entries(root, {})
                 if key is not value and getattr(key, "value", 0) == name and path not in self.handed_out)  # fmt: skip
        if (path := next(found, None)) is not None:
            self.handed_out.add(path)
        return path

    def default(self, path: str) -> Any:
        """The chart default at `path` as its values.yaml writes it, typed (None where it sets none)."""
        for root in self.defaults:
            node, _, rest, _ = walk(root, path)
            if not rest:
                return _typed(node) if isinstance(node, yaml.ScalarNode) else [] if isinstance(
                    node, yaml.SequenceNode) and not node.value else None  # fmt: skip
        return None

    def set_path(self, path: str) -> str:
        """`path` as --set spells it: the dots inside a key (nvidia.com/gpu) escaped, a list index in brackets."""
        for root in [*self.defaults, *(doc for _, documents in self.files for doc in documents)]:
            _, _, rest, keys = walk(root, path)
            if any("." in key for key in keys):
                path = ".".join([*(key.replace(".", "\\.") for key in keys), *([rest] if rest else [])])
                break
        return re.sub(r"(?<!\\)\.(\d+)(?=\.|$)", r"[\1]", path)

    def did_you_mean(self, parent: str, key: str) -> str:
        """The key of the chart's values.yaml at `parent` closest to `key`, else the keys it has there."""
        known: list[str] = []
        for root in self.defaults:
            node, _, rest, _ = walk(root, "" if parent == "(root)" else parent)
            if not rest and isinstance(node, yaml.MappingNode):
                known = [name.value for name, _ in node.value if isinstance(name, yaml.ScalarNode)]
                break
        if close := difflib.get_close_matches(key, known, n=1):
            return f"did you mean {parent + '.' if parent != '(root)' else ''}{close[0]}?"
        return f"known keys: {', '.join(known)}" if known else ""


def _typed(node: yaml.Node) -> Any:
    """A scalar node's value as YAML types it (None for a map, a list or a tag PyYAML cannot construct)."""
    try:
        return yaml.constructor.SafeConstructor().construct_object(node) if isinstance(node, yaml.ScalarNode) else None
    except (yaml.YAMLError, ValueError, TypeError):
        return None


def shown(source: str) -> str:
    """A --set argument as a message names it: a long one cut, saying how long it is."""
    return source if len(source) <= 120 else f"{source[:100]}... ({len(source)} characters)"


def _entries(root: yaml.Node, sizes: dict[int, int]) -> Iterator[tuple[str, yaml.Node, yaml.Node, bool]]:
    """(path, key node, value node, whether the value holds its own entry) of every map entry and list
    item, depth first without recursion, each node entered once; `sizes` gets how many nodes each node
    stands for with every alias expanded."""
    seen: set[int] = set()
    inside: set[int] = set()  # the nodes above the current one
    pending: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
    while pending:
        node, at, leaving = pending.pop()
        if not leaving and id(node) in seen:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [(key, value, str(getattr(key, "value", "?"))) for key, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, item, str(index)) for index, item in enumerate(node.value)]
        else:
            children = []
        if leaving:  # a key counts one, an alias the nodes it stands for, a node inside itself one
            inside.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes.get(id(value), 1) + (key is not value) for key, value, _ in children)
            continue
        seen.add(id(node))
        inside.add(id(node))
        pending.append((node, at, True))
        for key, value, label in reversed(children):
            path = f"{at}.{label}" if at else label
            yield path, key, value, id(value) in inside
            pending.append((value, path, False))


def file_error_key(documents: list[yaml.Node], message: str) -> tuple[str, int] | None:
    """The key (and line) a values file's error is about where helm names none: a NaN or infinite number
    (JSON has none), a value its tag does not fit, a merge key of a scalar, an anchor that contains
    itself, or the key whose aliases expand the most."""
    constructor = yaml.constructor.SafeConstructor()
    mistagged = re.search(r"cannot decode !!\w+ `(.*)` as a !!(\w+)", message)
    for root in documents:
        sizes: dict[int, int] = {}
        entries = list(_entries(root, sizes))
        for path, key, value, cyclic in entries:
            scalar = isinstance(value, yaml.ScalarNode)
            if "unsupported value" in message and isinstance(value, yaml.ScalarNode) and value.tag.endswith(":float"):
                number = constructor.construct_yaml_float(value)
                if number != number or number in (float("inf"), float("-inf")):
                    return path, key.start_mark.line + 1
            if mistagged and scalar and value.value == mistagged[1] and value.tag.endswith(":" + mistagged[2]):
                return path, key.start_mark.line + 1
            if "!!binary" in message and isinstance(value, yaml.ScalarNode) and value.tag.endswith(":binary"):
                try:
                    constructor.construct_yaml_binary(value)
                except yaml.YAMLError:
                    return path, key.start_mark.line + 1
            pairs = value.value if isinstance(value, yaml.MappingNode) else []
            merges = [v for k, v in pairs if getattr(k, "value", None) == "<<"]
            if "map merge requires" in message and merges and not isinstance(merges[0], yaml.MappingNode):
                return path, key.start_mark.line + 1
            if "contains itself" in message and cyclic:
                return path, key.start_mark.line + 1
        if "excessive aliasing" in message and entries:
            path, key, _, _ = max(entries, key=lambda entry: (sizes.get(id(entry[2]), 0), -entry[0].count(".")))
            return path, key.start_mark.line + 1
    return None
