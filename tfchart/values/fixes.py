"""Fixes that keep what the user meant, from the chart's schema and its rules' own `--set` fixes only: the value
typed as meant (`"3"`: 3, `10k` steps: 10000, a bare number for a quantity only with the schema's x-unit), else
the nearest allowed (enum choice, bound), else none and what is allowed (the default only for a null). Each is
written where the value came from: the line of the user's values file rewritten (indentation, key and comment
kept), else a `--set` argument (also for a file the chart ships). validate.py drops those the rules refuse.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tfchart.errors import Problem
from tfchart.values.origins import Origin, Origins

Schema = Mapping[str, Any]
SET_PIECE = re.compile(r"(--set(?:-string)?) ((?:[^\s=\\]|\\.)+)=(\S*)(?:\s+|$)")  # a rule's fix: --set KEY=VALUE
YAML_BREAK = re.compile(r"\r\n|[\n\r\x85\u2028\u2029]")  # the line breaks PyYAML counts lines by


@dataclass(frozen=True)
class Edit:
    """`key` = `value` as the argument `flag argument`; with `file`, as line `line` of it rewritten to `text`."""

    key: str
    value: Any
    flag: str
    argument: str
    replaces: str | None = None  # the --set argument this one takes the place of (helm applies --set-string last)
    file: str = ""
    line: int | None = None
    text: str = ""

    def shown(self, why: str = "") -> str:
        if self.file:
            return f"{self.file} line {self.line}{', ' + why if why else ''}: {self.text.strip()}"
        return f"{self.flag} {self.argument}" + ('""' if self.argument.endswith("=") else "")

    def as_dict(self) -> dict[str, Any]:
        where = {"file": self.file, "line": self.line, "text": self.text} if self.file else {"replaces": self.replaces}
        return {"key": self.key, "value": self.value, "set": [self.flag, self.argument], **where}


class Fixes:
    """The fixes of one validation. Fixes that rewrite one line (a flow map with two bad values) each carry every
    change to it once `whole` has seen them all: applied in any order, one or all of them make every change."""

    def __init__(self, origins: Origins, schema: Schema) -> None:
        self.origins, self.schema = origins, schema
        self.lines: dict[tuple[str, int], str] = {}  # (file, line number) as written
        self.changes: dict[tuple[str, int], dict[tuple[int, int], str]] = {}  # the same: {columns: new text}

    def whole(self, problem: Problem) -> Problem:
        """`problem` with each line its fix rewrites carrying every change found to that line."""
        edits, fix = [], problem.fix
        for edit in problem.edits:
            if edit.file and edit.line is not None:
                line = self.lines[edit.file, edit.line]
                for (begin, end), text in sorted(self.changes[edit.file, edit.line].items(), reverse=True):
                    line = line[:begin] + text + line[end:]  # right to left: the columns stay true
                fix, edit = fix.replace(edit.text.strip(), line.strip()), replace(edit, text=line)
            edits.append(edit)
        return replace(problem, fix=fix, edits=tuple(edits))

    def of_value(self, path: str, origin: Origin | None, choices: tuple[str, ...],
                 null: bool = False) -> tuple[str, tuple[Edit, ...]]:  # fmt: skip
        """The fix of a value the schema refuses (`choices`: the enum helm named, for a schema not walked): kept as
        meant, the nearest allowed, the default for a `null`; else no edit, and what is allowed in words."""
        node = schema_at(self.schema, path) or {}
        node = {**node, "enum": list(choices)} if choices and "enum" not in node else node
        meanings = self.schema.get("x-pattern-meanings") or {}
        kept = _kept(node, origin, meanings)
        value, why = kept if kept is not None else (_nearest(node, origin), "")
        value = self.origins.default(path) if value is _NONE and null and self.origins.default(path) is not None \
            else value
        if value is _NONE:
            return allowed(node, meanings), ()
        edit = self.edit_at(path, value, origin, node)
        return edit.shown(why), (edit,)

    def of_rule(self, fix: str) -> tuple[str, tuple[Edit, ...]]:
        """A chart rule's own fix, its leading `--set KEY=VALUE` arguments written where each key was set."""
        edits: list[Edit] = []
        position = 0
        while piece := SET_PIECE.match(fix, position):
            flag, key, written = piece.groups()
            if re.search(r"[<>{}\[\]'\\]", written):
                break  # a placeholder or a list: the rule's words
            path = key.replace("\\.", ".")
            value = "" if written == '""' else written if flag == "--set-string" else _helm_typed(written)
            edits.append(self.edit_at(path, value, self.origins.of(path)))
            position = piece.end()
        if not any(edit.file for edit in edits):
            return fix, tuple(edits)
        rest = f" {fix[position:]}" if fix[position:] else ""
        return "; ".join(edit.shown() for edit in edits) + rest, tuple(edits)

    def edit_at(self, path: str, value: Any, origin: Origin | None, node: Schema | None = None) -> Edit:
        """`path` = `value`, written where `origin` set it: its line in a values file, else a --set argument
        (--set reads 0.5 as a string: --set-json for a number, unless the schema `node` takes the string too)."""
        origins = self.origins
        flag, argument = set_argument(origins.set_path(path), value)
        if flag == "--set-json" and isinstance(value, float) and node is not None and fits(node, yaml_text(value)):
            flag = "--set"
        replaces = origin.source if origin and origins.leaves(origin.source) == 1 else None  # else kept
        edit = Edit(path, value, flag, argument, replaces)
        scalar = origin.node if origin is not None else None
        file = next((file for file in origins.inputs.files if origin and file.name == origin.source), None)
        chart = origins.chart.path.resolve()
        if (origin is None or origin.line is None or file is None or file.name != file.path  # standard input, a pipe
                or chart in Path(file.path).resolve().parents  # a file the chart ships: an override, not an edit
                or not isinstance(scalar, yaml.ScalarNode) or scalar.style in ("|", ">")
                or not origin.line <= scalar.start_mark.line + 1 == scalar.end_mark.line + 1):  # an alias, many lines
            return edit
        start, end = scalar.start_mark, scalar.end_mark
        try:
            line = YAML_BREAK.split(Path(file.path).read_bytes().decode("utf-8-sig"))[start.line]
        except (OSError, UnicodeError, IndexError):
            return edit
        written = line[start.column : end.column]
        if written != scalar.value and written[:1] not in ("'", '"'):
            return edit  # the marks do not point at the value: never rewrite another part of the line
        self.lines[file.name, start.line + 1] = line
        self.changes.setdefault((file.name, start.line + 1), {})[start.column, end.column] = yaml_text(value)
        text = line[: start.column] + yaml_text(value) + line[end.column :]
        return Edit(path, value, flag, argument, None, file.name, start.line + 1, text)


def schema_at(schema: Schema, path: str) -> Schema | None:
    """The schema of the value at the dotted `path` (a key may hold dots, as nvidia.com/gpu)."""
    node, rest = schema, path
    while rest:
        properties = node.get("properties", {})
        named = max((key for key in properties if rest == key or rest.startswith(key + ".")), key=len, default=None)
        if named is not None:
            node, rest = properties[named], rest[len(named) + 1 :]
            continue
        step, _, after = rest.partition(".")
        if isinstance(node.get("items"), Mapping) and step.isdigit():
            node, rest = node["items"], after
        elif isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
            rest = "" if "properties" not in node and "additionalProperties" not in node else after
        else:
            return None
    return node


def fits(node: Schema, value: Any) -> bool:
    """Whether the scalar `value` meets the schema `node`, as jsonschema reads it; a pattern must match the whole
    value (Go's `$` is the end of the text, never before a final line break)."""
    from jsonschema import Draft7Validator
    from jsonschema.exceptions import SchemaError
    from referencing.exceptions import Unresolvable

    if isinstance(value, (dict, list)) or (isinstance(value, str) and "\n" in value and "pattern" in str(node)):
        return False
    try:  # a $ref (to the whole schema, not at hand) is left out: the enum helm named stands beside it
        return bool(Draft7Validator({k: v for k, v in node.items() if k != "$ref"}).is_valid(value))
    except (re.error, SchemaError, Unresolvable):
        return False


def nearest_choice(written: str, choices: list[str]) -> str | None:
    """The choice closest in meaning to `written`: the same but for case and separators, then the only one it
    begins or is the initials of, then the one it is spelled most like; None where none is close."""
    if not (typed := _bare(written)) or len(written) > 256:
        return None
    choices = [choice for choice in choices if choice]
    for found in ([choice for choice in choices if _bare(choice) == typed],
                  [choice for choice in choices if _bare(choice).startswith(typed) or typed.startswith(_bare(choice))],
                  [choice for choice in choices if typed in _bare(choice)],
                  [choice for choice in choices if _initials(choice) == typed]):  # fmt: skip
        if len(found) == 1:
            return found[0]
    close = difflib.get_close_matches(written.lower(), [choice.lower() for choice in choices], n=1, cutoff=0.6)
    return next((choice for choice in choices if close and choice.lower() == close[0]), None)


def yaml_text(value: Any) -> str:
    """`value` as YAML that reads back as it, inside a flow map too: plain where that is safe, else in quotes."""
    if isinstance(value, (bool, list)) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        text = repr(value)  # YAML 1.1 (PyYAML, helm's go-yaml) reads 1e-05 as a string: 1.0e-05
        return text if "e" not in text or "." in text else text.replace("e", ".0e")
    if isinstance(value, int):
        return str(value)
    text = str(value)
    try:
        plain = yaml.safe_load(f"k: {text}") == {"k": text} and not re.search(r"[,\[\]{}#]", text)
    except yaml.YAMLError:
        plain = False
    return text if plain and text == text.strip() else json.dumps(text)


def set_argument(key: str, value: Any) -> tuple[str, str]:
    """The --set family flag and argument that give helm `value` at `key` (as --set spells the key)."""
    if isinstance(value, str):
        if re.search(r"[,\\{}\[\]]", value) or value.startswith(("'", '"')):
            return "--set-json", f"{key}={json.dumps(value)}"
        return ("--set" if _helm_typed(value) == value else "--set-string"), f"{key}={value}"
    if isinstance(value, list):
        return "--set", f"{key}={{}}"  # helm's --set for an empty list
    return ("--set-json" if isinstance(value, float) else "--set"), f"{key}={yaml_text(value)}"


_NONE = object()


def allowed(node: Schema, meanings: Mapping[str, str]) -> str:
    """What the schema `node` allows, in words (said where no fix keeps the value's meaning)."""
    kinds = node.get("type", [])
    words = [meanings.get(node.get("pattern", "")) or " or ".join([kinds] if isinstance(kinds, str) else kinds)]
    words += [f"one of {', '.join(map(str, node['enum']))}"] if node.get("enum") else []
    words += [f"{word} {node[key]}" for key, word in (("minimum", "at least"), ("maximum", "at most")) if key in node]
    return f"allowed: {', '.join(word for word in words if word)}" if any(words) else ""


SCALED = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([kKM])")  # 10k steps; never m (milli or million?)


def _kept(node: Schema, origin: Origin | None, meanings: Mapping[str, str]) -> tuple[Any, str] | None:
    """The user's value, typed as meant, where the schema takes it: "3" as 3, 2 as "2", " 0.5" as 0.5, 10k as 10000
    (a null meant no value: never "null"); a bare number for a quantity takes the schema's x-unit, else is no fix."""
    if origin is None or origin.text is None or origin.value is None:
        return None
    text, typed = origin.text.strip(), _as_meant(origin)
    if "quantity" in meanings.get(node.get("pattern", ""), "") and re.fullmatch(r"[0-9.]+", text):
        return (f"{text}{node['x-unit']}", "with its unit") if "x-unit" in node and fits(node, text + node["x-unit"]) \
            else None  # 20 for a size is 20 bytes to Kubernetes: 20Gi only where the schema says so
    if (scaled := SCALED.fullmatch(text)) and node.get("type") in ("integer", "number"):
        typed = float(scaled[1]) * {"k": 1e3, "K": 1e3, "M": 1e6}[scaled[2]]
    whole = int(typed) if isinstance(typed, float) and typed.is_integer() else _NONE
    for candidate in (whole, typed, text):
        same = type(candidate) is type(origin.value) and candidate == origin.value  # 1 is not 1.0 nor True
        if candidate is not _NONE and not same and fits(node, candidate):
            return candidate, f"{text} is {candidate}" if scaled else "in quotes" if isinstance(candidate, str) \
                else "without quotes"
    return None


def _nearest(node: Schema, origin: Origin | None) -> Any:
    """The allowed value nearest the user's (an enum's closest choice, a number at the end of its range); _NONE
    where there is none."""
    written = _as_meant(origin)
    branches = [node, *node.get("oneOf", []), *node.get("anyOf", [])]
    for branch in branches:
        if origin is not None and origin.text is not None and "enum" in branch:
            choice = nearest_choice(origin.text, [str(choice) for choice in branch["enum"]])
            if choice is not None and fits(node, choice):
                return choice
        numeric = isinstance(written, (int, float)) and not isinstance(written, bool)
        if numeric and math.isfinite(written) and (kinds := branch.get("type")) in ("integer", "number"):
            number = math.floor(written + 0.5) if kinds == "integer" else written
            step = 1 if kinds == "integer" else 0
            low = max(branch.get("minimum", -math.inf), branch.get("exclusiveMinimum", -math.inf) + step)
            high = min(branch.get("maximum", math.inf), branch.get("exclusiveMaximum", math.inf) - step)
            if fits(node, clamped := min(max(number, low), high)):
                return clamped
    return _NONE


def _bare(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def _initials(choice: str) -> str:
    return "".join(word[0] for word in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+", choice)).lower()


def _as_meant(origin: Origin | None) -> Any:
    """The value as written, typed as YAML types it: "3" is 3, " 0.5" 0.5, "mirror" stays a string."""
    text = origin.text.strip() if origin is not None and origin.text is not None else ""
    if re.fullmatch(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?", text):  # PyYAML's floats need a dot
        return float(text) if re.search(r"[.eE]", text) else int(text)
    try:
        return yaml.safe_load(text) if 0 < len(text) <= 256 else text
    except yaml.YAMLError:
        return text


def _helm_typed(text: str) -> Any:
    """A --set value as helm types it (strvals: true/false/null, an int64 without a leading 0, else a string)."""
    if text.lower() in ("true", "false", "null"):
        return {"true": True, "false": False, "null": None}[text.lower()]
    if text == "0" or (re.fullmatch(r"[+-]?[1-9][0-9]*", text) and -(2**63) <= int(text) < 2**63):
        return int(text)
    return text
