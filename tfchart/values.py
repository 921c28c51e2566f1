"""Values exactly as helm computes them: chart defaults, then -f files in order, then --set.

helm merges the user's files (maps recursively, anything else replaced), applies each --set to the
result, then coalesces that over the chart's values.yaml, where a null deletes a default. Where a
value came from is kept for error messages: the file and line, or the --set argument.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tfchart import strvals
from tfchart.errors import Problem, UsageError

try:  # libyaml when available: several times faster
    from yaml import CSafeLoader as SafeLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader  # type: ignore[assignment]

Path_ = tuple[str, ...]


@dataclass(frozen=True)
class Origin:
    """Where a value was set: a values file and line, or a --set argument."""

    source: str
    line: int | None = None


@dataclass
class Values:
    """The merged values and the origin of every user-set key path."""

    data: dict[str, Any]
    user_files: list[Path] = field(default_factory=list)
    sets: list[tuple[str, str]] = field(default_factory=list)  # (flag, argument)
    load_problems: list[Problem] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)  # the chart's values.yaml
    empty_files: list[Path] = field(default_factory=list)  # files with no document at all

    def origin(self, path: Path_) -> Origin | None:
        """The last source that set `path` or one of its parents (later sources win, like helm)."""
        best: Origin | None = None
        for flag, argument in self.sets:
            for assigned in _set_paths(flag, argument):
                if _overlaps(assigned, path):
                    best = Origin(f"{flag} {argument}")
        if best:
            return best
        for file in reversed(self.user_files):
            line = line_of(file, path)
            if line is not None:
                return Origin(str(file), line)
        return None


def _overlaps(assigned: Path_, path: Path_) -> bool:
    shorter = min(len(assigned), len(path))
    return assigned[:shorter] == path[:shorter]


def _set_paths(flag: str, argument: str) -> list[Path_]:
    parsed: dict[str, Any] = {}
    try:
        strvals.parse_into(argument, parsed, as_string=flag == "--set-string")
    except UsageError:
        return []
    return list(_leaf_paths(parsed, ()))


def _leaf_paths(value: Any, path: Path_) -> list[Path_]:
    if isinstance(value, dict) and value:
        return [leaf for key, child in value.items() for leaf in _leaf_paths(child, (*path, str(key)))]
    if isinstance(value, list) and value:
        return [leaf for index, child in enumerate(value) for leaf in _leaf_paths(child, (*path, str(index)))]
    return [path]


class ValuesFileError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def load_file(path: Path) -> dict[str, Any] | None:
    """A values file as helm reads it: None when it holds no document (helm reads {}), else a map."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read values file {path}: {error.strerror}", "check the path given to -f") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValuesFileError(
            Problem(
                "(root)",
                f"not a YAML file: invalid UTF-8 at byte {error.start}",
                file=str(path),
                line=raw[: error.start].count(b"\n") + 1,
            )
        ) from None
    try:
        document = yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        reason = getattr(error, "problem", None) or str(error)
        raise ValuesFileError(
            Problem("(root)", f"YAML syntax error: {reason}", file=str(path), line=mark.line + 1 if mark else None)
        ) from None
    if document is None:
        return None
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a {type(document).__name__}"
        raise ValuesFileError(
            Problem(
                "(root)",
                f"the document is {kind}, but a values file must be a map of keys (key: value)",
                value=_short(document),
                file=str(path),
                line=1,
            )
        )
    return {str(k): v for k, v in document.items()} if any(not isinstance(k, str) for k in document) else document


def _short(value: Any) -> Any:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def merge_maps(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """helm's mergeMaps for user files: maps merge recursively, anything else replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_maps(out[key], value)
        else:
            out[key] = value
    return out


def coalesce(user: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """helm's coalesce of user values over chart defaults: the user wins, null deletes a default."""
    out = dict(user)
    for key, default in defaults.items():
        if key in out:
            value = out[key]
            if value is None:
                del out[key]
            elif isinstance(value, dict) and isinstance(default, dict):
                out[key] = coalesce(value, default)
        else:
            out[key] = copy.deepcopy(default)
    return out


def compute(
    chart_values: Path,
    files: Sequence[Path] = (),
    sets: Sequence[tuple[str, str]] = (),
) -> Values:
    """The values helm would render with. Unreadable files become problems, not exceptions."""
    defaults = load_file(chart_values) or {}
    user: dict[str, Any] = {}
    problems: list[Problem] = []
    empty: list[Path] = []
    for file in files:
        try:
            document = load_file(file)
        except ValuesFileError as error:
            problems.append(error.problem)
            continue
        if document is None:
            empty.append(file)
        else:
            user = merge_maps(user, document)
    for flag, argument in sets:
        strvals.parse_into(argument, user, as_string=flag == "--set-string")
    return Values(coalesce(user, defaults), list(files), list(sets), problems, defaults, empty)


@functools.lru_cache(maxsize=64)
def _composed(file: str, mtime_ns: int, size: int) -> yaml.Node | None:
    """The YAML node tree of a file, parsed once per version of the file (many problems, one parse)."""
    try:
        return yaml.compose(Path(file).read_text(encoding="utf-8"), Loader=SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def line_of(file: Path, path: Path_) -> int | None:
    """1-based line where `file` sets `path` (or a prefix of it to a non-map value), else None."""
    try:
        stat = file.stat()
    except OSError:
        return None
    node = _composed(str(file), stat.st_mtime_ns, stat.st_size)
    if node is None:
        return None
    line: int | None = node.start_mark.line + 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if key_node.value == key:
                    line = key_node.start_mark.line + 1
                    node = value_node
                    break
            else:
                return None
        elif isinstance(node, yaml.SequenceNode) and key.isdigit() and int(key) < len(node.value):
            node = node.value[int(key)]
            line = node.start_mark.line + 1
        else:
            return line  # the file sets a scalar or list where the path continues: it set it all
    return line
