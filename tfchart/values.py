"""Values exactly as helm computes them: chart defaults, then -f files in order, then the --set family.

helm reads each values file (tfchart.goyaml decodes it the same way), merges the files (maps
recursively, anything else replaced), applies --set-json, --set, --set-string and --set-file in that
order, then coalesces the result over the chart's values.yaml, where a null deletes a default.
Every input is read once (tfchart.inputs). Where a value came from is kept for error messages: the
file and line, or the --set argument.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfchart import strvals
from tfchart.errors import Problem
from tfchart.goyaml import HelmMajor, Node, Path_, ValuesFileError, go_string, line_in, load_bytes, merge_maps
from tfchart.inputs import Inputs, Source

# -- merging ----------------------------------------------------------------------------------------




def coalesce(user: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """helm's coalesce of user values over chart defaults: the user wins, null deletes a default."""
    out = dict(user)
    pending = [(out, defaults)]
    while pending:
        target, source = pending.pop()
        for key, default in source.items():
            if key in target:
                value = target[key]
                if value is None:
                    del target[key]
                elif isinstance(value, dict) and isinstance(default, dict):
                    target[key] = dict(value)
                    pending.append((target[key], default))
            else:
                target[key] = _copy(default)
    return out


def _copy(value: Any) -> Any:
    """A deep copy of plain values without recursion."""
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    pending = [(root, value)]
    while pending:
        target, source = pending.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, child in items:
            if isinstance(child, (dict, list)):
                copied: Any = {} if isinstance(child, dict) else []
                pending.append((copied, child))
                child = copied
            if isinstance(target, dict):
                target[key] = child
            else:
                target.append(child)
    return root


# -- computing the values ---------------------------------------------------------------------------

SET_FLAGS = ("--set-json", "--set", "--set-string", "--set-file")  # the order helm applies them in


@dataclass(frozen=True)
class Origin:
    """Where a value was set: a values file and line, or a --set argument."""

    source: str
    line: int | None = None


class _SetIndex:
    """Which --set argument last assigned each key path: a trie, so each lookup costs its path length."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}

    def add(self, path: Path_, order: int, label: str) -> None:
        node = self.root
        for key in path:
            node["#max"] = max(node.get("#max", (-1, "")), (order, label))
            node = node.setdefault(key, {})
        node["#max"] = max(node.get("#max", (-1, "")), (order, label))
        node["#here"] = max(node.get("#here", (-1, "")), (order, label))

    def find(self, path: Path_) -> str | None:
        """The last argument that set `path`, a parent of it, or something below it."""
        best: tuple[int, str] = (-1, "")
        node = self.root
        for key in path:
            best = max(best, node.get("#here", (-1, "")))
            child = node.get(key)
            if child is None:
                if key.isdigit():  # an item helm padded with null when an argument set a later index
                    best = max(best, node.get("#max", (-1, "")))
                return best[1] if best[0] >= 0 else None
            node = child
        best = max(best, node.get("#max", (-1, "")))
        return best[1] if best[0] >= 0 else None


@dataclass
class Values:
    """The merged values and the origin of every user-set key path."""

    data: dict[str, Any]
    user_files: list[str] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)  # (flag, argument)
    load_problems: list[Problem] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)  # the chart's values.yaml
    empty_files: list[str] = field(default_factory=list)  # files with no document at all
    documents: dict[str, list[Node]] = field(default_factory=dict)  # per file, for line lookups
    set_index: _SetIndex = field(default_factory=_SetIndex)

    def origin(self, path: Path_) -> Origin | None:
        """The last source that set `path` or one of its parents (later sources win, like helm)."""
        found = self.set_index.find(path)
        if found is not None:
            return Origin(found)
        for file in reversed(self.user_files):
            for root in reversed(self.documents.get(file, [])):
                line = line_in(root, path)
                if line is not None:
                    return Origin(file, line)
        return None


def compute(
    chart_values: Path,
    files: Sequence[Path | Source] = (),
    sets: Sequence[tuple[str, str]] = (),
    helm_major: HelmMajor | None = None,
    inputs: Inputs | None = None,
) -> Values:
    """The values helm would render with. Unreadable files become problems, not exceptions.

    `sets` are (flag, argument) pairs of --set-json, --set, --set-string and --set-file; helm applies
    them grouped by flag in that order, each group in command-line order. --set-file paths are read
    through `inputs` (once).
    """
    inputs = inputs or Inputs()
    defaults_source = Source(str(chart_values), chart_values.read_bytes(), str(chart_values))
    defaults = load_bytes(defaults_source.data, defaults_source.name, helm_major).data or {}
    user: dict[str, Any] = {}
    problems: list[Problem] = []
    empty: list[str] = []
    names: list[str] = []
    documents: dict[str, list[Node]] = {}
    for file in files:
        source = file if isinstance(file, Source) else inputs.read(str(file))
        names.append(source.name)
        try:
            loaded = load_bytes(source.data, source.name, helm_major)
        except ValuesFileError as error:
            problems.append(error.problem)
            continue
        documents[source.name] = loaded.documents
        if loaded.data is None:
            empty.append(source.name)
        else:
            user = merge_maps(user, loaded.data)
    index = _SetIndex()
    ordered = sorted(enumerate(sets), key=lambda item: (SET_FLAGS.index(item[1][0]), item[0]))
    for order, (flag, argument) in enumerate(flag_argument for _, flag_argument in ordered):

        def record(path: Path_, text: str, order: int = order, flag: str = flag, argument: str = argument) -> None:
            # the whole argument when it is short, else just the assignment that set this path
            shown = argument if len(argument) <= 120 else (text if len(text) <= 120 else text[:117] + "...")
            index.add(path, order, f"{flag} {shown}")

        if flag == "--set-json":
            user = strvals.apply_json(argument, user, helm_major, record)
        elif flag == "--set-file":
            strvals.parse_into(
                argument, user, mode="file", on_assign=record, read_file=lambda name: _set_file(inputs, name)
            )
        else:
            strvals.parse_into(argument, user, mode="string" if flag == "--set-string" else "typed", on_assign=record)
    return Values(coalesce(user, defaults), names, list(sets), problems, defaults, empty, documents, index)


def _set_file(inputs: Inputs, name: str) -> str:
    source = inputs.read(name, "--set-file file", "--set-file")
    inputs.set_files.append(source)
    return go_string(source.data)


def iter_leaf_paths(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Key paths of every leaf (empty maps and lists count as leaves), without recursion."""
    pending: list[tuple[Any, Path_]] = [(value, path)]
    while pending:
        node, where = pending.pop()
        if isinstance(node, dict) and node:
            pending.extend((child, (*where, str(key))) for key, child in reversed(list(node.items())))
        elif isinstance(node, list) and node:
            pending.extend((child, (*where, str(index))) for index, child in reversed(list(enumerate(node))))
        else:
            yield where

